// AVX2 + FMA + F16C attention (compiled with -mavx2 -mfma -mf16c; reached only through
// attention_group after a CPU check). Same linkage rule as attention_avx512.cpp: nothing
// here may be an inline function of a shared header.
//
// Per tile of about attention_tile_keys() keys (whole blocks, as on the AVX-512 path): the blocks' K and V
// converted to f32 once, then the scores of up to four query rows at a time, 8 keys to
// a vector (K's dimension-major tile puts 8 keys of one dimension in one load, which the
// rows share), a vector exp, p.V of three rows at a time accumulated over head_dim. The 8-bit dtypes convert their codes unscaled (int8's interleaved tiles
// transposed on the way): a key's scale multiplies its dot product and a value's its
// probability, once per tile, as on the AVX-512 path. Each row's arithmetic is that of
// the row alone, whatever rows share the call.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vexp_avx2.h"

namespace ridge::kernels::detail {
namespace {

// Helpers must inline: an out-of-line one would take its vector arrays' address and
// spill them to the stack.
#define ATTN_INLINE inline __attribute__((always_inline))

constexpr float kNegInf = -__builtin_inff();

ATTN_INLINE __m256i first_lanes(int32_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

ATTN_INLINE float bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <DType T>
constexpr bool kScaled = T == DType::I8 || T == DType::F8_E4M3 || T == DType::F8_E5M2;

// A scaled dtype's codes come out of the conversions in units of kCodeUnit: E4M3's as
// halves 2^-8 of their value (the conversion below), so 2^8 goes onto their scales.
template <DType T>
constexpr float kCodeUnit = T == DType::F8_E4M3 ? 256.f : 1.f;

// 8 FP8 codes to f32 in kCodeUnit: E5M2 is the top byte of a half; E4M3's seven low bits
// shifted into a half's exponent and mantissa are its value times 2^-8 (subnormals
// included), and S.1111.111 is NaN.
template <DType T>
ATTN_INLINE __m256 fp8x8(const uint8_t* src) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  if constexpr (T == DType::F8_E5M2) return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
  const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
  return _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(__builtin_nanf("")), nan);
}

ATTN_INLINE float fp8_one(DType t, uint8_t c) {
  alignas(8) uint8_t b[8] = {c};
  float f[8];
  _mm256_storeu_ps(f, t == DType::F8_E5M2 ? fp8x8<DType::F8_E5M2>(b) : fp8x8<DType::F8_E4M3>(b));
  return f[0];
}

// Converts n contiguous cache elements to f32 (the 8-bit FP codes in kCodeUnit; int8's
// tiles go through the transposing conversions below).
template <DType T>
void to_f32_n(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  if constexpr (T == DType::F8_E4M3 || T == DType::F8_E5M2) {  // 16 at a time, as fp8x8 does 8
    for (; i + 16 <= n; i += 16) {
      const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      __m256i h;
      if constexpr (T == DType::F8_E5M2) {
        h = _mm256_slli_epi16(w, 8);
      } else {
        const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
        h = _mm256_or_si256(_mm256_slli_epi16(mag, 7), _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8));
        h = _mm256_blendv_epi8(h, _mm256_set1_epi16(0x7E00), _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)));  // NaN
      }
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
      _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
    }
  }
  for (; i + 8 <= n; i += 8) {
    if constexpr (T == DType::F8_E4M3 || T == DType::F8_E5M2) {
      _mm256_storeu_ps(dst + i, fp8x8<T>(src + i));
    } else if constexpr (T == DType::F16) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
    } else if constexpr (T == DType::BF16) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    } else {
      _mm256_storeu_ps(dst + i, _mm256_loadu_ps(reinterpret_cast<const float*>(src) + i));
    }
  }
  for (; i < n; ++i) {
    if constexpr (T == DType::F8_E4M3 || T == DType::F8_E5M2) {
      dst[i] = fp8_one(T, src[i]);
    } else if constexpr (T == DType::F32) {
      std::memcpy(dst + i, src + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = T == DType::F16 ? _cvtsh_ss(h) : bf16(h);
    }
  }
}

// int8 tiles hold 4x4 byte squares (four dimensions of four slots for K, four slots of
// four dimensions for V: kv_view.h): a 32-byte load is two squares side by side. Each
// square transposed in its lane, then the lanes' 32-bit quarters interleaved, gives four
// runs of 8 bytes: the 8 columns of one row each.
ATTN_INLINE void i8_quads(const uint8_t* src, __m128i out[4]) {
  const __m256i tr = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2,
                                      6, 10, 14, 3, 7, 11, 15);
  const __m256i x = _mm256_permutevar8x32_epi32(
      _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), tr),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  const __m128i lo = _mm256_castsi256_si128(x), hi = _mm256_extracti128_si256(x, 1);
  out[0] = lo;
  out[1] = _mm_unpackhi_epi64(lo, lo);
  out[2] = hi;
  out[3] = _mm_unpackhi_epi64(hi, hi);
}

ATTN_INLINE __m256 i8x8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }

// An int8 K tile [ceil(dk / 4)][bs][4] -> kf[4 ceil(dk / 4)][ldk] columns [0, bs), every slot.
void i8_k_tile(const uint8_t* src, float* kf, int64_t ldk, int32_t bs, int32_t dk) {
  const auto* c = reinterpret_cast<const int8_t*>(src);
  for (int32_t d4 = 0; d4 < (dk + 3) / 4; ++d4) {
    const int64_t in = int64_t(d4) * bs * 4;
    float* row = kf + 4 * d4 * ldk;  // rows 4 d4 .. 4 d4 + 3
    int32_t j = 0;
    for (; j + 8 <= bs; j += 8) {
      __m128i b[4];
      i8_quads(src + in + 4 * j, b);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(row + k * ldk + j, i8x8(b[k]));
    }
    for (; j < bs; ++j)
      for (int k = 0; k < 4; ++k) row[k * ldk + j] = float(c[in + 4 * j + k]);
  }
}

// An int8 V tile [ceil(bs / 4)][dv][4] -> vf[n][dv], slots [0, n).
void i8_v_tile(const uint8_t* src, float* vf, int32_t n, int32_t dv) {
  const auto* c = reinterpret_cast<const int8_t*>(src);
  for (int32_t j4 = 0; j4 < (n + 3) / 4; ++j4) {
    const int64_t in = int64_t(j4) * dv * 4;
    float* row = vf + int64_t(4 * j4) * dv;  // slots 4 j4 .. 4 j4 + 3
    const int32_t slots = n - 4 * j4 < 4 ? n - 4 * j4 : 4;
    int32_t d = 0;
    for (; slots == 4 && d + 8 <= dv; d += 8) {
      __m128i b[4];
      i8_quads(src + in + 4 * d, b);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(row + k * dv + d, i8x8(b[k]));
    }
    for (; d < dv; ++d)
      for (int k = 0; k < slots; ++k) row[k * dv + d] = float(c[in + 4 * d + k]);
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

// Row r's s[8g, 8g + 8) = (q_r . k_j) * scale for rows r < R and the keys of groups
// g0..g0+G-1 of an f32 K tile kf[dk][ldk] (key j in lane j % 8 of group j / 8; one fma
// chain per row and key over d = 0..dk-1, the rows sharing each load of K). A scaled
// dtype's dot products are times their keys' scales (ks, in the codes' unit) first.
// Lanes past the tile's keys are -inf.
template <int R, int G, bool Scaled>
ATTN_INLINE void scores(const float* q, int64_t ldq, const float* kf, int32_t ldk, int32_t dk, int32_t g0, int32_t n,
                        const float* ks, __m256 scale, float* s, int64_t lds) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  for (int32_t d = 0; d < dk; ++d) {
    const float* row = kf + int64_t(d) * ldk + 8 * g0;
    __m256 kv[G];
    for (int g = 0; g < G; ++g) kv[g] = _mm256_loadu_ps(row + 8 * g);
    for (int r = 0; r < R; ++r) {
      const __m256 qd = _mm256_broadcast_ss(q + r * ldq + d);
      for (int g = 0; g < G; ++g) acc[r][g] = _mm256_fmadd_ps(qd, kv[g], acc[r][g]);
    }
  }
  __m256i live[G];
  __m256 ksv[G];
  for (int g = 0; g < G; ++g) {
    live[g] = first_lanes(n - 8 * (g0 + g));
    if constexpr (Scaled) ksv[g] = _mm256_maskload_ps(ks + 8 * (g0 + g), live[g]);
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) {
      __m256 x = acc[r][g];
      if constexpr (Scaled) x = _mm256_mul_ps(x, ksv[g]);
      _mm256_storeu_ps(s + r * lds + 8 * (g0 + g),
                       _mm256_blendv_ps(_mm256_set1_ps(kNegInf), _mm256_mul_ps(x, scale), _mm256_castsi256_ps(live[g])));
    }
}

// The scores of rows [0, n_q) over groups [g0, g0 + G): four rows at a time.
template <int G, bool Scaled>
ATTN_INLINE void scores_rows(const float* q, int64_t ldq, int32_t n_q, const float* kf, int32_t ldk, int32_t dk, int32_t g0,
                             int32_t n, const float* ks, __m256 scale, float* s, int64_t lds) {
  int32_t i = 0;
  for (; i + 4 <= n_q; i += 4) scores<4, G, Scaled>(q + i * ldq, ldq, kf, ldk, dk, g0, n, ks, scale, s + i * lds, lds);
  switch (n_q - i) {
    case 1: scores<1, G, Scaled>(q + i * ldq, ldq, kf, ldk, dk, g0, n, ks, scale, s + i * lds, lds); break;
    case 2: scores<2, G, Scaled>(q + i * ldq, ldq, kf, ldk, dk, g0, n, ks, scale, s + i * lds, lds); break;
    case 3: scores<3, G, Scaled>(q + i * ldq, ldq, kf, ldk, dk, g0, n, ks, scale, s + i * lds, lds); break;
    default: break;
  }
}

// For rows r < R: o_r[d0, d0 + 8 NC) = o_r * corr_r + sum_j p_r[j] v_j, one chain per
// element over j in order (the rows share each load of V); with Tail the last chunk is
// partial (lanes past dv masked off). p_r = p + r * ldp, o_r = o + r * ldo.
template <int R, int NC, bool Tail>
ATTN_INLINE void pv(const float* v, int64_t ldv, const float* p, int64_t ldp, int32_t n, const float* corr, float* o,
                    int64_t ldo, int32_t d0, int32_t dv) {
  const __m256i lm = first_lanes(dv - d0 - 8 * (NC - 1));
  auto load = [&](const float* x, int c) { return Tail && c == NC - 1 ? _mm256_maskload_ps(x, lm) : _mm256_loadu_ps(x); };
  __m256 acc[R][NC];
  for (int r = 0; r < R; ++r) {
    const __m256 cr = _mm256_broadcast_ss(corr + r);
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_mul_ps(load(o + r * ldo + d0 + 8 * c, c), cr);
  }
  for (int32_t j = 0; j < n; ++j) {
    const float* vr = v + j * ldv + d0;
    __m256 pj[R];
    for (int r = 0; r < R; ++r) pj[r] = _mm256_broadcast_ss(p + r * ldp + j);
    for (int c = 0; c < NC; ++c) {
      const __m256 x = load(vr + 8 * c, c);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(pj[r], x, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      if (Tail && c == NC - 1) _mm256_maskstore_ps(o + r * ldo + d0 + 8 * c, lm, acc[r][c]);
      else _mm256_storeu_ps(o + r * ldo + d0 + 8 * c, acc[r][c]);
    }
}

template <int R, int NC>
ATTN_INLINE void pv_tail(const float* v, int64_t ldv, const float* p, int64_t ldp, int32_t n, const float* corr, float* o,
                         int64_t ldo, int32_t d0, int32_t dv) {
  if (dv - d0 < 8 * NC) pv<R, NC, true>(v, ldv, p, ldp, n, corr, o, ldo, d0, dv);
  else pv<R, NC, false>(v, ldv, p, ldp, n, corr, o, ldo, d0, dv);
}

// R rows over all of dv: 4 column chunks at a time (R x 4 accumulators stay in
// registers over the whole tile).
template <int R>
void pv_rows(const float* v, int64_t ldv, const float* p, int64_t ldp, int32_t n, const float* corr, float* o,
             int64_t ldo, int32_t dv) {
  const int32_t chunks = (dv + 7) / 8;
  int32_t c = 0;
  for (; c + 4 <= chunks; c += 4) pv_tail<R, 4>(v, ldv, p, ldp, n, corr, o, ldo, 8 * c, dv);
  switch (chunks - c) {
    case 1: pv_tail<R, 1>(v, ldv, p, ldp, n, corr, o, ldo, 8 * c, dv); break;
    case 2: pv_tail<R, 2>(v, ldv, p, ldp, n, corr, o, ldo, 8 * c, dv); break;
    case 3: pv_tail<R, 3>(v, ldv, p, ldp, n, corr, o, ldo, 8 * c, dv); break;
    default: break;
  }
}

// Rows [0, n_q), three at a time.
void pv_all(const float* v, int64_t ldv, const float* p, int64_t ldp, int32_t n_q, int32_t n, const float* corr, float* o,
            int64_t ldo, int32_t dv) {
  int32_t i = 0;
  for (; i + 3 <= n_q; i += 3) pv_rows<3>(v, ldv, p + i * ldp, ldp, n, corr + i, o + i * ldo, ldo, dv);
  if (n_q - i == 2) pv_rows<2>(v, ldv, p + i * ldp, ldp, n, corr + i, o + i * ldo, ldo, dv);
  if (n_q - i == 1) pv_rows<1>(v, ldv, p + i * ldp, ldp, n, corr + i, o + i * ldo, ldo, dv);
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

// Asks for the K/V of block table entry t (if any) ahead of its use: blocks lie scattered
// in the pool, so the hardware prefetchers, which follow one stream within a page, cannot
// guess them.
ATTN_INLINE void prefetch_block(const AttnView& a, int32_t t, int32_t n_blocks, int64_t k_bytes, int64_t v_bytes) {
  if (t >= n_blocks) return;
  const char* kb = reinterpret_cast<const char*>(a.k0 + a.blocks[t] * a.k_block_stride);
  const char* vb = reinterpret_cast<const char*>(a.v0 + a.blocks[t] * a.v_block_stride);
  for (int64_t x = 0; x < k_bytes; x += 64) _mm_prefetch(kb + x, _MM_HINT_T0);
  for (int64_t x = 0; x < v_bytes; x += 64) _mm_prefetch(vb + x, _MM_HINT_T0);
}

// One block's K tile [dk][bs] (int8: [dk / 4][bs][4]) into columns [0, bs) of kf, rows
// ldk floats apart, every slot.
template <DType T>
ATTN_INLINE void k_block_f32(const uint8_t* kb, float* kf, int64_t ldk, int32_t bs, int32_t dk) {
  constexpr int64_t esz = T == DType::F32 ? 4 : kScaled<T> ? 1 : 2;
  if constexpr (T == DType::I8) {
    i8_k_tile(kb, kf, ldk, bs, dk);
  } else if (ldk == bs) {
    to_f32_n<T>(kb, kf, int64_t(bs) * dk);
  } else {
    for (int32_t d = 0; d < dk; ++d) to_f32_n<T>(kb + int64_t(d) * bs * esz, kf + d * ldk, bs);
  }
}

// One block's first n V rows into vf[n][dv].
template <DType T>
ATTN_INLINE void v_block_f32(const uint8_t* vb, float* vf, int32_t n, int32_t dv) {
  if constexpr (T == DType::I8) i8_v_tile(vb, vf, n, dv);
  else to_f32_n<T>(vb, vf, int64_t(n) * dv);
}

// A tile is attention_tile_blocks consecutive blocks of the table (about
// attention_tile_keys() keys, as on the AVX-512 path), so the online softmax's per-row
// work (max, rescale, sums, the output's load and store) is paid once per tile, not per
// block. Tiles are aligned to
// absolute positions (with a window, to its first block, the same for every row of the
// call), which keeps a row's arithmetic that of the row alone.
template <DType T>
void group(const AttnView& a, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo, float* scratch) {
  const int32_t dk = a.dk, dv = a.dv, bs = a.block_size;
  const int32_t tb = attention_tile_blocks(bs, a.tile_keys), lanes = attention_tile_lanes(bs, a.tile_keys);
  const int32_t tk = tb * bs;  // a whole tile's keys, key j of block b in column b * bs + j
  // The scratch layout of attention_scratch_floats.
  const int32_t dkp = (dk + 15) / 16 * 16;
  float* kf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  //                                       [dk][tk] K tile in f32 (room for lanes * dkp)
  float* vf = kf + int64_t(lanes) * dkp;  // [tk][dv] V tile in f32
  float* sc = vf + int64_t(tb) * ((int64_t(bs) * dv + 15) / 16 * 16);  // [n_q][lanes] scores, then probabilities
  float* m = sc + int64_t(n_q) * lanes;  // [n_q] running max
  float* l = m + n_q;                    // [n_q] running sum of exp
  float* cr = l + n_q;                   // [n_q] this tile's rescale of the running state
  float* ks = cr + n_q;                  // [lanes] scaled dtypes: the keys' scales in the codes' unit
  float* vs = ks + lanes;                // [lanes] and the values'

  for (int32_t i = 0; i < n_q; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
    for (int32_t d = 0; d < dv; ++d) out[i * ldo + d] = 0.f;
  }
  const __m256 scale = _mm256_set1_ps(a.scale);

  const int32_t n_blocks = (a.n_ctx + bs - 1) / bs;
  constexpr int64_t esz = T == DType::F32 ? 4 : kScaled<T> ? 1 : 2;
  // Codes and (scaled dtypes) the slots' scales after them.
  const int64_t k_bytes = kScaled<T> ? a.k_scales_off + 4 * int64_t(bs) : int64_t(bs) * dk * esz;
  const int64_t v_bytes = kScaled<T> ? a.v_scales_off + 4 * int64_t(bs) : int64_t(bs) * dv * esz;
  // A tile ahead, at least two blocks (two tiles were no faster on bench_attention).
  const int32_t ahead = tb > 2 ? tb : 2;
  // A window starts the tiles at its first block; the keys before it there are masked.
  const int32_t first_block = a.first / bs, skip = a.first - first_block * bs;
  for (int32_t t = 0; t < ahead; ++t) prefetch_block(a, first_block + t, n_blocks, k_bytes, v_bytes);
  for (int32_t b0 = first_block; b0 < n_blocks; b0 += tb) {
    const int32_t nb = n_blocks - b0 < tb ? n_blocks - b0 : tb;
    const int32_t rest = a.n_ctx - b0 * bs, n = rest < tk ? rest : tk;  // keys in this tile
    const int32_t ng = (n + 7) / 8;                                       // groups of 8 keys
    for (int32_t b = 0; b < nb; ++b) {
      prefetch_block(a, b0 + ahead + b, n_blocks, k_bytes, v_bytes);
      const uint8_t* kb = a.k0 + a.blocks[b0 + b] * a.k_block_stride;
      const uint8_t* vb = a.v0 + a.blocks[b0 + b] * a.v_block_stride;
      const int32_t nv = n - b * bs < bs ? n - b * bs : bs;  // this block's keys
      k_block_f32<T>(kb, kf + b * bs, tk, bs, dk);           // slots past n too (never used)
      v_block_f32<T>(vb, vf + int64_t(b) * bs * dv, nv, dv);
      if constexpr (kScaled<T>) {
        const float* sk = reinterpret_cast<const float*>(kb + a.k_scales_off);  // [bs]
        const float* sv = reinterpret_cast<const float*>(vb + a.v_scales_off);
        for (int32_t j = 0; j < nv; ++j) ks[b * bs + j] = sk[j] * kCodeUnit<T>, vs[b * bs + j] = sv[j] * kCodeUnit<T>;
      }
    }
    // Values before the window weigh 0 in P.V: zeroed, so that a non-finite one there
    // cannot make 0 x Inf (the scalar path skips those keys).
    if (b0 == first_block && skip > 0) {
      for (int64_t x = 0; x < int64_t(skip) * dv; ++x) vf[x] = 0.f;
      if constexpr (kScaled<T>)
        for (int32_t j = 0; j < skip; ++j) vs[j] = 0.f;
    }

    // Each step over all rows before the next, as in attention_avx512.cpp.
    for (int32_t g = 0; g < ng; g += 2) {
      if (ng - g >= 2) scores_rows<2, kScaled<T>>(q, ldq, n_q, kf, tk, dk, g, n, ks, scale, sc, lanes);
      else scores_rows<1, kScaled<T>>(q, ldq, n_q, kf, tk, dk, g, n, ks, scale, sc, lanes);
    }
    if (b0 == first_block && skip > 0)  // before the window: probability 0
      for (int32_t i = 0; i < n_q; ++i)
        for (int32_t j = 0; j < skip; ++j) sc[int64_t(i) * lanes + j] = kNegInf;
    for (int32_t i = 0; i < n_q; ++i) {  // cr: the new running max, for now
      const float* si = sc + int64_t(i) * lanes;
      __m256 vmax = _mm256_loadu_ps(si);
      for (int32_t g = 1; g < ng; ++g) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(si + 8 * g));
      const float tile_max = hmax(vmax);
      cr[i] = m[i] > tile_max ? m[i] : tile_max;
    }
    for (int32_t i = 0; i < n_q; i += 8) {  // eight rows' rescales in one vector exp
      alignas(32) float mo[8] = {}, mn[8] = {}, e[8];
      const int32_t k = n_q - i < 8 ? n_q - i : 8;
      for (int32_t r = 0; r < k; ++r) mo[r] = m[i + r], mn[r] = cr[i + r];
      // 0 on the first tile (m = -inf).
      _mm256_store_ps(e, exp8(_mm256_sub_ps(_mm256_load_ps(mo), _mm256_load_ps(mn))));
      for (int32_t r = 0; r < k; ++r) m[i + r] = mn[r], cr[i + r] = e[r];
    }
    for (int32_t i = 0; i < n_q; ++i) {
      float* si = sc + int64_t(i) * lanes;
      const __m256 mv = _mm256_set1_ps(m[i]);
      __m256 psum = _mm256_setzero_ps();
      for (int32_t g = 0; g < ng; ++g) {
        __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(si + 8 * g), mv));
        psum = _mm256_add_ps(psum, p);
        // P.V weighs a scaled dtype's codes by the probabilities times the values' scales.
        if constexpr (kScaled<T>) p = _mm256_mul_ps(p, _mm256_maskload_ps(vs + 8 * g, first_lanes(n - 8 * g)));
        _mm256_storeu_ps(si + 8 * g, p);
      }
      l[i] = l[i] * cr[i] + hsum(psum);
    }
    pv_all(vf, dv, sc, lanes, n_q, n, cr, out, ldo, dv);
  }
  for (int32_t i = 0; i < n_q; ++i) {
    float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
    if (a.sinks) {  // as the scalar path: the sink's term, relative to the larger max
      const float mx = m[i] > a.sinks[i] ? m[i] : a.sinks[i], c = __builtin_expf(m[i] - mx);
      inv = c / (l[i] * c + __builtin_expf(a.sinks[i] - mx));
    }
    if (a.lse) a.lse[i] = l[i] > 0.f ? m[i] + __builtin_logf(l[i]) : -__builtin_inff();
    scale_row(out + i * ldo, dv, _mm256_set1_ps(inv));
  }
}

}  // namespace

void attention_group_avx2(const AttnView& v, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo,
                          float* scratch) {
  switch (v.dtype) {
    case DType::I8: return group<DType::I8>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::F8_E4M3: return group<DType::F8_E4M3>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::F8_E5M2: return group<DType::F8_E5M2>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::F16: return group<DType::F16>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::BF16: return group<DType::BF16>(v, n_q, q, ldq, out, ldo, scratch);
    default: return group<DType::F32>(v, n_q, q, ldq, out, ldo, scratch);
  }
}

void kv_codes_to_f32_avx2(DType t, const uint8_t* src, float* dst, int64_t n) {
  if (t == DType::I8) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float(int8_t(src[i]));
    return;
  }
  if (t == DType::F8_E4M3) to_f32_n<DType::F8_E4M3>(src, dst, n);
  else to_f32_n<DType::F8_E5M2>(src, dst, n);
  const float unit = t == DType::F8_E4M3 ? kCodeUnit<DType::F8_E4M3> : 1.f;
  for (int64_t i = 0; i < n; ++i) dst[i] *= unit;
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
