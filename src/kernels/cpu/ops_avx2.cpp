// AVX2 row ops, for CPUs without AVX-512 (compiled with -mavx2 -mfma -mf16c; reached only
// after a CPU check in ops.cpp). The same arithmetic as the AVX-512 paths, 8 lanes wide.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/ops_simd.h"
#include "kernels/cpu/vexp_avx2.h"

namespace ridge::kernels::detail {

void gelu_avx2(const float* x, float* out, int64_t n) {
  // x sigmoid(2u) (ops_simd.h) with sigmoid(z) = r for z >= 0 and t r for z < 0, where
  // t = e^-|z| and r = 1 / (1 + t): t never overflows, 1 + t lies in (1, 2], and its
  // reciprocal is rcp by one Newton step, as gelu_avx512's (whose rcp14 has more bits to
  // start from: the two paths agree to a few ulp, not bit for bit).
  const __m256 a = _mm256_set1_ps(kGeluA), b = _mm256_set1_ps(kGeluB);
  const __m256 one = _mm256_set1_ps(1.f), two = _mm256_set1_ps(2.f), sign = _mm256_set1_ps(-0.f);
  auto lanes = [&](__m256 v) {
    const __m256 z = _mm256_mul_ps(v, _mm256_fmadd_ps(b, _mm256_mul_ps(v, v), a));
    const __m256 t = exp8(_mm256_or_ps(z, sign));
    const __m256 d = _mm256_add_ps(one, t);
    __m256 r = _mm256_rcp_ps(d);
    r = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, two));
    r = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, two));  // rcp's 12 bits need two steps
    const __m256 sig = _mm256_blendv_ps(r, _mm256_mul_ps(t, r), _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(v, sig);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, lanes(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(out + i, m, lanes(_mm256_maskload_ps(x + i, m)));
  }
}

}  // namespace ridge::kernels::detail
