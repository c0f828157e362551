// AVX2 + FMA + F16C dots (compiled with -mavx2 -mfma -mf16c; reached only through dot_fn
// after a CPU check). Everything here is in an anonymous namespace and uses no inline
// function from a shared header, so no AVX2 code can be picked by the linker for a
// baseline caller.
#include <immintrin.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/dot_paths.h"

namespace ridge::quant::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half(uint16_t h) { return _cvtsh_ss(h); }
inline float bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Plain-float weights: 4 accumulators x 8 lanes (32 elements an iteration), then 8 at a
// time, then a scalar tail. `load8` turns 8 weights at element i into 8 floats.
template <typename Load8, typename Load1>
float dot_plain(const float* a, int64_t n, Load8 load8, Load1 load1) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(load8(i), _mm256_loadu_ps(a + i), acc0);
    acc1 = _mm256_fmadd_ps(load8(i + 8), _mm256_loadu_ps(a + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(load8(i + 16), _mm256_loadu_ps(a + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(load8(i + 24), _mm256_loadu_ps(a + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8(i), _mm256_loadu_ps(a + i), acc0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += load1(i) * a[i];
  return s;
}

float dot_f32(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  return dot_plain(
      static_cast<const float*>(act), n, [x](int64_t i) { return _mm256_loadu_ps(x + i); },
      [x](int64_t i) { return x[i]; });
}

float dot_f16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  return dot_plain(
      static_cast<const float*>(act), n,
      [x](int64_t i) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))); },
      [x](int64_t i) { return half(x[i]); });
}

float dot_bf16(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  return dot_plain(
      static_cast<const float*>(act), n,
      [x](int64_t i) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      },
      [x](int64_t i) { return bf16(x[i]); });
}

// FP8 weights: per 128-block 4 chains of 8 lanes (codes as halves x 2^-8, quant/fp8.h),
// summed and scaled by d x 2^8 into the row's sum.
float dot_fp8(const void* w, const void* act, int64_t n) {
  const auto* b = static_cast<const BlockFp8*>(w);
  const auto* a = static_cast<const float*>(act);
  const __m128i keep = _mm_set1_epi16(int16_t(0xBFFF));
  auto codes8 = [&](const uint8_t* q) {
    const __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(h, 7), keep));
  };
  float y = 0.0f;
  for (int64_t i = 0; i < n / kQF8; ++i, a += kQF8) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int j = 0; j < kQF8; j += 32)
      for (int u = 0; u < 4; ++u) acc[u] = _mm256_fmadd_ps(codes8(b[i].qs + j + 8 * u), _mm256_loadu_ps(a + j + 8 * u), acc[u]);
    float d;
    std::memcpy(&d, &b[i].d, 4);
    y = __builtin_fmaf(hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))), d * 256.0f, y);
  }
  return y;
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 8 int32 partial sums of w[32] . a[32], w signed: maddubs needs an unsigned left side,
// so multiply |w| by a with w's sign (exact; |w| = 128 is fine as unsigned, and pair sums
// stay below 2 * 128 * 127 < 32767 so maddubs never saturates).
inline __m256i idot_s8(__m256i w, __m256i a) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i s0 = idot_s8(load32(x[i].qs), load32(y[i].qs));
    const __m256i s1 = idot_s8(load32(x[i + 1].qs), load32(y[i + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(half(x[i].d) * y[i].d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(half(x[i + 1].d) * y[i + 1].d), acc1);
  }
  if (i < nb) {
    const __m256i s0 = idot_s8(load32(x[i].qs), load32(y[i].qs));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(half(x[i].d) * y[i].d), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// 32 nibbles of a Q4 block in element order: low nibbles (0..15) then high (16..31).
inline __m256i unpack_q4(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// 8 int32 partial sums of (q - 8) . a with q unsigned 0..15: q . a - 8 . a, both exact.
inline __m256i idot_q4(__m256i q, __m256i a) {
  const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, a),
                                     _mm256_maddubs_epi16(_mm256_set1_epi8(8), a));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

float dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m256i s0 = idot_q4(unpack_q4(x[i].qs), load32(y[i].qs));
    const __m256i s1 = idot_q4(unpack_q4(x[i + 1].qs), load32(y[i + 1].qs));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(half(x[i].d) * y[i].d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(half(x[i + 1].d) * y[i + 1].d), acc1);
  }
  if (i < nb) {
    const __m256i s0 = idot_q4(unpack_q4(x[i].qs), load32(y[i].qs));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(half(x[i].d) * y[i].d), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// MXFP4: the nibbles looked up in the doubled E2M1 table (pshufb), then a signed dot;
// the scale's bits built here as mxfp4_scale builds them.
float dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t e = x[i].e, bits = e < 2 ? uint32_t(0x00200000) << e : (e - 1) << 23;
    float d;
    std::memcpy(&d, &bits, 4);
    const __m256i s = idot_s8(_mm256_shuffle_epi8(table, unpack_q4(x[i].qs)), load32(y[i].qs));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * y[i].d), acc);
  }
  return hsum(acc);
}

// Unsigned codes (0..31 or 0..63) times activations: the 8 int32 partial sums of
// (q - offset) . a. maddubs takes q as is (unsigned); the offset is a second maddubs.
// Pair sums stay below 2 * 63 * 127 < 32767: no saturation.
inline __m256i idot_u8_off(__m256i q, __m256i a, int offset) {
  __m256i p = _mm256_maddubs_epi16(q, a);
  if (offset) p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(char(offset)), a));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// 0x10 in byte j where bit j of the 32-bit qh is set: each byte picks its qh byte (j / 8)
// by shuffle, then tests its own bit (j % 8) with a per-byte mask.
inline __m256i q5_high_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), shuf), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

// The four legacy formats other than Q8_0 share one loop: codes of block i (unsigned, in
// element order), the code offset, and the min (0 for symmetric formats).
template <typename Block, int kOffset, bool kFive, bool kMin>
float dot_legacy(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  const int64_t nb = n / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float mins = 0.0f;  // sum over blocks of m * s
  for (int64_t i = 0; i < nb; ++i) {
    __m256i q = unpack_q4(x[i].qs);
    if constexpr (kFive) q = _mm256_or_si256(q, q5_high_bits(x[i].qh));
    const __m256i s = idot_u8_off(q, load32(y[i].qs), kOffset);
    const __m256 sc = _mm256_set1_ps(half(x[i].d) * y[i].d);
    // Alternate accumulators: two independent FMA chains.
    if (i & 1) acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc1);
    else acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc0);
    if constexpr (kMin) mins += half(x[i].m) * y[i].s;
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + mins;
}

}  // namespace

DotFn avx2_dot(DType t) {
  switch (t) {
    case DType::F32: return dot_f32;
    case DType::F16: return dot_f16;
    case DType::BF16: return dot_bf16;
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_0: return dot_q4_0;
    case DType::Q4_1: return dot_legacy<BlockQ4_1, 0, false, true>;
    case DType::Q5_0: return dot_legacy<BlockQ5_0, 16, true, false>;
    case DType::Q5_1: return dot_legacy<BlockQ5_1, 0, true, true>;
    case DType::F8_E4M3_B128: return dot_fp8;
    case DType::MXFP4: return dot_mxfp4;
    default: return avx2_kquant_dot(t);
  }
}

}  // namespace ridge::quant::detail
