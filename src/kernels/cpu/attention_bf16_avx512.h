// The AVX-512 attention's BF16-cache path on AVX512-BF16 vectors, included by
// attention_avx512.cpp (whose group<> calls it) and by nothing else: its functions are
// marked for AVX512-BF16 and reached only where AttnView::bf16_dots says so
// (attention_dots in attention.h: the CPU has the instructions and the layout fits).
//
// Why: with 8 query rows per KV head, every bf16 element of K or V feeds 8 f32 FMAs on the
// f32 path (converted once, then multiplied), so that path is bound by the FMA rate, not
// by the cache's bytes. vdpbf16ps multiplies two bf16 pairs per f32 lane: half the
// multiply instructions for the same products, on CPUs where it runs at the FMA's
// instruction rate (Zen 4 and 5 here; docs/BENCHMARKS.md). The cache's bf16 elements go in
// exactly, straight from the cache: a K tile keeps dimension d of 16 keys in 32 bytes, so
// two such rows (d, d + 1) become 16 key pairs with one word permute, and two V rows (keys
// j, j + 1) become 16 dimension pairs the same way. The f32 operands are rounded to bf16
// once each (nearest even): a query row per call, a row's probabilities per tile. A
// row's score is one vdpbf16ps chain over its dimension pairs and its output one over its
// key pairs, in position order, whatever shares the call (batch invariance); the
// softmax, the masks, the windows and the sinks are the f32 path's.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_avx512_common.h"

namespace ridge::kernels::detail {
namespace {

// VBMI besides: every CPU path that takes these ways has it (core/cpu.h
// fp8_bf16_available), and the FP8 vectors, which need it, share pv_pairs.
#define BF16_DOTS_TARGET __attribute__((target("avx512vbmi,avx512bf16")))

// Word indices that interleave two rows of 16 words into 16 pairs (word 2j from the
// first row's word j, 2j + 1 from the second's): both rows in one vector (words 0-15 and
// 16-31), or two rows of 32 words in two vectors (pairs 0-15, then 16-31).
struct PairIndex {
  alignas(64) uint16_t rows[32];  // permutexvar
  alignas(64) uint16_t lo[32];    // permutex2var
  alignas(64) uint16_t hi[32];
};
constexpr PairIndex make_pair_index() {
  PairIndex x{};
  for (int j = 0; j < 16; ++j) {
    x.rows[2 * j] = uint16_t(j), x.rows[2 * j + 1] = uint16_t(16 + j);
    x.lo[2 * j] = uint16_t(j), x.lo[2 * j + 1] = uint16_t(32 + j);
    x.hi[2 * j] = uint16_t(16 + j), x.hi[2 * j + 1] = uint16_t(48 + j);
  }
  return x;
}
alignas(64) constexpr PairIndex kPairIndex = make_pair_index();

// The call's query rows rounded to bf16, pair-major: qb[dk / 2][n_q], word p of row r
// (qb[p * n_q + r]) holding dimensions 2p (low half) and 2p + 1, so the rows of a call
// unit sit at fixed offsets from one pointer. dk % 32 == 0.
BF16_DOTS_TARGET void bf16_query_pairs(const float* q, int64_t ldq, int32_t n_q, int32_t dk, uint32_t* qb) {
  alignas(64) uint32_t w[16];
  for (int32_t r = 0; r < n_q; ++r)
    for (int32_t d = 0; d < dk; d += 32) {
      const __m512 x0 = _mm512_loadu_ps(q + r * ldq + d), x1 = _mm512_loadu_ps(q + r * ldq + d + 16);
      _mm512_store_si512(w, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
      for (int32_t i = 0; i < 16; ++i) qb[int64_t(d / 2 + i) * n_q + r] = w[i];
    }
}

// The f32 sums of R query rows' pairs with the keys of G groups: out[r * G + g], lane j
// for the group's key j. q: row 0's first pair (qb + the unit's first row), pairs n_q
// words apart. A K tile's rows are kstride bytes apart; Rows64: 32 (a block of 16 keys),
// so a pair of rows is one 64-byte load. Out of line for the reason dots_i8 is.
template <int R, int G, bool Rows64>
BF16_DOTS_TARGET ATTN_NOINLINE void dots_bf16(const uint32_t* q, int32_t n_q, int32_t dp, const Group* gr,
                                              int64_t kstride, int64_t koff, Prefetcher& pf, __m512* out) {
  __m512 acc[R][G];
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const uint8_t* kp[G];
  ATTN_UNROLL for (int g = 0; g < G; ++g) kp[g] = gr[g].k + koff;
  const __m512i idx = _mm512_load_si512(kPairIndex.rows);
  const int64_t pair = 2 * kstride;
  Prefetcher::Cursor c = pf.cur;
  for (int32_t p = 0; p < dp; ++p, q += n_q) {
    if constexpr (G == 2) pf.step2(c);  // a line asked for per line read
    else pf.step(c);
    __m512bh kv[G];
    ATTN_UNROLL for (int g = 0; g < G; ++g) {
      const uint8_t* row = kp[g] + p * pair;
      __m512i raw;
      if constexpr (Rows64) {
        raw = _mm512_loadu_si512(row);
      } else {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
        raw = _mm512_inserti64x4(_mm512_castsi256_si512(a), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + kstride)), 1);
      }
      kv[g] = (__m512bh)_mm512_permutexvar_epi16(idx, raw);
    }
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      const __m512bh qv = (__m512bh)_mm512_set1_epi32(int32_t(q[r]));
      ATTN_UNROLL for (int g = 0; g < G; ++g) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], kv[g], qv);
    }
  }
  pf.cur = c;
  ATTN_UNROLL for (int r = 0; r < R; ++r) ATTN_UNROLL for (int g = 0; g < G; ++g) out[r * G + g] = acc[r][g];
}

// s[r][g.lane, g.lane + 16) = (q_r . k_j) x scale for R rows, as scores<> leaves them.
template <int R>
BF16_DOTS_TARGET void scores_bf16_tile(const uint32_t* q, int32_t n_q, int32_t dp, const Group* gr, int32_t ng,
                                       int64_t kstride, float scale, float* s, int64_t lds, int64_t koff,
                                       Prefetcher& pf) {
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  __m512 acc[R * 2];
  for (int32_t g = 0; g < ng; g += 2) {
    const int G = ng - g >= 2 ? 2 : 1;
    if (kstride == 32) {
      if (G == 2) dots_bf16<R, 2, true>(q, n_q, dp, gr + g, kstride, koff, pf, acc);
      else dots_bf16<R, 1, true>(q, n_q, dp, gr + g, kstride, koff, pf, acc);
    } else {
      if (G == 2) dots_bf16<R, 2, false>(q, n_q, dp, gr + g, kstride, koff, pf, acc);
      else dots_bf16<R, 1, false>(q, n_q, dp, gr + g, kstride, koff, pf, acc);
    }
    ATTN_UNROLL for (int r = 0; r < R; ++r) for (int i = 0; i < G; ++i)
      _mm512_storeu_ps(s + r * lds + gr[g + i].lane, _mm512_mask_mov_ps(ninf, gr[g + i].keys, _mm512_mul_ps(acc[r * G + i], vs)));
  }
}

// A row's probabilities in bf16: kBf16ProbLanes words (a tile's lanes, at most), a
// fixed stride so that P.V finds its rows at constant offsets from one pointer.
constexpr int32_t kBf16ProbLanes = kMaxTileKeys;

// Rows [0, n) of probabilities (lds floats apart) rounded to bf16: pw[n][kBf16ProbLanes].
BF16_DOTS_TARGET void bf16_probabilities(const float* p, int64_t lds, int32_t n, int32_t lanes, uint16_t* pw) {
  for (int32_t r = 0; r < n; ++r)
    for (int32_t x = 0; x < lanes; x += 16)
      _mm256_store_si256(reinterpret_cast<__m256i*>(pw + r * kBf16ProbLanes + x),
                         (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(p + r * lds + x)));
}

// o_r[d0, d0 + 32) = o_r x cr[r] + sum_j p_r[j] v_j for R rows over the tile's key pairs,
// in position order: pw holds the rows' probabilities in bf16 (bf16_probabilities),
// block b's key j in word b x lpb + j; load(c, vj, k0, k1, v0, v1) makes the dimension
// pairs of d0..d0+15 (v0) and d0+16..d0+31 (v1) of keys j, j + 1 from the V rows at vj
// and vj + row, reading neither row of a key whose flag is false (its values are then
// +0: a NaN in a slot not read must not reach the sum), and asks for its lines through
// cursor c. A pair's key before `live` or past its block's keys weighs 0. vb: a block's
// V tile plus voff plus d0's bytes. pv_bf16 and pv_fp8 (attention_fp8_vec_avx512.h).
template <int R, class Load>
BF16_DOTS_TARGET ATTN_INLINE void pv_pairs(const Tile& tl, int32_t lpb, int32_t live, const uint16_t* pw,
                                           const float* cr, float* o, int64_t ldo, int32_t d0, int64_t voff,
                                           int64_t d0_bytes, int64_t row, Prefetcher& pf, Load&& load) {
  __m512 acc[R][2];
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(cr[r]);
    acc[r][0] = _mm512_mul_ps(_mm512_loadu_ps(o + r * ldo + d0), c);
    acc[r][1] = _mm512_mul_ps(_mm512_loadu_ps(o + r * ldo + d0 + 16), c);
  }
  Prefetcher::Cursor c = pf.cur;
  const auto pair = [&](const uint8_t* vj, const uint16_t* pj, bool k0, bool k1) BF16_DOTS_TARGET {
    __m512i v0, v1;
    load(c, vj, k0, k1, v0, v1);
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      int32_t w2;
      __builtin_memcpy(&w2, pj + r * kBf16ProbLanes, 4);
      const __m512bh w = (__m512bh)_mm512_set1_epi32(w2);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)v0, w);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)v1, w);
    }
  };
  const int32_t lb = live / tl.bs, lj = live % tl.bs;  // the unit's first block read, and its first key there
  for (int32_t b = lb; b < tl.n_blocks; ++b) {
    const int32_t j0 = b == lb ? lj : 0, keys = tl.keys[b];
    const uint8_t* vb = tl.v[b] + voff + d0_bytes;
    const uint16_t* pb = pw + b * lpb;
    int32_t j = j0;
    if (j & 1) pair(vb + (j - 1) * row, pb + j - 1, false, true), ++j;  // its first key before live
    for (; j + 1 < keys; j += 2) pair(vb + j * row, pb + j, true, true);
    if (j < keys) pair(vb + j * row, pb + j, true, false);  // the block's last key, alone
  }
  pf.cur = c;
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(o + r * ldo + d0, acc[r][0]);
    _mm512_storeu_ps(o + r * ldo + d0 + 16, acc[r][1]);
  }
}

// pv_pairs from a BF16 V tile ([block_size][dv] bf16): two V rows of 32 dimensions, two
// loads, two word permutes. dv % 32 == 0.
template <int R>
BF16_DOTS_TARGET ATTN_NOINLINE void pv_bf16(const Tile& tl, int32_t lpb, int32_t live, const uint16_t* pw,
                                            const float* cr, float* o, int64_t ldo, int32_t d0, int32_t dv,
                                            int64_t voff, Prefetcher& pf) {
  const __m512i ilo = _mm512_load_si512(kPairIndex.lo), ihi = _mm512_load_si512(kPairIndex.hi);
  const int64_t row = 2 * int64_t(dv);  // bytes between a V tile's key rows
  const auto load = [&](Prefetcher::Cursor& c, const uint8_t* vj, bool k0, bool k1, __m512i& v0,
                        __m512i& v1) BF16_DOTS_TARGET {
    pf.step2(c);  // a line asked for per line read
    const __m512i x = _mm512_maskz_loadu_epi16(k0 ? ~__mmask32(0) : 0, vj);
    const __m512i y = _mm512_maskz_loadu_epi16(k1 ? ~__mmask32(0) : 0, vj + row);
    v0 = _mm512_permutex2var_epi16(x, ilo, y), v1 = _mm512_permutex2var_epi16(x, ihi, y);
  };
  pv_pairs<R>(tl, lpb, live, pw, cr, o, ldo, d0, voff, 2 * int64_t(d0), row, pf, load);
}

// Multi-head latent attention (KVLayout::v_in_k) keeps a value as its key's dimensions
// [v_dim0, v_dim0 + dv): in the K tile, [dv][bs] words, one dimension's keys along a row,
// so the pair of keys (2p, 2p + 1) of dimension d is word p of d's row. P.V here puts the
// query rows across the lanes instead of the dimensions: the 16 rows' probability pairs
// of keys (2p, 2p + 1) are one vector, dimension d's word p is broadcast from the cache,
// and each dimension has its own accumulator. A lane's products and their order are
// pv_bf16's over the same values (a pair's two products commute exactly), so the bits
// are those of the values in their own tiles, and no tile is transposed. The running
// outputs stay in that orientation, oT [dv][16] f32 per 16 rows, until a segment ends
// (latent_lanes_to_rows).

// pp[p][16] words: pair p of rows 0..15 of pw (bf16_probabilities' [.][kBf16ProbLanes]),
// rows from n on zero (not read), for pairs [0, pairs) in runs of 16 (pw's rows hold 64
// pairs, pp as many).
BF16_DOTS_TARGET void probability_pairs_by_lanes(const uint16_t* pw, int32_t n, int32_t pairs, uint32_t* pp) {
  for (int32_t p0 = 0; p0 < pairs; p0 += 16) {
    __m512 r[16];
    ATTN_UNROLL for (int e = 0; e < 16; ++e)
      r[e] = e < n ? _mm512_load_ps(reinterpret_cast<const float*>(pw + int64_t(e) * kBf16ProbLanes + 2 * p0))
                   : _mm512_setzero_ps();
    transpose16(r);
    ATTN_UNROLL for (int p = 0; p < 16; ++p) _mm512_store_ps(reinterpret_cast<float*>(pp + int64_t(p0 + p) * 16), r[p]);
  }
}

// oT[d] = oT[d] x cr + sum_j p[j] v_j[d] in the lanes of m (the rows this tile runs; the
// others keep theirs, whatever their lanes of pp and cr hold), over the tile's key pairs from `live` in position order: pp the
// rows' probability pairs (probability_pairs_by_lanes; block b's key j is lane b x lpb +
// j), koff the bytes from a block's K tile to dimension v_dim0's row. A key before live or
// past its block's keys reads as +0, as pv_bf16 masks it. Row bytes: the K tile's
// dimensions apart, a constant where the block size is the default's (its 16 broadcasts'
// addresses are then displacements).
template <int64_t Row>
BF16_DOTS_TARGET ATTN_NOINLINE void pv_latent(const Tile& tl, int32_t lpb, int32_t live, const uint32_t* pp,
                                              const float* cr, __mmask16 m, float* oT, int32_t dv, int64_t koff,
                                              Prefetcher& pf) {
  constexpr int D = 16;  // dimensions (accumulators) a pass
  const int64_t row = Row > 0 ? Row : 2 * int64_t(tl.bs);
  const __m512 crv = _mm512_maskz_loadu_ps(m, cr);
  const int32_t lb = live / tl.bs, lj = live % tl.bs;  // the first block read, and its first key there
  Prefetcher::Cursor c = pf.cur;
  for (int32_t d0 = 0; d0 < dv; d0 += D) {
    __m512 acc[D];
    ATTN_UNROLL for (int e = 0; e < D; ++e) acc[e] = _mm512_mul_ps(_mm512_load_ps(oT + (d0 + e) * 16), crv);
    // Keys 2p, 2p + 1 at word p of each dimension's row from kd; keep: the halves read.
    const auto pair = [&](const uint8_t* kd, const uint32_t* pj, uint32_t keep) BF16_DOTS_TARGET {
      pf.step2(c);  // a line asked for per line read
      const __m512bh pv = (__m512bh)_mm512_load_si512(pj);
      ATTN_UNROLL for (int e = 0; e < D; ++e) {
        uint32_t w;
        __builtin_memcpy(&w, kd + e * row, 4);
        acc[e] = _mm512_dpbf16_ps(acc[e], pv, (__m512bh)_mm512_set1_epi32(int32_t(w & keep)));
      }
    };
    for (int32_t b = lb; b < tl.n_blocks; ++b) {
      const int32_t keys = tl.keys[b];
      const uint8_t* kd = tl.k[b] + koff + int64_t(d0) * row;
      const uint32_t* pb = pp + int64_t(b * lpb / 2) * 16;
      int32_t j = b == lb ? lj : 0;
      if (j & 1) pair(kd + 2 * (j - 1), pb + (j - 1) / 2 * 16, 0xFFFF0000u), ++j;  // its first key before live
      for (; j + 1 < keys; j += 2) pair(kd + 2 * j, pb + j / 2 * 16, ~0u);
      if (j < keys) pair(kd + 2 * j, pb + j / 2 * 16, 0x0000FFFFu);  // the block's last key, alone
    }
    // Only m's lanes are stored: the others' sums are not read (GCC 12 moves a masked
    // vdpbf16ps's 16-bit mask as 8 bits, so the mask goes here, once a pass).
    ATTN_UNROLL for (int e = 0; e < D; ++e) _mm512_mask_store_ps(oT + (d0 + e) * 16, m, acc[e]);
  }
  pf.cur = c;
}

// Rows [0, n) of oT ([dv][16]) times inv[row], each to its own place: row(i) -> float*.
template <class Row>
BF16_DOTS_TARGET void latent_lanes_to_rows(const float* oT, int32_t n, int32_t dv, const float* inv, Row&& row) {
  float* dst[16];
  __m512 vinv[16];
  for (int32_t i = 0; i < n; ++i) dst[i] = row(i), vinv[i] = _mm512_set1_ps(inv[i]);
  for (int32_t d0 = 0; d0 < dv; d0 += 16) {
    __m512 r[16];
    ATTN_UNROLL for (int e = 0; e < 16; ++e) r[e] = _mm512_load_ps(oT + (d0 + e) * 16);
    transpose16(r);
    for (int32_t i = 0; i < n; ++i) _mm512_storeu_ps(dst[i] + d0, _mm512_mul_ps(r[i], vinv[i]));
  }
}

}  // namespace
}  // namespace ridge::kernels::detail
