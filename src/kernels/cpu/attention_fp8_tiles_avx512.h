// The AVX-512 attention's FP8 path on AMX-BF16 tiles, included by attention_avx512.cpp
// (whose group<> calls it) and by nothing else: it uses VBMI, AVX512-BF16 and AMX in
// functions marked for them, reached only where attention_dots (attention.h) said Amx.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_avx512_common.h"
#include "kernels/cpu/attention_fp8_codes_avx512.h"
#include "kernels/cpu/tiles.h"

namespace ridge::kernels::detail {
namespace {

// FP8 K/V with the dots on AMX-BF16 tiles (AttnView::tiles; attention_dots says when).
// Why: with 8 query rows per KV head every FP8 code decoded feeds 8 f32 FMAs, twice the
// arithmetic per cache byte of an f16 cache, and the E4M3 decode besides, so the f32 path
// (attention_avx512.cpp) runs at a fraction of the DRAM rate. Here each tile's codes are
// converted once to bf16 (attention_fp8_codes_avx512.h) and laid out as pair rows: 64
// bytes of 16 keys x 2 dimensions (K) or 16 dimensions x 2 keys (V), an AMX-BF16 B tile
// row. The f32 operands are split into bf16 parts that sum to them, a query row into
// three (all 24 bits), a probability row into two (within 2^-17 of it). tdpbf16ps
// multiplies bf16 pairs exactly and sums in f32, so a score or an output is the f32
// arithmetic's up to the order of its sums. A row's result depends on its own operands
// only (batch invariance), and the softmax, the masks and the scales stay the AVX-512
// code's. (Without the tiles, AVX512-BF16 vectors multiply the converted codes in
// registers: attention_fp8_vec_avx512.h.)
// Tiles: tmm0-2 A (a query's three parts, or a probability row's two), tmm3 B (16 pair
// rows of 64 bytes: 32 dimensions of 16 keys, or 32 keys of 16 value dimensions), tmm4-7
// C (R rows x 16 f32: 4 groups of 16 keys, or 4 groups of 16 value dimensions).
#define FP8_TILES_TARGET __attribute__((target("avx512vbmi,avx512bf16,amx-tile,amx-bf16")))

constexpr TileConfig fp8_tile_config(int r) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.rows[t] = uint8_t(t == 3 ? 16 : r), c.colsb[t] = 64;
  return c;
}
// A plain array (no std::array: no inline function of a baseline header here).
struct Fp8TileConfigs {
  TileConfig c[17];
};
constexpr Fp8TileConfigs make_fp8_tile_configs() {
  Fp8TileConfigs t{};
  for (int r = 0; r <= 16; ++r) t.c[r] = fp8_tile_config(r);
  return t;
}
alignas(64) constexpr Fp8TileConfigs kFp8TileConfigs = make_fp8_tile_configs();

// x as bf16 parts: hi = bf16(x), each next the bf16 of what is left (exact subtractions).
// Three parts hold every bit of an f32 (bar results under bf16's normal range, which the
// tiles flush); two, x within 2^-17.
template <int N>
FP8_TILES_TARGET ATTN_INLINE void bf16_parts(__m512 x0, __m512 x1, uint8_t* out, int64_t part_bytes) {
  for (int i = 0; i < N; ++i) {
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);  // words 0-15 from x0, 16-31 from x1
    _mm512_storeu_si512(out + i * part_bytes, h);
    if (i + 1 == N) break;
    x0 = _mm512_sub_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16)));
    x1 = _mm512_sub_ps(x1, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16)));
  }
}

// The call's query rows in three parts: qp[n_q][3][dk] bf16.
FP8_TILES_TARGET void fp8_tiles_queries(const float* q, int64_t ldq, int32_t n_q, int32_t dk, uint8_t* qp) {
  for (int32_t r = 0; r < n_q; ++r)
    for (int32_t d = 0; d < dk; d += 32) {
      const __m512 x0 = _mm512_loadu_ps(q + r * ldq + d), x1 = _mm512_loadu_ps(q + r * ldq + d + 16);
      uint8_t* o = qp + (int64_t(r) * 3 * dk + d) * 2;
      bf16_parts<3>(x0, x1, o, int64_t(dk) * 2);
    }
}

// The tile registers: the intrinsics stringify their numbers, which must be literals.
#define FP8_TILE_C(I, ...) \
  do {                         \
    switch (I) {               \
      case 0: __VA_ARGS__(4); break; \
      case 1: __VA_ARGS__(5); break; \
      case 2: __VA_ARGS__(6); break; \
      default: __VA_ARGS__(7); break; \
    }                          \
  } while (0)
#define FP8_ZERO(t) _tile_zero(t)
// C_i += A_P x B_B, i = 0..3 for tmm4..7.
#define FP8_DP_FN(P, B)                                 \
  FP8_TILES_TARGET ATTN_INLINE void fp8_dp_##P##_##B(int i) { \
    switch (i) {                                        \
      case 0: _tile_dpbf16ps(4, P, B); break;           \
      case 1: _tile_dpbf16ps(5, P, B); break;           \
      case 2: _tile_dpbf16ps(6, P, B); break;           \
      default: _tile_dpbf16ps(7, P, B); break;          \
    }                                                   \
  }
FP8_DP_FN(0, 3)
FP8_DP_FN(1, 3)
FP8_DP_FN(2, 3)
#undef FP8_DP_FN

// Up to 4 C tiles (n of them) = the A parts x their B tiles: b(i, kc) is tile i's B of
// reduction chunk kc; the first A part's rows of chunk kc at a + 64 kc, the next parts
// a_part bytes on, rows a_stride apart. tile_store then puts them in c[i][R][16].
template <class BAt>
FP8_TILES_TARGET ATTN_INLINE void tile_issue(int n, int32_t n_kc, int parts, const uint8_t* a, int64_t a_part, int64_t a_stride,
                            BAt&& b) {
  asm volatile("" ::: "memory");  // the operands' stores before the tile loads (no memory operands)
  for (int i = 0; i < n; ++i) FP8_TILE_C(i, FP8_ZERO);
  for (int32_t kc = 0; kc < n_kc; ++kc) {
    _tile_loadd(0, a + kc * 64, a_stride);
    _tile_loadd(1, a + a_part + kc * 64, a_stride);
    if (parts == 3) _tile_loadd(2, a + 2 * a_part + kc * 64, a_stride);
    for (int i = 0; i < n; ++i) {
      _tile_loadd(3, b(i, kc), 64);
      fp8_dp_0_3(i);
      fp8_dp_1_3(i);
      if (parts == 3) fp8_dp_2_3(i);
    }
  }
  asm volatile("" ::: "memory");
}
FP8_TILES_TARGET ATTN_INLINE void tile_store(int n, float* c, int32_t R) {
  asm volatile("" ::: "memory");
  for (int i = 0; i < n; ++i) {
    float* ci = c + i * R * 16;
#define FP8_STORE(t) _tile_stored(t, ci, 64)
    FP8_TILE_C(i, FP8_STORE);
#undef FP8_STORE
  }
  asm volatile("" ::: "memory");  // the sums' loads after the stores
}

// The tile path's scratch (attention.cpp fp8_tiles_bytes), per call.
struct Fp8Tiles {
  uint8_t* q = nullptr;      // [n_q][3][dk] bf16
  uint8_t* codes = nullptr;  // a tile's K (4 groups) or a head's V in pair rows
  uint8_t* probs = nullptr;  // [16][2][lanes] bf16
  float* sums = nullptr;     // [4][16][16]
  Fp8Tiles(const AttnView& a, int32_t n_q) {
    if (!a.tiles) return;
    const auto up64 = [](int64_t b) { return (b + 63) / 64 * 64; };
    const int64_t lanes = (attention_tile_lanes(a.block_size, a.tile_keys) + 31) / 32 * 32;
    q = a.tiles;
    codes = q + up64(int64_t(n_q) * 3 * a.dk * 2);
    const int64_t kb = 4 * int64_t(a.dk) * 32, vb = lanes * a.dv * 2;
    probs = codes + up64(kb > vb ? kb : vb);
    sums = reinterpret_cast<float*>(probs + 16 * 2 * lanes * 2);
  }
};

// Scores of rows [lo, hi) of each of the call's heads (grp rows apart) against the tile's
// ng groups of 16 keys, as scores<> leaves them in sc: (q.k x the key's scale) x scale,
// -inf past the keys. A group's K is dk rows of 16 codes, bs apart. In units of (head, 4
// groups): a C tile each.
template <DType T>
FP8_TILES_TARGET void fp8_tiles_scores(const AttnView& a, const Fp8Tiles& ft, int32_t grp, int32_t lo, int32_t hi,
                                       const Group* gr, int32_t ng, float* sc, int64_t lds, Prefetcher& pf) {
  const int32_t dk = a.dk, bs = a.block_size, rows = hi - lo, nb = (ng + 3) / 4, units = a.n_heads * nb;
  const Bf16Lut lut = bf16_lut<T>();
  const __m512i kidx = _mm512_load_si512(kByteIndex.k);
  const int64_t gbytes = int64_t(dk) * 32;  // a group's pair rows: [dk / 2][16 keys][2] bf16
  const __m512 vs = _mm512_set1_ps(a.scale), ninf = _mm512_set1_ps(kNegInf);
  const auto groups = [&](int32_t u) { return ng - (u % nb) * 4 < 4 ? ng - (u % nb) * 4 : 4; };
  const auto convert = [&](int32_t u) FP8_TILES_TARGET {
    const int32_t g0 = (u % nb) * 4, n = groups(u);
    const int64_t koff = (u / nb) * a.k_head_stride;
    Prefetcher::Cursor c = pf.cur;
    for (int i = 0; i < n; ++i) {
      const uint8_t* k = gr[g0 + i].k + koff;
      uint8_t* out = ft.codes + i * gbytes;
      for (int32_t d = 0; d < dk; d += 4) {  // dimensions d..d+3: pair rows d / 2, d / 2 + 1
        pf.step(c);
        __m512i raw;
        if (bs == 16) {
          raw = _mm512_loadu_si512(k + d * 16);
        } else {
          const auto row = [&](int32_t x) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(k + int64_t(x) * bs)); };
          raw = _mm512_inserti32x4(_mm512_castsi128_si512(row(d)), row(d + 1), 1);
          raw = _mm512_inserti32x4(_mm512_inserti32x4(raw, row(d + 2), 2), row(d + 3), 3);
        }
        codes_to_bf16(lut, _mm512_permutexvar_epi8(kidx, raw), out + d * 32, out + d * 32 + 64);
      }
    }
    pf.cur = c;
  };
  const auto issue = [&](int32_t u, int32_t r, int32_t R) FP8_TILES_TARGET {  // rows [r, r + R) of the head's
    const uint8_t* b = ft.codes;
    const uint8_t* qr = ft.q + int64_t((u / nb) * grp + lo + r) * 3 * dk * 2;
    use_tile_config(kFp8TileConfigs.c[R]);
    tile_issue(groups(u), dk / 32, 3, qr, int64_t(dk) * 2, int64_t(3) * dk * 2,
               [&](int i, int32_t kc) { return b + i * gbytes + kc * 1024; });
    tile_store(groups(u), ft.sums, R);
  };
  const auto finish = [&](int32_t u, int32_t r, int32_t R) FP8_TILES_TARGET {
    const float* sums = ft.sums;
    const int32_t g0 = (u % nb) * 4, n = groups(u);
    const int64_t koff = (u / nb) * a.k_head_stride;
    for (int i = 0; i < n; ++i) {
      const Group& g = gr[g0 + i];
      const __m512 ks = _mm512_loadu_ps(reinterpret_cast<const float*>(g.ks + koff));
      float* s = sc + int64_t((u / nb) * grp + lo + r) * lds + g.lane;
      for (int32_t x = 0; x < R; ++x)
        _mm512_storeu_ps(s + x * lds, _mm512_mask_mov_ps(ninf, g.keys, _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(sums + (i * R + x) * 16), ks), vs)));
    }
  };
  for (int32_t u = 0; u < units; ++u) {
    convert(u);
    for (int32_t r = 0; r < rows; r += 16) {  // units of at most 16 rows: a tile's
      const int32_t R = rows - r < 16 ? rows - r : 16;
      issue(u, r, R);
      finish(u, r, R);
    }
  }
}

// o_r = o_r x cr[r] + sum_j p_r[j] v_j for rows [lo, hi) of each of the call's heads (grp
// rows apart) over the tile's keys. p (sc) holds the probabilities times the values'
// scales (scale_probabilities, unit 1: the bf16 codes are the values); keys before
// tl.live, past a block's keys and in blocks not read weigh 0 and their codes are taken
// as 0 (a NaN there, weighed 0, must not reach the sum).
template <DType T>
FP8_TILES_TARGET void fp8_tiles_pv(const AttnView& a, const Fp8Tiles& ft, const Tile& tl, int32_t grp, int32_t lo,
                                   int32_t hi, const float* sc, int64_t lds, const float* cr, float* out, int64_t ldo,
                                   Prefetcher& pf) {
  const int32_t dv = a.dv, bs = tl.bs, lanes = tl.n_blocks * bs, lp = (lanes + 31) / 32 * 32, ndg = dv / 16;
  const int32_t rows = hi - lo, nh = a.n_heads;
  const Bf16Lut lut = bf16_lut<T>();
  const __m512i vidx = _mm512_load_si512(kByteIndex.v);
  const __m512i vidx2 = _mm512_add_epi8(vidx, _mm512_set1_epi8(32));  // the sources' bytes 32-63
  const __m512 zero = _mm512_setzero_ps();
  // Head h's V: pair row of keys (lane, lane + 1) for dimension group dg at
  // codes[lane / 32][dg][(lane % 32) / 2].
  const auto values = [&](int32_t h) FP8_TILES_TARGET {
    uint8_t* codes = ft.codes;
    const auto row_at = [&](int32_t lane) { return codes + ((int64_t(lane / 32) * ndg) * 16 + (lane % 32) / 2) * 64; };
    const int64_t voff = h * a.v_head_stride;
    Prefetcher::Cursor c = pf.cur;
    for (int32_t b = 0; b < tl.n_blocks; ++b) {
      if (tl.v[b] && tl.keys[b] == bs && b * bs >= tl.live) {  // every key: no masks
        const uint8_t* vb = tl.v[b] + voff;
        for (int32_t j = 0; j < bs; j += 2) {
          const uint8_t* v0 = vb + int64_t(j) * dv;
          uint8_t* dst = row_at(b * bs + j);
          if (dv % 64 == 0) {  // whole loads, no masks: 64 dimensions are 4 pair rows, 4 KiB on
            for (int32_t d0 = 0; d0 < dv; d0 += 64, v0 += 64, dst += 4096) {
              pf.step(c), pf.step(c);
              const __m512i x = _mm512_loadu_si512(v0), y = _mm512_loadu_si512(v0 + dv);
              codes_to_bf16(lut, _mm512_permutex2var_epi8(x, vidx, y), dst, dst + 1024);
              codes_to_bf16(lut, _mm512_permutex2var_epi8(x, vidx2, y), dst + 2048, dst + 3072);
            }
            continue;
          }
          for (int32_t d0 = 0; d0 < dv; d0 += 64) {
            pf.step(c), pf.step(c);
            const __mmask64 w = dv - d0 >= 64 ? ~__mmask64(0) : (__mmask64(1) << (dv - d0)) - 1;  // dv % 32 == 0
            const __m512i x = _mm512_maskz_loadu_epi8(w, v0 + d0), y = _mm512_maskz_loadu_epi8(w, v0 + dv + d0);
            uint8_t* o = dst + (d0 / 16) * 1024;
            codes_to_bf16(lut, _mm512_permutex2var_epi8(x, vidx, y), o, o + 1024);
            if (dv - d0 > 32) codes_to_bf16(lut, _mm512_permutex2var_epi8(x, vidx2, y), o + 2048, o + 3072);
          }
        }
        continue;
      }
      for (int32_t j = 0; j < bs; j += 2) {
        const int32_t lane = b * bs + j;
        const bool k0 = tl.v[b] && j < tl.keys[b] && lane >= tl.live, k1 = tl.v[b] && j + 1 < tl.keys[b] && lane + 1 >= tl.live;
        uint8_t* dst = row_at(lane);
        if (!k0 && !k1) {
          for (int32_t dg = 0; dg < ndg; ++dg) _mm512_store_si512(dst + dg * 1024, _mm512_setzero_si512());
          continue;
        }
        const uint8_t* v0 = tl.v[b] + voff + int64_t(j) * dv;
        const __mmask64 m0 = k0 ? ~__mmask64(0) : 0, m1 = k1 ? ~__mmask64(0) : 0;
        for (int32_t d0 = 0; d0 < dv; d0 += 64) {  // 64 dimensions of both keys: 4 pair rows
          pf.step(c), pf.step(c);
          const __mmask64 w = dv - d0 >= 64 ? ~__mmask64(0) : (__mmask64(1) << (dv - d0)) - 1;  // dv % 32 == 0
          const __m512i x = _mm512_maskz_loadu_epi8(m0 & w, v0 + d0), y = _mm512_maskz_loadu_epi8(m1 & w, v0 + dv + d0);
          uint8_t* o = dst + (d0 / 16) * 1024;
          codes_to_bf16(lut, _mm512_permutex2var_epi8(x, vidx, y), o, o + 1024);
          if (dv - d0 > 32) codes_to_bf16(lut, _mm512_permutex2var_epi8(x, vidx2, y), o + 2048, o + 3072);
        }
      }
    }
    for (int32_t lane = lanes; lane < lp; lane += 2)
      for (int32_t dg = 0; dg < ndg; ++dg) _mm512_store_si512(row_at(lane) + dg * 1024, _mm512_setzero_si512());
    pf.cur = c;
  };
  // Rows [r, r + R) of head h's probabilities in two parts: probs[R][2][lp].
  const auto probs = [&](int32_t h, int32_t r, int32_t R) FP8_TILES_TARGET {
    uint8_t* pb = ft.probs;
    for (int32_t x = 0; x < R; ++x) {
      const float* pr = sc + int64_t(h * grp + lo + r + x) * lds;
      for (int32_t l0 = 0; l0 < lp; l0 += 32) {
        const __m512 p0 = l0 < lanes ? _mm512_loadu_ps(pr + l0) : zero, p1 = l0 + 16 < lanes ? _mm512_loadu_ps(pr + l0 + 16) : zero;
        uint8_t* o = pb + (int64_t(x) * 2 * lp + l0) * 2;
        bf16_parts<2>(p0, p1, o, int64_t(lp) * 2);
      }
    }
  };
  const auto issue = [&](int32_t dg0, int32_t R) FP8_TILES_TARGET {
    const uint8_t* codes = ft.codes;
    const int n = ndg - dg0 < 4 ? ndg - dg0 : 4;
    use_tile_config(kFp8TileConfigs.c[R]);
    tile_issue(n, lp / 32, 2, ft.probs + 0, int64_t(lp) * 2, int64_t(2) * lp * 2,
               [&](int i, int32_t kc) { return codes + (int64_t(kc) * ndg + dg0 + i) * 16 * 64; });
    tile_store(n, ft.sums, R);
  };
  const auto finish = [&](int32_t h, int32_t dg0, int32_t r, int32_t R) FP8_TILES_TARGET {
    const int n = ndg - dg0 < 4 ? ndg - dg0 : 4;
    const float* sums = ft.sums;
    for (int i = 0; i < n; ++i)
      for (int32_t x = 0; x < R; ++x) {
        const int32_t row = h * grp + lo + r + x;
        float* od = out + row * ldo + 16 * (dg0 + i);
        _mm512_storeu_ps(od, _mm512_fmadd_ps(_mm512_loadu_ps(od), _mm512_set1_ps(cr[row]), _mm512_load_ps(sums + (i * R + x) * 16)));
      }
  };
  for (int32_t h = 0; h < nh; ++h) {
    values(h);
    for (int32_t r = 0; r < rows; r += 16) {  // units of at most 16 rows: a tile's
      const int32_t R = rows - r < 16 ? rows - r : 16;
      probs(h, r, R);
      for (int32_t dg0 = 0; dg0 < ndg; dg0 += 4) issue(dg0, R), finish(h, dg0, r, R);
    }
  }
}

}  // namespace
}  // namespace ridge::kernels::detail
