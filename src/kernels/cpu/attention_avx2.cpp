// AVX2 + FMA + F16C attention (compiled with -mavx2 -mfma -mf16c; reached only through
// attention_group after a CPU check). Same linkage rule as attention_avx512.cpp: nothing
// here may be an inline function of a shared header.
//
// Per block: the K and V tiles converted to f32 once, then per query row the scores 8
// keys to a vector (K's dimension-major tile puts 8 keys of one dimension in one load),
// a vector exp, p.V accumulated over head_dim. Nothing a row computes depends on the
// other rows.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention.h"

namespace ridge::kernels::detail {
namespace {

// Helpers must inline: an out-of-line one would take its vector arrays' address and
// spill them to the stack.
#define ATTN_INLINE inline __attribute__((always_inline))

constexpr float kNegInf = -__builtin_inff();
constexpr int32_t kPrefetchTiles = 2;  // how far ahead prefetch_tile runs

ATTN_INLINE __m256i first_lanes(int32_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// e^x as exp16 in attention_avx512.cpp (same reduction and polynomial), 2^n built in the
// exponent field, so n is kept to the normal range: exactly 0 below -87.6 (the true value
// is under 1e-38) and at -inf, +inf above 88.37; NaN stays NaN.
ATTN_INLINE __m256 exp8(__m256 x) {
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

ATTN_INLINE float bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Converts n contiguous cache elements to f32.
template <DType T>
void to_f32_n(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if constexpr (T == DType::F16) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
    } else if constexpr (T == DType::BF16) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    } else {
      _mm256_storeu_ps(dst + i, _mm256_loadu_ps(reinterpret_cast<const float*>(src) + i));
    }
  }
  for (; i < n; ++i) {
    if constexpr (T == DType::F32) {
      std::memcpy(dst + i, src + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = T == DType::F16 ? _cvtsh_ss(h) : bf16(h);
    }
  }
}

ATTN_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

ATTN_INLINE float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// s[8g, 8g + 8) = (q . k_j) * scale for the keys of groups g0..g0+G-1 of an f32 K tile
// kf[dk][bs] (key j in lane j % 8 of group j / 8; one fma chain per key over d = 0..dk-1).
// Lanes past the tile's keys read whatever follows in the scratch and are overwritten.
template <int G>
ATTN_INLINE void scores8(const float* q, const float* kf, int32_t bs, int32_t dk, int32_t g0, int32_t n, __m256 scale,
                         float* s) {
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  for (int32_t d = 0; d < dk; ++d) {
    const __m256 qd = _mm256_broadcast_ss(q + d);
    const float* row = kf + int64_t(d) * bs + 8 * g0;
    for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(row + 8 * g), acc[g]);
  }
  for (int g = 0; g < G; ++g)
    _mm256_storeu_ps(s + 8 * (g0 + g), _mm256_blendv_ps(_mm256_set1_ps(kNegInf), _mm256_mul_ps(acc[g], scale),
                                                         _mm256_castsi256_ps(first_lanes(n - 8 * (g0 + g)))));
}

// o[d0, d0 + 8 NC) = o * corr + sum_j p[j] v_j; with Tail the last chunk is partial
// (lanes past dv masked off).
template <int NC, bool Tail>
ATTN_INLINE void pv(const float* v, int64_t ldv, const float* p, int32_t n, __m256 corr, float* o, int32_t d0, int32_t dv) {
  const __m256i lm = first_lanes(dv - d0 - 8 * (NC - 1));
  auto load = [&](const float* x, int c) { return Tail && c == NC - 1 ? _mm256_maskload_ps(x, lm) : _mm256_loadu_ps(x); };
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_mul_ps(load(o + d0 + 8 * c, c), corr);
  for (int32_t j = 0; j < n; ++j) {
    const __m256 pj = _mm256_broadcast_ss(p + j);
    const float* vr = v + j * ldv + d0;
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_fmadd_ps(pj, load(vr + 8 * c, c), acc[c]);
  }
  for (int c = 0; c < NC; ++c) {
    if (Tail && c == NC - 1) _mm256_maskstore_ps(o + d0 + 8 * c, lm, acc[c]);
    else _mm256_storeu_ps(o + d0 + 8 * c, acc[c]);
  }
}

template <int NC>
ATTN_INLINE void pv_tail(const float* v, int64_t ldv, const float* p, int32_t n, __m256 corr, float* o, int32_t d0, int32_t dv) {
  if (dv - d0 < 8 * NC) pv<NC, true>(v, ldv, p, n, corr, o, d0, dv);
  else pv<NC, false>(v, ldv, p, n, corr, o, d0, dv);
}

// Up to 8 column chunks at a time: accumulators stay in registers over the whole tile.
void pv_row(const float* v, int64_t ldv, const float* p, int32_t n, __m256 corr, float* o, int32_t dv) {
  const int32_t chunks = (dv + 7) / 8;
  int32_t c = 0;
  for (; c + 8 <= chunks; c += 8) pv_tail<8>(v, ldv, p, n, corr, o, 8 * c, dv);
  switch (chunks - c) {
    case 1: pv_tail<1>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    case 2: pv_tail<2>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    case 3: pv_tail<3>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    case 4: pv_tail<4>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    case 5: pv_tail<5>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    case 6: pv_tail<6>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    case 7: pv_tail<7>(v, ldv, p, n, corr, o, 8 * c, dv); break;
    default: break;
  }
}

// o[0, dv) *= x, lanes past dv untouched.
void scale_row(float* o, int32_t dv, __m256 x) {
  int32_t d = 0;
  for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), x));
  if (d < dv) {
    const __m256i m = first_lanes(dv - d);
    _mm256_maskstore_ps(o + d, m, _mm256_mul_ps(_mm256_maskload_ps(o + d, m), x));
  }
}

// Asks for the K/V of tile t (if any) ahead of its use: blocks lie scattered in the pool,
// so the hardware prefetchers, which follow one stream within a page, cannot guess them
// (two tiles ahead: measurably faster on bench_attention's decode, 1 and 2 threads).
ATTN_INLINE void prefetch_tile(const AttnView& a, int32_t t, int32_t n_tiles, int64_t k_bytes, int64_t v_bytes) {
  if (t >= n_tiles) return;
  const char* kb = reinterpret_cast<const char*>(a.k0 + a.blocks[t] * a.k_block_stride);
  const char* vb = reinterpret_cast<const char*>(a.v0 + a.blocks[t] * a.v_block_stride);
  for (int64_t x = 0; x < k_bytes; x += 64) _mm_prefetch(kb + x, _MM_HINT_T0);
  for (int64_t x = 0; x < v_bytes; x += 64) _mm_prefetch(vb + x, _MM_HINT_T0);
}

template <DType T>
void group(const AttnView& a, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo, float* scratch) {
  const int32_t dk = a.dk, dv = a.dv, bs = a.block_size;
  // The scratch layout of attention_scratch_floats (sized for 16-key groups).
  const int32_t bsp = (bs + 15) / 16 * 16, dkp = (dk + 15) / 16 * 16;
  float* kf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  //                                         [dk][bs] K tile in f32 (room for bsp * dkp)
  float* vf = kf + int64_t(bsp) * dkp;    // [bs][dv] V tile in f32
  float* sc = vf + (int64_t(bs) * dv + 15) / 16 * 16;  // [n_q][bsp] scores, then probabilities
  float* m = sc + int64_t(n_q) * bsp;     // [n_q] running max
  float* l = m + n_q;                     // [n_q] running sum of exp
  float* cr = l + n_q;                    // [n_q] this tile's rescale of the running state

  for (int32_t i = 0; i < n_q; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
    for (int32_t d = 0; d < dv; ++d) out[i * ldo + d] = 0.f;
  }
  const __m256 scale = _mm256_set1_ps(a.scale);

  const int32_t n_tiles = (a.n_ctx + bs - 1) / bs;
  constexpr int64_t esz = T == DType::F32 ? 4 : 2;
  const int64_t k_tile_bytes = int64_t(bs) * dk * esz, v_tile_bytes = int64_t(bs) * dv * esz;
  for (int32_t t = 0; t < kPrefetchTiles; ++t) prefetch_tile(a, t, n_tiles, k_tile_bytes, v_tile_bytes);
  for (int32_t t = 0; t < n_tiles; ++t) {
    const int32_t rest = a.n_ctx - t * bs, n = rest < bs ? rest : bs;
    const int32_t ng = (n + 7) / 8;  // groups of 8 keys
    prefetch_tile(a, t + kPrefetchTiles, n_tiles, k_tile_bytes, v_tile_bytes);
    const uint8_t* kb = a.k0 + a.blocks[t] * a.k_block_stride;
    const uint8_t* vb = a.v0 + a.blocks[t] * a.v_block_stride;
    to_f32_n<T>(kb, kf, int64_t(bs) * dk);  // [dk][bs], slots past n too (never used)
    const float* vt = T == DType::F32 ? reinterpret_cast<const float*>(vb) : vf;
    if (T != DType::F32) to_f32_n<T>(vb, vf, int64_t(n) * dv);

    // Each step over all rows before the next, as in attention_avx512.cpp.
    for (int32_t i = 0; i < n_q; ++i) {
      const float* qi = q + i * ldq;
      float* si = sc + int64_t(i) * bsp;
      for (int32_t g = 0; g < ng; g += 4) switch (ng - g) {
          case 1: scores8<1>(qi, kf, bs, dk, g, n, scale, si); break;
          case 2: scores8<2>(qi, kf, bs, dk, g, n, scale, si); break;
          case 3: scores8<3>(qi, kf, bs, dk, g, n, scale, si); break;
          default: scores8<4>(qi, kf, bs, dk, g, n, scale, si); break;
        }
    }
    for (int32_t i = 0; i < n_q; ++i) {
      float* si = sc + int64_t(i) * bsp;
      __m256 vmax = _mm256_loadu_ps(si);
      for (int32_t g = 1; g < ng; ++g) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(si + 8 * g));
      const float tile_max = hmax(vmax);
      const float m_new = m[i] > tile_max ? m[i] : tile_max;
      const __m256 mv = _mm256_set1_ps(m_new);
      // 0 on the first tile (m = -inf).
      cr[i] = _mm256_cvtss_f32(exp8(_mm256_set1_ps(m[i] - m_new)));
      __m256 psum = _mm256_setzero_ps();
      for (int32_t g = 0; g < ng; ++g) {
        const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(si + 8 * g), mv));
        _mm256_storeu_ps(si + 8 * g, p);
        psum = _mm256_add_ps(psum, p);
      }
      l[i] = l[i] * cr[i] + hsum(psum);
      m[i] = m_new;
    }
    for (int32_t i = 0; i < n_q; ++i) pv_row(vt, dv, sc + int64_t(i) * bsp, n, _mm256_set1_ps(cr[i]), out + i * ldo, dv);
  }
  for (int32_t i = 0; i < n_q; ++i) scale_row(out + i * ldo, dv, _mm256_set1_ps(l[i] > 0.f ? 1.f / l[i] : 0.f));
}

}  // namespace

void attention_group_avx2(const AttnView& v, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo,
                          float* scratch) {
  switch (v.dtype) {
    case DType::F16: return group<DType::F16>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::BF16: return group<DType::BF16>(v, n_q, q, ldq, out, ldo, scratch);
    default: return group<DType::F32>(v, n_q, q, ldq, out, ldo, scratch);
  }
}

void exp_avx2(const float* x, float* y, int64_t n) {
  float buf[8];
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t k = n - i < 8 ? n - i : 8;
    for (int64_t j = 0; j < 8; ++j) buf[j] = j < k ? x[i + j] : 0.f;
    _mm256_storeu_ps(buf, exp8(_mm256_loadu_ps(buf)));
    for (int64_t j = 0; j < k; ++j) y[i + j] = buf[j];
  }
}

}  // namespace ridge::kernels::detail
