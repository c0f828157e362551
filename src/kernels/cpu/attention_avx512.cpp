// AVX-512 attention (compiled with the AVX-512 flags; reached only through
// attention_group after a CPU check). Everything is in an anonymous namespace, its shared
// pieces included (attention_avx512_common.h), and uses no inline function of a baseline
// header: the linker must never keep an AVX-512 copy of one. FP8 caches run their dots on
// bf16 pairs, AMX-BF16 tiles or AVX512-BF16 vectors, where the CPU has them
// (attention_fp8_tiles_avx512.h); BF16 caches on AVX512-BF16 vectors straight from the
// cache (attention_bf16_avx512.h).
//
// One online-softmax step covers a tile of whole blocks, about attention_tile_keys() keys,
// aligned to absolute positions, for every KV head of the call (a run of heads reads each block's
// tiles as one piece). Per tile the rows of each head (up to 8 at a time) run as small
// register-tiled matrix products, each K/V vector loaded and converted once for them all:
//  - scores S[8 rows][2 x 16 keys] in 16 accumulators: the cache keeps K dimension-major
//    per block ([dk][block_size]), so one load is dimension d of 16 keys and a broadcast
//    q[r][d] feeds them (no transpose, no horizontal sums; key j of a block in lane j);
//    int8 keys in integer arithmetic, four dimensions per load and vpdpbusd (scores_i8);
//  - the online-softmax bookkeeping of up to 16 rows at once, row i in lane i: tile max
//    and sum of exp by one fixed shuffle tree, one exp for every row's rescale;
//  - out[8 rows][32 columns] = out * rescale + P V in 16 accumulators over the tile's
//    keys, V converted from the cache as it is loaded, once for the 8 rows; int8 values
//    in integer arithmetic, four positions per load and vpdpbusd (pv_i8).
// Sliding windows keep the tiles where they are (aligned to absolute positions): a tile
// before every row's window is skipped, a row joins at the tile holding its window's
// start, the blocks of a tile before its rows' earliest window are not read and their
// lanes score -inf. Sinks enter the final normalization only.
// Batch invariance: a row's score for a key is one fma chain over d = 0..dk-1 (int8: one
// exact integer sum), then one multiply by the scale; every other step (int8's weights
// and their integer sums included) is lane-wise or in a fixed per-row order. No
// row's bits depend on how many rows share the call, or which (the tests compare bits).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_avx512_common.h"
#include "kernels/cpu/attention_bf16_avx512.h"
#include "kernels/cpu/attention_f16_avx512.h"
#include "kernels/cpu/attention_fp8_f32_avx512.h"
#include "kernels/cpu/attention_fp8_tiles_avx512.h"
#include "kernels/cpu/attention_fp8_vec_avx512.h"
#include "kernels/cpu/vexp_avx512.h"

namespace ridge::kernels::detail {
namespace {

// s[r][g.lane, g.lane + 16) = (q_r . k_j) * scale for R rows and G groups, -inf past the
// group's keys. Per (row, key) one fma chain over d = 0..dk-1, whatever R and G are.
template <int R, int G, DType T>
ATTN_INLINE void scores(const float* q, int64_t ldq, const Group* gr, int64_t kstride, int32_t dk, float scale,
                        float* s, int64_t lds, int64_t koff, Prefetcher& pf) {
  __m512 acc[R][G];
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const uint8_t* kp[G];
  __mmask16 km[G];
  ATTN_UNROLL for (int g = 0; g < G; ++g) kp[g] = gr[g].k + koff, km[g] = gr[g].slots;
  Prefetcher::Cursor c = pf.cur;
  for (int32_t d = 0; d < dk; ++d) {
    pf.step(c);
    __m512 kv[G];
    ATTN_UNROLL for (int g = 0; g < G; ++g) kv[g] = load16<T>(kp[g] + d * kstride, 0, km[g]);
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 qb = _mm512_set1_ps(q[r * ldq + d]);
      ATTN_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = _mm512_fmadd_ps(qb, kv[g], acc[r][g]);
    }
  }
  pf.cur = c;
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  if constexpr (kScaled<T>) {  // each key's dot product times its scale
    __m512 ks[G];
    ATTN_UNROLL for (int g = 0; g < G; ++g) {
      ks[g] = _mm512_maskz_loadu_ps(gr[g].slots, reinterpret_cast<const float*>(gr[g].ks + koff));
      if constexpr (kCodeUnit<T> != 1.f) ks[g] = _mm512_mul_ps(ks[g], _mm512_set1_ps(kCodeUnit<T>));
    }
    ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = _mm512_mul_ps(acc[r][g], ks[g]);
  }
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g)
    _mm512_storeu_ps(s + r * lds + gr[g].lane, _mm512_mask_mov_ps(ninf, gr[g].keys, _mm512_mul_ps(acc[r][g], vs)));
}

template <int R, DType T>
void scores_tile(const float* q, int64_t ldq, const Group* gr, int32_t ng, int64_t kstride, int32_t dk, float scale,
                 float* s, int64_t lds, int64_t koff, Prefetcher& pf, bool lookup) {
  if constexpr (kFp8<T>)
    if (lookup && dk % 4 == 0) {  // attention_fp8_f32_avx512.h
      for (int32_t g = 0; g < ng; ++g)
        if (kstride == 16) scores_fp8_f32<R, T, true>(q, ldq, gr[g], kstride, dk, scale, s, lds, koff, pf);
        else scores_fp8_f32<R, T, false>(q, ldq, gr[g], kstride, dk, scale, s, lds, koff, pf);
      return;
    }
  int32_t g = 0;
  for (; g + 2 <= ng; g += 2) scores<R, 2, T>(q, ldq, gr + g, kstride, dk, scale, s, lds, koff, pf);
  if (g < ng) scores<R, 1, T>(q, ldq, gr + g, kstride, dk, scale, s, lds, koff, pf);
}

// Int8 keys: the scores in integer arithmetic. Each query row is quantized once per call
// (QRows: an int8 code per dimension, four to an int32, and a scale: amax / 127, nearest
// even), and one vpdpbusd dots four of its dimensions with those of 16 keys, which the
// cache keeps four dimensions to a slot (kv_view.h). vpdpbusd multiplies unsigned by
// signed bytes: the keys' codes go in as k + 128 (their top bit flipped), and the row's
// 128 x sum of its codes comes off the exact int32 sum. A score is then that sum in f32
// times the key's scale times (the row's scale x the softmax scale): the same operations
// in the same order for a row whatever shares the call.
struct QRows {
  int32_t* codes;  // [n_q][dk4]: four int8 codes per int32
  int32_t* corr;   // [n_q]: 128 x the sum of the row's codes
  float* scale;    // [n_q]: the row's scale x the softmax scale
  int32_t dk4;
};

ATTN_INLINE void quantize_q_rows(const float* q, int64_t ldq, int32_t n_q, int32_t dk, float scale, const QRows& qr) {
  for (int32_t r = 0; r < n_q; ++r) {
    const float* x = q + r * ldq;
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;  // NaN or infinite: the row's scores are NaN, as the f32 paths' would be
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    for (int32_t d = 0; d < dk; d += 16) {
      const __mmask16 m = first_lanes(dk - d);
      const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + d));
      bad |= _mm512_mask_cmp_ps_mask(m, a, inf, _CMP_NLT_UQ);
      amax = _mm512_max_ps(amax, a);
    }
    const float a = bad ? 0.f : _mm512_reduce_max_ps(amax);  // codes 0: no overflow below
    float inv = a > 0.f ? 127.f / a : 0.f;
    if (!(inv < __builtin_inff())) inv = 0.f;  // a subnormal amax: the row counts as zeros
    const float sq = inv > 0.f ? a / 127.f : 0.f;
    __m512i sum = _mm512_setzero_si512();
    int8_t* c = reinterpret_cast<int8_t*>(qr.codes + int64_t(r) * qr.dk4);
    for (int32_t d = 0; d < 4 * qr.dk4; d += 16) {
      const __mmask16 m = bad ? __mmask16(0) : first_lanes(dk - d);  // a bad row: all codes 0
      const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + d), _mm512_set1_ps(inv)));
      const __m512i k = _mm512_maskz_mov_epi32(m, i);  // padding dimensions: code 0
      sum = _mm512_add_epi32(sum, k);
      _mm_mask_storeu_epi8(c + d, first_lanes(4 * qr.dk4 - d), _mm512_cvtsepi32_epi8(k));
    }
    qr.corr[r] = 128 * _mm512_reduce_add_epi32(sum);
    qr.scale[r] = bad ? __builtin_nanf("") : sq * scale;
  }
}

// The int32 dot products of R query rows with the keys of G groups: out[r * G + g], lane j
// for the group's key j. Out of line: inlined, GCC 12 shuffles every accumulator through
// a second register around each vpdpbusd when the caller converts the sums to f32.
template <int R, int G>
ATTN_NOINLINE void dots_i8(const QRows& qr, int32_t r0, const Group* gr, int64_t kquad, int64_t koff, Prefetcher& pf,
                           __m512i* out) {
  __m512i acc[R][G];
  static_for<R>([&](auto r) { static_for<G>([&](auto g) { acc[r][g] = _mm512_setzero_si512(); }); });
  const uint8_t* kp[G];
  __mmask16 km[G];
  static_for<G>([&](auto g) { kp[g] = gr[g].k + koff, km[g] = gr[g].slots; });
  const int32_t* qc = qr.codes + int64_t(r0) * qr.dk4;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  Prefetcher::Cursor c = pf.cur;
  for (int32_t d4 = 0; d4 < qr.dk4; ++d4) {
    if constexpr (G == 2) pf.step2(c);  // a line asked for per line read
    else pf.step(c);
    __m512i kv[G];
    static_for<G>([&](auto g) { kv[g] = _mm512_xor_si512(_mm512_maskz_loadu_epi32(km[g], kp[g] + d4 * kquad), flip); });
    static_for<R>([&](auto r) {
      const __m512i qb = _mm512_set1_epi32(qc[r * qr.dk4 + d4]);
      static_for<G>([&](auto g) { acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], kv[g], qb); });
    });
  }
  pf.cur = c;
  static_for<R>([&](auto r) { static_for<G>([&](auto g) { out[r * G + g] = acc[r][g]; }); });
}

// s[r][g.lane, g.lane + 16) for R rows and G groups, as scores<> but in integer arithmetic
// (QRows); kquad: bytes between a K tile's four-dimension rows (block_size x 4).
template <int R, int G>
ATTN_INLINE void scores_i8(const QRows& qr, int32_t r0, const Group* gr, int64_t kquad, float* s, int64_t lds,
                           int64_t koff, Prefetcher& pf) {
  __m512i acc[R * G];
  dots_i8<R, G>(qr, r0, gr, kquad, koff, pf, acc);
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  __m512 ks[G];
  static_for<G>([&](auto g) { ks[g] = _mm512_maskz_loadu_ps(gr[g].slots, reinterpret_cast<const float*>(gr[g].ks + koff)); });
  static_for<R>([&](auto r) {
    const __m512i corr = _mm512_set1_epi32(qr.corr[r0 + r]);
    const __m512 rs = _mm512_set1_ps(qr.scale[r0 + r]);
    static_for<G>([&](auto g) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r * G + g], corr));
      _mm512_storeu_ps(s + r * lds + gr[g].lane, _mm512_mask_mov_ps(ninf, gr[g].keys, _mm512_mul_ps(_mm512_mul_ps(dot, ks[g]), rs)));
    });
  });
}

template <int R>
void scores_i8_tile(const QRows& qr, int32_t r0, const Group* gr, int32_t ng, int64_t kquad, float* s, int64_t lds,
                    int64_t koff, Prefetcher& pf) {
  int32_t g = 0;
  for (; g + 2 <= ng; g += 2) scores_i8<R, 2>(qr, r0, gr + g, kquad, s, lds, koff, pf);
  if (g < ng) scores_i8<R, 1>(qr, r0, gr + g, kquad, s, lds, koff, pf);
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

// The scores (and below, P.V) of `rows` rows: a run-time count to the kernels' template.
template <DType T>
void scores_rows(int32_t rows, const float* q, int64_t ldq, const Group* gr, int32_t ng, int64_t kstride, int32_t dk,
                 float scale, float* s, int64_t lds, int64_t koff, Prefetcher& pf, bool lookup) {
  with_rows(rows, [&](auto R) {
    scores_tile<decltype(R)::value, T>(q, ldq, gr, ng, kstride, dk, scale, s, lds, koff, pf, lookup);
  });
}

// o_r[d0, d0 + 32) = o_r * cr[r] + sum_j p_r[j] v_j for R rows (lanes past dv masked
// off), over the tile's keys in position order per element; block b's key j has its
// probability in lane b * lpb + j. V comes straight from the cache, each converted vector
// serving all R rows, 2R accumulators in registers.
template <int R, DType T>
void pv(const Tile& tl, int32_t lpb, int32_t live, const float* p, int64_t ldp, const float* cr, float* o, int64_t ldo,
        int32_t d0, int32_t dv, int64_t voff, Prefetcher& pf) {
  constexpr int64_t esz = kEsz<T>;
  const __mmask16 m0 = first_lanes(dv - d0), m1 = first_lanes(dv - d0 - 16);
  __m512 acc[R][2];
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(cr[r]);
    acc[r][0] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, o + r * ldo + d0), c);
    acc[r][1] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, o + r * ldo + d0 + 16), c);
  }
  Prefetcher::Cursor c = pf.cur;
  for (int32_t b = live / tl.bs; b < tl.n_blocks; ++b) {
    const uint8_t* vb = tl.v[b] + voff + d0 * esz;
    const float* pb = p + b * lpb;
    for (int32_t j = b == live / tl.bs ? live % tl.bs : 0; j < tl.keys[b]; ++j) {
      pf.step(c);
      const uint8_t* vj = vb + int64_t(j) * dv * esz;
      const __m512 v0 = load16<T>(vj, 0, m0), v1 = load16<T>(vj, 16, m1);
      ATTN_UNROLL for (int r = 0; r < R; ++r) {
        const __m512 w = _mm512_set1_ps(pb[r * ldp + j]);  // a scaled value's: times its scale already
        acc[r][0] = _mm512_fmadd_ps(w, v0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(w, v1, acc[r][1]);
      }
    }
  }
  pf.cur = c;
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(o + r * ldo + d0, m0, acc[r][0]);
    _mm512_mask_storeu_ps(o + r * ldo + d0 + 16, m1, acc[r][1]);
  }
}


template <DType T>
void pv_rows(int32_t rows, const Tile& tl, int32_t lpb, int32_t live, const float* p, int64_t ldp, const float* cr,
             float* o, int64_t ldo, int32_t d0, int32_t dv, int64_t voff, Prefetcher& pf, bool lookup) {
  with_rows(rows, [&](auto R) {
    if constexpr (kFp8<T>)
      if (lookup) return pv_fp8_f32<decltype(R)::value, T>(tl, lpb, live, p, ldp, cr, o, ldo, d0, dv, voff, pf);
    pv<decltype(R)::value, T>(tl, lpb, live, p, ldp, cr, o, ldo, d0, dv, voff, pf);
  });
}

// A scaled value's scale goes with its probability (kv_view.h): p[r][lane of key j] x
// sv_j x unit (the codes' kCodeUnit) for rows [r0, r0 + n) of one head, whose V scales
// lie vsoff past its tiles, over the tile's keys. After the softmax's sums, which are of
// the probabilities themselves.
void scale_probabilities(const Tile& tl, int32_t gpb, float* p, int64_t ldp, int32_t n, int64_t vsoff, float unit) {
  for (int32_t b = tl.live / tl.bs; b < tl.n_blocks; ++b) {
    const float* sv = reinterpret_cast<const float*>(tl.v[b] + vsoff);
    for (int32_t g = 0; g < gpb && 16 * g < tl.keys[b]; ++g) {
      const __mmask16 m = first_lanes(tl.keys[b] - 16 * g) & ~tl.dead_lanes(b, g);  // dead lanes stay 0
      const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sv + 16 * g), _mm512_set1_ps(unit));
      for (int32_t r = 0; r < n; ++r) {
        float* pr = p + r * ldp + (b * gpb + g) * 16;
        _mm512_mask_storeu_ps(pr, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, pr), s));
      }
    }
  }
}

// Int8 values: P.V in integer arithmetic. A row's weights for a tile's keys, each
// probability times its value's scale (w = p x sv, kv_view.h), are quantized to 8 bits
// against the row's largest in their chunk of kChunkLanes score lanes (codes
// round(w x 255 / max w), the chunk's step max w / 255), and one vpdpbusd weighs 16
// dimensions of four positions, which the cache keeps four positions to a slot, with four
// of a row's codes. The running sum of the probabilities stays exact (softmax_rows), so a
// weight's rounding moves only its own key's share of the output, by at most half a step
// times its value; a weight under half a step drops out of the output but not out of the
// sum, which a chunk of at most 128 keys bounds (a tile of one block larger than that has
// several chunks). A NaN or infinite weight makes the row's output NaN (its
// steps from that chunk on), as the f32 paths' would be.
constexpr int32_t kChunkLanes = 128;

// Rows [0, R) of one head: their weights over the tile's lanes (0 past each block's keys)
// to codes pc[R][ldc], and each chunk's step, step[r * lds_step + chunk]; vsoff: bytes from
// a block's V tile of the head to its scales. p holds the probabilities on entry and the
// weights after.
template <int R>
ATTN_INLINE void weights_i8(const Tile& tl, int32_t gpb, float* p, int64_t ldp, int64_t vsoff, uint8_t* pc, int64_t ldc,
                            float* step, int64_t lds_step) {
  const int32_t lpb = gpb * 16, lanes = tl.n_blocks * lpb;
  const __m512 zero = _mm512_setzero_ps();
  // Chunk by chunk: its weights and their row maxima while they are in registers, then
  // its step and codes. The blocks before live are not read: their lanes hold
  // probabilities of 0 already.
  for (int32_t c0 = 0; c0 < lanes; c0 += kChunkLanes) {
    const int32_t c1 = lanes - c0 < kChunkLanes ? lanes : c0 + kChunkLanes;
    __m512 wmax[R], bad[R];  // bad: 0, or NaN once a weight of the row is not finite (w x 0)
    static_for<R>([&](auto r) { wmax[r] = bad[r] = zero; });
    const int32_t live = tl.live_block;
    for (int32_t b = c0 / lpb > live ? c0 / lpb : live; b < tl.n_blocks && b * lpb < c1; ++b) {
      const float* sv = reinterpret_cast<const float*>(tl.v[b] + vsoff);
      for (int32_t g = 0; g < gpb; ++g) {
        const int32_t x = b * lpb + 16 * g;
        if (x < c0) continue;
        if (x >= c1) break;
        const __mmask16 m = first_lanes(tl.keys[b] - 16 * g) & ~tl.dead_lanes(b, g);  // 0 past the keys and before live
        const __m512 s = _mm512_maskz_loadu_ps(m, sv + 16 * g);
        static_for<R>([&](auto r) {
          float* pr = p + r * ldp + x;
          const __m512 w = _mm512_maskz_mul_ps(m, _mm512_loadu_ps(pr), s);
          _mm512_storeu_ps(pr, w);
          bad[r] = _mm512_fmadd_ps(w, zero, bad[r]);
          wmax[r] = _mm512_max_ps(wmax[r], w);
        });
      }
    }
    // Every row's step at once: the rows' maxima in lanes (one fixed tree, exact for a
    // max), one division for all of them. A row with a weight that is not finite: step
    // NaN and codes 0, in this chunk and those after (its output is NaN either way).
    __m512 any = bad[0];
    static_for<R>([&](auto r) {
      if constexpr (r > 0) any = _mm512_add_ps(any, bad[r]);
    });
    __mmask16 badm = 0;
    if (__builtin_expect(_mm512_cmp_ps_mask(any, any, _CMP_UNORD_Q) != 0, 0))
      static_for<R>([&](auto r) { badm |= _mm512_cmp_ps_mask(bad[r], bad[r], _CMP_UNORD_Q) ? __mmask16(1u << r) : __mmask16(0); });
    __m512 cm[16];
    static_for<16>([&](auto r) {
      if constexpr (r < R) cm[r] = wmax[r];
      else cm[r] = zero;
    });
    const __m512 mx = reduce16<true>(cm);
    const __mmask16 pos = _mm512_cmp_ps_mask(mx, zero, _CMP_GT_OQ);
    __m512 inv = _mm512_maskz_div_ps(pos, _mm512_set1_ps(255.f), mx);
    const __mmask16 fin = _mm512_cmp_ps_mask(inv, _mm512_set1_ps(__builtin_inff()), _CMP_LT_OQ);  // a subnormal max: zeros
    inv = _mm512_maskz_mov_ps(fin, inv);
    const __mmask16 live_rows = _mm512_cmp_ps_mask(inv, zero, _CMP_GT_OQ);
    const __m512 st = _mm512_mask_mov_ps(_mm512_maskz_div_ps(live_rows, mx, _mm512_set1_ps(255.f)), badm,
                                         _mm512_set1_ps(__builtin_nanf("")));
    inv = _mm512_mask_mov_ps(inv, badm, zero);
    alignas(64) float stv[16];
    _mm512_store_ps(stv, st);
    static_for<R>([&](auto r) {
      step[r * lds_step + c0 / kChunkLanes] = stv[r];
      const __m512 vi = _mm512_permutexvar_ps(_mm512_set1_epi32(r), inv);
      for (int32_t x = c0; x < c1; x += 16)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(pc + r * ldc + x),
                         _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p + r * ldp + x), vi))));
    });
  }
}

// The int32 sums sum_j code_r[j] v_j[d0, d0 + 32) of R rows over the tile's score lanes
// [c0, c0 + kChunkLanes), out[2r], out[2r + 1]: each quad of a block's positions is one
// 64-byte load per 16 dimensions, its four codes of a row one broadcast 32-bit word. Out
// of line for the reason dots_i8 is.
template <int R>
ATTN_NOINLINE void pv_dots_i8(const Tile& tl, int32_t lpb, const uint8_t* pc, int64_t ldc, int32_t c0, int32_t d0,
                              int32_t dv, int64_t voff, Prefetcher& pf, __m512i* out) {
  const __mmask16 m0 = first_lanes(dv - d0), m1 = first_lanes(dv - d0 - 16);
  const int64_t quad = 4 * int64_t(dv);  // bytes between a V tile's four-position rows
  __m512i acc[R][2];
  static_for<R>([&](auto r) { acc[r][0] = acc[r][1] = _mm512_setzero_si512(); });
  Prefetcher::Cursor c = pf.cur;
  // The blocks with lanes in the chunk, from the first read (blocks before live: codes 0).
  const int32_t c1 = c0 + kChunkLanes;
  for (int32_t b = tl.live_block; b < tl.n_blocks && b * lpb < c1; ++b) {
    // The block's keys whose lanes lie in the chunk (a chunk starts on a multiple of
    // kChunkLanes, and a block's lanes on a multiple of 16: a whole quad either way).
    const int32_t j0 = c0 - b * lpb > 0 ? c0 - b * lpb : 0;
    const int32_t j1 = c1 - b * lpb < tl.keys[b] ? c1 - b * lpb : tl.keys[b];
    const uint8_t* vj = tl.v[b] + voff + 4 * int64_t(d0) + (j0 >> 2) * quad;
    const uint8_t* pb = pc + b * lpb;
    for (int32_t j = j0; j < j1; j += 4, vj += quad) {
      pf.step2(c);  // a line asked for per line read
      const __m512i v0 = _mm512_maskz_loadu_epi32(m0, vj), v1 = _mm512_maskz_loadu_epi32(m1, vj + 64);
      static_for<R>([&](auto r) {
        int32_t w4;
        __builtin_memcpy(&w4, pb + r * ldc + j, 4);
        const __m512i w = _mm512_set1_epi32(w4);
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], w, v0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], w, v1);
      });
    }
  }
  pf.cur = c;
  static_for<R>([&](auto r) { out[2 * r] = acc[r][0], out[2 * r + 1] = acc[r][1]; });
}

// o_r[d0, d0 + 32) = o_r * cr[r] + sum over the tile's chunks of (sum_j code_r[j] v_j) x
// the chunk's step, for R rows, in chunk order: as pv<> but in integer arithmetic. The
// running sums between chunks stay in an aligned scratch of whole vectors: reloading o
// right after its masked stores waits on store forwarding.
template <int R>
ATTN_INLINE void pv_i8(const Tile& tl, int32_t lpb, const uint8_t* pc, int64_t ldc, const float* step, int64_t lds_step,
                       const float* cr, float* o, int64_t ldo, int32_t d0, int32_t dv, int64_t voff, Prefetcher& pf) {
  const __mmask16 m0 = first_lanes(dv - d0), m1 = first_lanes(dv - d0 - 16);
  const int32_t lanes = tl.n_blocks * lpb;
  alignas(64) float run[R][32];
  for (int32_t c0 = 0; c0 < lanes; c0 += kChunkLanes) {
    __m512i acc[2 * R];
    pv_dots_i8<R>(tl, lpb, pc, ldc, c0, d0, dv, voff, pf, acc);
    const bool first = c0 == 0, last = c0 + kChunkLanes >= lanes;
    static_for<R>([&](auto r) {
      const __m512 sv = _mm512_set1_ps(step[r * lds_step + c0 / kChunkLanes]);
      float* orow = o + r * ldo + d0;
      __m512 x0, x1;
      if (first) {
        const __m512 cv = _mm512_set1_ps(cr[r]);
        x0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, orow), cv);
        x1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, orow + 16), cv);
      } else {
        x0 = _mm512_load_ps(run[r]), x1 = _mm512_load_ps(run[r] + 16);
      }
      x0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[2 * r]), sv, x0);
      x1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[2 * r + 1]), sv, x1);
      if (last) {
        _mm512_mask_storeu_ps(orow, m0, x0);
        _mm512_mask_storeu_ps(orow + 16, m1, x1);
      } else {
        _mm512_store_ps(run[r], x0), _mm512_store_ps(run[r] + 16, x1);
      }
    });
  }
}

// KVLayout::v_in_k: a block's values [bs][dv] in f32 out of its K tile's dimensions
// [v_dim0, v_dim0 + dv) ([dv][bs] from kd, the first of them), 16 x 16 at a time; only
// the first `keys` slots are written (P.V reads no others). The same numbers a V tile
// of the dtype would hold, so P.V's arithmetic is unchanged.
template <DType T>
void values_from_keys(const uint8_t* kd, int32_t bs, int32_t keys, int32_t dv, float* vt) {
  constexpr int64_t esz = kEsz<T>;
  for (int32_t s0 = 0; s0 < keys; s0 += 16) {
    const __mmask16 ms = first_lanes(bs - s0);
    const int32_t ns = keys - s0 < 16 ? keys - s0 : 16;
    for (int32_t d0 = 0; d0 < dv; d0 += 16) {
      __m512 r[16];
      ATTN_UNROLL for (int i = 0; i < 16; ++i)
        r[i] = d0 + i < dv ? load16<T>(kd + int64_t(d0 + i) * bs * esz, s0, ms) : _mm512_setzero_ps();
      transpose16(r);
      const __mmask16 md = first_lanes(dv - d0);
      for (int32_t j = 0; j < ns; ++j) _mm512_mask_storeu_ps(vt + int64_t(s0 + j) * dv + d0, md, r[j]);
    }
  }
}

// KVLayout::v_in_k, int8: a block's values out of its K tile into a V tile's layout
// (kv_view.h v_element: [ceil(bs / 4)][dv][4], then the slots' scales), so P.V's integer
// arithmetic (pv_i8) runs on them unchanged. kd: the K tile's four-dimension row holding
// v_dim0 ([dv / 4][bs][4] from there), ks: its scales. A 64-byte load of a K row is 16
// slots' next four dimensions; one byte shuffle turns each 16-byte lane (four slots x four
// dimensions) into four dimensions' words of four slots, and a 4 x 4 transpose of the
// lanes of four such rows gives four slot quads' 16 dimensions, each one 64-byte store.
// Only the quads holding the first `keys` slots are written (slots past them in a quad
// are whatever the block holds: their weights are 0).
ATTN_NOINLINE void values_i8_from_keys(const uint8_t* kd, const float* ks, int32_t bs, int32_t keys, int32_t dv,
                                       uint8_t* vt) {
  const int32_t dv4 = dv / 4;
  const __m512i by_dims = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  for (int32_t s0 = 0; s0 < keys; s0 += 16) {
    const __mmask16 ms = first_lanes(bs - s0);
    const int32_t quads = keys - s0 >= 16 ? 4 : (keys - s0 + 3) / 4;
    for (int32_t q0 = 0; q0 < dv4; q0 += 4) {
      __m512i r[4];
      ATTN_UNROLL for (int i = 0; i < 4; ++i)
        r[i] = q0 + i < dv4 ? _mm512_shuffle_epi8(_mm512_maskz_loadu_epi32(ms, kd + (int64_t(q0 + i) * bs + s0) * 4), by_dims)
                            : _mm512_setzero_si512();
      const __m512i t0 = _mm512_shuffle_i64x2(r[0], r[1], 0x44), t1 = _mm512_shuffle_i64x2(r[0], r[1], 0xEE);
      const __m512i t2 = _mm512_shuffle_i64x2(r[2], r[3], 0x44), t3 = _mm512_shuffle_i64x2(r[2], r[3], 0xEE);
      const __m512i o[4] = {_mm512_shuffle_i64x2(t0, t2, 0x88), _mm512_shuffle_i64x2(t0, t2, 0xDD),
                            _mm512_shuffle_i64x2(t1, t3, 0x88), _mm512_shuffle_i64x2(t1, t3, 0xDD)};
      const __mmask16 md = first_lanes(dv - 4 * q0);  // one word per dimension
      for (int32_t j = 0; j < quads; ++j)
        _mm512_mask_storeu_epi32(vt + (int64_t(s0 / 4 + j) * dv + 4 * q0) * 4, md, o[j]);
    }
  }
  float* vs = reinterpret_cast<float*>(vt + int64_t((bs + 3) / 4) * 4 * dv);
  for (int32_t s = 0; s < keys; s += 16) _mm512_mask_storeu_ps(vs + s, first_lanes(keys - s), _mm512_maskz_loadu_ps(first_lanes(keys - s), ks + s));
}

// A tile whose V pieces are its K pieces: a latent value's scale is its key's.
ATTN_INLINE Tile keys_as_values(const Tile& tl) {
  Tile t = tl;
  for (int32_t i = 0; i < tl.n_blocks; ++i) t.v[i] = tl.k[i];
  return t;
}

template <DType T>
void group(const AttnView& a, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo, float* scratch) {
  constexpr int64_t esz = kEsz<T>;
  const int32_t dk = a.dk, dv = a.dv, bs = a.block_size;
  const int32_t gpb = (bs + 15) / 16;            // 16-lane groups per block
  const int32_t tb = attention_tile_blocks(bs, a.tile_keys);  // blocks per tile
  const int32_t bsp = (bs + 15) / 16 * 16, dkp = (dk + 15) / 16 * 16;
  // The layout of attention_scratch_floats; this path needs no K/V tile in f32.
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  const int64_t tile_lanes = attention_tile_lanes(bs, a.tile_keys), lds = tile_lanes > bsp ? tile_lanes : bsp;
  const int64_t vn = kScaled<T> ? a.v_scales_off : int64_t(bs) * dv;  // floats of the (unused) V tile
  float* sc = base + int64_t(bsp) * dkp + (vn + 15) / 16 * 16;  // [n_q][lds] scores, then probabilities
  float* m = sc + int64_t(n_q) * lds;  // [n_q] running max
  float* l = m + n_q;                  // [n_q] running sum of exp
  float* cr = l + n_q;                 // [n_q] this tile's rescale of the running state
  // Int8 keys: the query rows' codes (attention_scratch_floats counts them).
  const int32_t dk4 = (dk + 3) / 4;
  const QRows qr{reinterpret_cast<int32_t*>(cr + n_q), reinterpret_cast<int32_t*>(cr + n_q) + int64_t(n_q) * dk4,
                 cr + n_q + int64_t(n_q) * (dk4 + 1), dk4};
  if constexpr (T == DType::I8) quantize_q_rows(q, ldq, n_q, dk, a.scale, qr);
  // BF16 and FP8 on AVX512-BF16 vectors (attention_bf16_avx512.h, attention_fp8_vec_avx512.h),
  // where int8's codes would be: the query rows' bf16 pairs, then a tile's probabilities
  // in bf16, 64-byte aligned.
  const bool b16 = (T == DType::BF16 || kFp8<T>) && a.bf16_dots;
  const int32_t dp = dk / 2;
  uint32_t* qb = reinterpret_cast<uint32_t*>(cr + n_q);  // [dk / 2][n_q]
  uint16_t* pw = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(qb + int64_t(n_q) * dp) + 63) &
                                             ~uintptr_t(63));  // [n_q][kBf16ProbLanes]
  if constexpr (T == DType::BF16 || kFp8<T>)
    if (b16) bf16_query_pairs(q, ldq, n_q, dk, qb);
  // F16 in half arithmetic (attention_f16_avx512.h), in the same place: the query rows in
  // halves [n_q][dk], a tile's probabilities in halves [n_q][kF16ProbLanes] (64-byte
  // aligned), the rows' factors [n_q].
#if RIDGE_ATTN_F16_BUILT
  // An E4M3 cache the same, its weights' factors after: uf [n_q].
  constexpr bool kHalves = T == DType::F16 || T == DType::F8_E4M3;
  const bool h16 = kHalves && a.f16_dots;
  uint16_t* qh = reinterpret_cast<uint16_t*>(cr + n_q);
  uint16_t* ph = pw;
  float* qf = reinterpret_cast<float*>(ph + int64_t(n_q) * kF16ProbLanes);
  float* uf = qf + n_q;
  if constexpr (kHalves)
    if (h16) f16_query_rows(q, ldq, n_q, dk, a.scale, qh, qf);
#endif
  // Int8 values: the rows' 8-bit weights of a tile, and their steps.
  const int64_t ldc = tile_lanes, ldstep = (ldc + kChunkLanes - 1) / kChunkLanes;
  uint8_t* pc = reinterpret_cast<uint8_t*>(qr.scale + n_q);  // [n_q][ldc]
  float* pstep = reinterpret_cast<float*>(pc + int64_t(n_q) * ldc);  // [n_q][ldstep]

  // FP8 on AMX tiles: the query rows' bf16 parts, once per call.
  const Fp8Tiles ft(a, kFp8<T> && a.tiles ? n_q : 0);
  if constexpr (kFp8<T>)
    if (a.tiles) fp8_tiles_queries(q, ldq, n_q, dk, ft.q);

  for (int32_t i = 0; i < n_q; ++i) {
    m[i] = kNegInf;
    l[i] = 0.f;
    for (int32_t d = 0; d < dv; d += 16) _mm512_mask_storeu_ps(out + i * ldo + d, first_lanes(dv - d), _mm512_setzero_ps());
  }
  // Latent values (BF16 and FP8 on vectors): P.V with the rows across the lanes
  // (pv_latent), its running outputs oT [ceil(n_q / 16)][dv][16] and a tile's probability
  // pairs pp [kMaxTileKeys / 2][16] in vt; FP8: then, 64-byte aligned, a head's latent
  // rows of the tile in bf16, lat [tile blocks][dv][bs].
  const bool lanes_pv = (T == DType::BF16 || kFp8<T>) && b16 && a.v_dim0 >= 0;
  const int32_t n16 = (n_q + 15) / 16;
  float* oT = a.vt;
  uint32_t* pp = lanes_pv ? reinterpret_cast<uint32_t*>(a.vt + int64_t(n16) * 16 * dv) : nullptr;
  uint8_t* lat = kFp8<T> && lanes_pv ? reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(pp + kMaxTileKeys / 2 * 16) +
                                                                   63) & ~uintptr_t(63))
                                     : nullptr;
  const auto zero_lanes = [&] {
    for (int64_t i = 0; i < int64_t(n16) * 16 * dv; i += 16) _mm512_store_ps(oT + i, _mm512_setzero_ps());
  };
  if (lanes_pv) zero_lanes();

  const int32_t n_blk = (a.n_ctx + bs - 1) / bs;
  const int32_t n_tiles = (n_blk + tb - 1) / tb;
  const int64_t kstride = int64_t(bs) * esz;  // bytes between dimensions of a K tile
  Prefetcher pf;
  const int32_t nh = a.n_heads, grp = n_q / nh;  // heads, rows per head
  // A block's K tiles of the call's heads are one piece, and so are its V tiles (with
  // their scales).
  const int64_t k_bytes = int64_t(nh) * a.k_head_stride, v_bytes = int64_t(nh) * a.v_head_stride;
  const int32_t* rc = a.row_ctx;  // null: every row attends to [0, n_ctx)
  // Row i of a head attends to [row_first(i), row_end(i)); both ascend with i.
  const auto row_end = [&](int32_t i) { return rc ? rc[i] : a.n_ctx; };
  const auto row_first = [&](int32_t i) {
    const int32_t f = row_end(i) - a.window;
    return a.window > 0 && f > 0 ? f : 0;
  };
  // Tiles stay aligned to absolute positions with a window too (a row's tiles, and so its
  // bits, are those of its lone call): the first is the one holding the earliest window's
  // start, and the blocks of a tile before its rows' windows are not read.
  const int32_t t0 = row_first(0) / bs / tb;
  // The K (V) pieces of tile t's blocks that rows from lo on read (a block before the
  // earliest window is not read); none past the last tile.
  const auto tile = [&](bool values, int32_t t, int32_t lo) {
    const int32_t live = row_first(lo) / bs, b = t * tb > live ? t * tb : live, e = (t + 1) * tb;
    return Prefetcher::Pieces{values ? a.v0 : a.k0, a.blocks, values ? a.v_block_stride : a.k_block_stride,
                              values ? v_bytes : k_bytes, b < n_blk ? b : n_blk, e < n_blk ? e : n_blk};
  };
  const Prefetcher::Pieces none{nullptr, nullptr, 0, 0, 0, 0};
  // After the last tile, the first keys of the call this thread makes next (AttnNext).
  const Prefetcher::Pieces next{a.next_k0, a.next_blocks, a.next_k_block_stride, a.next_k_bytes, a.next_b0, a.next_b1};
  pf.start(none, tile(false, t0, 0));  // the first scores' keys, at once
  pf.finish();
  Tile tl;
  tl.bs = bs;
  Group gr[kMaxTileBlocks * 4];
  // Normalizes the rows of segment c (the whole context's when there are none) and keeps
  // or folds them (AttnArgs::segment); !last: resets the state for the next segment, as a
  // fresh call starts.
  const auto finish = [&](int32_t c, bool last) {
    // A row's normalized output goes to seg_out as it is (keep), else stays in out.
    const bool keep = a.seg_tiles > 0 && a.seg_out;
    const auto row_of = [&](int32_t i) { return keep ? a.seg_out + (int64_t(c) * a.seg_rows + i) * dv : out + i * ldo; };
    for (int32_t i = 0; i < n_q; ++i) {  // 1 / the row's sum, in cr (free until the next tile)
      cr[i] = l[i] > 0.f ? 1.f / l[i] : 0.f;
      if (a.sinks) {  // as the scalar path: the sink's term, relative to the larger max
        const float mx = m[i] > a.sinks[i] ? m[i] : a.sinks[i], e = __builtin_expf(m[i] - mx);
        cr[i] = e / (l[i] * e + __builtin_expf(a.sinks[i] - mx));
      }
    }
    if constexpr (T == DType::BF16 || kFp8<T>)
      if (lanes_pv) {  // transposed and normalized in one pass, straight to where they go
        for (int32_t g = 0; g < n16; ++g)
          latent_lanes_to_rows(oT + int64_t(g) * 16 * dv, n_q - 16 * g < 16 ? n_q - 16 * g : 16, dv, cr + 16 * g,
                               [&](int32_t i) { return row_of(16 * g + i); });
        if (!last) zero_lanes();
      }
    for (int32_t i = 0; i < n_q; ++i) {
      float* o = out + i * ldo;
      if (!lanes_pv) {
        const __m512 vinv = _mm512_set1_ps(cr[i]);
        for (int32_t d = 0; d < dv; d += 16) {
          const __mmask16 mk = first_lanes(dv - d);
          _mm512_mask_storeu_ps(o + d, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o + d), vinv));
        }
        if (keep) __builtin_memcpy(row_of(i), o, size_t(dv) * 4);
      }
      const float lse = l[i] > 0.f ? m[i] + __builtin_logf(l[i]) : kNegInf;
      if (keep) {
        a.seg_lse[int64_t(c) * a.seg_rows + i] = lse;
      } else if (a.seg_tiles > 0 && (c > 0 || !last)) {
        float* f = a.fold + int64_t(i) * dv;
        float* fl = a.fold + int64_t(n_q) * dv + i;
        if (c == 0) __builtin_memcpy(f, o, size_t(dv) * 4), *fl = lse;
        else attention_fold(f, fl, o, lse, dv);
        if (last) __builtin_memcpy(o, f, size_t(dv) * 4);
      }
      if (a.lse) a.lse[i] = a.seg_tiles > 0 && !a.seg_out && c > 0 ? a.fold[int64_t(n_q) * dv + i] : lse;
      if (!last) {
        m[i] = kNegInf, l[i] = 0.f;
        if (!lanes_pv)  // (the lanes' running outputs are oT)
          for (int32_t d = 0; d < dv; d += 16) _mm512_mask_storeu_ps(o + d, first_lanes(dv - d), _mm512_setzero_ps());
      }
    }
  };
  for (int32_t t = t0; t < n_tiles; ++t) {
    if (a.seg_tiles > 0 && t > 0 && t % a.seg_tiles == 0) finish(t / a.seg_tiles - 1, false);
    const int32_t b0 = t * tb, b1 = b0 + tb < n_blk ? b0 + tb : n_blk;
    tl.n_blocks = b1 - b0;
    // The rows of each head this tile runs, [lo, hi): those whose context ended before it
    // are done (a lone row would have stopped), those whose window starts after it have
    // not begun (their state stays empty; a lone row's first tile is a later one).
    int32_t lo = 0, hi = grp;
    if (rc)
      while (lo < grp && rc[lo] <= b0 * bs) ++lo;
    while (hi > lo && row_first(hi - 1) >= b1 * bs) --hi;
    if (lo == hi) continue;
    tl.live = row_first(lo) > b0 * bs ? row_first(lo) - b0 * bs : 0;
    tl.live_block = tl.live / bs;
    int32_t ng = 0;
    for (int32_t b = b0; b < b1; ++b) {
      const int32_t i = b - b0, keys = a.n_ctx - b * bs < bs ? a.n_ctx - b * bs : bs;
      // A block wholly before every row's window may be gone from the table (-1: its
      // window pages were dropped, engine/block_manager.h); nothing reads it.
      const bool dead = (i + 1) * bs <= tl.live;
      tl.k[i] = dead ? nullptr : a.k0 + a.blocks[b] * a.k_block_stride;
      tl.v[i] = dead ? nullptr : a.v0 + a.blocks[b] * a.v_block_stride;
      tl.keys[i] = keys;
      for (int32_t g = 0; g < gpb && 16 * g < keys; ++g)
        if (tl.live < i * bs + 16 * g + (keys - 16 * g < 16 ? keys - 16 * g : 16))  // a group with a live key
          gr[ng++] = Group{tl.k[i] + 16 * g * (T == DType::I8 ? 4 : esz), first_lanes(bs - 16 * g),
                           first_lanes(keys - 16 * g), (i * gpb + g) * 16, tl.k[i] + a.k_scales_off + 16 * g * 4,
                           i * bs + 16 * g};
    }
    // Score lanes in use: the groups', then -inf in the dead groups before them and up to
    // the whole 16-lane groups the softmax reads (a last block with fewer keys than
    // slots leaves some).
    const int32_t lanes = tl.n_blocks * gpb * 16;
    for (int32_t i = 0; i < n_q; ++i) {
      for (int32_t x = 0; x < gr[0].lane; x += 16) _mm512_storeu_ps(sc + i * lds + x, _mm512_set1_ps(kNegInf));
      for (int32_t x = gr[ng - 1].lane + 16; x < lanes; x += 16) _mm512_storeu_ps(sc + i * lds + x, _mm512_set1_ps(kNegInf));
    }
    // This tile's values and the next tile's keys, spread over this tile's inner iterations.
    pf.start(tile(true, t, lo), t + 1 < n_tiles ? tile(false, t + 1, lo) : next);

    // Row units never straddle two heads (their K/V tiles differ).
    if constexpr (kFp8<T>)
      if (a.tiles) fp8_tiles_scores<T>(a, ft, grp, lo, hi, gr, ng, sc, lds, pf);
    for (int32_t h = 0; h < nh && !(kFp8<T> && a.tiles); ++h) {
      for (int32_t i = lo; i < hi; i += kRows) {
        const int32_t r0 = h * grp + i, rows = hi - i < kRows ? hi - i : kRows;
        if constexpr (T == DType::I8)
          with_rows(rows, [&](auto R) {
            scores_i8_tile<decltype(R)::value>(qr, r0, gr, ng, 4 * int64_t(bs), sc + int64_t(r0) * lds, lds,
                                               h * a.k_head_stride, pf);
          });
        else if (T == DType::BF16 && b16)
          with_rows(rows, [&](auto R) {
            scores_bf16_tile<decltype(R)::value>(qb + r0, n_q, dp, gr, ng, kstride, a.scale, sc + int64_t(r0) * lds,
                                                 lds, h * a.k_head_stride, pf);
          });
#if RIDGE_ATTN_F16_BUILT
        else if (kHalves && h16)
          with_rows(rows, [&](auto R) {
            // Each row's attended positions in the tile: only their scores decide a redo.
            int32_t span[2 * kRows];
            for (int32_t r = 0; r < decltype(R)::value; ++r)
              span[2 * r] = row_first(i + r) - b0 * bs, span[2 * r + 1] = row_end(i + r) - b0 * bs;
            uint32_t redo = scores_f16_tile<decltype(R)::value, kFp8<T>>(qh + int64_t(r0) * dk, dk, qf + r0, span, gr,
                                                                         ng, kstride, sc + int64_t(r0) * lds, lds,
                                                                         h * a.k_head_stride, pf);
            for (; redo; redo &= redo - 1) {  // the rows whose sums left the finite halves or floats
              const int32_t r = r0 + __builtin_ctz(redo);
              scores_rows<T>(1, q + r * ldq, ldq, gr, ng, kstride, dk, a.scale, sc + int64_t(r) * lds, lds,
                             h * a.k_head_stride, pf, a.fp8_lookup);
            }
          });
#endif
        else if (kFp8<T> && b16)
          with_rows(rows, [&](auto R) {
            if constexpr (kFp8<T>)
              scores_fp8_tile<decltype(R)::value, T>(qb + r0, n_q, dk, gr, ng, kstride, a.scale,
                                                     sc + int64_t(r0) * lds, lds, h * a.k_head_stride, pf);
          });
        else
          scores_rows<T>(rows, q + r0 * ldq, ldq, gr, ng, kstride, dk, a.scale, sc + int64_t(r0) * lds, lds,
                         h * a.k_head_stride, pf, a.fp8_lookup);
      }
    }
    // A row's keys outside [row_first, row_end) score -inf here, as a lone row's call
    // leaves them (the partial last block, the keys of its first block before the
    // window); the extra -inf lanes then add exact zeros to its sums.
    const int32_t tp0 = b0 * bs, tp1 = b1 * bs < a.n_ctx ? b1 * bs : a.n_ctx;
    const auto mask = [&](int32_t i, int32_t p0, int32_t p1) {  // row i's positions [p0, p1) of the tile
      for (int32_t p = p0 > tp0 ? p0 : tp0; p < p1 && p < tp1; ++p)
        for (int32_t h = 0; h < nh; ++h) sc[int64_t(h * grp + i) * lds + ((p / bs - b0) * gpb) * 16 + p % bs] = kNegInf;
    };
    for (int32_t i = lo; i < hi && (rc || a.window > 0); ++i) mask(i, tp0, row_first(i)), mask(i, row_end(i), tp1);
    if (lo == 0 && hi == grp) {  // every row: units of kStatRows across heads
      for (int32_t r0 = 0; r0 < n_q; r0 += kStatRows)
        softmax_rows(sc + int64_t(r0) * lds, lds, lanes / 16, n_q - r0 < kStatRows ? n_q - r0 : kStatRows, m + r0,
                     l + r0, cr + r0);
    } else {
      for (int32_t h = 0; h < nh; ++h)
        for (int32_t i = lo; i < hi; i += kStatRows) {
          const int32_t r0 = h * grp + i;
          softmax_rows(sc + int64_t(r0) * lds, lds, lanes / 16, hi - i < kStatRows ? hi - i : kStatRows, m + r0,
                       l + r0, cr + r0);
        }
    }
    // P.V of a unit of rows starts at its first row's first key (a later row of the unit
    // weighs the keys before its own window by 0).
    const auto unit_live = [&](int32_t i) { return row_first(i) > tp0 ? row_first(i) - tp0 : 0; };
    if constexpr (T == DType::I8) {
      for (int32_t h = 0; h < nh; ++h) {
        // Latent values: out of the head's K tiles, once for its rows, into a.vt.
        Tile tk;
        const bool in_k = a.v_dim0 >= 0;
        if (in_k) {
          tk = tl;
          for (int32_t i = tl.live_block; i < tl.n_blocks; ++i) {
            const uint8_t* kt = tl.k[i] + h * a.k_head_stride;
            uint8_t* vt = reinterpret_cast<uint8_t*>(a.vt) + i * a.vt_block_bytes;
            values_i8_from_keys(kt + int64_t(a.v_dim0) * bs, reinterpret_cast<const float*>(kt + a.k_scales_off), bs,
                                tl.keys[i], dv, vt);
            tk.v[i] = vt;
          }
        }
        const Tile& tv = in_k ? tk : tl;
        const int64_t voff = in_k ? 0 : h * a.v_head_stride;
        const int64_t vsoff = in_k ? int64_t((bs + 3) / 4) * 4 * dv : voff + a.v_scales_off;
        for (int32_t i = lo; i < hi; i += kRows)
          with_rows(hi - i < kRows ? hi - i : kRows, [&](auto R) {
            constexpr int Rn = decltype(R)::value;
            const int32_t r0 = h * grp + i;
            weights_i8<Rn>(tv, gpb, sc + int64_t(r0) * lds, lds, vsoff, pc + r0 * ldc, ldc, pstep + r0 * ldstep, ldstep);
            for (int32_t d0 = 0; d0 < dv; d0 += 32)
              pv_i8<Rn>(tv, gpb * 16, pc + r0 * ldc, ldc, pstep + r0 * ldstep, ldstep, cr + r0, out + r0 * ldo, ldo,
                        d0, dv, voff, pf);
          });
      }
      pf.finish();
      continue;
    }
    if (b16) {
      for (int32_t h = 0; h < nh; ++h) {
        // FP8: each value's scale goes with its probability (the codes' bf16 are the codes);
        // a latent value's is its key's.
        if constexpr (kFp8<T>)
          scale_probabilities(a.v_dim0 >= 0 ? keys_as_values(tl) : tl, gpb, sc + int64_t(h * grp + lo) * lds, lds,
                              hi - lo, a.v_dim0 >= 0 ? h * a.k_head_stride + a.k_scales_off
                                                     : h * a.v_head_stride + a.v_scales_off,
                              1.f);
        bf16_probabilities(sc + int64_t(h * grp + lo) * lds, lds, hi - lo, lanes,
                           pw + int64_t(h * grp + lo) * kBf16ProbLanes);
        if constexpr (T == DType::BF16 || kFp8<T>)
          if (lanes_pv) {  // each 16 rows' lanes that are this head's [lo, hi)
            // FP8: the head's latent rows in bf16 first, once for its rows, read as a
            // BF16 cache's K rows (v_dim0 at each block's start).
            Tile tk = tl;
            int64_t koff = h * a.k_head_stride + int64_t(a.v_dim0) * kstride;
            if constexpr (kFp8<T>) {
              for (int32_t i = tl.live_block; i < tl.n_blocks; ++i) {
                uint8_t* li = lat + int64_t(i) * bs * dv * 2;
                fp8_latent_to_bf16<T>(tl.k[i] + koff, int64_t(bs) * dv, li);
                tk.k[i] = li;
              }
              koff = 0;
            }
            const int a0 = h * grp + lo, a1 = h * grp + hi;
            for (int32_t g = a0 / 16; 16 * g < a1; ++g) {
              const int32_t r0 = 16 * g, n = n_q - r0 < 16 ? n_q - r0 : 16;
              const __mmask16 mk = __mmask16(first_lanes(a1 - r0) & ~first_lanes(a0 - r0));
              probability_pairs_by_lanes(pw + int64_t(r0) * kBf16ProbLanes, n, lanes / 2, pp);
              float* o = oT + int64_t(g) * 16 * dv;
              // From the group's first row's first key, as a unit of rows starts (a later
              // row weighs the keys before its own by 0).
              const int32_t live = unit_live((a0 > r0 ? a0 : r0) - h * grp);
              if (2 * bs == 32) pv_latent<32>(tk, gpb * 16, live, pp, cr + r0, mk, o, dv, koff, pf);
              else pv_latent<0>(tk, gpb * 16, live, pp, cr + r0, mk, o, dv, koff, pf);
            }
            continue;
          }
        for (int32_t i = lo; i < hi; i += kRows)
          with_rows(hi - i < kRows ? hi - i : kRows, [&](auto R) {
            constexpr int Rn = decltype(R)::value;
            const int32_t r0 = h * grp + i;
            const uint16_t* pr = pw + int64_t(r0) * kBf16ProbLanes;
            for (int32_t d0 = 0; d0 < dv; d0 += 32)
              if constexpr (kFp8<T>)
                pv_fp8<Rn, T>(tl, gpb * 16, unit_live(i), pr, cr + r0, out + r0 * ldo, ldo, d0, dv,
                              h * a.v_head_stride, pf);
              else
                pv_bf16<Rn>(tl, gpb * 16, unit_live(i), pr, cr + r0, out + r0 * ldo, ldo, d0, dv,
                            h * a.v_head_stride, pf);
          });
      }
      pf.finish();
      continue;
    }
#if RIDGE_ATTN_F16_BUILT
    if constexpr (T == DType::F16)
      if (h16) {
        for (int32_t h = 0; h < nh; ++h) {
          f16_probabilities(sc + int64_t(h * grp + lo) * lds, lds, hi - lo, lanes, ph + int64_t(h * grp + lo) * kF16ProbLanes);
          for (int32_t i = lo; i < hi; i += kRows)
            with_rows(hi - i < kRows ? hi - i : kRows, [&](auto R) {
              const int32_t r0 = h * grp + i;
              for (int32_t d0 = 0; d0 < dv; d0 += 32) {
                uint32_t redo = pv_f16<decltype(R)::value>(tl, gpb * 16, unit_live(i), ph + int64_t(r0) * kF16ProbLanes,
                                                           cr + r0, out + r0 * ldo, ldo, d0, dv, h * a.v_head_stride, pf);
                for (; redo; redo &= redo - 1) {
                  const int32_t r = r0 + __builtin_ctz(redo);
                  pv_rows<T>(1, tl, gpb * 16, unit_live(i), sc + int64_t(r) * lds, lds, cr + r, out + r * ldo, ldo, d0,
                             dv, h * a.v_head_stride, pf, false);
                }
              }
            });
        }
        pf.finish();
        continue;
      }
#endif
    if constexpr (kScaled<T>)
      for (int32_t h = 0; h < nh; ++h)
        scale_probabilities(a.v_dim0 >= 0 ? keys_as_values(tl) : tl, gpb, sc + int64_t(h * grp + lo) * lds, lds,
                            hi - lo,
                            a.v_dim0 >= 0 ? h * a.k_head_stride + a.k_scales_off : h * a.v_head_stride + a.v_scales_off,
                            a.tiles ? 1.f : kCodeUnit<T>);
#if RIDGE_ATTN_F16_BUILT
    if constexpr (T == DType::F8_E4M3)
      if (h16) {  // the weights (scaled above) in halves, each row by its own power of two
        for (int32_t h = 0; h < nh; ++h) {
          fp8_weights_halves(sc + int64_t(h * grp + lo) * lds, lds, hi - lo, lanes,
                             ph + int64_t(h * grp + lo) * kF16ProbLanes, uf + h * grp + lo);
          for (int32_t i = lo; i < hi; i += kRows)
            with_rows(hi - i < kRows ? hi - i : kRows, [&](auto R) {
              const int32_t r0 = h * grp + i;
              for (int32_t d0 = 0; d0 < dv; d0 += 32) {
                uint32_t redo = pv_f16<decltype(R)::value, true>(tl, gpb * 16, unit_live(i),
                                                                 ph + int64_t(r0) * kF16ProbLanes, cr + r0,
                                                                 out + r0 * ldo, ldo, d0, dv, h * a.v_head_stride, pf,
                                                                 uf + r0);
                for (; redo; redo &= redo - 1) {
                  const int32_t r = r0 + __builtin_ctz(redo);
                  pv_rows<T>(1, tl, gpb * 16, unit_live(i), sc + int64_t(r) * lds, lds, cr + r, out + r * ldo, ldo,
                             d0, dv, h * a.v_head_stride, pf, a.fp8_lookup);
                }
              }
            });
        }
        pf.finish();
        continue;
      }
#endif
    if constexpr (kFp8<T>)
      if (a.tiles) {
        fp8_tiles_pv<T>(a, ft, tl, grp, lo, hi, sc, lds, cr, out, ldo, pf);
        pf.finish();
        continue;
      }
    if constexpr (T != DType::I8) {
      if (a.v_dim0 >= 0) {  // values out of each head's K tiles, transposed once for its rows
        for (int32_t h = 0; h < nh; ++h) {
          Tile tv = tl;
          for (int32_t i = tl.live / bs; i < tl.n_blocks; ++i) {
            float* vt = a.vt + int64_t(i) * bs * dv;
            values_from_keys<T>(tl.k[i] + h * a.k_head_stride + int64_t(a.v_dim0) * bs * esz, bs, tl.keys[i], dv, vt);
            tv.v[i] = reinterpret_cast<const uint8_t*>(vt);
          }
          for (int32_t i = lo; i < hi; i += kRows) {
            const int32_t r0 = h * grp + i;
            for (int32_t d0 = 0; d0 < dv; d0 += 32)
              pv_rows<DType::F32>(hi - i < kRows ? hi - i : kRows, tv, gpb * 16, unit_live(i), sc + int64_t(r0) * lds,
                                  lds, cr + r0, out + r0 * ldo, ldo, d0, dv, 0, pf, false);
          }
        }
        pf.finish();
        continue;
      }
    }
    for (int32_t h = 0; h < nh; ++h)
      for (int32_t i = lo; i < hi; i += kRows) {
        const int32_t r0 = h * grp + i;
        for (int32_t d0 = 0; d0 < dv; d0 += 32)
          pv_rows<T>(hi - i < kRows ? hi - i : kRows, tl, gpb * 16, unit_live(i), sc + int64_t(r0) * lds, lds, cr + r0,
                     out + r0 * ldo, ldo, d0, dv, h * a.v_head_stride, pf, a.fp8_lookup);
      }
    pf.finish();
  }
  finish(a.seg_tiles > 0 && n_tiles > 0 ? (n_tiles - 1) / a.seg_tiles : 0, true);
}

}  // namespace

void attention_group_avx512(const AttnView& v, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo,
                            float* scratch) {
  switch (v.dtype) {
    case DType::F16: return group<DType::F16>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::BF16: return group<DType::BF16>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::I8: return group<DType::I8>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::F8_E4M3: return group<DType::F8_E4M3>(v, n_q, q, ldq, out, ldo, scratch);
    case DType::F8_E5M2: return group<DType::F8_E5M2>(v, n_q, q, ldq, out, ldo, scratch);
    default: return group<DType::F32>(v, n_q, q, ldq, out, ldo, scratch);
  }
}

bool attention_f16_built() { return RIDGE_ATTN_F16_BUILT; }

void kv_codes_to_f32_avx512(DType t, const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(int32_t(n - i < 16 ? n - i : 16));
    const __m512 v = t == DType::I8        ? load16<DType::I8>(src, i, m)
                     : t == DType::F8_E4M3 ? _mm512_mul_ps(load16<DType::F8_E4M3>(src, i, m), _mm512_set1_ps(kCodeUnit<DType::F8_E4M3>))
                                           : load16<DType::F8_E5M2>(src, i, m);
    _mm512_mask_storeu_ps(dst + i, m, v);
  }
}

void exp_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_lanes(int32_t(n - i < 16 ? n - i : 16));
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace ridge::kernels::detail
