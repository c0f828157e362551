// Pieces every AVX-512 GEMM kernel shares (gemm_avx512.cpp, gemm_kquant_avx512.h): the
// prefetchers, the float accumulators' load and store, nibble codes and their unpacked
// form, a decode batch's row tiles and float scratch.
//
// Include only from translation units compiled with the AVX-512 flags: everything here
// sits in an anonymous namespace, so each such unit keeps its own copies and no AVX-512
// instruction can reach baseline code through the linker.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_formats.h"

namespace ridge::kernels::detail {
namespace {
inline __mmask16 lane_mask(int64_t lanes) { return lanes >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << lanes) - 1); }

// Prefetches the next pass of a panel group (panels_over) into L2, a few lines per
// kernel iteration, spread over the whole current pass: the pass's first row tile reads
// its weights from DRAM in a burst, faster than the hardware prefetcher ramps up, and the
// tiles after it read only L1, so without this the stream and the arithmetic take turns
// (m = 16 took the DRAM time plus the compute time). Spread, not in one burst: a burst
// fills the core's few line-fill buffers and stalls the loads behind it.
struct PassPrefetch {
  const char* at = nullptr;   // the next line of the next pass's slice of the first panel
  const char* end = nullptr;  // that slice's end
  int64_t second = 0;         // from the first panel's slice to the second's (0: one panel)
  int32_t lines = 0;          // of each slice per kernel iteration

  // Few instructions and no stores: this runs in every iteration of the kernels, and a
  // per-line bounds check with its position kept in memory was a large share of the
  // kernel's time with the weights in L2, the larger the fewer rows (docs/BENCHMARKS.md,
  // issue 6 session 6).
  inline void step() {
    if (at >= end) return;
    for (int32_t i = 0; i < lines; ++i) {
      _mm_prefetch(at + 64 * i, _MM_HINT_T1);
      _mm_prefetch(at + second + 64 * i, _MM_HINT_T1);
    }
    at += 64 * lines;
  }
};

// Line o of a stream whose panel starts at `panel`, or past the panel's end the line in
// the panel `group` later (stream_ahead). A function: as a lambda inside stream_ahead,
// GCC 12 left no prefetch of it in the object code.
inline __attribute__((always_inline)) void ask_line(const uint8_t* panel, int64_t ps, int64_t group, int64_t o) {
  _mm_prefetch(reinterpret_cast<const char*>(o < ps ? panel + o : panel + group * ps + (o - ps)), _MM_HINT_T0);
}

// Decode (one activation row) streams each panel once. With the arithmetic between the
// loads, the hardware prefetchers alone leave a thread's 4 panel streams measurably under
// a plain read (bench/bench_stream.cpp); a software prefetch a fixed distance ahead in
// every stream, one per line spread over the iterations, wins that back, most in f16 and
// q4_k_m decode (docs/BENCHMARKS.md, issue 6 session 6). The distance (GemmArgs::ahead)
// is tuned per CPU and weight type (tuning.h): decode's, or a decode batch's, which
// spends several times longer on each block and so needs more bytes for the same time.
//
// Prefetches the lines `dist` past [off, off + kBytes) of NP panels at stride ps; off is
// from the panel's start. One line every 64 bytes from the range's start asks twice for
// a line that a block's end shares with the next block's start, where a block is not a
// whole number of lines. With kLineStarts a call asks for the lines that start in its
// range instead, so the iterations that walk a stream ask for each of its lines once:
// kBytes / 64 of them, and one more when the range's first line starts early enough
// (the count alternates where a block is whole lines and a half, a branch the core
// predicts). Q8_0's decode takes it (its 16-row block is 8.5 lines): its matrices and the
// engine's q8_0 decode measured faster so. Q4_0's (4.5 lines) and the K-quants' did too
// as lone matrices, but not in the engine's decode, and Q4_0's a little slower there: they
// keep the 64-byte steps (docs/BENCHMARKS.md, issue 22 session 41).
//
// Past its panel's end a stream goes on in the panel kGroup later: a task walks its
// panels in groups of kGroup (decode: panels_over), so that is where this stream's reads
// go next. Each stream thus reaches the next group warm, where prefetching past the end
// landed in the next panel of the same group, already read, and three of the next
// group's four streams began with a demand miss, most often with short panels (4-bit
// weights: 9 KiB a panel per thousand columns); measured a little faster, never
// measurably slower (docs/BENCHMARKS.md, issue 22 session 38). Past a task's last group,
// or where a group of 4 is followed by a shorter one, some lines are panels this task
// does not read next (or, past a matrix, whatever follows it): a hint, never a fault.
template <int NP, int64_t kBytes, int kGroup = NP, bool kLineStarts = false>
inline __attribute__((always_inline)) void stream_ahead(const uint8_t* w, int64_t ps, int64_t off, int64_t dist) {
  const int64_t at = off + dist;
  for (int p = 0; p < NP; ++p) {
    const uint8_t* panel = w + p * ps;
    if constexpr (kLineStarts && kBytes % 64 != 0) {
      const int64_t first = at + (-(reinterpret_cast<intptr_t>(panel) + at) & 63);  // the first line start >= at
      for (int64_t i = 0; i < kBytes / 64; ++i) ask_line(panel, ps, kGroup, first + 64 * i);
      if (first + 64 * (kBytes / 64) < at + kBytes) ask_line(panel, ps, kGroup, first + 64 * (kBytes / 64));
    } else {
      for (int64_t j = 0; j < kBytes; j += 64) ask_line(panel, ps, kGroup, at + j);
    }
  }
}

// The float accumulators of an MR x NP tile: zero at the start of the reduction, else
// what an earlier part of it left in y.
template <int MR, int NP>
inline void acc_begin(__m512 (&acc)[MR][NP], bool first, const float* y, int64_t ldy, __mmask16 last) {
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p)
      acc[i][p] = first ? _mm512_setzero_ps()
                        : _mm512_maskz_loadu_ps(p == NP - 1 ? last : __mmask16(0xFFFF), y + i * ldy + p * 16);
}

template <int MR, int NP>
inline void acc_end(const __m512 (&acc)[MR][NP], float* y, int64_t ldy, __mmask16 last) {
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) _mm512_mask_storeu_ps(y + i * ldy + p * 16, p == NP - 1 ? last : __mmask16(0xFFFF), acc[i][p]);
}


// Group g of a nibble vector v as two code vectors: lo = elements 4g + j (low nibbles),
// hi = elements 16 + 4g + j (high nibbles), each with its fifth bit from h when kHigh:
// bit g of a byte for lo, bit 4 + g for hi, moved to bit 4 (16-bit shifts are safe: the
// bit that lands in bit 4 of a byte comes from the same byte).
// kLut: each nibble replaced by MXFP4's value + 12 (0 .. 24), one vpshufb per vector.
template <bool kHigh, bool kLut = false>
inline __attribute__((always_inline)) void nibble_codes(__m512i v, __m512i h, int g, __m512i& lo, __m512i& hi) {
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  lo = _mm512_and_si512(v, lo4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
  if constexpr (kLut) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    lo = _mm512_shuffle_epi8(lut, lo);
    hi = _mm512_shuffle_epi8(lut, hi);
  }
  if constexpr (kHigh) {
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - g)), bit4));
    hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srl_epi16(h, _mm_cvtsi32_si128(g)), bit4));
  }
}

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// A 32-block of NP panels unpacked to one code byte per weight (nibble_unpack,
// q6k_unpack): [panel][half][group], each vector [16 rows][4 bytes], half 0 the block's
// elements 4g + j, half 1 elements 16 + 4g + j.
template <int NP>
using BlockCodes = uint8_t[NP][2][4][64];
// 32-blocks per chunk of prefill's unpacked codes: 2 panels' take 32 KiB (and their
// KScales 8), in L1 while every row tile runs over them.
inline constexpr int64_t kUnpackBlocks = 32;

// A 32-block's two float scale vectors of NP panels, made with its unpacked codes once for
// all the row tiles, which otherwise each redo the conversions on vpdpbusd's ports: the
// 32-block formats' (d_w, the _1 types' m_w), Q4_K / Q5_K's (d sc_b, dmin m_b), Q6_K's
// (d sc_2b, d sc_2b+1).
template <int NP>
struct KScales {
  __m512 a[NP], b[NP];
};

// A 32-block of a nibble format, NP panels, unpacked once for all the row tiles that read
// it (a decode batch's, a prefill chunk's), which otherwise each redo the masks and
// shifts, a third as many vector ops as their vpdpbusd, on the same ports:
// codes[p][0][g] and codes[p][1][g] are nibble_codes' lo and hi of group g. wb: the
// block's nibbles in panel 0 (the h vector 256 bytes on, kHigh).
template <int NP, bool kHigh, bool kLut = false>
inline __attribute__((always_inline)) void nibble_unpack(const uint8_t* wb, int64_t ps, BlockCodes<NP>& codes) {
  for (int p = 0; p < NP; ++p) {
    const __m512i hb = kHigh ? _mm512_loadu_si512(wb + p * ps + 256) : _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      __m512i lo, hi;
      nibble_codes<kHigh, kLut>(_mm512_loadu_si512(wb + p * ps + g * 64), hb, g, lo, hi);
      _mm512_store_si512(codes[p][0][g], lo);
      _mm512_store_si512(codes[p][1][g], hi);
    }
  }
}

// acci[i][p] += the int32 sums of unpacked codes (nibble_unpack) with MR activation
// rows (ab: their ActQ8 of the block, stride lda).
template <int MR, int NP>
inline __attribute__((always_inline)) void codes_isums(const BlockCodes<NP>& codes, const ActQ8* ab, int64_t lda,
                                                       __m512i (&acci)[MR][NP]) {
  for (int g = 0; g < 4; ++g)
    for (int p = 0; p < NP; ++p) {
      const __m512i lo = _mm512_load_si512(codes[p][0][g]), hi = _mm512_load_si512(codes[p][1][g]);
      for (int i = 0; i < MR; ++i) {
        acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], lo, bcast4(ab[i * lda].qs + 4 * g));
        acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], hi, bcast4(ab[i * lda].qs + 16 + 4 * g));
      }
    }
}

// The 16 rows' scales of a block (sc: the block's start in a panel): f16 d, or MXFP4's
// E8M0 byte as 2^(e - 128) (quant::mxfp4_scale: e < 2 the subnormals 2^-128, 2^-127).
template <Fmt F>
inline __attribute__((always_inline)) __m512 block_scales(const uint8_t* sc) {
  if constexpr (FmtInfo<F>::kLut) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, sub));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
  }
}

// The most rows of a decode batch (GemmArgs::stream): Matmul's row chunk.
inline constexpr int64_t kBatchRows = 48;

// f(R, r) for the row tiles of a batch: R = 4 rows from r = 0, 4, ..., then the 3, 2 or 1
// left over (R a std::integral_constant, for the tile kernels' template).
template <class F>
inline __attribute__((always_inline)) void batch_row_tiles(int64_t rows, F&& f) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) f(std::integral_constant<int, 4>{}, r);
  switch (rows - r) {
    case 3: return f(std::integral_constant<int, 3>{}, r);
    case 2: return f(std::integral_constant<int, 2>{}, r);
    case 1: return f(std::integral_constant<int, 1>{}, r);
    default: return;
  }
}

// f(R, r) for tiles of at most 4 rows, as even as the rows allow (9 rows: 3, 3, 3, where
// batch_row_tiles runs 4, 4, 1): a one-row tile loads each weight vector for a single
// vpdpbusd. Measured faster for the 32-block formats at 5 to 9 rows; the K-quant batches,
// whose tiles carry per-panel scale vectors too, measured the same or slower, so they
// keep batch_row_tiles (docs/BENCHMARKS.md, issue 20 session 13).
template <class F>
inline __attribute__((always_inline)) void batch_even_tiles(int64_t rows, F&& f) {
  const int64_t tiles = (rows + 3) / 4;
  for (int64_t t = 0, r = 0; t < tiles; ++t) {
    const int64_t n = (rows - r) / (tiles - t);  // the larger tiles last
    switch (n) {
      case 4: f(std::integral_constant<int, 4>{}, r); break;
      case 3: f(std::integral_constant<int, 3>{}, r); break;
      case 2: f(std::integral_constant<int, 2>{}, r); break;
      default: f(std::integral_constant<int, 1>{}, r); break;
    }
    r += n;
  }
}

// A decode batch's row tiles for one block (even, or 4s: GemmArgs::even_tiles), with the
// block's prefetch ahead issued one panel per row tile: all NP panels' lines at the block's start are a burst
// that fills the core's fill buffers and holds up the first tile's loads. The panels no
// tile took (fewer than 4 NP rows) go after the last tile. Used by Q8_0, the batch type
// nearest its memory bound, where it measured faster at m = 16; on the 4-bit types,
// compute-bound at m = 16, it measured slower (docs/BENCHMARKS.md, issue 6 session 7).
// Here a line every 64 bytes of the block, not kLineStarts as in its decode: at 4 rows
// asking for each line once measured slower (issue 22 session 41).
template <int NP, int64_t kBytes, bool kEven, class F>
inline __attribute__((always_inline)) void batch_tiles_ahead(const uint8_t* w, int64_t ps, int64_t off, int64_t dist,
                                                             int64_t rows, F&& f) {
  int ahead = 0;
  auto tile = [&](auto R, int64_t r) {
    if (ahead < NP) stream_ahead<1, kBytes, NP>(w + ahead++ * ps, ps, off, dist);
    f(R, r);
  };
  if constexpr (kEven) batch_even_tiles(rows, tile);
  else batch_row_tiles(rows, tile);
  for (; ahead < NP; ++ahead) stream_ahead<1, kBytes, NP>(w + ahead * ps, ps, off, dist);
}

// A batch kernel's float sums: accm[row][panel][16], zero before the first block.
template <int NP>
inline void batch_clear(float (*accm)[NP][16], int64_t rows) {
  for (int64_t i = 0; i < rows; ++i)
    for (int p = 0; p < NP; ++p) _mm512_store_ps(accm[i][p], _mm512_setzero_ps());
}

// The scratch's sums of rows [0, rows) into y, the group's last panel masked by last.
template <int NP>
inline void batch_store(const float (*accm)[NP][16], int64_t rows, float* y, int64_t ldy, __mmask16 last) {
  for (int64_t i = 0; i < rows; ++i)
    for (int p = 0; p < NP; ++p)
      _mm512_mask_storeu_ps(y + i * ldy + p * 16, p == NP - 1 ? last : __mmask16(0xFFFF), _mm512_load_ps(accm[i][p]));
}

}  // namespace
}  // namespace ridge::kernels::detail
