// AVX-512 row ops. The roofline report showed them far under their memory roof on the
// baseline ISA, SwiGLU's scalar exp furthest (docs/ROOFLINE.md), so they get vector
// paths. Each row is still computed alone, in a fixed order: batch invariance holds.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/ops_simd.h"
#include "kernels/cpu/vexp_avx512.h"

namespace ridge::kernels::detail {

void rms_norm_avx512(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Squares summed in double, as the scalar reference does, 8 lanes x 2 accumulators.
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    s0 = _mm512_fmadd_pd(a, a, s0);
    s1 = _mm512_fmadd_pd(b, b, s1);
  }
  double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  const __m512 scale = _mm512_set1_ps(float(1.0 / std::sqrt(ss / double(n) + double(eps))));
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), scale);
    if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
  // silu(g) = g * sigmoid(g) with sigmoid(g) = r for g >= 0 and t r for g < 0, where
  // t = e^-|g| and r = 1 / (1 + t): t never overflows, so 1 + t lies in (1, 2] and its
  // reciprocal is rcp14 refined by one Newton step (relative error ~2^-27), in place of a
  // divide (vdivps: about one per 10 cycles). As an op of its own SwiGLU did not get
  // faster (it waits on rows both cores wrote); it now mostly runs inside ffn_down's
  // activation quantization, from cache (Matmul RowSource).
  const __m512 one = _mm512_set1_ps(1.f), two = _mm512_set1_ps(2.f), sign = _mm512_set1_ps(-0.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 t = exp16(_mm512_or_ps(g, sign));  // e^-|g|
    const __m512 d = _mm512_add_ps(one, t);
    __m512 r = _mm512_rcp14_ps(d);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
    const __m512 sig = _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ), t, r);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void swiglu_oai_avx512(const float* gate, const float* up, float* out, int64_t n) {
  // swiglu_avx512's sigmoid, of alpha x; the clamps as ggml's (a NaN gate or up stays NaN).
  const __m512 one = _mm512_set1_ps(1.f), two = _mm512_set1_ps(2.f), sign = _mm512_set1_ps(-0.f);
  const __m512 alpha = _mm512_set1_ps(1.702f), lim = _mm512_set1_ps(7.f), nlim = _mm512_set1_ps(-7.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 g0 = _mm512_maskz_loadu_ps(m, gate + i), u0 = _mm512_maskz_loadu_ps(m, up + i);
    // min/max return their second operand when either is NaN: the input goes second.
    const __m512 x = _mm512_min_ps(lim, g0), y = _mm512_max_ps(nlim, _mm512_min_ps(lim, u0));
    const __m512 ax = _mm512_mul_ps(alpha, x);
    const __m512 t = exp16(_mm512_or_ps(ax, sign));  // e^-|alpha x|
    const __m512 d = _mm512_add_ps(one, t);
    __m512 r = _mm512_rcp14_ps(d);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
    const __m512 sig = _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(ax, _mm512_setzero_ps(), _CMP_LT_OQ), t, r);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sig), _mm512_add_ps(y, one)));
  }
}

void gelu_avx512(const float* x, float* out, int64_t n) {
  // 0.5 x (1 + tanh(u)) = x sigmoid(2u), 2u = x (a + b x^2): the sigmoid as swiglu's above.
  const __m512 a = _mm512_set1_ps(kGeluA), b = _mm512_set1_ps(kGeluB);
  const __m512 one = _mm512_set1_ps(1.f), two = _mm512_set1_ps(2.f), sign = _mm512_set1_ps(-0.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 z = _mm512_mul_ps(v, _mm512_fmadd_ps(b, _mm512_mul_ps(v, v), a));
    const __m512 t = exp16(_mm512_or_ps(z, sign));  // e^-|z|
    const __m512 d = _mm512_add_ps(one, t);
    __m512 r = _mm512_rcp14_ps(d);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
    const __m512 sig = _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ), t, r);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, sig));
  }
}

// RoPE on one head vector, bit for bit the scalar rope_apply: each output is one rounded
// difference or sum of two rounded products (an fma by 1 adds or subtracts exactly).
void rope_apply_avx512(const float* cs, float* x, int32_t rope_dim, bool neox) {
  const __m512 one = _mm512_set1_ps(1.f);
  if (!neox) {
    // Pairs (x[2i], x[2i+1]) line up with cs's (cos, sin): lanes of one vector.
    for (int32_t i = 0; i < rope_dim; i += 16) {
      const __mmask16 m = rope_dim - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (rope_dim - i)) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(m, x + i), c = _mm512_maskz_loadu_ps(m, cs + i);
      const __m512 ac = _mm512_mul_ps(v, _mm512_moveldup_ps(c));  // (a cos, b cos)
      const __m512 bs = _mm512_mul_ps(_mm512_permute_ps(v, 0xB1), _mm512_movehdup_ps(c));  // (b sin, a sin)
      _mm512_mask_storeu_ps(x + i, m, _mm512_fmaddsub_ps(ac, one, bs));
    }
    return;
  }
  // Halves: a = x[i], b = x[i + half]; cos and sin of pair i at cs[2i], cs[2i + 1].
  const int32_t half = rope_dim / 2;
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int32_t i = 0; i < half; i += 16) {
    const int32_t k = half - i >= 16 ? 16 : half - i;  // pairs in this step
    auto lanes = [](int32_t n) { return __mmask16((1u << (n < 0 ? 0 : n > 16 ? 16 : n)) - 1); };
    const __mmask16 m = lanes(k), m0 = lanes(2 * k), m1 = lanes(2 * k - 16);
    const __m512 lo = _mm512_maskz_loadu_ps(m0, cs + 2 * i), hi = _mm512_maskz_loadu_ps(m1, cs + 2 * i + 16);
    const __m512 c = _mm512_permutex2var_ps(lo, even, hi), s = _mm512_permutex2var_ps(lo, odd, hi);
    const __m512 a = _mm512_maskz_loadu_ps(m, x + i), b = _mm512_maskz_loadu_ps(m, x + i + half);
    // fmsub / fmadd by 1, not sub / add: GCC would contract a product into the sum.
    _mm512_mask_storeu_ps(x + i, m, _mm512_fmsub_ps(_mm512_mul_ps(a, c), one, _mm512_mul_ps(b, s)));
    _mm512_mask_storeu_ps(x + i + half, m, _mm512_fmadd_ps(_mm512_mul_ps(a, s), one, _mm512_mul_ps(b, c)));
  }
}

void add_inplace_avx512(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

}  // namespace ridge::kernels::detail
