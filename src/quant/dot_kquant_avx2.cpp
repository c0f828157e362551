// AVX2 dots of the K-quants (Q4_K, Q5_K, Q6_K) with BlockQ8A activations; the AVX-512
// path uses these too (dot_fn falls back). A super-block of 256 meets 8 activation
// blocks; for each 32-element sub-block the codes are built in element order as unsigned
// bytes, multiplied by the activations with maddubs, and the sub-block scale is applied
// in the integer madd (instead of a multiply by ones), so only d * act.d is float.
#include <immintrin.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/dot_paths.h"
#include "quant/kscales.h"

namespace ridge::quant::detail {
namespace {

inline float half(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// sum over 32 elements of q * a * sc as 8 int32, q unsigned (0..31): maddubs pair sums
// (<= 2 * 31 * 127) times the 6-bit scale in madd: <= 4 * 31 * 127 * 63 per lane.
inline __m256i idot_scaled(__m256i q, __m256i a, int sc) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), _mm256_set1_epi16(int16_t(sc)));
}

// Q4_K / Q5_K: value = d sc_j q - dmin m_j; the min part is dmin m_j s_j per sub-block.
template <typename Block, bool kFive>
float dot_q45_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK / kQK) {
    const float d = half(x[i].d), dmin = half(x[i].dmin);
    uint8_t sc[8], m[8];  // [8] 6-bit scale and min per sub-block
    for (int j = 0; j < 8; ++j) k_scale_min(j, x[i].scales, sc[j], m[j]);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFive) qh = load32(x[i].qh);
    for (int c = 0; c < 4; ++c) {  // chunk c: sub-blocks 2c (low nibbles), 2c+1 (high)
      const __m256i v = load32(x[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      if constexpr (kFive) {  // 5th bit of sub-block j is bit j of qh[l]
        const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * c)));
        const __m256i b1 = _mm256_set1_epi8(char(2 << (2 * c)));
        const __m256i x10 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), x10));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), x10));
      }
      const int j0 = 2 * c, j1 = 2 * c + 1;
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot_scaled(lo, load32(y[j0].qs), sc[j0])),
                             _mm256_set1_ps(d * y[j0].d), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot_scaled(hi, load32(y[j1].qs), sc[j1])),
                             _mm256_set1_ps(d * y[j1].d), acc1);
      mins += dmin * (float(m[j0]) * y[j0].s + float(m[j1]) * y[j1].s);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1)) - mins;
}

// Q6_K: value = d sc[e / 16] (q - 32). Activation block j = 4h + g of half h takes the
// codes of group g; its low 16 elements use scale 2j, its high 16 scale 2j + 1, which is
// exactly the split of a ymm's two 128-bit lanes, so one madd applies both.
float dot_q6_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
  const __m256i k32 = _mm256_set1_epi8(32);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = half(x[i].d);
    for (int h = 0; h < 2; ++h, y += 4) {
      const __m256i l0 = load32(x[i].ql + 64 * h), l1 = load32(x[i].ql + 64 * h + 32);
      const __m256i hb = load32(x[i].qh + 32 * h);
      __m256i q[4];  // [4 groups][32] codes 0..63
      q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hb, bits45));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45));
      const int8_t* sc = x[i].scales + 8 * h;
      for (int g = 0; g < 4; ++g) {
        const __m256i a = load32(y[g].qs);
        // (q - 32) . a pair sums: |.| <= 2 * 32 * 127, exact in int16.
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[g], a), _mm256_maddubs_epi16(k32, a));
        const __m256i s16 = _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, s16));
        if (g & 1) acc1 = _mm256_fmadd_ps(f, _mm256_set1_ps(d * y[g].d), acc1);
        else acc0 = _mm256_fmadd_ps(f, _mm256_set1_ps(d * y[g].d), acc0);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace

DotFn avx2_kquant_dot(DType t) {
  switch (t) {
    case DType::Q4_K: return dot_q45_k<BlockQ4_K, false>;
    case DType::Q5_K: return dot_q45_k<BlockQ5_K, true>;
    case DType::Q6_K: return dot_q6_k;
    default: return nullptr;
  }
}

}  // namespace ridge::quant::detail
