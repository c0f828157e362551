// AVX-512 attention (compiled with the AVX-512 flags; reached only through
// attention_group after a CPU check). Everything is in an anonymous namespace and uses no
// inline function of a shared header: the linker must never keep an AVX-512 copy of one.
//
// Per tile: the K and V tiles are converted to f32 once for all rows (K packed for the
// dot, an f32 V read in place), then every query row runs the same sequence of vector
// operations: 16 keys at a time, q.k over head_dim in 16-lane partial sums reduced by a
// fixed shuffle tree, a vector exp (std::exp per score made the whole kernel 1.8x slower
// at 8 rows, dk 64), and p.V accumulated over head_dim. Nothing a row computes depends
// on the other rows of the call.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace ridge::kernels::detail {
namespace {

// Helpers must inline: an out-of-line one would take its vector arrays' address and
// spill them to the stack.
#define ATTN_INLINE inline __attribute__((always_inline))

constexpr float kNegInf = -__builtin_inff();
constexpr int32_t kPrefetchTiles = 2;  // how far ahead prefetch_tile runs

// e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts so r is nearly exact), e^r by
// its degree-7 Taylor polynomial (truncation error < 6e-9 relative), 2^n applied by
// scalef. Relative error within a few ulp of std::exp (the test measures it). Exactly 0
// below -104 (under the least f32 denormal) and at -inf; NaN stays NaN.
ATTN_INLINE __m512 exp16(__m512 x) {
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

ATTN_INLINE __mmask16 first_lanes(int32_t k) {
  return k >= 16 ? __mmask16(0xFFFF) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1);
}

// Elements [i, i + 16) of a cache row in f32, lanes outside m zero.
template <DType T>
ATTN_INLINE __m512 load16(const uint8_t* row, int64_t i, __mmask16 m) {
  if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
  } else if constexpr (T == DType::BF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * i)), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
  }
}

// The tile's K rows [n][dk] in the layout dot16 reads: [key group][dk chunk][16 keys][16
// lanes], so that one group's loads are at fixed offsets from one pointer. Zero past dk
// and past key n (whole groups exist and are finite).
template <DType T>
void pack_k(const uint8_t* src, int32_t n, int32_t dk, float* dst) {
  constexpr int64_t esz = T == DType::F32 ? 4 : 2;
  const int32_t nc = (dk + 15) / 16, ng = (n + 15) / 16;
  const __mmask16 last = first_lanes(dk - 16 * (nc - 1));
  for (int32_t j = 0; j < ng * 16; ++j) {
    float* d = dst + (int64_t(j / 16) * nc * 16 + j % 16) * 16;
    const uint8_t* row = src + int64_t(j) * dk * esz;
    for (int32_t c = 0; c < nc; ++c)
      _mm512_store_ps(d + c * 256, j < n ? load16<T>(row, 16 * c, c == nc - 1 ? last : __mmask16(0xFFFF))
                                         : _mm512_setzero_ps());
  }
}

// Converts n contiguous cache elements to f32.
template <DType T>
void to_f32_n(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16<T>(src, i, 0xFFFF));
  if (i < n) {
    const __mmask16 m = first_lanes(int32_t(n - i));
    _mm512_mask_storeu_ps(dst + i, m, load16<T>(src, i, m));
  }
}

// Two vectors' 16 lanes each folded to 8 (x in the low half of the result, y in the high).
ATTN_INLINE __m512 fold_halves(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Lane j of the result = sum of a[j]'s 16 lanes, by one fixed tree of shuffles and adds.
ATTN_INLINE __m512 reduce16(const __m512* a) {
  // The tree leaves key 4r+q in lane 4q+r; feeding the inputs in that transposed order
  // puts key j in lane j.
  __m512 b[8];
  for (int k = 0; k < 8; ++k) {
    const int k0 = 2 * k, k1 = 2 * k + 1;
    b[k] = fold_halves(a[(k0 % 4) * 4 + k0 / 4], a[(k1 % 4) * 4 + k1 / 4]);
  }
  __m512 c[4];
  for (int k = 0; k < 4; ++k)
    c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  __m512 d[2];
  for (int k = 0; k < 2; ++k)
    d[k] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane j = q . k_j for the 16 keys of one pack_k group.
ATTN_INLINE __m512 dot16(const float* q, const float* kg, int32_t dk) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  const int32_t nc = (dk + 15) / 16;
  for (int32_t c = 0; c < nc; ++c) {
    const __m512 qv = c < nc - 1 ? _mm512_loadu_ps(q + 16 * c) : _mm512_maskz_loadu_ps(first_lanes(dk - 16 * c), q + 16 * c);
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(kg + c * 256 + j * 16), acc[j]);
  }
  return reduce16(acc);
}

// o[d0, d0 + 16 NC) = o * corr + sum_j p[j] v_j; with Tail the last chunk is partial
// (lanes past dv masked off; full chunks load unmasked so the load folds into the FMA).
template <int NC, bool Tail>
ATTN_INLINE void pv(const float* v, int64_t ldv, const float* p, int32_t n, __m512 corr, float* o, int32_t d0,
                    int32_t dv) {
  const __mmask16 lm = first_lanes(dv - d0 - 16 * (NC - 1));
  auto load = [&](const float* x, int c) {
    return Tail && c == NC - 1 ? _mm512_maskz_loadu_ps(lm, x) : _mm512_loadu_ps(x);
  };
  __m512 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm512_mul_ps(load(o + d0 + 16 * c, c), corr);
  for (int32_t j = 0; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const float* vr = v + j * ldv + d0;
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_fmadd_ps(pj, load(vr + 16 * c, c), acc[c]);
  }
  for (int c = 0; c < NC; ++c) {
    if (Tail && c == NC - 1) _mm512_mask_storeu_ps(o + d0 + 16 * c, lm, acc[c]);
    else _mm512_storeu_ps(o + d0 + 16 * c, acc[c]);
  }
}

template <int NC>
ATTN_INLINE void pv_tail(const float* v, int64_t ldv, const float* p, int32_t n, __m512 corr, float* o, int32_t d0,
                         int32_t dv) {
  if (dv - d0 < 16 * NC) pv<NC, true>(v, ldv, p, n, corr, o, d0, dv);
  else pv<NC, false>(v, ldv, p, n, corr, o, d0, dv);
}

// Up to 8 column chunks at a time: accumulators stay in registers over the whole tile.
void pv_row(const float* v, int64_t ldv, const float* p, int32_t n, __m512 corr, float* o, int32_t dv) {
  const int32_t chunks = (dv + 15) / 16;
  int32_t c = 0;
  for (; c + 8 <= chunks; c += 8) pv_tail<8>(v, ldv, p, n, corr, o, 16 * c, dv);
  switch (chunks - c) {
    case 1: pv_tail<1>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    case 2: pv_tail<2>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    case 3: pv_tail<3>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    case 4: pv_tail<4>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    case 5: pv_tail<5>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    case 6: pv_tail<6>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    case 7: pv_tail<7>(v, ldv, p, n, corr, o, 16 * c, dv); break;
    default: break;
  }
}

// Asks for the K/V of tile t (if any) ahead of its use: blocks lie scattered in the pool,
// so the hardware prefetchers, which follow one stream within a page, cannot guess them
// (two tiles ahead: +12 to 18% on bench_attention's decode, 1 and 2 threads).
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
  const int32_t bsp = (bs + 15) / 16 * 16;
  const int32_t dkp = (dk + 15) / 16 * 16;
  // 64-byte aligned (attention_scratch_floats leaves room): whole-line loads.
  float* kf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  //                                         [bsp * dkp] K tile, pack_k layout
  float* vf = kf + int64_t(bsp) * dkp;    // [bs][dv] V tile in f32
  float* sc = vf + (int64_t(bs) * dv + 15) / 16 * 16;  // [n_q][bsp] scores, then probabilities
  float* m = sc + int64_t(n_q) * bsp;     // [n_q] running max
  float* l = m + n_q;                     // [n_q] running sum of exp
  float* cr = l + n_q;                    // [n_q] this tile's rescale of the running state

  for (int32_t i = 0; i < n_q; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
    for (int32_t d = 0; d < dv; d += 16) _mm512_mask_storeu_ps(out + i * ldo + d, first_lanes(dv - d), _mm512_setzero_ps());
  }
  const __m512 scale = _mm512_set1_ps(a.scale);

  const int32_t n_tiles = (a.n_ctx + bs - 1) / bs;
  constexpr int64_t esz = T == DType::F32 ? 4 : 2;
  const int64_t k_tile_bytes = int64_t(bs) * dk * esz, v_tile_bytes = int64_t(bs) * dv * esz;
  for (int32_t t = 0; t < kPrefetchTiles; ++t) prefetch_tile(a, t, n_tiles, k_tile_bytes, v_tile_bytes);
  for (int32_t t = 0; t < n_tiles; ++t) {
    const int32_t rest = a.n_ctx - t * bs, n = rest < bs ? rest : bs;
    const int32_t ng = (n + 15) / 16;  // groups of 16 keys
    prefetch_tile(a, t + kPrefetchTiles, n_tiles, k_tile_bytes, v_tile_bytes);
    const uint8_t* kb = a.k0 + a.blocks[t] * a.k_block_stride;
    const uint8_t* vb = a.v0 + a.blocks[t] * a.v_block_stride;
    pack_k<T>(kb, n, dk, kf);
    const float* vt = T == DType::F32 ? reinterpret_cast<const float*>(vb) : vf;
    if (T != DType::F32) to_f32_n<T>(vb, vf, int64_t(n) * dv);

    // Each step runs over all rows before the next: a row's steps form one long chain of
    // dependent latencies, independent rows side by side keep the core busy. The order
    // of rows changes no row's arithmetic.
    for (int32_t i = 0; i < n_q; ++i) {
      const float* qi = q + i * ldq;
      float* si = sc + int64_t(i) * bsp;
      for (int32_t g = 0; g < ng; ++g) {
        const __m512 s = _mm512_mul_ps(dot16(qi, kf + int64_t(g) * 16 * dkp, dk), scale);
        _mm512_storeu_ps(si + 16 * g, _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), first_lanes(n - 16 * g), s));
      }
    }
    for (int32_t i = 0; i < n_q; ++i) {
      float* si = sc + int64_t(i) * bsp;
      __m512 vmax = _mm512_loadu_ps(si);
      for (int32_t g = 1; g < ng; ++g) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(si + 16 * g));
      const float tile_max = _mm512_reduce_max_ps(vmax);
      const float m_new = m[i] > tile_max ? m[i] : tile_max;
      const __m512 mv = _mm512_set1_ps(m_new);
      // 0 on the first tile (m = -inf).
      cr[i] = _mm512_cvtss_f32(exp16(_mm512_set1_ps(m[i] - m_new)));
      __m512 psum = _mm512_setzero_ps();
      for (int32_t g = 0; g < ng; ++g) {
        const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(si + 16 * g), mv));
        _mm512_storeu_ps(si + 16 * g, p);
        psum = _mm512_add_ps(psum, p);
      }
      l[i] = l[i] * cr[i] + _mm512_reduce_add_ps(psum);
      m[i] = m_new;
    }
    for (int32_t i = 0; i < n_q; ++i) pv_row(vt, dv, sc + int64_t(i) * bsp, n, _mm512_set1_ps(cr[i]), out + i * ldo, dv);
  }
  for (int32_t i = 0; i < n_q; ++i) {
    const __m512 inv = _mm512_set1_ps(l[i] > 0.f ? 1.f / l[i] : 0.f);
    float* o = out + i * ldo;
    for (int32_t d = 0; d < dv; d += 16) {
      const __mmask16 mk = first_lanes(dv - d);
      _mm512_mask_storeu_ps(o + d, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o + d), inv));
    }
  }
}

}  // namespace

void attention_group_avx512(const AttnView& v, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo,
                            float* scratch) {
  switch (v.dtype) {
    case DType::F16: return group<DType::F16>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::BF16: return group<DType::BF16>(v, n_q, q, ldq, out, ldo, scratch);
    default: return group<DType::F32>(v, n_q, q, ldq, out, ldo, scratch);
  }
}

void exp_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(int32_t(n - i < 16 ? n - i : 16));
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace ridge::kernels::detail
