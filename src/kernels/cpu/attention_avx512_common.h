// Pieces the AVX-512 attention files share (attention_avx512.cpp and the FP8 tile path it
// includes, attention_fp8_tiles_avx512.h): the helpers' inlining, the 8-bit dtypes'
// traits and decode, a tile's blocks and groups, and the prefetcher of the next tile.
//
// Include only from translation units compiled with the AVX-512 flags: everything here
// sits in an anonymous namespace, so each such unit keeps its own copies and no AVX-512
// instruction can reach baseline code through the linker.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/attention.h"

namespace ridge::kernels::detail {
namespace {

// Helpers must inline: an out-of-line one would take its vector arrays' address and
// spill them to the stack.
#define ATTN_INLINE inline __attribute__((always_inline))
#define ATTN_NOINLINE __attribute__((noinline))
// On loops over register arrays: unrolled before GCC would turn them into memsets or
// keep the arrays on the stack.
#define ATTN_UNROLL _Pragma("GCC unroll 16")

constexpr float kNegInf = -__builtin_inff();
constexpr int32_t kMaxTileBlocks = kMaxTileKeys;  // at block_size 1
constexpr int32_t kStatRows = 16;      // rows whose softmax state shares one vector
constexpr int32_t kRows = 8;           // scores and P.V: 8 rows x 32 lanes of accumulators

ATTN_INLINE __mmask16 first_lanes(int32_t k) {
  return k >= 16 ? __mmask16(0xFFFF) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1);
}

// f(integral_constant<int, 0>), ..., f(integral_constant<int, N - 1>): a loop over register
// arrays whose indices are constants from the start. GCC keeps an array indexed by an
// unrolled loop's counter in memory until after unrolling and then shuffles every
// vpdpbusd accumulator through a second register (two moves per instruction, some
// spills); with constant indices the array is split into registers early.
template <int N, class F>
ATTN_INLINE void static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

// f(std::integral_constant<int, R>) for R = rows, 1..kRows: the register tiles' row count
// is a template argument.
template <class F>
ATTN_INLINE void with_rows(int32_t rows, F&& f) {
  switch (rows) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// The 8-bit dtypes: codes, one scale per position (kv_view.h).
template <DType T>
inline constexpr bool kScaled = is_scaled_kv_dtype(T);
template <DType T>
inline constexpr bool kFp8 = T == DType::F8_E4M3 || T == DType::F8_E5M2;
template <DType T>
inline constexpr int64_t kEsz = T == DType::F32 ? 4 : kScaled<T> ? 1 : 2;

// A scaled dtype's codes come out of load16 in units of kCodeUnit, which the scales that
// multiply them take in (a multiply per scale, not per code).
template <DType T>
inline constexpr float kCodeUnit = T == DType::F8_E4M3 ? 256.f : 1.f;

// Elements [i, i + 16) of a cache row in f32, lanes outside m zero (and not read). The
// 8-bit codes as their values in kCodeUnit (times the position's scale later): E5M2 is the
// top byte of a half; E4M3's exponent and mantissa shifted into a half's are its value
// times 2^-8 (subnormals included), and S.1111.111 is NaN.
template <DType T>
ATTN_INLINE __m512 load16(const uint8_t* row, int64_t i, __mmask16 m) {
  if constexpr (kScaled<T>) {
    const __m128i b = _mm_maskz_loadu_epi8(m, row + i);
    if constexpr (T == DType::I8) {
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    } else if constexpr (T == DType::F8_E5M2) {
      return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
    } else {
      // Sign-extended, a negative code's high byte is all ones: shifted by 7 the sign
      // lands on bits 15 and 14, and the mask keeps 15 and the magnitude's bits 7-13.
      const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xBF80)));
      const __m512 f = _mm512_cvtph_ps(h);
      const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_or_si256(h, _mm256_set1_epi16(int16_t(0x8000))), _mm256_set1_epi16(int16_t(0xBF80)));
      return _mm512_mask_mov_ps(f, nan, _mm512_set1_ps(__builtin_nanf("")));
    }
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
  } else if constexpr (T == DType::BF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * i)), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
  }
}

// r[16] rows of 16 floats -> their transpose in place (unpacks, then 128-bit lane moves).
ATTN_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  ATTN_UNROLL for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  ATTN_UNROLL for (int i = 0; i < 4; ++i) {  // r[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  ATTN_UNROLL for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
  }
  ATTN_UNROLL for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xDD);
  }
}

// A tile's blocks: their K and V tiles and how many keys each holds. In a row of scores,
// block b's key j is lane b * lpb + j (lpb = its slots rounded up to 16); padding lanes
// hold -inf.
struct Tile {
  const uint8_t* k[kMaxTileBlocks];
  const uint8_t* v[kMaxTileBlocks];
  int32_t keys[kMaxTileBlocks];
  int32_t n_blocks = 0;
  int32_t bs = 0;
  // The first key any of the tile's rows attends to, counted from the tile's first
  // position (a window's start; 0 without one): the blocks before its block are not
  // read, and no key before it contributes (their score lanes hold -inf; its block's
  // earlier slots may be loaded with the rest of their 16-lane group or quad).
  int32_t live = 0;
  int32_t live_block = 0;  // live / bs: the first block read
  // Whether key j of block b (its lane's 16-key group g = j / 16) is before `live`.
  ATTN_INLINE __mmask16 dead_lanes(int32_t b, int32_t g) const {
    const int32_t k = live - b * bs - 16 * g;
    return k >= 16 ? __mmask16(0xFFFF) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1);
  }
};

// One 16-lane group of a tile's scores: dimension 0 of its 16 K columns, which of them
// exist in the block (loaded) and which are keys (scored), and its first score lane.
struct Group {
  const uint8_t* k;
  __mmask16 slots, keys;
  int32_t lane;
  const uint8_t* ks;  // the 16 keys' scales (scaled dtypes)
  int32_t pos;        // its first key's position, counted from the tile's first
};

// Asks for K/V lines about half a tile before they are read, one line per inner iteration
// of the scores and P.V: the blocks lie scattered in the pool, so the hardware
// prefetchers, which follow one stream within a page, cannot guess them, and a burst of
// more lines than the core has fill buffers holds up every load behind it. During a tile
// it asks for that tile's V tiles (its P.V comes after its scores and softmax), then the
// next tile's K tiles (the next scores need them all at once). Asked a whole tile ahead
// (the next tile's K, then its V), lines from DRAM came later on this CPU's long-context
// decode, and two tiles ahead or into L1 later still (docs/BENCHMARKS.md, issue 6
// session 5; issue 21 session 42). With a 2-byte cache dtype a tile has as many lines as
// iterations (a score iteration reads one dimension of 32 keys, a P.V iteration 32
// columns of one key's V: 64 bytes each); what is left, with f32, goes out at the tile's
// end. The issuing position stays in registers through a loop (Cursor): the hot loops
// hold 16 accumulators and must call nothing.
struct Prefetcher {
  // Where the issuing stands: kept in the hot loops' registers (a copy), saved after.
  struct Cursor {
    const char* p;
    int32_t left, seg;  // lines left in segment seg - 1
  };
  const char* seg_p[2 * kMaxTileBlocks];  // K pieces of the tile's blocks, then V pieces
  int32_t seg_n[2 * kMaxTileBlocks];      // their lines
  int32_t n_seg = 0;
  Cursor cur{nullptr, 0, 0};

  // A range of at most a tile's blocks of a table, one piece of `bytes` each (a block's K
  // or V tiles of the call's heads, adjacent in the cache) at base + blocks[b] * stride.
  struct Pieces {
    const uint8_t* base;
    const int32_t* blocks;
    int64_t stride, bytes;
    int32_t b0, b1;
  };
  // The pieces of v, then those of k; every line a piece touches, whatever its alignment.
  void start(const Pieces& v, const Pieces& k) {
    n_seg = 0;
    for (const Pieces* r : {&v, &k})
      for (int32_t b = r->b0; b < r->b1 && r->bytes > 0; ++b) {
        const uint8_t* p = r->base + r->blocks[b] * r->stride;
        const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63);
        seg_p[n_seg] = reinterpret_cast<const char*>(lo);
        seg_n[n_seg++] = int32_t((reinterpret_cast<uintptr_t>(p) + uintptr_t(r->bytes) - lo + 63) / 64);
      }
    cur = Cursor{nullptr, 0, 0};
  }
  ATTN_INLINE void step(Cursor& c) const {
    if (c.left == 0) {
      if (c.seg == n_seg) return;
      c.p = seg_p[c.seg], c.left = seg_n[c.seg], ++c.seg;
    }
    _mm_prefetch(c.p, _MM_HINT_T1);
    c.p += 64, --c.left;
  }
  // Two lines: one test for both where the segment holds them (the hot loops' usual case).
  ATTN_INLINE void step2(Cursor& c) const {
    if (c.left >= 2) {
      _mm_prefetch(c.p, _MM_HINT_T1);
      _mm_prefetch(c.p + 64, _MM_HINT_T1);
      c.p += 128, c.left -= 2;
      return;
    }
    step(c), step(c);
  }
  void finish() {
    while (cur.left > 0 || cur.seg < n_seg) step(cur);
  }
};


}  // namespace
}  // namespace ridge::kernels::detail
