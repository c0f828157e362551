// AVX-512 micro-kernels over 16-row panels (layouts in packed.h, contract in gemm.h).
// Nothing here is visible to baseline code: gemm_panels (gemm.cpp) calls in only after
// checking the CPU.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed.h"
#include "quant/blocks.h"

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
  // per-line bounds check with its position kept in memory cost 10-15% of the m = 16
  // kernel with the weights in L2 (40% at m = 6).
  inline void step() {
    if (at >= end) return;
    for (int32_t i = 0; i < lines; ++i) {
      _mm_prefetch(at + 64 * i, _MM_HINT_T1);
      _mm_prefetch(at + second + 64 * i, _MM_HINT_T1);
    }
    at += 64 * lines;
  }
};

// Decode (one activation row) streams each panel once. With the arithmetic between the
// loads, the hardware prefetchers alone leave a thread's 4 panel streams about 11% under
// a plain read (bench/bench_stream.cpp); a software prefetch a fixed distance ahead in
// every stream, one per line spread over the iterations, wins that back: decode b1 +6-11%
// on f16, +13-18% on q4_k_m (docs/BENCHMARKS.md, session 6). 1 KiB and 2 KiB measured the
// same in the kernels.
inline constexpr int64_t kAheadBytes = 1024;

// Prefetches the lines kAheadBytes past [off, off + kBytes) of NP panels at stride ps.
// Stepping 64 bytes from each iteration's start covers every line of a stream that the
// iterations walk back to back.
template <int NP, int64_t kBytes>
inline __attribute__((always_inline)) void stream_ahead(const uint8_t* w, int64_t ps, int64_t off) {
  for (int p = 0; p < NP; ++p)
    for (int64_t j = 0; j < kBytes; j += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + p * ps + off + kAheadBytes + j), _MM_HINT_T0);
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

struct LoadF32 {
  static __m512 at(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
  static constexpr int64_t kColBytes = 64;
};
struct LoadF16 {
  static __m512 at(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static constexpr int64_t kColBytes = 32;
};
struct LoadBF16 {
  static __m512 at(const uint8_t* p) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  }
  static constexpr int64_t kColBytes = 32;
};

// Every kernel computes columns [c0, c1) of the reduction, in its own unit (float:
// columns, multiples of kGemmKc; Q8_0 / Q4_0: 32-blocks; K-quants: super-blocks). From
// c0 > 0 it continues the sums y already holds: a float accumulator stored and reloaded
// is the same value, so splitting the reduction changes no bit of any lane.
//
// Float weights. w: first panel (NP panels at stride ps bytes); x: MR rows at stride ldx;
// y: MR rows at stride ldy, 16 * NP columns, the last panel's lanes masked by `last`.
template <int MR, int NP, bool kAhead, typename L>
void kern_float(const uint8_t* w, int64_t ps, const float* x, int64_t ldx, int64_t c0, int64_t c1, float* y,
                int64_t ldy, __mmask16 last, PassPrefetch& pf) {
  for (int64_t k0 = c0; k0 < c1; k0 += kGemmKc) {
    const int64_t k1 = std::min(c1, k0 + kGemmKc);
    __m512 acc[MR][NP];
    for (int i = 0; i < MR; ++i)
      for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
    for (int64_t c = k0; c < k1; ++c) {
      if ((c & 15) == 0) pf.step();
      if constexpr (kAhead)
        if ((c & (64 / L::kColBytes - 1)) == 0) stream_ahead<NP, 64>(w, ps, c * L::kColBytes);
      __m512 wv[NP];
      for (int p = 0; p < NP; ++p) wv[p] = L::at(w + p * ps + c * L::kColBytes);
      for (int i = 0; i < MR; ++i) {
        const __m512 xb = _mm512_set1_ps(x[i * ldx + c]);
        for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_fmadd_ps(wv[p], xb, acc[i][p]);
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int p = 0; p < NP; ++p) {
        const __mmask16 mk = p == NP - 1 ? last : __mmask16(0xFFFF);
        float* yp = y + i * ldy + p * 16;
        const __m512 v = k0 == 0 ? acc[i][p] : _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yp), acc[i][p]);
        _mm512_mask_storeu_ps(yp, mk, v);
      }
  }
}

// Group g of a nibble vector v as two code vectors: lo = elements 4g + j (low nibbles),
// hi = elements 16 + 4g + j (high nibbles), each with its fifth bit from h when kHigh:
// bit g of a byte for lo, bit 4 + g for hi, moved to bit 4 (16-bit shifts are safe: the
// bit that lands in bit 4 of a byte comes from the same byte).
template <bool kHigh>
inline __attribute__((always_inline)) void nibble_codes(__m512i v, __m512i h, int g, __m512i& lo, __m512i& hi) {
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  lo = _mm512_and_si512(v, lo4);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
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

// The 32-element block formats with an int8 kernel (packed.h for the layouts).
enum class Fmt { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 };

// The block layout of a 32-block format (packed.h).
template <Fmt F>
struct FmtInfo {
  static constexpr bool kNibbles = F != Fmt::Q8_0, kMin = F == Fmt::Q4_1 || F == Fmt::Q5_1;
  static constexpr bool kHigh = F == Fmt::Q5_0 || F == Fmt::Q5_1;
  static constexpr int64_t kBlockBytes = 16 * (F == Fmt::Q8_0 ? 34 : 18 + (kMin ? 2 : 0) + (kHigh ? 4 : 0));
  static constexpr int64_t kCodes = kMin ? 64 : 32;  // nibbles (or Q8_0's codes) past d (and m)
  // What the unsigned codes carry on top of the value (the _1 types have none: m does it).
  static constexpr int32_t kOffset = F == Fmt::Q8_0 ? 128 : F == Fmt::Q4_0 ? 8 : F == Fmt::Q5_0 ? 16 : 0;
};

// The exact int32 sums of block b for MR activation rows x NP panels: Q8_0's 8 groups of
// (q + 128), or the others' 4 groups of nibble pairs with a fifth bit from the block's h
// vector (the Q5 types, nibble_codes). Each sum starts at minus the offset the unsigned
// codes carry (exact integers, so starting there instead of subtracting at the end
// changes no bit, and saves a vector op per sum on the ports vpdpbusd needs).
template <int MR, int NP, Fmt F>
inline __attribute__((always_inline)) void isum_offsets(const ActQ8* a, int64_t lda, int64_t b, __m512i (&acci)[MR][NP]) {
  using I = FmtInfo<F>;
  for (int i = 0; i < MR; ++i) {
    // -kOffset x (sum16[0] + sum16[1]) in every lane: one broadcast load of the pair and
    // one vpmaddwd, where the scalar sum and a broadcast from a general register took 6
    // uops (one on a port vpdpbusd needs).
    int32_t pair;
    __builtin_memcpy(&pair, a[i * lda + b].sum16, 4);
    const __m512i off = I::kOffset == 0 ? _mm512_setzero_si512()
                                        : _mm512_madd_epi16(_mm512_set1_epi32(pair), _mm512_set1_epi16(int16_t(-I::kOffset)));
    for (int p = 0; p < NP; ++p) acci[i][p] = off;
  }
}

template <int MR, int NP, Fmt F>
inline __attribute__((always_inline)) void block_isums(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda,
                                                       int64_t b, __m512i (&acci)[MR][NP]) {
  using I = FmtInfo<F>;
  isum_offsets<MR, NP, F>(a, lda, b, acci);
  const uint8_t* wb = w + b * I::kBlockBytes + I::kCodes;
  if constexpr (I::kNibbles) {
    __m512i hb[NP];
    for (int p = 0; p < NP; ++p) hb[p] = I::kHigh ? _mm512_loadu_si512(wb + p * ps + 256) : _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g)
      for (int p = 0; p < NP; ++p) {
        __m512i lo, hi;
        nibble_codes<I::kHigh>(_mm512_loadu_si512(wb + p * ps + g * 64), hb[p], g, lo, hi);
        for (int i = 0; i < MR; ++i) {
          const int8_t* q = a[i * lda + b].qs;
          acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], lo, bcast4(q + 4 * g));
          acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], hi, bcast4(q + 16 + 4 * g));
        }
      }
  } else {
    for (int g = 0; g < 8; ++g)
      for (int p = 0; p < NP; ++p) {
        const __m512i v = _mm512_loadu_si512(wb + p * ps + g * 64);
        for (int i = 0; i < MR; ++i) acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], v, bcast4(a[i * lda + b].qs + 4 * g));
      }
  }
}

// A 32-block of NP panels unpacked to one code byte per weight (nibble_unpack,
// q6k_unpack): [panel][half][group], each vector [16 rows][4 bytes], half 0 the block's
// elements 4g + j, half 1 elements 16 + 4g + j.
template <int NP>
using BlockCodes = uint8_t[NP][2][4][64];
// 32-blocks per chunk of prefill's unpacked codes: 2 panels' take 32 KiB, in L1 while
// every row tile runs over them.
inline constexpr int64_t kUnpackBlocks = 32;

// A 32-block of a nibble format, NP panels, unpacked once for all the row tiles that read
// it (a decode batch's, a prefill chunk's), which otherwise each redo the masks and
// shifts, a third as many vector ops as their vpdpbusd, on the same ports:
// codes[p][0][g] and codes[p][1][g] are nibble_codes' lo and hi of group g. wb: the
// block's nibbles in panel 0 (the h vector 256 bytes on, kHigh).
template <int NP, bool kHigh>
inline __attribute__((always_inline)) void nibble_unpack(const uint8_t* wb, int64_t ps, BlockCodes<NP>& codes) {
  for (int p = 0; p < NP; ++p) {
    const __m512i hb = kHigh ? _mm512_loadu_si512(wb + p * ps + 256) : _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      __m512i lo, hi;
      nibble_codes<kHigh>(_mm512_loadu_si512(wb + p * ps + g * 64), hb, g, lo, hi);
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

// Integer weights, ActQ8 activations (MR rows at stride lda blocks): per block the
// exact int32 sums (block_isums), then, with the _1 types' per-row minimum,
//   acc = fma(float(isum), d_w d_a, acc);  acc = fma(m_w, d_a sum_a, acc)  (_1 only)
// kCodes: the nibble formats' blocks [b0, b1) come unpacked in codes (unpack_units).
template <int MR, int NP, bool kAhead, Fmt F, bool kCodes = false>
void kern_int8(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t b0, int64_t b1, float* y,
               int64_t ldy, __mmask16 last, PassPrefetch& pf, const BlockCodes<NP>* codes) {
  using I = FmtInfo<F>;
  constexpr bool kMin = I::kMin;
  constexpr int64_t kBlockBytes = I::kBlockBytes;
  __m512 accf[MR][NP];
  acc_begin(accf, b0 == 0, y, ldy, last);
  for (int64_t b = b0; b < b1; ++b) {
    pf.step();
    if constexpr (kAhead) stream_ahead<NP, kBlockBytes>(w, ps, b * kBlockBytes);
    __m512i acci[MR][NP];
    if constexpr (kCodes) {
      isum_offsets<MR, NP, F>(a, lda, b, acci);
      codes_isums<MR, NP>(codes[b - b0], a + b, lda, acci);
    } else {
      block_isums<MR, NP, F>(w, ps, a, lda, b, acci);
    }
    __m512 dw[NP], mw[NP];
    for (int p = 0; p < NP; ++p) {
      const uint8_t* sc = w + p * ps + b * kBlockBytes;
      dw[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
      if constexpr (kMin) mw[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
    }
    for (int i = 0; i < MR; ++i) {
      const ActQ8& q = a[i * lda + b];
      const __m512 da = _mm512_set1_ps(q.d);
      for (int p = 0; p < NP; ++p) {
        const __m512 t = _mm512_cvtepi32_ps(acci[i][p]);
        accf[i][p] = _mm512_fmadd_ps(t, _mm512_mul_ps(dw[p], da), accf[i][p]);
      }
      if constexpr (kMin) {
        const __m512 dsum = _mm512_set1_ps(q.d * float(q.sum()));
        for (int p = 0; p < NP; ++p) accf[i][p] = _mm512_fmadd_ps(mw[p], dsum, accf[i][p]);
      }
    }
  }
  acc_end(accf, y, ldy, last);
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

// batch_row_tiles for one block of a decode batch, with the block's prefetch ahead
// issued one panel per row tile: all NP panels' lines at the block's start are a burst
// that fills the core's fill buffers and holds up the first tile's loads. The panels no
// tile took (fewer than 4 NP rows) go after the last tile. Used by Q8_0, the batch type
// nearest its memory bound (m = 16: +2-5% of DRAM); on the 4-bit types, compute-bound at
// m = 16, it measured 1-13% slower (docs/BENCHMARKS.md, session 7).
template <int NP, int64_t kBytes, class F>
inline __attribute__((always_inline)) void batch_tiles_ahead(const uint8_t* w, int64_t ps, int64_t off, int64_t rows,
                                                             F&& f) {
  int ahead = 0;
  batch_row_tiles(rows, [&](auto R, int64_t r) {
    if (ahead < NP) stream_ahead<1, kBytes>(w + ahead++ * ps, ps, off);
    f(R, r);
  });
  for (; ahead < NP; ++ahead) stream_ahead<1, kBytes>(w + ahead * ps, ps, off);
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

// codes: the block unpacked by nibble_unpack (the nibble formats; Q8_0 reads w).
template <int MR, int NP, Fmt F>
inline __attribute__((always_inline)) void batch_tile(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda,
                                                      int64_t b, const BlockCodes<NP>& codes,
                                                      const __m512 (&dw)[NP], const __m512 (&mw)[NP],
                                                      float (*accm)[NP][16]) {
  constexpr bool kMin = FmtInfo<F>::kMin;
  __m512i acci[MR][NP];
  if constexpr (FmtInfo<F>::kNibbles) {
    isum_offsets<MR, NP, F>(a, lda, b, acci);
    codes_isums<MR, NP>(codes, a + b, lda, acci);
  } else {
    block_isums<MR, NP, F>(w, ps, a, lda, b, acci);
  }
  for (int i = 0; i < MR; ++i) {
    const ActQ8& q = a[i * lda + b];
    const __m512 da = _mm512_set1_ps(q.d);
    for (int p = 0; p < NP; ++p) {
      __m512 acc = _mm512_load_ps(accm[i][p]);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[i][p]), _mm512_mul_ps(dw[p], da), acc);
      if constexpr (kMin) acc = _mm512_fmadd_ps(mw[p], _mm512_set1_ps(q.d * float(q.sum())), acc);
      _mm512_store_ps(accm[i][p], acc);
    }
  }
}

// kern_int8 for a decode batch: rows [0, rows) (at most kBatchRows) against NP panels,
// block by block, each block in row tiles of 4. A block's weights come from DRAM as the
// first row tile reads them and from L1 for the others right after, so the panels
// stream at the pace of the arithmetic, NP streams at once with a prefetch ahead as in
// decode. (kern_int8's L1-sized passes instead fetch the next pass with software
// prefetches, which the core's few fill buffers cap near 10 GB/s.) The float sums of
// every row sit in an aligned scratch, loaded and stored around the same fma on the same
// values as kern_int8's, so every lane keeps its bits.
template <int NP, Fmt F>
void kern_int8_batch(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t rows, int64_t nb, float* y,
                     int64_t ldy, __mmask16 last) {
  constexpr bool kMin = FmtInfo<F>::kMin;
  constexpr int64_t kBlockBytes = FmtInfo<F>::kBlockBytes;
  alignas(64) float accm[kBatchRows][NP][16];
  alignas(64) BlockCodes<NP> codes;
  batch_clear<NP>(accm, rows);
  for (int64_t b = 0; b < nb; ++b) {
    __m512 dw[NP], mw[NP];
    for (int p = 0; p < NP; ++p) {
      const uint8_t* sc = w + p * ps + b * kBlockBytes;
      dw[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
      mw[p] = kMin ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32))) : _mm512_setzero_ps();
    }
    auto tile = [&](auto R, int64_t r) {
      batch_tile<decltype(R)::value, NP, F>(w, ps, a + r * lda, lda, b, codes, dw, mw, accm + r);
    };
    if constexpr (F == Fmt::Q8_0) {
      batch_tiles_ahead<NP, kBlockBytes>(w, ps, b * kBlockBytes, rows, tile);
    } else {
      stream_ahead<NP, kBlockBytes>(w, ps, b * kBlockBytes);
      nibble_unpack<NP, FmtInfo<F>::kHigh>(w + b * kBlockBytes + FmtInfo<F>::kCodes, ps, codes);
      batch_row_tiles(rows, tile);
    }
  }
  batch_store<NP>(accm, rows, y, ldy, last);
}

// Bytes of a Q4_K / Q5_K super-block of one panel (packed_kquant.cpp).
template <bool kQ5>
inline constexpr int64_t kQ45Super = kQ5 ? 16 * 180 : 16 * 148;

// Sub-block b of a Q4_K / Q5_K super-block sb (per panel): the exact int32 sums of MR
// activation rows (ab: the rows' ActQ8 of that 32-block, stride lda) x NP panels, Q5_K's
// fifth bits from the block's h vector (nibble_codes).
template <int MR, int NP, bool kQ5>
inline __attribute__((always_inline)) void q45k_isums(const uint8_t* sb, int64_t ps, const ActQ8* ab, int64_t lda,
                                                      int b, __m512i (&acci)[MR][NP]) {
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) acci[i][p] = _mm512_setzero_si512();
  const uint8_t* qs = sb + 320 + b * (kQ5 ? 320 : 256);
  __m512i hb[NP];
  for (int p = 0; p < NP; ++p) hb[p] = kQ5 ? _mm512_loadu_si512(qs + p * ps + 256) : _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g)
    for (int p = 0; p < NP; ++p) {
      __m512i lo, hi;
      nibble_codes<kQ5>(_mm512_loadu_si512(qs + p * ps + g * 64), hb[p], g, lo, hi);
      for (int i = 0; i < MR; ++i) {
        acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], lo, bcast4(ab[i * lda].qs + 4 * g));
        acci[i][p] = _mm512_dpbusd_epi32(acci[i][p], hi, bcast4(ab[i * lda].qs + 16 + 4 * g));
      }
    }
}

// Sub-block b's scale and min of every row of NP panels: d sc_b and dmin m_b.
template <int NP>
inline __attribute__((always_inline)) void q45k_scales(const uint8_t* sb, int64_t ps, int b, const __m512 (&dv)[NP],
                                                       const __m512 (&dmv)[NP], __m512 (&scf)[NP], __m512 (&mf)[NP]) {
  for (int p = 0; p < NP; ++p) {
    const auto* sc = reinterpret_cast<const __m128i*>(sb + p * ps + 64 + b * 16);
    const auto* mn = reinterpret_cast<const __m128i*>(sb + p * ps + 192 + b * 16);
    scf[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(sc))), dv[p]);
    mf[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(mn))), dmv[p]);
  }
}

// A super-block's d and dmin of every row of NP panels.
template <int NP>
inline __attribute__((always_inline)) void q45k_d(const uint8_t* sb, int64_t ps, __m512 (&dv)[NP], __m512 (&dmv)[NP]) {
  for (int p = 0; p < NP; ++p) {
    dv[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + p * ps)));
    dmv[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + p * ps + 32)));
  }
}

// Q4_K / Q5_K super-blocks (packed_kquant.cpp): 32-block b of a super-block is sub-block
// b, so one activation block meets one (scale, min) pair per row:
//   acc = fma(float(isum), (d sc_b) d_a, acc);  acc = fnma((dmin m_b), d_a sum_a, acc)
// kCodes: super-blocks [s0, s1) come unpacked in codes (unpack_units).
template <int MR, int NP, bool kAhead, bool kQ5, bool kCodes = false>
void kern_q45k(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t s0, int64_t s1, float* y,
               int64_t ldy, __mmask16 last, PassPrefetch& pf, const BlockCodes<NP>* codes) {
  constexpr int64_t kSuper = kQ45Super<kQ5>;
  __m512 accf[MR][NP];
  acc_begin(accf, s0 == 0, y, ldy, last);
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* sb = w + s * kSuper;
    __m512 dv[NP], dmv[NP];
    q45k_d(sb, ps, dv, dmv);
    for (int b = 0; b < 8; ++b) {
      pf.step();
      if constexpr (kAhead) stream_ahead<NP, kSuper / 8>(sb, ps, b * (kSuper / 8));
      const ActQ8* ab = a + s * 8 + b;
      __m512i acci[MR][NP];
      if constexpr (kCodes) {
        for (int i = 0; i < MR; ++i)
          for (int p = 0; p < NP; ++p) acci[i][p] = _mm512_setzero_si512();
        codes_isums<MR, NP>(codes[(s - s0) * 8 + b], ab, lda, acci);
      } else {
        q45k_isums<MR, NP, kQ5>(sb, ps, ab, lda, b, acci);
      }
      __m512 scf[NP], mf[NP];
      q45k_scales(sb, ps, b, dv, dmv, scf, mf);
      for (int i = 0; i < MR; ++i) {
        const __m512 da = _mm512_set1_ps(ab[i * lda].d);
        const __m512 dsum = _mm512_set1_ps(ab[i * lda].d * float(ab[i * lda].sum()));
        for (int p = 0; p < NP; ++p) {
          accf[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[i][p]), _mm512_mul_ps(scf[p], da), accf[i][p]);
          accf[i][p] = _mm512_fnmadd_ps(mf[p], dsum, accf[i][p]);
        }
      }
    }
  }
  acc_end(accf, y, ldy, last);
}

// kern_int8_batch's order for Q4_K / Q5_K: every row of the call (at most kBatchRows)
// against NP panels, one 32-block sub-block at a time in row tiles of 4, the sub-block's
// scales converted once for all the tiles, the float sums in an aligned scratch around
// kern_q45k's fma and fnmadd (so every lane keeps its bits).
template <int MR, int NP>
inline __attribute__((always_inline)) void q45k_batch_tile(const BlockCodes<NP>& codes, const ActQ8* ab,
                                                           int64_t lda, const __m512 (&scf)[NP], const __m512 (&mf)[NP],
                                                           float (*accm)[NP][16]) {
  __m512i acci[MR][NP];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) acci[i][p] = _mm512_setzero_si512();
  codes_isums<MR, NP>(codes, ab, lda, acci);
  for (int i = 0; i < MR; ++i) {
    const __m512 da = _mm512_set1_ps(ab[i * lda].d);
    const __m512 dsum = _mm512_set1_ps(ab[i * lda].d * float(ab[i * lda].sum()));
    for (int p = 0; p < NP; ++p) {
      __m512 acc = _mm512_load_ps(accm[i][p]);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acci[i][p]), _mm512_mul_ps(scf[p], da), acc);
      acc = _mm512_fnmadd_ps(mf[p], dsum, acc);
      _mm512_store_ps(accm[i][p], acc);
    }
  }
}

template <int NP, bool kQ5>
void kern_q45k_batch(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t rows, int64_t n_super,
                     float* y, int64_t ldy, __mmask16 last) {
  constexpr int64_t kSuper = kQ45Super<kQ5>;
  alignas(64) float accm[kBatchRows][NP][16];
  alignas(64) BlockCodes<NP> codes;
  batch_clear<NP>(accm, rows);
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* sb = w + s * kSuper;
    __m512 dv[NP], dmv[NP];
    q45k_d(sb, ps, dv, dmv);
    for (int b = 0; b < 8; ++b) {
      stream_ahead<NP, kSuper / 8>(sb, ps, b * (kSuper / 8));
      nibble_unpack<NP, kQ5>(sb + 320 + b * (kQ5 ? 320 : 256), ps, codes);
      __m512 scf[NP], mf[NP];
      q45k_scales(sb, ps, b, dv, dmv, scf, mf);
      const ActQ8* ab = a + s * 8 + b;
      batch_row_tiles(rows, [&](auto R, int64_t r) {
        q45k_batch_tile<decltype(R)::value, NP>(codes, ab + r * lda, lda, scf, mf, accm + r);
      });
    }
  }
  batch_store<NP>(accm, rows, y, ldy, last);
}

// The top 2 bits of group g's codes (packed_kquant.cpp) moved to bits 4..5 of each byte.
// 16-bit shifts are safe: what crosses a byte boundary lands outside the 0x30 mask.
template <int G>
inline __m512i q6_high(__m512i hb) {
  const __m512i m = _mm512_set1_epi8(0x30);
  if constexpr (G == 0) return _mm512_and_si512(_mm512_slli_epi16(hb, 4), m);
  if constexpr (G == 1) return _mm512_and_si512(_mm512_slli_epi16(hb, 2), m);
  if constexpr (G == 2) return _mm512_and_si512(hb, m);
  if constexpr (G == 3) return _mm512_and_si512(_mm512_srli_epi16(hb, 2), m);
}

// Q6_K: codes q in 0..63 stand for q - 32; a 32-block holds two 16-element sub-blocks
// (scales 2b and 2b + 1 of the super-block), each with its own int32 sum:
//   acc = fma(float(isum_h - 32 sum16_h), (d sc_{2b+h}) d_a, acc) for h = 0, 1.
// The pieces below are shared by the tile kernel (kern_q6k), the decode batches
// (kern_q6k_batch) and prefill over unpacked codes (kern_q6k with codes), so all three run
// the same arithmetic per row and every lane keeps its bits whichever runs.

// Group g of block b's codes, NP = 1 panel at bp: lo = elements 4g + j, hi = 16 + 4g + j.
template <int G>
inline __attribute__((always_inline)) void q6k_group(const uint8_t* bp, __m512i hb0, __m512i hb1, __m512i& lo,
                                                     __m512i& hi) {
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_loadu_si512(bp + G * 64);
  lo = _mm512_or_si512(_mm512_and_si512(v, lo4), q6_high<G>(hb0));
  hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo4), q6_high<G>(hb1));
}

// f(lo, hi, g) for the 4 groups of block b of one panel (p's super-block at sb).
template <class F>
inline __attribute__((always_inline)) void q6k_groups(const uint8_t* sb, int b, F&& f) {
  const uint8_t* bp = sb + 32 + 256 + b * 384;
  const __m512i hb0 = _mm512_loadu_si512(bp + 256), hb1 = _mm512_loadu_si512(bp + 320);
  __m512i lo, hi;
  q6k_group<0>(bp, hb0, hb1, lo, hi), f(lo, hi, 0);
  q6k_group<1>(bp, hb0, hb1, lo, hi), f(lo, hi, 1);
  q6k_group<2>(bp, hb0, hb1, lo, hi), f(lo, hi, 2);
  q6k_group<3>(bp, hb0, hb1, lo, hi), f(lo, hi, 3);
}

// Each half's int32 sums start at -32 x the half's activation sum.
template <int MR, int NP>
inline __attribute__((always_inline)) void q6k_offsets(const ActQ8* ab, int64_t lda, __m512i (&acc0)[MR][NP],
                                                       __m512i (&acc1)[MR][NP]) {
  for (int i = 0; i < MR; ++i) {
    const __m512i off0 = _mm512_set1_epi32(-32 * ab[i * lda].sum16[0]);
    const __m512i off1 = _mm512_set1_epi32(-32 * ab[i * lda].sum16[1]);
    for (int p = 0; p < NP; ++p) acc0[i][p] = off0, acc1[i][p] = off1;
  }
}

// acc0 / acc1 += group g's codes (lo / hi) of panel p with MR activation rows.
template <int MR, int NP>
inline __attribute__((always_inline)) void q6k_dots(__m512i lo, __m512i hi, int g, int p, const ActQ8* ab, int64_t lda,
                                                    __m512i (&acc0)[MR][NP], __m512i (&acc1)[MR][NP]) {
  for (int i = 0; i < MR; ++i) {
    acc0[i][p] = _mm512_dpbusd_epi32(acc0[i][p], lo, bcast4(ab[i * lda].qs + 4 * g));
    acc1[i][p] = _mm512_dpbusd_epi32(acc1[i][p], hi, bcast4(ab[i * lda].qs + 16 + 4 * g));
  }
}

// Block b's two sub-block scales of every row of NP panels: d sc_{2b} and d sc_{2b+1}.
template <int NP>
inline __attribute__((always_inline)) void q6k_scales(const uint8_t* sb, int64_t ps, int b, const __m512 (&dv)[NP],
                                                      __m512 (&sc0)[NP], __m512 (&sc1)[NP]) {
  for (int p = 0; p < NP; ++p) {
    const auto* sc = reinterpret_cast<const __m128i*>(sb + p * ps + 32 + 2 * b * 16);
    sc0[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(sc))), dv[p]);
    sc1[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(sc + 1))), dv[p]);
  }
}

template <int NP>
inline __attribute__((always_inline)) void q6k_d(const uint8_t* sb, int64_t ps, __m512 (&dv)[NP]) {
  for (int p = 0; p < NP; ++p) dv[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + p * ps)));
}

// The block's two fmas for one row and panel.
inline __attribute__((always_inline)) __m512 q6k_fma(__m512 acc, __m512i s0, __m512i s1, __m512 sc0, __m512 sc1,
                                                     __m512 da) {
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(sc0, da), acc);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(sc1, da), acc);
}

// The int32 sums of MR rows over one block's unpacked codes (q6k_unpack).
template <int MR, int NP>
inline __attribute__((always_inline)) void q6k_code_sums(const BlockCodes<NP>& codes, const ActQ8* ab,
                                                         int64_t lda, __m512i (&acc0)[MR][NP], __m512i (&acc1)[MR][NP]) {
  q6k_offsets<MR, NP>(ab, lda, acc0, acc1);
  for (int g = 0; g < 4; ++g)
    for (int p = 0; p < NP; ++p)
      q6k_dots<MR, NP>(_mm512_load_si512(codes[p][0][g]), _mm512_load_si512(codes[p][1][g]), g, p, ab, lda, acc0, acc1);
}

// kCodes: super-blocks [s0, s1) come unpacked in codes (q6k_unpack_range). Prefill's row tiles
// share one unpacking instead of each redoing it (as many vector ops as a 4-row tile's
// vpdpbusd); free of the unpacking's temporaries, 4 x 2 tiles fit in the registers
// (16 int32 sums, 8 float), where without codes wider than 4 x 1 would spill.
template <int MR, int NP, bool kAhead, bool kCodes = false>
void kern_q6k(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t s0, int64_t s1, float* y,
              int64_t ldy, __mmask16 last, PassPrefetch& pf, const BlockCodes<NP>* codes) {
  __m512 accf[MR][NP];
  acc_begin(accf, s0 == 0, y, ldy, last);
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* sb = w + s * (16 * 210);
    __m512 dv[NP];
    q6k_d(sb, ps, dv);
    for (int b = 0; b < 8; ++b) {
      pf.step();
      if constexpr (kAhead) stream_ahead<NP, 210 * 16 / 8>(sb, ps, b * (210 * 16 / 8));
      const ActQ8* ab = a + s * 8 + b;
      __m512i acc0[MR][NP], acc1[MR][NP];
      if constexpr (kCodes) {
        q6k_code_sums<MR, NP>(codes[(s - s0) * 8 + b], ab, lda, acc0, acc1);
      } else {
        q6k_offsets<MR, NP>(ab, lda, acc0, acc1);
        for (int p = 0; p < NP; ++p)
          q6k_groups(sb + p * ps, b,
                     [&](__m512i lo, __m512i hi, int g) { q6k_dots<MR, NP>(lo, hi, g, p, ab, lda, acc0, acc1); });
      }
      __m512 sc0[NP], sc1[NP];
      q6k_scales(sb, ps, b, dv, sc0, sc1);
      for (int i = 0; i < MR; ++i) {
        const __m512 da = _mm512_set1_ps(ab[i * lda].d);
        for (int p = 0; p < NP; ++p) accf[i][p] = q6k_fma(accf[i][p], acc0[i][p], acc1[i][p], sc0[p], sc1[p], da);
      }
    }
  }
  acc_end(accf, y, ldy, last);
}

// Block b of a Q6_K super-block sb, NP panels: the 6-bit codes assembled (low nibble
// plus the top 2 bits, 0..63) into codes[p][h][g] (BlockCodes).
template <int NP>
inline __attribute__((always_inline)) void q6k_unpack(const uint8_t* sb, int64_t ps, int b, BlockCodes<NP>& codes) {
  for (int p = 0; p < NP; ++p)
    q6k_groups(sb + p * ps, b, [&](__m512i lo, __m512i hi, int g) {
      _mm512_store_si512(codes[p][0][g], lo);
      _mm512_store_si512(codes[p][1][g], hi);
    });
}

// kern_q6k_batch's row tile: kern_q6k's block for MR rows over codes q6k_unpack made, on
// the float sums in the batch scratch.
template <int MR, int NP>
inline __attribute__((always_inline)) void q6k_batch_tile(const BlockCodes<NP>& codes, const ActQ8* ab, int64_t lda,
                                                          const __m512 (&sc0)[NP], const __m512 (&sc1)[NP],
                                                          float (*accm)[NP][16]) {
  __m512i acc0[MR][NP], acc1[MR][NP];
  q6k_code_sums<MR, NP>(codes, ab, lda, acc0, acc1);
  for (int i = 0; i < MR; ++i) {
    const __m512 da = _mm512_set1_ps(ab[i * lda].d);
    for (int p = 0; p < NP; ++p)
      _mm512_store_ps(accm[i][p], q6k_fma(_mm512_load_ps(accm[i][p]), acc0[i][p], acc1[i][p], sc0[p], sc1[p], da));
  }
}

// kern_int8_batch's order for Q6_K (NP <= 2: two int32 sums per row and panel): each
// 32-block's codes assembled once for all the row tiles instead of once per tile, which
// took as many vector ops as the vpdpbusd of a 4-row tile.
template <int NP>
void kern_q6k_batch(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t rows, int64_t n_super, float* y,
                    int64_t ldy, __mmask16 last) {
  static_assert(NP <= 2);
  alignas(64) float accm[kBatchRows][NP][16];
  alignas(64) BlockCodes<NP> codes;
  batch_clear<NP>(accm, rows);
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* sb = w + s * (16 * 210);
    __m512 dv[NP];
    q6k_d(sb, ps, dv);
    for (int b = 0; b < 8; ++b) {
      stream_ahead<NP, 210 * 16 / 8>(sb, ps, b * (210 * 16 / 8));
      q6k_unpack<NP>(sb, ps, b, codes);
      __m512 sc0[NP], sc1[NP];
      q6k_scales(sb, ps, b, dv, sc0, sc1);
      const ActQ8* ab = a + s * 8 + b;
      batch_row_tiles(rows, [&](auto R, int64_t r) {
        q6k_batch_tile<decltype(R)::value, NP>(codes, ab + r * lda, lda, sc0, sc1, accm + r);
      });
    }
  }
  batch_store<NP>(accm, rows, y, ldy, last);
}

// Every 32-block of super-blocks [s0, s1) of NP panels into codes[(s - s0) * 8 + b].
template <int NP>
void q6k_unpack_range(const uint8_t* w, int64_t ps, int64_t s0, int64_t s1, BlockCodes<NP>* codes) {
  for (int64_t s = s0; s < s1; ++s)
    for (int b = 0; b < 8; ++b) q6k_unpack<NP>(w + s * (16 * 210), ps, b, codes[(s - s0) * 8 + b]);
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool is_kquant_type(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// Reduction units of a type (see kern_float) and how many one pass over a panel group
// takes: about 8 KiB of each panel, so a pair of panels stays in L1 while every row
// tile of the call passes over it.
int64_t reduction_units(const GemmArgs& g) {
  return is_float_type(g.type) ? g.k : is_kquant_type(g.type) ? g.k / 256 : g.k / 32;
}
int64_t units_per_pass(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return kGemmKc;  // f16: 8 KiB of a panel, f32: 16
    case DType::Q6_K: return 2;        // 2 x 3360 B
    default: return 1 << 30;           // the batch formats never run passes (batch_over)
  }
}

// One MR x NP tile over reduction units [c0, c1).
// codes: the group's units [c0, c1) unpacked (unpack_units; the types unpacks() names),
// or null.
template <int MR, int NP, bool kAhead = false>
void tile(const GemmArgs& g, int64_t m, int64_t p, __mmask16 last, int64_t c0, int64_t c1, PassPrefetch& pf,
          const BlockCodes<NP>* codes = nullptr) {
  const int64_t ps = panel_bytes(g.type, g.k);
  const uint8_t* w = g.packed + p * ps;
  float* y = g.y + m * g.ldy + p * kPanelRows;
  const auto* q8 = static_cast<const ActQ8*>(g.act) + m * g.lda;
  const auto* xf = static_cast<const float*>(g.act) + m * g.lda;
  if constexpr (!kAhead) {  // decode is never unpacked
    if (codes) switch (g.type) {
        case DType::Q4_0: return kern_int8<MR, NP, false, Fmt::Q4_0, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        case DType::Q4_1: return kern_int8<MR, NP, false, Fmt::Q4_1, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        case DType::Q5_0: return kern_int8<MR, NP, false, Fmt::Q5_0, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        case DType::Q5_1: return kern_int8<MR, NP, false, Fmt::Q5_1, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        case DType::Q4_K: return kern_q45k<MR, NP, false, false, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        case DType::Q5_K: return kern_q45k<MR, NP, false, true, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        case DType::Q6_K: return kern_q6k<MR, NP, false, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, codes);
        default: break;
      }
  }
  switch (g.type) {
    case DType::F32: return kern_float<MR, NP, kAhead, LoadF32>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf);
    case DType::F16: return kern_float<MR, NP, kAhead, LoadF16>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf);
    case DType::BF16: return kern_float<MR, NP, kAhead, LoadBF16>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf);
    case DType::Q8_0: return kern_int8<MR, NP, kAhead, Fmt::Q8_0>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q4_0: return kern_int8<MR, NP, kAhead, Fmt::Q4_0>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q4_1: return kern_int8<MR, NP, kAhead, Fmt::Q4_1>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q5_0: return kern_int8<MR, NP, kAhead, Fmt::Q5_0>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q5_1: return kern_int8<MR, NP, kAhead, Fmt::Q5_1>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q4_K: return kern_q45k<MR, NP, kAhead, false>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q5_K: return kern_q45k<MR, NP, kAhead, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
    case DType::Q6_K:
      if constexpr (MR * NP <= 4)  // two int32 sums per pair: wider tiles would spill
        return kern_q6k<MR, NP, kAhead>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, nullptr);
      else
        for (int p = 0; p < NP; ++p)
          kern_q6k<MR, 1, kAhead>(w + p * ps, ps, q8, g.lda, c0, c1, y + p * kPanelRows, g.ldy,
                                  p == NP - 1 ? last : __mmask16(0xFFFF), pf, nullptr);
      return;
    default: return;
  }
}

// The types whose decode batches run block by block (batch_over); the float types run
// passes (a batch order through their tile kernels measured 5-15% slower).
bool has_batch_kernel(DType t) { return !is_float_type(t); }

// kern_int8_batch or kern_q45k_batch for rows [m0, m1) of NP panels from p.
template <int NP>
void batch_over(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p, __mmask16 last) {
  const int64_t ps = panel_bytes(g.type, g.k), nb = g.k / 32;
  const uint8_t* w = g.packed + p * ps;
  float* y = g.y + m0 * g.ldy + p * kPanelRows;
  const auto* a = static_cast<const ActQ8*>(g.act) + m0 * g.lda;
  const int64_t rows = m1 - m0;
  switch (g.type) {
    case DType::Q8_0: return kern_int8_batch<NP, Fmt::Q8_0>(w, ps, a, g.lda, rows, nb, y, g.ldy, last);
    case DType::Q4_0: return kern_int8_batch<NP, Fmt::Q4_0>(w, ps, a, g.lda, rows, nb, y, g.ldy, last);
    case DType::Q4_1: return kern_int8_batch<NP, Fmt::Q4_1>(w, ps, a, g.lda, rows, nb, y, g.ldy, last);
    case DType::Q5_0: return kern_int8_batch<NP, Fmt::Q5_0>(w, ps, a, g.lda, rows, nb, y, g.ldy, last);
    case DType::Q5_1: return kern_int8_batch<NP, Fmt::Q5_1>(w, ps, a, g.lda, rows, nb, y, g.ldy, last);
    case DType::Q4_K: return kern_q45k_batch<NP, false>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, last);
    case DType::Q5_K:
      if constexpr (NP == 4) {  // the fifth-bit vectors leave too few registers for 4
        kern_q45k_batch<2, true>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, 0xFFFF);
        return kern_q45k_batch<2, true>(w + 2 * ps, ps, a, g.lda, rows, g.k / 256, y + 32, g.ldy, last);
      } else {
        return kern_q45k_batch<NP, true>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, last);
      }
    case DType::Q6_K:
      if constexpr (NP == 4) {
        kern_q6k_batch<2>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, 0xFFFF);
        return kern_q6k_batch<2>(w + 2 * ps, ps, a, g.lda, rows, g.k / 256, y + 32, g.ldy, last);
      } else {
        return kern_q6k_batch<NP>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, last);
      }
    default: return;
  }
}

// Rows [m0, m1) of NP panels from p over units [c0, c1): tiles of kMr rows, then the
// remainder as one smaller tile.
template <int kMr, int NP>
void rows_over(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p, __mmask16 last, int64_t c0, int64_t c1,
               PassPrefetch& pf, const BlockCodes<NP>* codes) {
  int64_t m = m0;
  for (; m + kMr <= m1; m += kMr) tile<kMr, NP>(g, m, p, last, c0, c1, pf, codes);
  switch (m1 - m) {
    case 7: if constexpr (kMr > 7) tile<7, NP>(g, m, p, last, c0, c1, pf, codes); break;
    case 6: if constexpr (kMr > 6) tile<6, NP>(g, m, p, last, c0, c1, pf, codes); break;
    case 5: tile<5, NP>(g, m, p, last, c0, c1, pf, codes); break;
    case 4: tile<4, NP>(g, m, p, last, c0, c1, pf, codes); break;
    case 3: tile<3, NP>(g, m, p, last, c0, c1, pf, codes); break;
    case 2: tile<2, NP>(g, m, p, last, c0, c1, pf, codes); break;
    case 1: tile<1, NP>(g, m, p, last, c0, c1, pf, codes); break;
    default: break;
  }
}

// The types whose prefill tiles can read unpacked codes (unpack_units).
bool unpacks(DType t) { return t != DType::Q8_0 && !is_float_type(t); }

template <int NP, Fmt F>
void unpack_blocks(const uint8_t* w, int64_t ps, int64_t b0, int64_t b1, BlockCodes<NP>* codes) {
  using I = FmtInfo<F>;
  for (int64_t b = b0; b < b1; ++b) nibble_unpack<NP, I::kHigh>(w + b * I::kBlockBytes + I::kCodes, ps, codes[b - b0]);
}

template <int NP, bool kQ5>
void unpack_q45k(const uint8_t* w, int64_t ps, int64_t s0, int64_t s1, BlockCodes<NP>* codes) {
  for (int64_t s = s0; s < s1; ++s)
    for (int b = 0; b < 8; ++b)
      nibble_unpack<NP, kQ5>(w + s * kQ45Super<kQ5> + 320 + b * (kQ5 ? 320 : 256), ps, codes[(s - s0) * 8 + b]);
}

// Reduction units [u0, u1) of NP panels from w, one BlockCodes per 32-block.
template <int NP>
void unpack_units(DType t, const uint8_t* w, int64_t ps, int64_t u0, int64_t u1, BlockCodes<NP>* codes) {
  switch (t) {
    case DType::Q4_0: return unpack_blocks<NP, Fmt::Q4_0>(w, ps, u0, u1, codes);
    case DType::Q4_1: return unpack_blocks<NP, Fmt::Q4_1>(w, ps, u0, u1, codes);
    case DType::Q5_0: return unpack_blocks<NP, Fmt::Q5_0>(w, ps, u0, u1, codes);
    case DType::Q5_1: return unpack_blocks<NP, Fmt::Q5_1>(w, ps, u0, u1, codes);
    case DType::Q4_K: return unpack_q45k<NP, false>(w, ps, u0, u1, codes);
    case DType::Q5_K: return unpack_q45k<NP, true>(w, ps, u0, u1, codes);
    case DType::Q6_K: return q6k_unpack_range<NP>(w, ps, u0, u1, codes);
    default: return;
  }
}

// Panels [p0, p1): one row runs the decode tiles, and a decode batch of a block-by-block
// type runs batch_over. Otherwise groups of NP (2, then 1 for an odd one); per group the
// reduction runs in passes of units_per_pass (prefill: one pass), each pass taking every
// row tile while the group's slice of weights is in L1. So the weights come from DRAM
// once, spread over all the tiles' arithmetic, which lets the hardware prefetcher
// overlap the stream with the compute (a group's whole reduction per row tile instead
// read DRAM in the first tile and waited on it, and only reused the weights from L2 in
// the others).
template <int kMr>
void panels_over(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t n_panels = (g.n_out + kPanelRows - 1) / kPanelRows;
  auto last_of = [&](int64_t p_end) {
    return p_end == n_panels ? lane_mask(g.n_out - (n_panels - 1) * kPanelRows) : __mmask16(0xFFFF);
  };
  const int64_t units = reduction_units(g), step = g.stream ? units_per_pass(g.type) : units;
  if (m1 - m0 == 1) {  // decode: four weight streams in flight, one pass
    int64_t p = p0;
    PassPrefetch none;
    for (; p + 4 <= p1; p += 4) tile<1, 4, true>(g, m0, p, last_of(p + 4), 0, units, none);
    for (; p + 2 <= p1; p += 2) tile<1, 2, true>(g, m0, p, last_of(p + 2), 0, units, none);
    for (; p < p1; ++p) tile<1, 1, true>(g, m0, p, last_of(p + 1), 0, units, none);
    return;
  }
  // Decode batches of the block-by-block types, 4 panels at a time.
  if (g.stream && m1 - m0 <= kBatchRows && has_batch_kernel(g.type)) {
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4) batch_over<4>(g, m0, m1, p, last_of(p + 4));
    for (; p + 2 <= p1; p += 2) batch_over<2>(g, m0, m1, p, last_of(p + 2));
    for (; p < p1; ++p) batch_over<1>(g, m0, m1, p, last_of(p + 1));
    return;
  }
  // Kernel iterations (PassPrefetch::step calls) per unit: int8 per 32-block, K-quants
  // per 32-block of a super-block, float per 16 columns.
  const int64_t steps_per_unit = is_kquant_type(g.type) ? 8 : 1;
  const int64_t unit_div = is_float_type(g.type) ? 16 : 1;
  const int64_t ps = panel_bytes(g.type, g.k), unit_bytes = ps / units, row_tiles = (m1 - m0 + kMr - 1) / kMr;
  for (int64_t p = p0; p < p1; p += 2) {
    const bool pair = p + 2 <= p1;
    const __mmask16 last = last_of(pair ? p + 2 : p + 1);
    for (int64_t c0 = 0; c0 < units; c0 += step) {
      const int64_t c1 = std::min(units, c0 + step);
      // The pass after this one: the next slice of these panels, or the first slice of
      // the next group in [p0, p1).
      PassPrefetch pf;
      const int64_t np = c1 < units ? p : p + 2, nc0 = c1 < units ? c1 : 0;
      if (g.stream && np < p1) {
        const int64_t nc1 = std::min(units, nc0 + step), len = (nc1 - nc0) * unit_bytes;
        pf.at = reinterpret_cast<const char*>(g.packed + np * ps + nc0 * unit_bytes);
        pf.end = pf.at + len;
        pf.second = np + 2 <= p1 ? ps : 0;
        const int64_t iters = std::max<int64_t>(1, row_tiles * (c1 - c0) * steps_per_unit / unit_div);
        pf.lines = int32_t((len / 64 + iters - 1) / iters);
      }
      if (unpacks(g.type) && row_tiles > 1) {
        // The pass in chunks of kUnpackBlocks 32-blocks, each chunk's codes unpacked once
        // for all the row tiles, which otherwise each redo the masks and shifts (Q4_0 and
        // Q4_K: a third as many vector ops as their vpdpbusd, Q6_K as many). A tile's float
        // sums go through y between chunks, exactly, as between passes.
        alignas(64) BlockCodes<2> codes[kUnpackBlocks];
        auto* codes1 = reinterpret_cast<BlockCodes<1>*>(codes);
        const int64_t chunk = is_kquant_type(g.type) ? kUnpackBlocks / 8 : kUnpackBlocks;
        for (int64_t u0 = c0; u0 < c1; u0 += chunk) {
          const int64_t u1 = std::min(c1, u0 + chunk);
          if (pair) {
            unpack_units<2>(g.type, g.packed + p * ps, ps, u0, u1, codes);
            rows_over<kMr, 2>(g, m0, m1, p, last, u0, u1, pf, codes);
          } else {
            unpack_units<1>(g.type, g.packed + p * ps, ps, u0, u1, codes1);
            rows_over<kMr, 1>(g, m0, m1, p, last, u0, u1, pf, codes1);
          }
        }
      } else if (pair) {
        rows_over<kMr, 2>(g, m0, m1, p, last, c0, c1, pf, nullptr);
      } else {
        rows_over<kMr, 1>(g, m0, m1, p, last, c0, c1, pf, nullptr);
      }
    }
  }
}

}  // namespace

// Same arithmetic as the scalar quantize_act_gemm, so the codes are bit for bit equal:
// amax exact, d = amax / 127 and 1 / d in f32, x * (1 / d) rounded to nearest even
// (vcvtps2dq in the default MXCSR mode is what lrintf does).
void quantize_act_gemm_avx512(const float* x, ActQ8* y, int64_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, b)));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i lim = _mm512_set1_epi32(127);
    const __m512i qa = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)), lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
    const __m512i qb = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(b, vid)), lim), _mm512_sub_epi32(_mm512_setzero_si512(), lim));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16), _mm512_cvtepi32_epi8(qb));
    y[i].d = d;
    y[i].sum16[0] = int16_t(_mm512_reduce_add_epi32(qa));
    y[i].sum16[1] = int16_t(_mm512_reduce_add_epi32(qb));
  }
}

void gemm_panels_avx512(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  // Rows per tile: enough independent accumulator chains to hide the FMA / vpdpbusd
  // latency (a block's 8 vpdpbusd into one int32 accumulator form a 40-cycle chain, so
  // 2 per cycle need >= 10 chains), few enough to stay in 32 registers:
  //   float: 8 x 2 = 16 accumulators + 2 weight vectors (8 FMAs per weight load);
  //   Q8_0 / Q4_0: 6 x 2 = 12 int32 + 12 float accumulators;
  //   K-quants, Q4_1 and the Q5 types carry per-panel scale, min or fifth-bit vectors
  //   too: 4 x 2.
  switch (g.type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return panels_over<8>(g, m0, m1, p0, p1);
    case DType::Q8_0:
    case DType::Q4_0: return panels_over<6>(g, m0, m1, p0, p1);
    default: return panels_over<4>(g, m0, m1, p0, p1);
  }
}

}  // namespace ridge::kernels::detail
