#include <immintrin.h>

#include "core/fp16.h"
#include "core/dtype.h"
#include "kernels/cpu/convert.h"

namespace ridge::kernels::detail {

void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

// fp8_kv_scale's errors (convert.h), 16 lanes at a time: |x| inv_k clamped to the largest
// value, then to its grid (normals: the mantissa, from vgetmantps in [1, 2), rounded to
// `man` fraction bits and scaled back by the exponent; below the smallest normal: a
// multiple of its even step), squared differences accumulated by fma per lane. Lanes past
// n hold 0 and add nothing.
void fp8_sq_errors_avx512(DType t, const float* x, int64_t n, const float* inv, int steps, float* err) {
  const bool e4m3 = t == DType::F8_E4M3;
  const __m512 max = _mm512_set1_ps(e4m3 ? 448.f : 57344.f), min_normal = _mm512_set1_ps(e4m3 ? 0x1p-6f : 0x1p-14f);
  const __m512 sign = _mm512_set1_ps(-0.f);
  // The grid below the smallest normal: multiples of 2^-9 (E4M3) or 2^-16 (E5M2).
  const __m512 steps_per_unit = _mm512_set1_ps(e4m3 ? 0x1p9f : 0x1p16f), unit_per_step = _mm512_set1_ps(e4m3 ? 0x1p-9f : 0x1p-16f);
  for (int k = 0; k < steps; ++k) {
    const __m512 ik = _mm512_set1_ps(inv[k]);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
      const __m512 y = _mm512_min_ps(_mm512_mul_ps(_mm512_andnot_ps(sign, _mm512_maskz_loadu_ps(m, x + i)), ik), max);
      const __m512 mant = _mm512_getmant_ps(y, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
      const __m512 ex = _mm512_getexp_ps(y);
      const __m512 rm = e4m3 ? _mm512_roundscale_ps(mant, (3 << 4) | _MM_FROUND_TO_NEAREST_INT)
                             : _mm512_roundscale_ps(mant, (2 << 4) | _MM_FROUND_TO_NEAREST_INT);
      const __m512 rn = _mm512_min_ps(_mm512_scalef_ps(rm, ex), max);
      const __m512 rs = _mm512_mul_ps(_mm512_roundscale_ps(_mm512_mul_ps(y, steps_per_unit), _MM_FROUND_TO_NEAREST_INT),
                                      unit_per_step);  // exact: powers of two
      const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(y, min_normal, _CMP_LT_OQ), rn, rs);
      const __m512 d = _mm512_sub_ps(r, y);
      acc = _mm512_fmadd_ps(d, d, acc);
    }
    // The tree of convert.cpp's reduce16: lane j + lane j + 8, then + 4, + 2, + 1.
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    err[k] = _mm_cvtss_f32(q);
  }
}

}  // namespace ridge::kernels::detail
