// AVX-512 row ops. The roofline report showed them far under their memory roof on the
// baseline ISA (SwiGLU's scalar exp: 8 GB/s of 29 in prefill), so they get vector paths.
// Each row is still computed alone, in a fixed order: batch invariance holds.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

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
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    // silu(g) = g / (1 + e^-g); e^-g overflows to +inf for g < -88: g / inf = -0, the limit.
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void add_inplace_avx512(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

}  // namespace ridge::kernels::detail
