// AVX-512 attention (compiled with the AVX-512 flags; reached only through
// attention_group after a CPU check). Everything is in an anonymous namespace and uses no
// inline function of a shared header: the linker must never keep an AVX-512 copy of one.
//
// Per tile (one cache block) the rows of the call run as small register-tiled matrix
// products, each K/V vector loaded and converted once for several rows (the earlier
// per-row dot with a 16-way reduction per key, then p.V one row at a time, kept the FMA
// units waiting on shuffles, reductions and latencies; 2x slower on bench_attention):
//  - K into "quads" (k_quads): dimensions [4dq, 4dq + 4) of 4 keys per vector, which
//    takes one qword permute per 4 keys (a full transpose to one vector per dimension
//    cost more shuffle-port time than all the score FMAs); scores S[4 rows][16 keys] from
//    16 accumulators, a 128-bit broadcast of q feeding 4 keys, and two levels of pair
//    sums at the end, so key j lands in lane key_lane(j);
//  - the online-softmax bookkeeping of up to 16 rows at once, row i in lane i: tile max
//    and sum of exp by one fixed shuffle tree, one exp for every row's rescale;
//  - out[8 rows][32 columns] = out * rescale + P V in 16 accumulators over the tile's
//    keys, V converted from the cache as it is loaded, once for the 8 rows.
// Batch invariance: a row's score for a key is 4 fma chains over the dimension quads
// (one per dimension mod 4) combined as (c0 + c1) + (c2 + c3); every other step is
// lane-wise or in a fixed per-row order. No row's bits depend on how many rows share the
// call, or which (the tests compare bits).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vexp_avx512.h"

namespace ridge::kernels::detail {
namespace {

// Helpers must inline: an out-of-line one would take its vector arrays' address and
// spill them to the stack.
#define ATTN_INLINE inline __attribute__((always_inline))
// On loops over register arrays: unrolled before GCC would turn them into memsets or
// keep the arrays on the stack.
#define ATTN_UNROLL _Pragma("GCC unroll 16")

constexpr float kNegInf = -__builtin_inff();
constexpr int32_t kPrefetchTiles = 2;  // how far ahead Prefetcher runs
constexpr int32_t kPrefetchParts = 6;  // a tile's prefetches go out in this many bursts
constexpr int32_t kStatRows = 16;      // rows whose softmax state shares one vector
constexpr int32_t kQkRows = 4;         // score kernel: 4 rows x 4 key quads of accumulators
constexpr int32_t kPvRows = 8;         // P.V kernel: 8 rows x 32 columns of accumulators

ATTN_INLINE __mmask16 first_lanes(int32_t k) {
  return k >= 16 ? __mmask16(0xFFFF) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1);
}

// Elements [i, i + 16) of a cache row in f32, lanes outside m zero (and not read).
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

// Scores use K in "quads": one vector holds 4 dimensions [4dq, 4dq + 4) of 4 keys, one
// key per 128-bit block, so that K needs only a qword permute per 4 keys (a full 16x16
// transpose kept the shuffle port busier than the FMAs), and a 128-bit broadcast of q
// serves 4 keys at once. kt[group][dq][kq][16]: vector kq of dimension quad dq holds keys
// 4kq..4kq+3 of the group of 16. Zero past dk and past key n; slots past n are not read.
template <DType T>
void k_quads(const uint8_t* src, int32_t n, int32_t dk, float* kt) {
  constexpr int64_t esz = T == DType::F32 ? 4 : 2;
  const int32_t ndq = (dk + 3) / 4, ng = (n + 15) / 16;
  const __m512i lo = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13), hi = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
  for (int32_t g = 0; g < ng; ++g)
    for (int32_t kq = 0; kq < 4; ++kq) {
      const int32_t key0 = 16 * g + 4 * kq;
      const uint8_t* row = src + int64_t(key0) * dk * esz;
      for (int32_t c = 0; c < ndq; c += 4) {  // quads c..c+3: dimensions [4c, 4c + 16)
        const __mmask16 m = first_lanes(dk - 4 * c);
        auto mask = [&](int i) { return key0 + i < n ? m : __mmask16(0); };
        __m512 v[4];
        if constexpr (T == DType::F32) {
          __m512 z[4];
          ATTN_UNROLL for (int i = 0; i < 4; ++i)
            z[i] = _mm512_maskz_loadu_ps(mask(i), reinterpret_cast<const float*>(row + i * dk * esz) + 4 * c);
          const __m512 ab0 = _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(1, 0, 1, 0));
          const __m512 cd0 = _mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(1, 0, 1, 0));
          const __m512 ab1 = _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 2, 3, 2));
          const __m512 cd1 = _mm512_shuffle_f32x4(z[2], z[3], _MM_SHUFFLE(3, 2, 3, 2));
          v[0] = _mm512_shuffle_f32x4(ab0, cd0, _MM_SHUFFLE(2, 0, 2, 0));
          v[1] = _mm512_shuffle_f32x4(ab0, cd0, _MM_SHUFFLE(3, 1, 3, 1));
          v[2] = _mm512_shuffle_f32x4(ab1, cd1, _MM_SHUFFLE(2, 0, 2, 0));
          v[3] = _mm512_shuffle_f32x4(ab1, cd1, _MM_SHUFFLE(3, 1, 3, 1));
        } else {
          // Two keys' 16 halves per register; one qword permute gathers quad dq of the 4
          // keys into a 256-bit half, converted to f32 as one vector.
          auto ld = [&](int i) {
            const uint8_t* p = row + i * dk * esz + 8 * c;
            return mask(i) == 0xFFFF ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                     : _mm256_maskz_loadu_epi16(mask(i), p);
          };
          const __m512i ab = _mm512_inserti64x4(_mm512_castsi256_si512(ld(0)), ld(1), 1);
          const __m512i cd = _mm512_inserti64x4(_mm512_castsi256_si512(ld(2)), ld(3), 1);
          const __m512i p0 = _mm512_permutex2var_epi64(ab, lo, cd), p1 = _mm512_permutex2var_epi64(ab, hi, cd);
          auto cvt = [](__m256i h) {
            if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
            else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          };
          v[0] = cvt(_mm512_castsi512_si256(p0));
          v[1] = cvt(_mm512_extracti64x4_epi64(p0, 1));
          v[2] = cvt(_mm512_castsi512_si256(p1));
          v[3] = cvt(_mm512_extracti64x4_epi64(p1, 1));
        }
        float* d = kt + (int64_t(g) * ndq + c) * 64 + 16 * kq;
        ATTN_UNROLL for (int i = 0; i < 4; ++i)
          if (c + i < ndq) _mm512_store_ps(d + 64 * i, v[i]);
      }
    }
}

// Per 128-bit block: [x0 + x1, x2 + x3, y0 + y1, y2 + y3].
ATTN_INLINE __m512 pair_sums(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Score lanes hold the group's keys transposed 4x4: key j in lane key_lane(j) (its own
// inverse), as the 4x4 sums below leave them.
ATTN_INLINE int32_t key_lane(int32_t j) { return 4 * (j & 3) + ((j >> 2) & 3); }

// s[r][0, 16) = (q_r . k_j) * scale for the 16 keys of one kt group (key j in lane
// key_lane(j)), -inf for keys past `keys`. Per (row, key): 4 fma chains over the
// dimension quads, one per dimension mod 4, then (c0 + c1) + (c2 + c3): the same sequence
// for every row and key whatever R is. R rows x 4 key quads of accumulators.
template <int R>
void scores(const float* q, int64_t ldq, const float* kt, int32_t dk, float scale, int32_t keys, float* s,
            int64_t lds) {
  __m512 acc[R][4];
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int k = 0; k < 4; ++k) acc[r][k] = _mm512_setzero_ps();
  auto step = [&](int32_t dq, auto load_q) {
    __m512 kv[4];
    ATTN_UNROLL for (int k = 0; k < 4; ++k) kv[k] = _mm512_load_ps(kt + 64 * dq + 16 * k);
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 qb = load_q(q + r * ldq + 4 * dq);
      ATTN_UNROLL for (int k = 0; k < 4; ++k) acc[r][k] = _mm512_fmadd_ps(qb, kv[k], acc[r][k]);
    }
  };
  const int32_t full = dk / 4;
#pragma GCC unroll 2
  for (int32_t dq = 0; dq < full; ++dq) step(dq, [](const float* x) { return _mm512_broadcast_f32x4(_mm_loadu_ps(x)); });
  if (full * 4 < dk) {  // q is not read past dk
    const __mmask8 m = __mmask8((1u << (dk - 4 * full)) - 1);
    step(full, [m](const float* x) { return _mm512_broadcast_f32x4(_mm_maskz_loadu_ps(m, x)); });
  }
  const __m512i lane_key = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __mmask16 valid = _mm512_cmplt_epi32_mask(lane_key, _mm512_set1_epi32(keys));
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 dot = pair_sums(pair_sums(acc[r][0], acc[r][1]), pair_sums(acc[r][2], acc[r][3]));
    _mm512_storeu_ps(s + r * lds, _mm512_mask_mov_ps(ninf, valid, _mm512_mul_ps(dot, vs)));
  }
}

void scores_rows(int32_t rows, const float* q, int64_t ldq, const float* kt, int32_t dk, float scale, int32_t keys,
                 float* s, int64_t lds) {
  switch (rows) {
    case 1: return scores<1>(q, ldq, kt, dk, scale, keys, s, lds);
    case 2: return scores<2>(q, ldq, kt, dk, scale, keys, s, lds);
    case 3: return scores<3>(q, ldq, kt, dk, scale, keys, s, lds);
    default: return scores<4>(q, ldq, kt, dk, scale, keys, s, lds);
  }
}

// Lane j of the result = a[j]'s 16 lanes combined (sum, or max with Max) by one fixed
// tree, the same for every j: row j's result does not depend on the other inputs.
template <bool Max>
ATTN_INLINE __m512 reduce16(const __m512* a) {
  auto op = [](__m512 x, __m512 y) { return Max ? _mm512_max_ps(x, y) : _mm512_add_ps(x, y); };
  // Each level folds every input in half: lanes i and i + 8, then i and i + 4, ... The
  // tree leaves input 4r+q in lane 4q+r; feeding the inputs in that order puts j in lane j.
  __m512 b[8];
  ATTN_UNROLL for (int k = 0; k < 8; ++k) {
    const __m512 x = a[((2 * k) % 4) * 4 + (2 * k) / 4], y = a[((2 * k + 1) % 4) * 4 + (2 * k + 1) / 4];
    b[k] = op(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 c[4];
  ATTN_UNROLL for (int k = 0; k < 4; ++k)
    c[k] = op(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  __m512 d[2];
  ATTN_UNROLL for (int k = 0; k < 2; ++k)
    d[k] = op(_mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return op(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// One online-softmax step for R <= 16 rows, row i in lane i of the state vectors: scores
// s[R][lds] (ng groups of 16) become probabilities; m (max), l (sum of exp) and cr (the
// factor this tile rescales the row's output by) are updated. Lanes past R are padding
// whose results are never stored.
void softmax_rows(float* s, int64_t lds, int32_t ng, int32_t R, float* m, float* l, float* cr) {
  __m512 x[16];
  for (int32_t i = 0; i < 16; ++i) {
    x[i] = _mm512_setzero_ps();
    if (i >= R) continue;
    x[i] = _mm512_loadu_ps(s + i * lds);
    for (int32_t g = 1; g < ng; ++g) x[i] = _mm512_max_ps(x[i], _mm512_loadu_ps(s + i * lds + 16 * g));
  }
  const __mmask16 rm = first_lanes(R);
  const __m512 m_old = _mm512_maskz_loadu_ps(rm, m);
  const __m512 m_new = _mm512_max_ps(m_old, reduce16<true>(x));
  const __m512 c = exp16(_mm512_sub_ps(m_old, m_new));  // 0 on the first tile (m = -inf)
  _mm512_mask_storeu_ps(m, rm, m_new);
  _mm512_mask_storeu_ps(cr, rm, c);
  for (int32_t i = 0; i < R; ++i) {
    const __m512 mv = _mm512_permutexvar_ps(_mm512_set1_epi32(i), m_new);
    float* si = s + i * lds;
    __m512 sum = _mm512_setzero_ps();
    for (int32_t g = 0; g < ng; ++g) {
      const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(si + 16 * g), mv));
      _mm512_storeu_ps(si + 16 * g, p);
      sum = _mm512_add_ps(sum, p);
    }
    x[i] = sum;
  }
  for (int32_t i = R; i < 16; ++i) x[i] = _mm512_setzero_ps();
  _mm512_mask_storeu_ps(l, rm, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(rm, l), c, reduce16<false>(x)));
}

// o_r[d0, d0 + 32) = o_r * cr[r] + sum_j p_r[j] v_j for R rows (lanes past dv masked
// off), in the order j = 0..n-1 per element; p_r[j] sits in lane key_lane(j) of its
// group. V comes straight from the cache, each converted vector serving all R rows (so a
// call with more rows than one unit converts it again), 2R accumulators in registers.
template <int R, DType T>
void pv(const uint8_t* v, int32_t n, const float* p, int64_t ldp, const float* cr, float* o, int64_t ldo, int32_t d0,
        int32_t dv) {
  constexpr int64_t esz = T == DType::F32 ? 4 : 2;
  const __mmask16 m0 = first_lanes(dv - d0), m1 = first_lanes(dv - d0 - 16);
  __m512 acc[R][2];
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(cr[r]);
    acc[r][0] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, o + r * ldo + d0), c);
    acc[r][1] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, o + r * ldo + d0 + 16), c);
  }
  for (int32_t j = 0; j < n; ++j) {
    const uint8_t* vj = v + (int64_t(j) * dv + d0) * esz;
    const __m512 v0 = load16<T>(vj, 0, m0), v1 = load16<T>(vj, 16, m1);
    const float* pj = p + (j & ~15) + key_lane(j);
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(pj[r * ldp]);
      acc[r][0] = _mm512_fmadd_ps(b, v0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(b, v1, acc[r][1]);
    }
  }
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(o + r * ldo + d0, m0, acc[r][0]);
    _mm512_mask_storeu_ps(o + r * ldo + d0 + 16, m1, acc[r][1]);
  }
}

template <DType T>
void pv_unit(int32_t rows, const uint8_t* v, int32_t n, const float* p, int64_t ldp, const float* cr, float* o,
             int64_t ldo, int32_t d0, int32_t dv) {
  switch (rows) {
    case 1: return pv<1, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    case 2: return pv<2, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    case 3: return pv<3, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    case 4: return pv<4, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    case 5: return pv<5, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    case 6: return pv<6, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    case 7: return pv<7, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
    default: return pv<8, T>(v, n, p, ldp, cr, o, ldo, d0, dv);
  }
}

// Asks for the K/V of a tile ahead of its use: blocks lie scattered in the pool, so the
// hardware prefetchers, which follow one stream within a page, cannot guess them (two
// tiles ahead: +12 to 18% on bench_attention's decode). A few lines at a time through the
// tile's work: one burst of a whole tile's prefetches waits on the core's few fill
// buffers and holds up everything behind it (spread: +20% on 1 thread, +10% on 2).
struct Prefetcher {
  const char* k = nullptr;
  const char* v = nullptr;
  int64_t k_bytes = 0, v_bytes = 0, pos = 0;

  void start(const AttnView& a, int32_t t, int32_t n_tiles) {
    pos = 0;
    if (t >= n_tiles) return (void)(k = v = nullptr);
    k = reinterpret_cast<const char*>(a.k0 + a.blocks[t] * a.k_block_stride);
    v = reinterpret_cast<const char*>(a.v0 + a.blocks[t] * a.v_block_stride);
  }
  void run(int64_t lines) {
    if (k == nullptr) return;
    for (; lines > 0 && pos < k_bytes + v_bytes; --lines, pos += 64)
      _mm_prefetch(pos < k_bytes ? k + pos : v + (pos - k_bytes), _MM_HINT_T0);
  }
};

template <DType T>
void group(const AttnView& a, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo, float* scratch) {
  const int32_t dk = a.dk, dv = a.dv, bs = a.block_size;
  const int32_t bsp = (bs + 15) / 16 * 16;
  const int32_t dkp = (dk + 15) / 16 * 16;
  const int32_t ndq4 = (dk + 3) / 4 * 4;  // kt floats per key (k_quads layout)
  // 64-byte aligned (attention_scratch_floats leaves room): whole-line loads.
  float* kf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  //                                         [bsp * dkp] K tile, k_quads layout
  // (then room for a V tile in f32, which this path does not use)
  float* sc = kf + int64_t(bsp) * dkp + (int64_t(bs) * dv + 15) / 16 * 16;  // [n_q][bsp] scores, then probabilities
  float* m = sc + int64_t(n_q) * bsp;     // [n_q] running max
  float* l = m + n_q;                     // [n_q] running sum of exp
  float* cr = l + n_q;                    // [n_q] this tile's rescale of the running state

  for (int32_t i = 0; i < n_q; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
    for (int32_t d = 0; d < dv; d += 16) _mm512_mask_storeu_ps(out + i * ldo + d, first_lanes(dv - d), _mm512_setzero_ps());
  }

  const int32_t n_tiles = (a.n_ctx + bs - 1) / bs;
  constexpr int64_t esz = T == DType::F32 ? 4 : 2;
  const int64_t k_tile_bytes = int64_t(bs) * dk * esz, v_tile_bytes = int64_t(bs) * dv * esz;
  auto tile_keys = [&](int32_t t) { return a.n_ctx - t * bs < bs ? a.n_ctx - t * bs : bs; };
  Prefetcher pf;
  pf.k_bytes = k_tile_bytes, pf.v_bytes = v_tile_bytes;
  for (int32_t t = 0; t < kPrefetchTiles; ++t) pf.start(a, t, n_tiles), pf.run(1 << 30);
  if (n_tiles > 0) k_quads<T>(a.k0 + a.blocks[0] * a.k_block_stride, tile_keys(0), dk, kf);
  for (int32_t t = 0; t < n_tiles; ++t) {
    const int32_t n = tile_keys(t), ng = (n + 15) / 16;  // groups of 16 keys
    pf.start(a, t + kPrefetchTiles, n_tiles);
    const int64_t pf_step = (k_tile_bytes + v_tile_bytes) / 64 / kPrefetchParts + 1;

    // Scores of every row (in blocks of kStatRows, the softmax state vectors), softmax,
    // then P.V; the next tile's K goes into kf between the two, where it fills the
    // softmax's latencies. How the rows are blocked changes no row's arithmetic.
    for (int32_t r0 = 0; r0 < n_q; r0 += kStatRows) {
      const int32_t rows = n_q - r0 < kStatRows ? n_q - r0 : kStatRows;
      for (int32_t g = 0; g < ng; ++g)
        for (int32_t i = 0; i < rows; i += kQkRows)
          scores_rows(rows - i < kQkRows ? rows - i : kQkRows, q + (r0 + i) * ldq, ldq, kf + int64_t(g) * 16 * ndq4,
                      dk, a.scale, n - 16 * g, sc + int64_t(r0 + i) * bsp + 16 * g, bsp);
    }
    pf.run(pf_step);
    for (int32_t r0 = 0; r0 < n_q; r0 += kStatRows)
      softmax_rows(sc + int64_t(r0) * bsp, bsp, ng, n_q - r0 < kStatRows ? n_q - r0 : kStatRows, m + r0, l + r0, cr + r0);
    pf.run(pf_step);
    if (t + 1 < n_tiles) k_quads<T>(a.k0 + a.blocks[t + 1] * a.k_block_stride, tile_keys(t + 1), dk, kf);
    pf.run(pf_step);
    const uint8_t* vb = a.v0 + a.blocks[t] * a.v_block_stride;
    for (int32_t r = 0; r < n_q; r += kPvRows)
      for (int32_t d0 = 0; d0 < dv; d0 += 32) {
        pv_unit<T>(n_q - r < kPvRows ? n_q - r : kPvRows, vb, n, sc + int64_t(r) * bsp, bsp, cr + r, out + r * ldo, ldo,
                   d0, dv);
        pf.run(pf_step);
      }
    pf.run(1 << 30);
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
