// The AVX-512 attention's FP8-cache path on AVX512-BF16 vectors, included by
// attention_avx512.cpp (whose group<> calls it) and by nothing else: its functions are
// marked for VBMI and AVX512-BF16 and reached only where AttnView::bf16_dots says so
// (attention_dots in attention.h: the CPU has them, no AMX tiles, the layout fits).
//
// Why: an FP8 code is one byte per element, so per cache byte it feeds twice the
// multiplies of an f16 or bf16 element; on f32 FMAs (attention_avx512.cpp) that keeps the
// path at a fraction of the DRAM rate. Here the codes become bf16 in registers as they
// are loaded (exact, attention_fp8_codes_avx512.h) and vdpbf16ps multiplies them in pairs,
// as the BF16 cache's path does (attention_bf16_avx512.h, whose rounded query pairs and
// probabilities this path shares), with no copy of a tile through memory:
//  - scores: 64 codes of a K tile are dimensions d..d+3 of 16 keys (four rows of a block's
//    [dk][block_size] tile); one byte permute and the lookup make them the key pairs of
//    dimensions (d, d + 1) and (d + 2, d + 3). A score is then (the pair dots) x the
//    key's scale x the softmax scale, as the f32 path computes it.
//  - P.V: 32 dimensions of two V rows (keys j, j + 1), one two-source byte permute and the
//    lookup: the pairs of dimensions d0..d0+15 and d0+16..d0+31. The values' scales go
//    with their probabilities before these are rounded to bf16 (scale_probabilities).
// A row's score is one vdpbf16ps chain over its dimension pairs and its output one over
// its key pairs, in position order, whatever shares the call (batch invariance).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_avx512_common.h"
#include "kernels/cpu/attention_bf16_avx512.h"
#include "kernels/cpu/attention_fp8_codes_avx512.h"

namespace ridge::kernels::detail {
namespace {

// The f32 sums of R query rows' pairs with the keys of G groups, as dots_bf16 leaves them
// (out[r * G + g], lane j for the group's key j), from an FP8 K tile: q as there (pairs
// n_q words apart); rows of 16 codes kstride bytes apart, Rows64: kstride 16 (a block of
// 16 keys), so four rows are one 64-byte load.
template <int R, int G, DType T, bool Rows64>
FP8_CODES_TARGET ATTN_NOINLINE void dots_fp8(const uint32_t* q, int32_t n_q, int32_t dk, const Group* gr,
                                             int64_t kstride, int64_t koff, Prefetcher& pf, __m512* out) {
  __m512 acc[R][G];
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const uint8_t* kp[G];
  ATTN_UNROLL for (int g = 0; g < G; ++g) kp[g] = gr[g].k + koff;
  const Bf16Lut lut = bf16_lut<T>();
  const __m512i kidx = _mm512_load_si512(kByteIndex.k);
  Prefetcher::Cursor c = pf.cur;
  for (int32_t d = 0; d < dk; d += 4, q += 2 * n_q) {
    if constexpr (G == 2) pf.step2(c);  // a line asked for per line read
    else pf.step(c);
    __m512i k0[G], k1[G];
    ATTN_UNROLL for (int g = 0; g < G; ++g) {
      __m512i raw;
      if constexpr (Rows64) {
        raw = _mm512_loadu_si512(kp[g] + d * 16);
      } else {
        const auto row = [&](int32_t x) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(kp[g] + x * kstride)); };
        raw = _mm512_inserti32x4(_mm512_castsi128_si512(row(d)), row(d + 1), 1);
        raw = _mm512_inserti32x4(_mm512_inserti32x4(raw, row(d + 2), 2), row(d + 3), 3);
      }
      codes_to_pairs(lut, _mm512_permutexvar_epi8(kidx, raw), k0[g], k1[g]);
    }
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      const __m512bh q0 = (__m512bh)_mm512_set1_epi32(int32_t(q[r])), q1 = (__m512bh)_mm512_set1_epi32(int32_t(q[n_q + r]));
      ATTN_UNROLL for (int g = 0; g < G; ++g) {
        acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)k0[g], q0);
        acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)k1[g], q1);
      }
    }
  }
  pf.cur = c;
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g) out[r * G + g] = acc[r][g];
}

// s[r][g.lane, g.lane + 16) = (q_r . k_j) x the key's scale x scale for R rows, -inf past
// the group's keys: as the f32 path leaves them.
template <int R, DType T>
FP8_CODES_TARGET void scores_fp8_tile(const uint32_t* q, int32_t n_q, int32_t dk, const Group* gr, int32_t ng,
                                      int64_t kstride, float scale, float* s, int64_t lds, int64_t koff, Prefetcher& pf) {
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  __m512 acc[R * 2];
  for (int32_t g = 0; g < ng; g += 2) {
    const int G = ng - g >= 2 ? 2 : 1;
    if (kstride == 16) {
      if (G == 2) dots_fp8<R, 2, T, true>(q, n_q, dk, gr + g, kstride, koff, pf, acc);
      else dots_fp8<R, 1, T, true>(q, n_q, dk, gr + g, kstride, koff, pf, acc);
    } else {
      if (G == 2) dots_fp8<R, 2, T, false>(q, n_q, dk, gr + g, kstride, koff, pf, acc);
      else dots_fp8<R, 1, T, false>(q, n_q, dk, gr + g, kstride, koff, pf, acc);
    }
    for (int i = 0; i < G; ++i) {
      const __m512 ks = _mm512_loadu_ps(reinterpret_cast<const float*>(gr[g + i].ks + koff));
      ATTN_UNROLL for (int r = 0; r < R; ++r)
        _mm512_storeu_ps(s + r * lds + gr[g + i].lane,
                         _mm512_mask_mov_ps(ninf, gr[g + i].keys, _mm512_mul_ps(_mm512_mul_ps(acc[r * G + i], ks), vs)));
    }
  }
}

// pv_pairs from an FP8 V tile ([block_size][dv] codes): pw holds the rows' probabilities
// times the values' scales. 32 codes of each of two V rows, one two-source byte permute
// and the lookup. dv % 32 == 0.
template <int R, DType T>
FP8_CODES_TARGET ATTN_NOINLINE void pv_fp8(const Tile& tl, int32_t lpb, int32_t live, const uint16_t* pw,
                                           const float* cr, float* o, int64_t ldo, int32_t d0, int32_t dv, int64_t voff,
                                           Prefetcher& pf) {
  const Bf16Lut lut = bf16_lut<T>();
  const __m512i vidx = _mm512_load_si512(kByteIndex.v);
  const int64_t row = dv;  // bytes between a V tile's key rows
  const auto load = [&](Prefetcher::Cursor& c, const uint8_t* vj, bool k0, bool k1, __m512i& v0,
                        __m512i& v1) FP8_CODES_TARGET {
    pf.step(c);  // a line asked for per line read
    const __m512i x = _mm512_maskz_loadu_epi8(k0 ? 0xFFFFFFFFull : 0, vj);  // the sources' bytes 0-31
    const __m512i y = _mm512_maskz_loadu_epi8(k1 ? 0xFFFFFFFFull : 0, vj + row);
    codes_to_pairs(lut, _mm512_permutex2var_epi8(x, vidx, y), v0, v1);
  };
  pv_pairs<R>(tl, lpb, live, pw, cr, o, ldo, d0, voff, d0, row, pf, load);
}

// Multi-head latent attention (KVLayout::v_in_k): a block's latent rows of an FP8 K tile,
// n codes from kd ([dv][bs], n = dv x bs, a multiple of 64), as bf16 words in their order
// at out (64-byte aligned): the BF16 cache's K rows, which pv_latent reads with the query
// rows across the lanes. Exact, so its bits are those of pv_fp8 over the same codes in a
// V tile. Codes past the context convert too (their keys read as +0 there).
template <DType T>
FP8_CODES_TARGET ATTN_NOINLINE void fp8_latent_to_bf16(const uint8_t* kd, int64_t n, uint8_t* out) {
  const Bf16Lut lut = bf16_lut<T>();
  const __m512i idx = _mm512_load_si512(kByteIndex.id);
  for (int64_t i = 0; i < n; i += 64)
    codes_to_bf16(lut, _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(kd + i)), out + 2 * i, out + 2 * i + 64);
}

}  // namespace
}  // namespace ridge::kernels::detail
