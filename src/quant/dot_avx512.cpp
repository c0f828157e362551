// AVX-512 (F/BW/VL/DQ/VNNI) dots. Integer blocks use vpdpbusd (u8 x s8 -> s32), two
// 32-element blocks per zmm: lanes 0..7 of the int32 result belong to the first block,
// 8..15 to the second, so the per-block float scale is applied lane-wise and no
// horizontal sum is needed until the end. Same linkage rule as dot_avx2.cpp: nothing here
// is visible to, or shared with, baseline code.
#include <immintrin.h>

#include "quant/blocks.h"
#include "quant/dot_paths.h"

namespace ridge::quant::detail {
namespace {

inline float half(uint16_t h) { return _cvtsh_ss(h); }

inline __mmask16 tail_mask(int64_t rem) { return __mmask16((1u << rem) - 1); }

// Plain-float weights: 4 accumulators x 16 lanes, then 16 at a time, then one masked step
// for the last n % 16 (masked loads read nothing past the row).
template <typename Load16>
float dot_plain(const float* a, int64_t n, Load16 load16) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  const __mmask16 all = 0xFFFF;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(load16(i, all), _mm512_loadu_ps(a + i), acc0);
    acc1 = _mm512_fmadd_ps(load16(i + 16, all), _mm512_loadu_ps(a + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(load16(i + 32, all), _mm512_loadu_ps(a + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(load16(i + 48, all), _mm512_loadu_ps(a + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(load16(i, all), _mm512_loadu_ps(a + i), acc0);
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    acc1 = _mm512_fmadd_ps(load16(i, m), _mm512_maskz_loadu_ps(m, a + i), acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

float dot_f32(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  return dot_plain(static_cast<const float*>(act), n,
                   [x](int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x + i); });
}

float dot_f16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  return dot_plain(static_cast<const float*>(act), n, [x](int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
  });
}

float dot_bf16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  return dot_plain(static_cast<const float*>(act), n, [x](int64_t i, __mmask16 m) {
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  });
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// Per-lane scale: s0 for lanes 0..7 (first block), s1 for 8..15 (second block).
inline __m512 scales2(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

// int32 partial sums of w . a, both signed: vpdpbusd wants the left side unsigned, so
// use |w| and a with w's sign. |w| = 128 is right as unsigned; negating a is exact
// because BlockQ8A codes are never -128.
inline __m512i idot_s8(__m512i w, __m512i a) {
  const __mmask64 neg = _mm512_movepi8_mask(w);
  const __m512i sa = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sa);
}

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const int64_t nb = n / kQK;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    const __m512i s0 = idot_s8(join(load32(x[i].qs), load32(x[i + 1].qs)),
                               join(load32(y[i].qs), load32(y[i + 1].qs)));
    const __m512i s1 = idot_s8(join(load32(x[i + 2].qs), load32(x[i + 3].qs)),
                               join(load32(y[i + 2].qs), load32(y[i + 3].qs)));
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                           scales2(half(x[i].d) * y[i].d, half(x[i + 1].d) * y[i + 1].d), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1),
                           scales2(half(x[i + 2].d) * y[i + 2].d, half(x[i + 3].d) * y[i + 3].d), acc1);
  }
  for (; i < nb; ++i) {  // 1..3 blocks left: one block in the low half, zeros above
    const __m512i s = idot_s8(_mm512_zextsi256_si512(load32(x[i].qs)),
                               _mm512_zextsi256_si512(load32(y[i].qs)));
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scales2(half(x[i].d) * y[i].d, 0.0f), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Nibbles of two Q4 blocks laid out as two activation blocks: 128-bit lanes
// [b0 low, b0 high, b1 low, b1 high] (each block's 16 bytes broadcast to two lanes, then
// lanes 1 and 3 take the high nibbles).
inline __m512i unpack_q4x2(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i b0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  const __m256i b1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
  const __m512i v = join(b0, b1);
  const __m512i m = _mm512_set1_epi8(0x0F);
  return _mm512_mask_blend_epi64(0xCC, _mm512_and_si512(v, m),
                                 _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
}

// int32 partial sums of (q - 8) . a: q (0..15) is already unsigned, so vpdpbusd takes it
// as is, and the offset is a second vpdpbusd of 8s with a: exact integers throughout.
inline __m512i idot_q4(__m512i q, __m512i a) {
  const __m512i z = _mm512_setzero_si512();
  return _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, a),
                          _mm512_dpbusd_epi32(z, _mm512_set1_epi8(8), a));
}

float dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const int64_t nb = n / kQK;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    const __m512i s0 = idot_q4(unpack_q4x2(x[i].qs, x[i + 1].qs),
                               join(load32(y[i].qs), load32(y[i + 1].qs)));
    const __m512i s1 = idot_q4(unpack_q4x2(x[i + 2].qs, x[i + 3].qs),
                               join(load32(y[i + 2].qs), load32(y[i + 3].qs)));
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                           scales2(half(x[i].d) * y[i].d, half(x[i + 1].d) * y[i + 1].d), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1),
                           scales2(half(x[i + 2].d) * y[i + 2].d, half(x[i + 3].d) * y[i + 3].d), acc1);
  }
  for (; i < nb; ++i) {  // one block: its nibbles twice, activations only in the low half
    const __m512i s = idot_q4(unpack_q4x2(x[i].qs, x[i].qs), _mm512_zextsi256_si512(load32(y[i].qs)));
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scales2(half(x[i].d) * y[i].d, 0.0f), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

}  // namespace

DotFn avx512_dot(DType t) {
  switch (t) {
    case DType::F32: return dot_f32;
    case DType::F16: return dot_f16;
    case DType::BF16: return dot_bf16;
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    default: return nullptr;
  }
}

}  // namespace ridge::quant::detail
