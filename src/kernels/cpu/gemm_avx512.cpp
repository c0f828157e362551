// AVX-512 micro-kernels over 16-row panels (layouts in packed.h, contract in gemm.h).
// Nothing here is visible to baseline code: gemm_panels (gemm.cpp) calls in only after
// checking the CPU.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512_common.h"
#include "kernels/cpu/gemm_formats.h"
#include "kernels/cpu/gemm_kquant_avx512.h"
#include "kernels/cpu/packed.h"
#include "quant/blocks.h"
#include "quant/fp8.h"

namespace ridge::kernels::detail {
namespace {

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
// Float weights. w: first panel (NP panels at stride ps bytes), from column wc0 (0, or
// where a converted copy starts: convert_columns); x: MR rows at stride ldx; y: MR rows
// at stride ldy, 16 * NP columns, the last panel's lanes masked by `last`.
template <int MR, int NP, bool kAhead, typename L>
void kern_float(const uint8_t* w, int64_t ps, const float* x, int64_t ldx, int64_t c0, int64_t c1, float* y,
                int64_t ldy, __mmask16 last, PassPrefetch& pf, int64_t ahead, int64_t wc0 = 0) {
  for (int64_t k0 = c0; k0 < c1; k0 += kGemmKc) {
    const int64_t k1 = std::min(c1, k0 + kGemmKc);
    __m512 acc[MR][NP];
    for (int i = 0; i < MR; ++i)
      for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
    for (int64_t c = k0; c < k1; ++c) {
      if ((c & 15) == 0) pf.step();
      if constexpr (kAhead)
        if ((c & (64 / L::kColBytes - 1)) == 0) stream_ahead<NP, 64>(w, ps, (c - wc0) * L::kColBytes, ahead);
      __m512 wv[NP];
      for (int p = 0; p < NP; ++p) wv[p] = L::at(w + p * ps + (c - wc0) * L::kColBytes);
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

// FP8 weights (packed.h), in 128-blocks [b0, b1): per block MR x NP FMA chains over its
// columns from zero, then y = fma(chain, d x 2^8, y) (gemm.h's order, the scalar
// dot_fp8's). A column's 16 codes become floats as halves (quant/fp8.h,
// fp8_e4m3_unit): sign-extended to 16 bits and shifted left 7, with the sign's second
// copy (bit 14) cleared, then vcvtph2ps, which is exact for half subnormals.
// Two adjacent columns at a time: the integer part runs once on 32 codes.
inline __attribute__((always_inline)) void fp8_columns(const uint8_t* p, __m512& c0, __m512& c1) {
  const __m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i f = _mm512_and_si512(_mm512_slli_epi16(h, 7), _mm512_set1_epi16(int16_t(0xBFFF)));
  c0 = _mm512_cvtph_ps(_mm512_castsi512_si256(f));
  c1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f, 1));
}

inline constexpr int64_t kFp8Block = kPanelRows * int64_t(sizeof(quant::BlockFp8));  // 64 B of scales + 2048 of codes

// A block's chains from zero; decode asks for the block's scales' line here, its 32 lines
// of codes as the columns go (each line of the block once).
template <int MR, int NP, bool kAhead>
inline __attribute__((always_inline)) void fp8_block_begin(__m512 (&acc)[MR][NP], const uint8_t* w, int64_t ps,
                                                           int64_t off, int64_t ahead) {
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
  if constexpr (kAhead) stream_ahead<NP, 64>(w, ps, off, ahead);
}

// A block's chains into y: y = fma(chain, d x unit, y), from zero in a row's first block.
// block: the block of the first panel (its 16 scales first), NP panels at stride ps.
template <int MR, int NP>
inline __attribute__((always_inline)) void fp8_block_end(const __m512 (&acc)[MR][NP], const uint8_t* block, int64_t ps,
                                                         bool first, __m512 unit, float* y, int64_t ldy, __mmask16 last) {
  for (int p = 0; p < NP; ++p) {
    const __mmask16 mk = p == NP - 1 ? last : __mmask16(0xFFFF);
    const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(block + p * ps)), unit);
    for (int i = 0; i < MR; ++i) {
      float* yp = y + i * ldy + p * 16;
      const __m512 prev = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, yp);
      _mm512_mask_storeu_ps(yp, mk, _mm512_fmadd_ps(acc[i][p], d, prev));
    }
  }
}

template <int MR, int NP, bool kAhead>
void kern_fp8(const uint8_t* w, int64_t ps, const float* x, int64_t ldx, int64_t b0, int64_t b1, float* y,
              int64_t ldy, __mmask16 last, PassPrefetch& pf, int64_t ahead) {
  const __m512 two8 = _mm512_set1_ps(256.0f);
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t off = b * kFp8Block;
    __m512 acc[MR][NP];
    fp8_block_begin<MR, NP, kAhead>(acc, w, ps, off, ahead);
    const float* xb = x + b * quant::kQF8;
    for (int64_t c = 0; c < quant::kQF8; c += 2) {
      if ((c & 15) == 0) pf.step();
      const int64_t at = off + 64 + c * kPanelRows;
      if constexpr (kAhead)
        if ((c & 3) == 0) stream_ahead<NP, 64>(w, ps, at, ahead);
      __m512 wv[2][NP];
      for (int p = 0; p < NP; ++p) fp8_columns(w + p * ps + at, wv[0][p], wv[1][p]);
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < MR; ++i) {
          const __m512 xv = _mm512_set1_ps(xb[i * ldx + c + j]);
          for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_fmadd_ps(wv[j][p], xv, acc[i][p]);
        }
    }
    fp8_block_end<MR, NP>(acc, w + off, ps, b == 0, two8, y, ldy, last);
  }
}

// kern_fp8's block b from its columns converted once (fp8_block_convert: cw[panel][column]
// [row], the values fp8_columns gives) for MR rows: the same chains, so the same bits.
template <int NP>
inline void fp8_block_convert(const uint8_t* w, int64_t ps, int64_t b, float (*cw)[quant::kQF8][16]) {
  const int64_t at = b * kFp8Block + 64;
  for (int p = 0; p < NP; ++p)
    for (int64_t c = 0; c < quant::kQF8; c += 2) {
      __m512 c0, c1;
      fp8_columns(w + p * ps + at + c * kPanelRows, c0, c1);
      _mm512_store_ps(cw[p][c], c0);
      _mm512_store_ps(cw[p][c + 1], c1);
    }
}

template <int MR, int NP>
void kern_fp8_converted(const float (*cw)[quant::kQF8][16], const uint8_t* w, int64_t ps, const float* x, int64_t ldx,
                        int64_t b, float* y, int64_t ldy, __mmask16 last) {
  __m512 acc[MR][NP];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
  const float* xb = x + b * quant::kQF8;
  for (int64_t c = 0; c < quant::kQF8; ++c) {
    __m512 wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_load_ps(cw[p][c]);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_set1_ps(xb[i * ldx + c]);
      for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_fmadd_ps(wv[p], xv, acc[i][p]);
    }
  }
  fp8_block_end<MR, NP>(acc, w + b * kFp8Block, ps, b == 0, _mm512_set1_ps(256.0f), y, ldy, last);
}

// FP8 weights on the bf16 path (packed.h's layout): per 4 columns of NP panels, one
// 64-byte load of codes, two vpermi2b lookups (the bf16's low and high bytes by the
// code's 7 magnitude bits; the sign ORed into the high byte) and two unpacks give the
// columns (0, 1) and (2, 3) as [row][pair] words, each a vdpbf16ps with the broadcast
// activation pair.
// The bf16 bytes of the E4M3 magnitudes (quant::fp8_e4m3_bf16_bits; the NaN code never
// reaches a weight kernel: model loading refuses it).
struct Bf16Tables {
  alignas(64) uint8_t lo[128], hi[128];
};
constexpr Bf16Tables make_bf16_tables() {
  Bf16Tables t{};
  for (int c = 0; c < 128; ++c)
    t.lo[c] = uint8_t(quant::fp8_e4m3_bf16_bits(c) & 0xFF), t.hi[c] = uint8_t(quant::fp8_e4m3_bf16_bits(c) >> 8);
  return t;
}
constexpr Bf16Tables kBf16Tables = make_bf16_tables();

template <int MR, int NP, bool kAhead>
__attribute__((target("avx512bf16,avx512vbmi"))) void kern_fp8_bf16(const uint8_t* w, int64_t ps, const uint16_t* x,
                                                                    int64_t ldx, int64_t b0, int64_t b1, float* y,
                                                                    int64_t ldy, __mmask16 last, PassPrefetch& pf, int64_t ahead) {
  const __m512i lo0 = _mm512_load_si512(kBf16Tables.lo), lo1 = _mm512_load_si512(kBf16Tables.lo + 64);
  const __m512i hi0 = _mm512_load_si512(kBf16Tables.hi), hi1 = _mm512_load_si512(kBf16Tables.hi + 64);
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t off = b * kFp8Block;
    __m512 acc[MR][NP];
    fp8_block_begin<MR, NP, kAhead>(acc, w, ps, off, ahead);
    const uint16_t* xb = x + b * quant::kQF8;
    for (int64_t g = 0; g < quant::kQF8 / 4; ++g) {
      if ((g & 3) == 0) pf.step();
      const int64_t at = off + 64 + g * 64;
      if constexpr (kAhead) stream_ahead<NP, 64>(w, ps, at, ahead);
      __m512i a01[NP], a23[NP];
      for (int p = 0; p < NP; ++p) {
        const __m512i v = _mm512_loadu_si512(w + p * ps + at);
        const __m512i l = _mm512_permutex2var_epi8(lo0, v, lo1);
        const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, v, hi1), v, sign, 0xF8);  // h | (v & sign)
        a01[p] = _mm512_unpacklo_epi8(l, h);
        a23[p] = _mm512_unpackhi_epi8(l, h);
      }
      for (int i = 0; i < MR; ++i) {
        uint32_t x01, x23;
        __builtin_memcpy(&x01, xb + i * ldx + 4 * g, 4);
        __builtin_memcpy(&x23, xb + i * ldx + 4 * g + 2, 4);
        const __m512i p01 = _mm512_set1_epi32(int(x01)), p23 = _mm512_set1_epi32(int(x23));
        for (int p = 0; p < NP; ++p) {
          acc[i][p] = _mm512_dpbf16_ps(acc[i][p], (__m512bh)a01[p], (__m512bh)p01);
          acc[i][p] = _mm512_dpbf16_ps(acc[i][p], (__m512bh)a23[p], (__m512bh)p23);
        }
      }
    }
    fp8_block_end<MR, NP>(acc, w + off, ps, b == 0, _mm512_set1_ps(1.0f), y, ldy, last);
  }
}

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
        nibble_codes<I::kHigh, I::kLut>(_mm512_loadu_si512(wb + p * ps + g * 64), hb[p], g, lo, hi);
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


// Integer weights, ActQ8 activations (MR rows at stride lda blocks): per block the
// exact int32 sums (block_isums), then, with the _1 types' per-row minimum,
//   acc = fma(float(isum), d_w d_a, acc);  acc = fma(m_w, d_a sum_a, acc)  (_1 only)
// kCodes: the nibble formats' blocks [b0, b1) come unpacked in codes, their scales in ks (unpack_units).
template <int MR, int NP, bool kAhead, Fmt F, bool kCodes = false>
void kern_int8(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t b0, int64_t b1, float* y,
               int64_t ldy, __mmask16 last, PassPrefetch& pf, int64_t ahead, const BlockCodes<NP>* codes,
               const KScales<NP>* ks) {
  using I = FmtInfo<F>;
  constexpr bool kMin = I::kMin;
  constexpr int64_t kBlockBytes = I::kBlockBytes;
  __m512 accf[MR][NP];
  acc_begin(accf, b0 == 0, y, ldy, last);
  for (int64_t b = b0; b < b1; ++b) {
    pf.step();
    if constexpr (kAhead) stream_ahead<NP, kBlockBytes, NP, F == Fmt::Q8_0>(w, ps, b * kBlockBytes, ahead);
    __m512i acci[MR][NP];
    if constexpr (kCodes) {
      isum_offsets<MR, NP, F>(a, lda, b, acci);
      codes_isums<MR, NP>(codes[b - b0], a + b, lda, acci);
    } else {
      block_isums<MR, NP, F>(w, ps, a, lda, b, acci);
    }
    __m512 dw[NP], mw[NP];
    for (int p = 0; p < NP; ++p) {
      if constexpr (kCodes) {
        dw[p] = ks[b - b0].a[p];
        if constexpr (kMin) mw[p] = ks[b - b0].b[p];
      } else {
        const uint8_t* sc = w + p * ps + b * kBlockBytes;
        dw[p] = block_scales<F>(sc);
        if constexpr (kMin) mw[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
      }
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
// prefetches, which the core's few fill buffers cap well under its share of DRAM
// bandwidth: docs/BENCHMARKS.md, issue 6 session 6.) The float sums of
// every row sit in an aligned scratch, loaded and stored around the same fma on the same
// values as kern_int8's, so every lane keeps its bits.
// kEven: the row tiles (GemmArgs::even_tiles), a template argument: with both kinds of
// tile in one function GCC's register allocation of the accumulators fell apart (several
// times the register moves and stack traffic).
template <int NP, Fmt F, bool kEven>
void kern_int8_batch(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t rows, int64_t nb, float* y,
                     int64_t ldy, __mmask16 last, int64_t ahead) {
  constexpr bool kMin = FmtInfo<F>::kMin;
  constexpr int64_t kBlockBytes = FmtInfo<F>::kBlockBytes;
  alignas(64) float accm[kBatchRows][NP][16];
  alignas(64) BlockCodes<NP> codes;
  batch_clear<NP>(accm, rows);
  for (int64_t b = 0; b < nb; ++b) {
    __m512 dw[NP], mw[NP];
    for (int p = 0; p < NP; ++p) {
      const uint8_t* sc = w + p * ps + b * kBlockBytes;
      dw[p] = block_scales<F>(sc);
      mw[p] = kMin ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32))) : _mm512_setzero_ps();
    }
    auto tile = [&](auto R, int64_t r) {
      batch_tile<decltype(R)::value, NP, F>(w, ps, a + r * lda, lda, b, codes, dw, mw, accm + r);
    };
    if constexpr (F == Fmt::Q8_0) {
      batch_tiles_ahead<NP, kBlockBytes, kEven>(w, ps, b * kBlockBytes, ahead, rows, tile);
    } else {
      stream_ahead<NP, kBlockBytes>(w, ps, b * kBlockBytes, ahead);
      nibble_unpack<NP, FmtInfo<F>::kHigh, FmtInfo<F>::kLut>(w + b * kBlockBytes + FmtInfo<F>::kCodes, ps, codes);
      if constexpr (kEven) batch_even_tiles(rows, tile);
      else batch_row_tiles(rows, tile);
    }
  }
  batch_store<NP>(accm, rows, y, ldy, last);
}


bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool is_kquant_type(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// Reduction units of a type (see kern_float) and how many one pass over a panel group
// takes: about 8 KiB of each panel, so a pair of panels stays in L1 while every row
// tile of the call passes over it.
int64_t reduction_units(const GemmArgs& g) {
  if (g.type == DType::F8_E4M3_B128) return g.k / quant::kQF8;
  return is_float_type(g.type) ? g.k : is_kquant_type(g.type) ? g.k / 256 : g.k / 32;
}
int64_t units_per_pass(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return kGemmKc;  // f16: 8 KiB of a panel, f32: 16
    case DType::Q6_K: return 2;        // 2 x 3360 B
    case DType::F8_E4M3_B128: return 4;  // 4 x 2112 B
    default: return 1 << 30;           // the batch formats never run passes (batch_over)
  }
}

// One MR x NP tile over reduction units [c0, c1).
// codes, ks: the group's units [c0, c1) unpacked with their scale vectors (unpack_units;
// the types unpacks() names), or both null.
template <int MR, int NP, bool kAhead = false>
void tile(const GemmArgs& g, int64_t m, int64_t p, __mmask16 last, int64_t c0, int64_t c1, PassPrefetch& pf,
          const BlockCodes<NP>* codes, const KScales<NP>* ks) {
  const int64_t ps = panel_bytes(g.type, g.k);
  const uint8_t* w = g.packed + p * ps;
  float* y = g.y + m * g.ldy + p * kPanelRows;
  const auto* q8 = static_cast<const ActQ8*>(g.act) + m * g.lda;
  const auto* xf = static_cast<const float*>(g.act) + m * g.lda;
  if constexpr (!kAhead) {  // decode is never unpacked
    if (codes) switch (g.type) {
        case DType::Q4_0: return kern_int8<MR, NP, false, Fmt::Q4_0, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::Q4_1: return kern_int8<MR, NP, false, Fmt::Q4_1, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::Q5_0: return kern_int8<MR, NP, false, Fmt::Q5_0, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::Q5_1: return kern_int8<MR, NP, false, Fmt::Q5_1, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::MXFP4: return kern_int8<MR, NP, false, Fmt::MXFP4, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::Q4_K: return kern_q45k<MR, NP, false, false, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::Q5_K: return kern_q45k<MR, NP, false, true, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        case DType::Q6_K: return kern_q6k<MR, NP, false, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, codes, ks);
        default: break;
      }
  }
  switch (g.type) {
    case DType::F32: return kern_float<MR, NP, kAhead, LoadF32>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead);
    case DType::F16: return kern_float<MR, NP, kAhead, LoadF16>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead);
    case DType::BF16: return kern_float<MR, NP, kAhead, LoadBF16>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead);
    case DType::F8_E4M3_B128:
      if (g.fp8_bf16)
        return kern_fp8_bf16<MR, NP, kAhead>(w, ps, static_cast<const uint16_t*>(g.act) + m * g.lda, g.lda, c0, c1, y,
                                             g.ldy, last, pf, g.ahead);
      return kern_fp8<MR, NP, kAhead>(w, ps, xf, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead);
    case DType::Q8_0: return kern_int8<MR, NP, kAhead, Fmt::Q8_0>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q4_0: return kern_int8<MR, NP, kAhead, Fmt::Q4_0>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q4_1: return kern_int8<MR, NP, kAhead, Fmt::Q4_1>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q5_0: return kern_int8<MR, NP, kAhead, Fmt::Q5_0>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q5_1: return kern_int8<MR, NP, kAhead, Fmt::Q5_1>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::MXFP4: return kern_int8<MR, NP, kAhead, Fmt::MXFP4>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q4_K: return kern_q45k<MR, NP, kAhead, false>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q5_K: return kern_q45k<MR, NP, kAhead, true>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
    case DType::Q6_K:
      if constexpr (MR * NP <= 4)  // two int32 sums per pair: wider tiles would spill
        return kern_q6k<MR, NP, kAhead>(w, ps, q8, g.lda, c0, c1, y, g.ldy, last, pf, g.ahead, nullptr, nullptr);
      else
        for (int p = 0; p < NP; ++p)
          kern_q6k<MR, 1, kAhead>(w + p * ps, ps, q8, g.lda, c0, c1, y + p * kPanelRows, g.ldy,
                                  p == NP - 1 ? last : __mmask16(0xFFFF), pf, g.ahead, nullptr, nullptr);
      return;
    default: return;
  }
}

// The types whose decode batches run block by block (batch_over); the float types run
// passes (a batch order through their tile kernels measured slower: docs/BENCHMARKS.md,
// issue 6 session 6).
bool has_batch_kernel(DType t) { return !is_float_type(t) && t != DType::F8_E4M3_B128; }

// kern_int8_batch with the call's row tiles (GemmArgs::even_tiles).
template <int NP, Fmt F>
void int8_batch(const GemmArgs& g, const uint8_t* w, int64_t ps, const ActQ8* a, int64_t rows, int64_t nb, float* y,
                __mmask16 last) {
  if (g.even_tiles) return kern_int8_batch<NP, F, true>(w, ps, a, g.lda, rows, nb, y, g.ldy, last, g.ahead);
  return kern_int8_batch<NP, F, false>(w, ps, a, g.lda, rows, nb, y, g.ldy, last, g.ahead);
}

// kern_int8_batch or kern_q45k_batch for rows [m0, m1) of NP panels from p.
template <int NP>
void batch_over(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p, __mmask16 last) {
  const int64_t ps = panel_bytes(g.type, g.k), nb = g.k / 32;
  const uint8_t* w = g.packed + p * ps;
  float* y = g.y + m0 * g.ldy + p * kPanelRows;
  const auto* a = static_cast<const ActQ8*>(g.act) + m0 * g.lda;
  const int64_t rows = m1 - m0;
  switch (g.type) {
    case DType::Q8_0: return int8_batch<NP, Fmt::Q8_0>(g, w, ps, a, rows, nb, y, last);
    case DType::Q4_0: return int8_batch<NP, Fmt::Q4_0>(g, w, ps, a, rows, nb, y, last);
    case DType::Q4_1: return int8_batch<NP, Fmt::Q4_1>(g, w, ps, a, rows, nb, y, last);
    case DType::Q5_0: return int8_batch<NP, Fmt::Q5_0>(g, w, ps, a, rows, nb, y, last);
    case DType::Q5_1: return int8_batch<NP, Fmt::Q5_1>(g, w, ps, a, rows, nb, y, last);
    case DType::MXFP4: return int8_batch<NP, Fmt::MXFP4>(g, w, ps, a, rows, nb, y, last);
    case DType::Q4_K: return kern_q45k_batch<NP, false>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, last, g.ahead);
    case DType::Q5_K:
      if constexpr (NP == 4) {  // the fifth-bit vectors leave too few registers for 4
        kern_q45k_batch<2, true>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, 0xFFFF, g.ahead);
        return kern_q45k_batch<2, true>(w + 2 * ps, ps, a, g.lda, rows, g.k / 256, y + 32, g.ldy, last, g.ahead);
      } else {
        return kern_q45k_batch<NP, true>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, last, g.ahead);
      }
    case DType::Q6_K:
      if constexpr (NP == 4) {
        kern_q6k_batch<2>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, 0xFFFF, g.ahead);
        return kern_q6k_batch<2>(w + 2 * ps, ps, a, g.lda, rows, g.k / 256, y + 32, g.ldy, last, g.ahead);
      } else {
        return kern_q6k_batch<NP>(w, ps, a, g.lda, rows, g.k / 256, y, g.ldy, last, g.ahead);
      }
    default: return;
  }
}

// f(R, m) for rows [m0, m1): tiles of R = kMr rows, then the remainder as one smaller
// tile (R a std::integral_constant, for the tile kernels' template).
template <int kMr, class F>
inline __attribute__((always_inline)) void row_tiles(int64_t m0, int64_t m1, F&& f) {
  int64_t m = m0;
  for (; m + kMr <= m1; m += kMr) f(std::integral_constant<int, kMr>{}, m);
  switch (m1 - m) {
    case 7: if constexpr (kMr > 7) f(std::integral_constant<int, 7>{}, m); break;
    case 6: if constexpr (kMr > 6) f(std::integral_constant<int, 6>{}, m); break;
    case 5: f(std::integral_constant<int, 5>{}, m); break;
    case 4: f(std::integral_constant<int, 4>{}, m); break;
    case 3: f(std::integral_constant<int, 3>{}, m); break;
    case 2: f(std::integral_constant<int, 2>{}, m); break;
    case 1: f(std::integral_constant<int, 1>{}, m); break;
    default: break;
  }
}

// Rows [m0, m1) of NP panels from p over units [c0, c1).
template <int kMr, int NP>
void rows_over(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p, __mmask16 last, int64_t c0, int64_t c1,
               PassPrefetch& pf, const BlockCodes<NP>* codes, const KScales<NP>* ks) {
  row_tiles<kMr>(m0, m1, [&](auto R, int64_t m) { tile<decltype(R)::value, NP>(g, m, p, last, c0, c1, pf, codes, ks); });
}

// Columns [k0, k1) (at most kGemmKc) of NP float panels from w as f32, out[panel][column
// - k0][row]: the weights the tiles load, exactly (f16 and bf16 are subsets of f32).
template <int NP, typename L>
void convert_columns(const uint8_t* w, int64_t ps, int64_t k0, int64_t k1, float (*out)[kGemmKc][16]) {
  for (int p = 0; p < NP; ++p)
    for (int64_t c = k0; c < k1; ++c) _mm512_store_ps(out[p][c - k0], L::at(w + p * ps + c * L::kColBytes));
}

// Rows [m0, m1) of NP F16 or BF16 panels from p over columns [c0, c1) (c0 a multiple of
// kGemmKc), each kGemmKc of them converted once (convert_columns, 32 KiB for a pair, in
// L1 while every row tile runs over them), then reduced by the f32 kernel. Each kGemmKc
// chunk is a chain from zero added to y (kern_float), so the bits are a tile's own. FP8
// (the f16c path) the same per 128-block (16 KiB for a pair), each block's chains from
// zero as kern_fp8's.
template <int kMr, int NP>
void rows_over_converted(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p, __mmask16 last, int64_t c0, int64_t c1,
                         PassPrefetch& pf) {
  const int64_t ps = panel_bytes(g.type, g.k);
  const uint8_t* w = g.packed + p * ps;
  const auto* x = static_cast<const float*>(g.act);
  if (g.type == DType::F8_E4M3_B128) {
    alignas(64) float conv[NP][quant::kQF8][16];
    for (int64_t b = c0; b < c1; ++b) {
      fp8_block_convert<NP>(w, ps, b, conv);
      row_tiles<kMr>(m0, m1, [&](auto R, int64_t m) {
        kern_fp8_converted<decltype(R)::value, NP>(conv, w, ps, x + m * g.lda, g.lda, b, g.y + m * g.ldy + p * kPanelRows,
                                                   g.ldy, last);
      });
    }
    return;
  }
  alignas(64) float conv[NP][kGemmKc][16];
  const auto* cw = reinterpret_cast<const uint8_t*>(conv);
  for (int64_t k0 = c0; k0 < c1; k0 += kGemmKc) {
    const int64_t k1 = std::min(c1, k0 + kGemmKc);
    if (g.type == DType::F16) convert_columns<NP, LoadF16>(w, ps, k0, k1, conv);
    else convert_columns<NP, LoadBF16>(w, ps, k0, k1, conv);
    row_tiles<kMr>(m0, m1, [&](auto R, int64_t m) {
      kern_float<decltype(R)::value, NP, false, LoadF32>(cw, kGemmKc * 64, x + m * g.lda, g.lda, k0, k1,
                                                         g.y + m * g.ldy + p * kPanelRows, g.ldy, last, pf, g.ahead, k0);
    });
  }
}

// The types whose prefill tiles can read unpacked codes (unpack_units).
bool unpacks(DType t) { return t != DType::Q8_0 && t != DType::F8_E4M3_B128 && !is_float_type(t); }

// Whether a call's row tiles read weights converted once (rows_over_converted): prefill
// of the types whose tiles convert in their inner loop, when the tuning asks for it.
bool converts_once(const GemmArgs& g) {
  const bool converting = g.type == DType::F16 || g.type == DType::BF16 || (g.type == DType::F8_E4M3_B128 && !g.fp8_bf16);
  return g.convert_once && !g.stream && converting;
}

template <int NP, Fmt F>
void unpack_blocks(const uint8_t* w, int64_t ps, int64_t b0, int64_t b1, BlockCodes<NP>* codes, KScales<NP>* ks) {
  using I = FmtInfo<F>;
  for (int64_t b = b0; b < b1; ++b) {
    nibble_unpack<NP, I::kHigh, I::kLut>(w + b * I::kBlockBytes + I::kCodes, ps, codes[b - b0]);
    for (int p = 0; p < NP; ++p) {
      const uint8_t* sc = w + p * ps + b * I::kBlockBytes;
      ks[b - b0].a[p] = block_scales<F>(sc);
      if constexpr (I::kMin) ks[b - b0].b[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
    }
  }
}

template <int NP, bool kQ5>
void unpack_q45k(const uint8_t* w, int64_t ps, int64_t s0, int64_t s1, BlockCodes<NP>* codes, KScales<NP>* ks) {
  for (int64_t s = s0; s < s1; ++s)
    for (int b = 0; b < 8; ++b)
      nibble_unpack<NP, kQ5>(w + s * kQ45Super<kQ5> + 320 + b * (kQ5 ? 320 : 256), ps, codes[(s - s0) * 8 + b]);
  q45k_scales_range<NP, kQ5>(w, ps, s0, s1, ks);
}

// Reduction units [u0, u1) of NP panels from w, one BlockCodes and one KScales per
// 32-block.
template <int NP>
void unpack_units(DType t, const uint8_t* w, int64_t ps, int64_t u0, int64_t u1, BlockCodes<NP>* codes,
                  KScales<NP>* ks) {
  switch (t) {
    case DType::Q4_0: return unpack_blocks<NP, Fmt::Q4_0>(w, ps, u0, u1, codes, ks);
    case DType::Q4_1: return unpack_blocks<NP, Fmt::Q4_1>(w, ps, u0, u1, codes, ks);
    case DType::Q5_0: return unpack_blocks<NP, Fmt::Q5_0>(w, ps, u0, u1, codes, ks);
    case DType::Q5_1: return unpack_blocks<NP, Fmt::Q5_1>(w, ps, u0, u1, codes, ks);
    case DType::MXFP4: return unpack_blocks<NP, Fmt::MXFP4>(w, ps, u0, u1, codes, ks);
    case DType::Q4_K: return unpack_q45k<NP, false>(w, ps, u0, u1, codes, ks);
    case DType::Q5_K: return unpack_q45k<NP, true>(w, ps, u0, u1, codes, ks);
    case DType::Q6_K:
      q6k_unpack_range<NP>(w, ps, u0, u1, codes);
      return q6k_scales_range<NP>(w, ps, u0, u1, ks);
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
  if (m1 - m0 == 1) {  // decode: g.streams weight streams in flight (4 or 2), one pass
    int64_t p = p0;
    PassPrefetch none;
    if (g.streams >= 4)
      for (; p + 4 <= p1; p += 4) tile<1, 4, true>(g, m0, p, last_of(p + 4), 0, units, none, nullptr, nullptr);
    for (; p + 2 <= p1; p += 2) tile<1, 2, true>(g, m0, p, last_of(p + 2), 0, units, none, nullptr, nullptr);
    for (; p < p1; ++p) tile<1, 1, true>(g, m0, p, last_of(p + 1), 0, units, none, nullptr, nullptr);
    return;
  }
  // Decode batches of the block-by-block types, g.streams panels at a time (4 or 2).
  if (g.stream && m1 - m0 <= kBatchRows && has_batch_kernel(g.type)) {
    int64_t p = p0;
    if (g.streams >= 4)
      for (; p + 4 <= p1; p += 4) batch_over<4>(g, m0, m1, p, last_of(p + 4));
    for (; p + 2 <= p1; p += 2) batch_over<2>(g, m0, m1, p, last_of(p + 2));
    for (; p < p1; ++p) batch_over<1>(g, m0, m1, p, last_of(p + 1));
    return;
  }
  // Kernel iterations (PassPrefetch::step calls) per unit: int8 per 32-block, K-quants
  // per 32-block of a super-block, float per 16 columns, FP8 per 16 columns of a block.
  const int64_t steps_per_unit = is_kquant_type(g.type) || g.type == DType::F8_E4M3_B128 ? 8 : 1;
  const int64_t unit_div = is_float_type(g.type) ? 16 : 1;
  const int64_t ps = panel_bytes(g.type, g.k), unit_bytes = ps / units, n_tiles = (m1 - m0 + kMr - 1) / kMr;
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
        const int64_t iters = std::max<int64_t>(1, n_tiles * (c1 - c0) * steps_per_unit / unit_div);
        pf.lines = int32_t((len / 64 + iters - 1) / iters);
      }
      if (unpacks(g.type) && n_tiles > 1) {
        // The pass in chunks of kUnpackBlocks 32-blocks, each chunk's codes unpacked (and
        // its blocks' scale vectors made: KScales) once for all the row tiles, which
        // otherwise each redo the masks and shifts (Q4_0 and Q4_K: a third as many vector
        // ops as their vpdpbusd, Q6_K as many). A tile's float
        // sums go through y between chunks, exactly, as between passes.
        alignas(64) BlockCodes<2> codes[kUnpackBlocks];
        auto* codes1 = reinterpret_cast<BlockCodes<1>*>(codes);
        KScales<2> ks[kUnpackBlocks];
        auto* ks1 = reinterpret_cast<KScales<1>*>(ks);
        const int64_t chunk = is_kquant_type(g.type) ? kUnpackBlocks / 8 : kUnpackBlocks;
        for (int64_t u0 = c0; u0 < c1; u0 += chunk) {
          const int64_t u1 = std::min(c1, u0 + chunk);
          if (pair) {
            unpack_units<2>(g.type, g.packed + p * ps, ps, u0, u1, codes, ks);
            rows_over<kMr, 2>(g, m0, m1, p, last, u0, u1, pf, codes, ks);
          } else {
            unpack_units<1>(g.type, g.packed + p * ps, ps, u0, u1, codes1, ks1);
            rows_over<kMr, 1>(g, m0, m1, p, last, u0, u1, pf, codes1, ks1);
          }
        }
      } else if (converts_once(g) && n_tiles > 1) {
        if (pair) rows_over_converted<kMr, 2>(g, m0, m1, p, last, c0, c1, pf);
        else rows_over_converted<kMr, 1>(g, m0, m1, p, last, c0, c1, pf);
      } else if (pair) {
        rows_over<kMr, 2>(g, m0, m1, p, last, c0, c1, pf, nullptr, nullptr);
      } else {
        rows_over<kMr, 1>(g, m0, m1, p, last, c0, c1, pf, nullptr, nullptr);
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

// f32_to_bf16's bits (core/fp16.h: nearest even, NaN kept quiet), 16 at a time.
void round_bf16_avx512(const float* x, uint16_t* y, int64_t n) {
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one))), 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet);
    _mm512_mask_cvtepi32_storeu_epi16(y + i, m, _mm512_mask_blend_epi32(nan, r, q));
  }
}

void gemm_panels_avx512(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  // Rows per register tile (tuning.h, the defaults' reasons there).
  switch (g.tile_rows) {
    case 8: return panels_over<8>(g, m0, m1, p0, p1);
    case 6: return panels_over<6>(g, m0, m1, p0, p1);
    default: return panels_over<4>(g, m0, m1, p0, p1);
  }
}

}  // namespace ridge::kernels::detail
