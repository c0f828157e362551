// A vectorized e^x for the AVX2 kernels (include only from *_avx2.cpp files, which are
// compiled with the AVX2 flags; always inlined, so no out-of-line copy is ever shared
// with a file compiled for another CPU).
#pragma once
#include <immintrin.h>

namespace ridge::kernels::detail {

// e^x as exp16 in vexp_avx512.h (same reduction and polynomial), 2^n built in the
// exponent field, so n is kept to the normal range: exactly 0 below -87.6 (the true value
// is under 1e-38) and at -inf, +inf above 88.37; NaN stays NaN.
inline __attribute__((always_inline)) __m256 exp8(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.4286068203094173e-06f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040.f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  const __m256 nc = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-126.f)), _mm256_set1_ps(127.f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nc), _mm256_set1_epi32(127)), 23);
  __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  // Ordered compares: false on NaN, which keeps its NaN.
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-87.6f), _CMP_LT_OQ));
  return _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(88.37f), _CMP_GT_OQ));
}

}  // namespace ridge::kernels::detail
