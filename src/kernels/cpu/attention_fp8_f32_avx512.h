// The AVX-512 attention's FP8-cache f32 path (AttnDots::F32) with its codes made f32 by
// byte lookups (AttnView::fp8_lookup: the CPU has VBMI). Included by attention_avx512.cpp
// only, whose scores_tile and pv_rows call it.
//
// Why: the f32 path multiplies an FP8 code as an exact f32 with the query row's f32, one
// FMA per code per row, like an f16 cache's. Its half-conversion (load16: sign-extend,
// shift, mask, vcvtph2ps, a NaN test) took about as many vector uops per 16 codes as the 8
// rows' FMAs they feed, on the same two ports of a core with two. Here 64 codes become
// four vectors of f32 in ten: a byte permute, the two-table lookup of each code's bf16
// bits (attention_fp8_codes_avx512.h's, of the values in kCodeUnit) and two rounds of
// unpacks that put those bits above 16 zero bits. Every finite code's value is load16's,
// so every product, sum and bit of a finite result is the half path's; a NaN code is a
// NaN here too (its sign and payload may differ from load16's, which no result keeps
// apart: a row that reads one is NaN on either path).
//  - scores: 64 codes are dimensions d..d+3 of 16 keys (four rows of a K tile), the four
//    vectors one dimension each, as load16 gives them one at a time;
//  - P.V: 32 dimensions of two V rows (keys j and j + 1), the vectors key j's dimensions
//    d0..d0+15 and d0+16..d0+31, then key j + 1's; each output's FMA chain still runs over
//    the keys in position order.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/attention_avx512_common.h"
#include "kernels/cpu/attention_fp8_codes_avx512.h"
#include "quant/fp8.h"

namespace ridge::kernels::detail {
namespace {

#define FP8_F32_TARGET __attribute__((target("avx512vbmi")))

// The bf16 bits (as the top half of an f32) of each magnitude's value in kCodeUnit: E4M3's
// value x 2^-8 (load16's half trick, exact: the exponent 8 lower), E5M2's value.
constexpr uint16_t unit_bits(DType t, int magnitude) {
  const uint16_t b = exact_bits(t, magnitude);
  return t == DType::F8_E5M2 || b == 0 || magnitude == 0x7F ? b : uint16_t(b - (8 << 7));
}
alignas(64) constexpr Bf16Bytes kUnitBytes = make_fp8_bytes(unit_bits);
static_assert(kCodeUnit<DType::F8_E4M3> == 256.f && kCodeUnit<DType::F8_E5M2> == 1.f, "the tables' units");

// codes_to_f32's unpacks leave, in 128-bit lane L of its result m, the bytes 16L + 4m ..
// 16L + 4m + 3 of what they were given; element 4L + k of vector m must be logical code
// 16m + 4L + k. So slot 16L + 4m + k takes logical code 16m + 4L + k (a 4 x 4 transpose of
// 4-byte groups).
constexpr int f32_slot_code(int s) { return 16 * ((s % 16) / 4) + 4 * (s / 16) + s % 4; }
// P.V's two sources: logical code n < 32 is byte n of key j's row (the first source),
// 32 + n byte n of key j + 1's (the second, index 64 +).
constexpr int pv_source(int x) { return x < 32 ? x : 64 + x - 32; }
struct F32Index {
  alignas(64) uint8_t k[64], v[64];
};
constexpr F32Index make_f32_index() {
  F32Index b{};
  for (int s = 0; s < 64; ++s) b.k[s] = uint8_t(f32_slot_code(s)), b.v[s] = uint8_t(pv_source(f32_slot_code(s)));
  return b;
}
alignas(64) constexpr F32Index kF32Index = make_f32_index();

template <DType T>
ATTN_INLINE Bf16Lut unit_lut() {
  return lut_of<T>(kUnitBytes);
}

// 64 codes in slot order -> logical codes 16m .. 16m + 15 as f32 in f[m] (in kCodeUnit).
FP8_F32_TARGET ATTN_INLINE void codes_to_f32(const Bf16Lut& t, __m512i v, __m512 f[4]) {
  const __m512i l = _mm512_permutex2var_epi8(t.lo0, v, t.lo1);
  const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, v, t.hi1), v, _mm512_set1_epi8(char(0x80)), 0xF8);
  const __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h), z = _mm512_setzero_si512();
  f[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w0));
  f[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w0));
  f[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w1));
  f[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w1));
}

// scores() of attention_avx512.cpp for FP8 keys, one group of 16 keys, four dimensions a
// step: the same chains (per row and key, d = 0..dk-1), the same scale products. dk % 4
// == 0. One group, not scores()'s two: each query element then feeds one FMA, as its
// embedded broadcast, where two groups' 8 converted vectors and 16 accumulators left GCC
// spilling. Rows64: kstride 16 (a block of 16 keys), so four rows are one 64-byte load.
template <int R, DType T, bool Rows64>
FP8_F32_TARGET ATTN_NOINLINE void scores_fp8_f32(const float* q, int64_t ldq, const Group& gr, int64_t kstride,
                                                 int32_t dk, float scale, float* s, int64_t lds, int64_t koff,
                                                 Prefetcher& pf) {
  __m512 acc[R];
  ATTN_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const uint8_t* kp = gr.k + koff;
  const Bf16Lut lut = unit_lut<T>();
  const __m512i kidx = _mm512_load_si512(kF32Index.k);
  Prefetcher::Cursor c = pf.cur;
  for (int32_t d = 0; d < dk; d += 4) {
    pf.step(c);  // a line asked for per line read
    __m512i raw;
    if constexpr (Rows64) {
      raw = _mm512_loadu_si512(kp + d * 16);
    } else {
      const auto row = [&](int32_t x) { return _mm_maskz_loadu_epi8(gr.slots, kp + x * kstride); };
      raw = _mm512_inserti32x4(_mm512_castsi128_si512(row(d)), row(d + 1), 1);
      raw = _mm512_inserti32x4(_mm512_inserti32x4(raw, row(d + 2), 2), row(d + 3), 3);
    }
    __m512 kv[4];
    codes_to_f32(lut, _mm512_permutexvar_epi8(kidx, raw), kv);
    ATTN_UNROLL for (int i = 0; i < 4; ++i) ATTN_UNROLL for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d + i]), kv[i], acc[r]);
  }
  pf.cur = c;
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  __m512 ks = _mm512_maskz_loadu_ps(gr.slots, reinterpret_cast<const float*>(gr.ks + koff));
  if constexpr (kCodeUnit<T> != 1.f) ks = _mm512_mul_ps(ks, _mm512_set1_ps(kCodeUnit<T>));
  ATTN_UNROLL for (int r = 0; r < R; ++r)
    _mm512_storeu_ps(s + r * lds + gr.lane, _mm512_mask_mov_ps(ninf, gr.keys, _mm512_mul_ps(_mm512_mul_ps(acc[r], ks), vs)));
}

// pv() of attention_avx512.cpp for FP8 values: o_r[d0, d0 + 32) = o_r x cr[r] + sum_j p_r[j]
// v_j, two keys' rows per conversion, lanes past dv masked off (their codes read as 0 and
// not stored).
template <int R, DType T>
FP8_F32_TARGET ATTN_NOINLINE void pv_fp8_f32(const Tile& tl, int32_t lpb, int32_t live, const float* p, int64_t ldp,
                                             const float* cr, float* o, int64_t ldo, int32_t d0, int32_t dv,
                                             int64_t voff, Prefetcher& pf) {
  const __mmask16 m0 = first_lanes(dv - d0), m1 = first_lanes(dv - d0 - 16);
  const __mmask64 bytes = dv - d0 >= 32 ? 0xFFFFFFFFull : (1ull << (dv - d0)) - 1;  // of a row's 32 codes
  __m512 acc[R][2];
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 c = _mm512_set1_ps(cr[r]);
    acc[r][0] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, o + r * ldo + d0), c);
    acc[r][1] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, o + r * ldo + d0 + 16), c);
  }
  const Bf16Lut lut = unit_lut<T>();
  const __m512i vidx = _mm512_load_si512(kF32Index.v);
  Prefetcher::Cursor c = pf.cur;
  // Keys j (and j + 1 when two): their rows' codes converted together, then each key's
  // FMAs in turn.
  const auto keys = [&](const uint8_t* vj, const float* pj, auto two) FP8_F32_TARGET {
    pf.step(c);  // a line asked for per line read
    const __m512i x = _mm512_maskz_loadu_epi8(bytes, vj);
    const __m512i y = two() ? _mm512_maskz_loadu_epi8(bytes, vj + dv) : _mm512_setzero_si512();
    __m512 v[4];
    codes_to_f32(lut, _mm512_permutex2var_epi8(x, vidx, y), v);
    ATTN_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 w = _mm512_set1_ps(pj[r * ldp]);  // times the value's scale already
      acc[r][0] = _mm512_fmadd_ps(w, v[0], acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(w, v[1], acc[r][1]);
    }
    if constexpr (two())
      ATTN_UNROLL for (int r = 0; r < R; ++r) {
        const __m512 w = _mm512_set1_ps(pj[r * ldp + 1]);
        acc[r][0] = _mm512_fmadd_ps(w, v[2], acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(w, v[3], acc[r][1]);
      }
  };
  for (int32_t b = live / tl.bs; b < tl.n_blocks; ++b) {
    const uint8_t* vb = tl.v[b] + voff + d0;
    const float* pb = p + b * lpb;
    int32_t j = b == live / tl.bs ? live % tl.bs : 0;
    for (; j + 1 < tl.keys[b]; j += 2) keys(vb + int64_t(j) * dv, pb + j, std::true_type{});
    if (j < tl.keys[b]) keys(vb + int64_t(j) * dv, pb + j, std::false_type{});
  }
  pf.cur = c;
  ATTN_UNROLL for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(o + r * ldo + d0, m0, acc[r][0]);
    _mm512_mask_storeu_ps(o + r * ldo + d0 + 16, m1, acc[r][1]);
  }
}

}  // namespace
}  // namespace ridge::kernels::detail
