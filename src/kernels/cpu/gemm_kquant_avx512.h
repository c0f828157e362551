// The K-quant kernels (Q4_K, Q5_K, Q6_K super-blocks; layouts in packed_kquant.cpp): the
// prefill / decode tiles and the decode batches, for gemm_avx512.cpp's dispatch.
//
// Include only from translation units compiled with the AVX-512 flags (see
// gemm_avx512_common.h): everything here sits in an anonymous namespace.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512_common.h"

namespace ridge::kernels::detail {
namespace {
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

// Q4_K / Q5_K's KScales: (d sc_b, dmin m_b) (q45k_scales) of super-blocks [s0, s1).
template <int NP, bool kQ5>
void q45k_scales_range(const uint8_t* w, int64_t ps, int64_t s0, int64_t s1, KScales<NP>* out) {
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* sb = w + s * kQ45Super<kQ5>;
    __m512 dv[NP], dmv[NP];
    q45k_d(sb, ps, dv, dmv);
    for (int b = 0; b < 8; ++b) q45k_scales(sb, ps, b, dv, dmv, out[(s - s0) * 8 + b].a, out[(s - s0) * 8 + b].b);
  }
}

// Q4_K / Q5_K super-blocks (packed_kquant.cpp): 32-block b of a super-block is sub-block
// b, so one activation block meets one (scale, min) pair per row:
//   acc = fma(float(isum), (d sc_b) d_a, acc);  acc = fnma((dmin m_b), d_a sum_a, acc)
// kCodes: super-blocks [s0, s1) come unpacked in codes (unpack_units), their scales in ks
// (q45k_scales_range).
template <int MR, int NP, bool kAhead, bool kQ5, bool kCodes = false>
void kern_q45k(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t s0, int64_t s1, float* y,
               int64_t ldy, __mmask16 last, PassPrefetch& pf, int64_t ahead, const BlockCodes<NP>* codes,
               const KScales<NP>* ks) {
  constexpr int64_t kSuper = kQ45Super<kQ5>;
  __m512 accf[MR][NP];
  acc_begin(accf, s0 == 0, y, ldy, last);
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* sb = w + s * kSuper;
    __m512 dv[NP], dmv[NP];
    if constexpr (!kCodes) q45k_d(sb, ps, dv, dmv);
    for (int b = 0; b < 8; ++b) {
      pf.step();
      if constexpr (kAhead) stream_ahead<NP, kSuper / 8>(w, ps, s * kSuper + b * (kSuper / 8), ahead);
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
      if constexpr (kCodes) {
        for (int p = 0; p < NP; ++p) scf[p] = ks[(s - s0) * 8 + b].a[p], mf[p] = ks[(s - s0) * 8 + b].b[p];
      } else {
        q45k_scales(sb, ps, b, dv, dmv, scf, mf);
      }
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
                     float* y, int64_t ldy, __mmask16 last, int64_t ahead) {
  constexpr int64_t kSuper = kQ45Super<kQ5>;
  alignas(64) float accm[kBatchRows][NP][16];
  alignas(64) BlockCodes<NP> codes;
  batch_clear<NP>(accm, rows);
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* sb = w + s * kSuper;
    __m512 dv[NP], dmv[NP];
    q45k_d(sb, ps, dv, dmv);
    for (int b = 0; b < 8; ++b) {
      stream_ahead<NP, kSuper / 8>(w, ps, s * kSuper + b * (kSuper / 8), ahead);
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

// kCodes: super-blocks [s0, s1) come unpacked in codes (q6k_unpack_range), their scale
// vectors in ks (q6k_scales_range). Prefill's row tiles
// share one unpacking instead of each redoing it (as many vector ops as a 4-row tile's
// vpdpbusd); free of the unpacking's temporaries, 4 x 2 tiles fit in the registers
// (16 int32 sums, 8 float), where without codes wider than 4 x 1 would spill.
template <int MR, int NP, bool kAhead, bool kCodes = false>
void kern_q6k(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t lda, int64_t s0, int64_t s1, float* y,
              int64_t ldy, __mmask16 last, PassPrefetch& pf, int64_t ahead, const BlockCodes<NP>* codes,
              const KScales<NP>* ks) {
  __m512 accf[MR][NP];
  acc_begin(accf, s0 == 0, y, ldy, last);
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* sb = w + s * (16 * 210);
    __m512 dv[NP];
    if constexpr (!kCodes) q6k_d(sb, ps, dv);
    for (int b = 0; b < 8; ++b) {
      pf.step();
      if constexpr (kAhead) stream_ahead<NP, 210 * 16 / 8>(w, ps, s * (16 * 210) + b * (210 * 16 / 8), ahead);
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
      if constexpr (kCodes) {
        for (int p = 0; p < NP; ++p) sc0[p] = ks[(s - s0) * 8 + b].a[p], sc1[p] = ks[(s - s0) * 8 + b].b[p];
      } else {
        q6k_scales(sb, ps, b, dv, sc0, sc1);
      }
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
                    int64_t ldy, __mmask16 last, int64_t ahead) {
  static_assert(NP <= 2);
  alignas(64) float accm[kBatchRows][NP][16];
  alignas(64) BlockCodes<NP> codes;
  batch_clear<NP>(accm, rows);
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* sb = w + s * (16 * 210);
    __m512 dv[NP];
    q6k_d(sb, ps, dv);
    for (int b = 0; b < 8; ++b) {
      stream_ahead<NP, 210 * 16 / 8>(w, ps, s * (16 * 210) + b * (210 * 16 / 8), ahead);
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

// Their KScales: (d sc_2b, d sc_2b+1) (q6k_scales) into out[(s - s0) * 8 + b].
template <int NP>
void q6k_scales_range(const uint8_t* w, int64_t ps, int64_t s0, int64_t s1, KScales<NP>* out) {
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* sb = w + s * (16 * 210);
    __m512 dv[NP];
    q6k_d(sb, ps, dv);
    for (int b = 0; b < 8; ++b) q6k_scales(sb, ps, b, dv, out[(s - s0) * 8 + b].a, out[(s - s0) * 8 + b].b);
  }
}

}  // namespace
}  // namespace ridge::kernels::detail
