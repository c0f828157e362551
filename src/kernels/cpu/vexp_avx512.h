// A vectorized e^x for the AVX-512 kernels (include only from *_avx512.cpp files, which
// are compiled with the AVX-512 flags).
#pragma once
#include <immintrin.h>

namespace ridge::kernels::detail {

// e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts so r is nearly exact), e^r by
// its degree-7 Taylor polynomial (truncation error < 6e-9 relative), 2^n applied by
// scalef. Relative error within a few ulp of std::exp (the test measures it). Exactly 0
// below -104 (under the least f32 denormal) and at -inf; NaN stays NaN. Lane-wise.
inline __attribute__((always_inline)) __m512 exp16(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.4286068203094173e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  const __m512 e = _mm512_scalef_ps(p, n);
  // NLT_UQ keeps NaN lanes (unordered) and zeroes x < -104, -inf included.
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.f), _CMP_NLT_UQ), e);
}

}  // namespace ridge::kernels::detail
