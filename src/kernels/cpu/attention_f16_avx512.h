// The AVX-512 attention's F16-cache path in half-precision arithmetic (AVX512-FP16),
// included by attention_avx512.cpp (whose group<> calls it) and by nothing else: its
// functions are marked for AVX512-FP16 and reached only where AttnView::f16_dots says so
// (attention_dots in attention.h: the CPU has the instructions, the layout fits and the
// user opted in, attention_f16_arith).
//
// Why: with 8 query rows per KV head every half of K or V feeds 8 f32 FMAs on the f32
// path, after a conversion, so that path is bound by the FMA rate, not by the cache's
// bytes. vfmadd231ph multiplies 32 halves per instruction, twice the f32 FMA's lanes, and
// the cache's halves go in as they are stored: half the multiply instructions and no
// conversion. An E4M3 cache the same, its codes made halves in three ops per 32 (their
// values x 2^-8, exact: at most 1.75), where the f32 path spends ten ops per 64 codes and
// twice the FMAs: its key scales multiply the scores after the sums, and a row's weights
// (probability x value scale, any magnitude) are scaled by a power of two per tile that
// puts the largest in [1, 2) before they are rounded, undone at each chunk's flush. That
// power is the row's own: tiles lie at fixed positions, and every row of an E4M3 call
// shares one context (attention_shares_positions: scaled caches split rows with their own
// contexts into lone calls), so its keys are the row's keys; a key whose value scale is
// not finite makes its weight Inf or NaN and the row is redone on the f32 path, whose
// sums are NaN there too. Half sums stay at most 32 x 2 x 1.75 = 112 (no overflow).
//
// Numerics. A query row is scaled by a power of two that puts its largest magnitude in
// [1, 2) and rounded to halves once per call (its factor undone in f32 with the softmax
// scale); a row's probabilities are rounded to halves once per tile (they lie in [0, 1];
// E4M3: its weights, scaled as above).
// Products are summed in halves over a chunk (kF16ScoreDims dimensions of a score,
// kF16ValueKeys positions of an output), each lane in its own fixed order, and the
// chunks' sums in f32. Each operand's rounding is 2^-11 of itself and a chunk's sum adds
// at most one such rounding per term: a few 2^-11 of sum |q_d k_d| in a score, of sum
// p_j |v_j| in an output, against 2^-11 for the f16 cache's own storage. Under 2^-14 a
// half keeps a fixed step of 2^-24 instead: a probability under 2^-25 of its tile's
// largest drops out of the output (not out of the f32 sum that normalizes it), as a
// product or partial sum that small loses its low bits; over n such keys at most
// n 2^-25 max |v| of the output, a bound that only long contexts whose weight is spread
// thin approach. A half
// overflows past 65504: a row whose chunk sums leave the finite halves (huge K or V, or
// a query or cache holding Inf or NaN) is computed again on the f32 path for that tile,
// the decision made from the row's own numbers alone. So every row's bits are its own
// whatever shares the call (batch invariance); the softmax, masks, windows and sinks are
// the f32 path's.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_avx512_common.h"

// Compilers that give the half intrinsics to a function's target attribute: GCC from 12,
// clang from 15 (clang 14, the fuzzing build's, declares them only under -mavx512fp16,
// which would let it use them anywhere in this file). Elsewhere the way is not built and
// attention_dots never takes it (attention_f16_built).
#if (defined(__clang__) && __clang_major__ >= 15) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12) || \
    defined(__AVX512FP16__)
#define RIDGE_ATTN_F16_BUILT 1
#else
#define RIDGE_ATTN_F16_BUILT 0
#endif

#if RIDGE_ATTN_F16_BUILT
namespace ridge::kernels::detail {
namespace {

#define F16_DOTS_TARGET __attribute__((target("avx512fp16")))

// A row's probabilities in halves: a tile's lanes at most.
constexpr int32_t kF16ProbLanes = kMaxTileKeys;

// The call's query rows in halves, qh[n_q][dk], each scaled by 2^e that puts its largest
// magnitude in [1, 2) (0: a row of zeros), and qf[n_q] = 2^-e x the softmax scale; a row
// with an Inf or NaN gets qf NaN (its scores go to the f32 path). dk % 32 == 0.
F16_DOTS_TARGET void f16_query_rows(const float* q, int64_t ldq, int32_t n_q, int32_t dk, float scale, uint16_t* qh,
                                    float* qf) {
  for (int32_t r = 0; r < n_q; ++r) {
    const float* x = q + r * ldq;
    __m512 amax = _mm512_setzero_ps();
    for (int32_t d = 0; d < dk; d += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + d)));
    const float a = _mm512_reduce_max_ps(amax);
    int e = 0;
    if (a > 0.f && a < __builtin_inff()) {
      int x2;
      __builtin_frexpf(a, &x2);  // a = m 2^x2, m in [0.5, 1)
      e = 1 - x2;
      e = e > 126 ? 126 : e < -126 ? -126 : e;  // 2^e and 2^-e normal floats
    }
    const float up = __builtin_ldexpf(1.f, e);
    bool bad = !(a < __builtin_inff());  // Inf, or NaN (the max drops NaN lanes: check them)
    for (int32_t d = 0; d < dk; d += 16) {
      const __m512 v = _mm512_loadu_ps(x + d);
      bad |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qh + int64_t(r) * dk + d),
                          _mm512_cvtps_ph(_mm512_mul_ps(v, _mm512_set1_ps(up)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    qf[r] = bad ? __builtin_nanf("") : __builtin_ldexpf(1.f, -e) * scale;
  }
}

// acc[r] += the 32 half sums h[r] in f32 (lanes 0-15, 16-31), h[r] = 0; with uf, each
// row's sums times uf[r] (a power of two: exact) on the way.
template <int R>
F16_DOTS_TARGET ATTN_INLINE void flush_halves(__m512h* h, __m512 (*acc)[2], const float* uf = nullptr) {
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512i x = _mm512_castph_si512(h[r]);
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(x)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
    if (uf) {
      const __m512 f = _mm512_set1_ps(uf[r]);
      acc[r][0] = _mm512_fmadd_ps(lo, f, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(hi, f, acc[r][1]);
    } else {
      acc[r][0] = _mm512_add_ps(acc[r][0], lo);
      acc[r][1] = _mm512_add_ps(acc[r][1], hi);
    }
    h[r] = _mm512_setzero_ph();
  }
}

// 32 halves, lanes 0-15 from a (16 keys of one group) and 16-31 from b (the next
// group's, or zeros).
F16_DOTS_TARGET ATTN_INLINE __m512h pair16(const uint8_t* a, const uint8_t* b) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  if (!b) return _mm512_castsi512_ph(_mm512_zextsi256_si512(lo));
  return _mm512_castsi512_ph(_mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1));
}

// 32 E4M3 codes as halves of their values times 2^-8 (load16's trick, 32 lanes wide). A NaN
// code (S.1111.111) reads as 1.875 here: the cache never pairs one with a finite scale
// (kv_view.cpp quantize_scaled: a vector holding a NaN gets scale NaN, one holding an Inf
// scale Inf, and only then a NaN code), so the key's score or weight is not finite and
// the row that attends it is redone on the f32 path, which reads the NaN.
F16_DOTS_TARGET ATTN_INLINE __m512h e4m3_halves(__m256i b) {
  return _mm512_castsi512_ph(
      _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(b), 7), _mm512_set1_epi16(int16_t(0xBF80))));
}

// 32 codes, bytes 0-15 from a (16 keys of one group) and 16-31 from b (the next group's,
// or zeros).
F16_DOTS_TARGET ATTN_INLINE __m256i codes32(const uint8_t* a, const uint8_t* b) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo),
                                 b ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)) : _mm_setzero_si128(), 1);
}

// Scores of R rows for two groups (g1 may be null: one): s[r][g.lane, g.lane + 16) =
// (sum over chunks of the half sums of q'_d k_jd) x qf[r], -inf past each group's keys.
// Returns the rows (bit r) with a non-finite score among the keys they attend (span[2r]
// to span[2r + 1], positions from the tile's first): the caller scores them again on the
// f32 path. Other lanes' scores (keys of another row's window, slots past the context)
// are masked by the caller, as the f32 path's are. Contig: g1's keys follow g0's in memory (one block of 32 or
// more slots), one 64-byte load per dimension.
template <int R, bool Contig, bool Fp8 = false>
F16_DOTS_TARGET ATTN_NOINLINE uint32_t scores_f16(const uint16_t* qh, int32_t dk, const float* qf, const int32_t* span,
                                                  const Group* g0,
                                                  const Group* g1, int64_t kstride, float* s, int64_t lds, int64_t koff,
                                                  Prefetcher& pf) {
  __m512 acc[R][2];
  ATTN_UNROLL for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint8_t* k0 = g0->k + koff;
  const uint8_t* k1 = g1 ? g1->k + koff : nullptr;
  Prefetcher::Cursor c = pf.cur;
  for (int32_t d0 = 0; d0 < dk; d0 += kF16ScoreDims) {
    __m512h h[R];
    ATTN_UNROLL for (int r = 0; r < R; ++r) h[r] = _mm512_setzero_ph();
    for (int32_t d = d0; d < d0 + kF16ScoreDims; ++d) {
      __m512h kv;
      if constexpr (Fp8) {  // a dimension of 32 keys is 32 bytes: a line every other one
        if (d & 1) pf.step(c);
        kv = Contig ? e4m3_halves(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k0 + d * kstride)))
                    : e4m3_halves(codes32(k0 + d * kstride, k1 ? k1 + d * kstride : nullptr));
      } else {
        pf.step(c);
        kv = Contig ? _mm512_loadu_ph(k0 + d * kstride) : pair16(k0 + d * kstride, k1 ? k1 + d * kstride : nullptr);
      }
      ATTN_UNROLL for (int r = 0; r < R; ++r)
        h[r] = _mm512_fmadd_ph(_mm512_set1_ph(reinterpret_cast<const _Float16*>(qh)[r * dk + d]), kv, h[r]);
    }
    flush_halves<R>(h, acc);
  }
  pf.cur = c;
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  uint32_t bad = 0;
  // The lanes of a group whose positions row r attends.
  const auto attended = [&](const Group* g, int r) {
    return __mmask16(g->keys & first_lanes(span[2 * r + 1] - g->pos) & ~first_lanes(span[2 * r] - g->pos));
  };
  // FP8: each key's scale in the codes' unit (kCodeUnit), times the sums before qf.
  __m512 ks0 = _mm512_setzero_ps(), ks1 = _mm512_setzero_ps();
  if constexpr (Fp8) {
    const __m512 unit = _mm512_set1_ps(kCodeUnit<DType::F8_E4M3>);
    ks0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(g0->slots, g0->ks + koff), unit);
    if (g1) ks1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(g1->slots, g1->ks + koff), unit);
  }
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 f = _mm512_set1_ps(qf[r]);
    const __m512 s0 = _mm512_mul_ps(Fp8 ? _mm512_mul_ps(acc[r][0], ks0) : acc[r][0], f);
    __mmask16 nf = _mm512_mask_fpclass_ps_mask(attended(g0, r), s0, 0x99);  // NaN, +-Inf
    _mm512_storeu_ps(s + r * lds + g0->lane, _mm512_mask_mov_ps(ninf, g0->keys, s0));
    if (g1) {
      const __m512 s1 = _mm512_mul_ps(Fp8 ? _mm512_mul_ps(acc[r][1], ks1) : acc[r][1], f);
      nf |= _mm512_mask_fpclass_ps_mask(attended(g1, r), s1, 0x99);
      _mm512_storeu_ps(s + r * lds + g1->lane, _mm512_mask_mov_ps(ninf, g1->keys, s1));
    }
    if (nf) bad |= 1u << r;
  }
  return bad;
}

// The scores of R rows over a tile's ng groups, two at a time; the rows to score again.
// Fp8: an E4M3 cache's codes (a group's keys 16 bytes apart in a dimension's row).
template <int R, bool Fp8 = false>
F16_DOTS_TARGET uint32_t scores_f16_tile(const uint16_t* qh, int32_t dk, const float* qf, const int32_t* span,
                                         const Group* gr, int32_t ng, int64_t kstride, float* s, int64_t lds,
                                         int64_t koff, Prefetcher& pf) {
  constexpr int64_t kGroupBytes = Fp8 ? 16 : 32;
  uint32_t bad = 0;
  for (int32_t g = 0; g < ng; g += 2) {
    const Group* g1 = g + 1 < ng ? gr + g + 1 : nullptr;
    if (g1 && g1->k == gr[g].k + kGroupBytes)
      bad |= scores_f16<R, true, Fp8>(qh, dk, qf, span, gr + g, g1, kstride, s, lds, koff, pf);
    else bad |= scores_f16<R, false, Fp8>(qh, dk, qf, span, gr + g, g1, kstride, s, lds, koff, pf);
  }
  return bad;
}

// Rows [0, n) of probabilities (lds floats apart) rounded to halves: ph[n][kF16ProbLanes].
F16_DOTS_TARGET void f16_probabilities(const float* p, int64_t lds, int32_t n, int32_t lanes, uint16_t* ph) {
  for (int32_t r = 0; r < n; ++r)
    for (int32_t x = 0; x < lanes; x += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ph + r * kF16ProbLanes + x),
                          _mm512_cvtps_ph(_mm512_loadu_ps(p + r * lds + x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// An E4M3 cache's weights in halves: rows [0, n) of w = p x sv x kCodeUnit (lds floats
// apart, scale_probabilities' result: any magnitude) each scaled by 2^e that puts its
// largest in [1, 2) and rounded, ph[n][kF16ProbLanes], and uf[r] = 2^-e, which the P.V's
// flushes multiply back (NaN where a weight is not finite: the row's sums then are not
// finite and the row is redone on the f32 path). The lanes are the row's own keys (the
// file's header says why), so e is the row's own.
F16_DOTS_TARGET void fp8_weights_halves(const float* p, int64_t lds, int32_t n, int32_t lanes, uint16_t* ph, float* uf) {
  for (int32_t r = 0; r < n; ++r) {
    const float* x = p + r * lds;
    __m512 wmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int32_t i = 0; i < lanes; i += 16) {
      const __m512 w = _mm512_loadu_ps(x + i);
      bad |= _mm512_fpclass_ps_mask(w, 0x99);  // NaN, +-Inf
      wmax = _mm512_max_ps(wmax, w);
    }
    const float a = _mm512_reduce_max_ps(wmax);
    int e = 0;
    if (a > 0.f && !bad) {
      int x2;
      __builtin_frexpf(a, &x2);
      e = 1 - x2;
      e = e > 126 ? 126 : e < -126 ? -126 : e;
    }
    const __m512 up = _mm512_set1_ps(__builtin_ldexpf(1.f, e));
    for (int32_t i = 0; i < lanes; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ph + r * kF16ProbLanes + i),
                          _mm512_cvtps_ph(_mm512_mul_ps(_mm512_loadu_ps(x + i), up), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    uf[r] = bad ? __builtin_nanf("") : __builtin_ldexpf(1.f, -e);
  }
}

// o_r[d0, d0 + 32) = o_r x cr[r] + sum over the tile's chunks of kF16ValueKeys positions
// of the half sums of p_rj v_j, for R rows, each lane in position order; block b's key j
// has its probability in lane b * lpb + j of ph's row. A row whose sums leave the finite
// halves or floats is not stored (bit r of the result): the caller runs it on the f32
// path, which reads o as it was. dv % 32 == 0. Fp8: an E4M3 cache's codes as halves
// (e4m3_halves), ph its weights (fp8_weights_halves), each chunk's sums times uf[r].
template <int R, bool Fp8 = false>
F16_DOTS_TARGET ATTN_NOINLINE uint32_t pv_f16(const Tile& tl, int32_t lpb, int32_t live, const uint16_t* ph,
                                              const float* cr, float* o, int64_t ldo, int32_t d0, int32_t dv,
                                              int64_t voff, Prefetcher& pf, const float* uf = nullptr) {
  constexpr int64_t esz = Fp8 ? 1 : 2;
  __m512 acc[R][2];
  __m512h h[R];
  ATTN_UNROLL for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps(), h[r] = _mm512_setzero_ph();
  const _Float16* p = reinterpret_cast<const _Float16*>(ph);
  Prefetcher::Cursor c = pf.cur;
  // Chunks are fixed position ranges of the tile, [kF16ValueKeys x i, + kF16ValueKeys),
  // whichever row reads them.
  const int32_t first = live / tl.bs;
  for (int32_t b = first; b < tl.n_blocks; ++b) {
    const uint8_t* vb = tl.v[b] + voff + d0 * esz;
    const _Float16* pb = p + b * lpb;
    for (int32_t j = b == first ? live % tl.bs : 0; j < tl.keys[b]; ++j) {
      __m512h v;
      if constexpr (Fp8) {  // 32 bytes of a key's row: a line every other key
        if (j & 1) pf.step(c);
        v = e4m3_halves(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vb + int64_t(j) * dv)));
      } else {
        pf.step(c);
        v = _mm512_loadu_ph(vb + int64_t(j) * dv * 2);
      }
      ATTN_UNROLL for (int r = 0; r < R; ++r) h[r] = _mm512_fmadd_ph(_mm512_set1_ph(pb[r * kF16ProbLanes + j]), v, h[r]);
      if (((b * tl.bs + j + 1) & (kF16ValueKeys - 1)) == 0) flush_halves<R>(h, acc, Fp8 ? uf : nullptr);
    }
  }
  flush_halves<R>(h, acc, Fp8 ? uf : nullptr);
  pf.cur = c;
  uint32_t bad = 0;
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    float* orow = o + r * ldo + d0;
    if (_mm512_fpclass_ps_mask(acc[r][0], 0x99) | _mm512_fpclass_ps_mask(acc[r][1], 0x99)) {
      bad |= 1u << r;
      continue;
    }
    const __m512 cv = _mm512_set1_ps(cr[r]);
    _mm512_storeu_ps(orow, _mm512_fmadd_ps(_mm512_loadu_ps(orow), cv, acc[r][0]));
    _mm512_storeu_ps(orow + 16, _mm512_fmadd_ps(_mm512_loadu_ps(orow + 16), cv, acc[r][1]));
  }
  return bad;
}

}  // namespace
}  // namespace ridge::kernels::detail
#endif  // RIDGE_ATTN_F16_BUILT
