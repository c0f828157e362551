// AVX2 micro-kernels over the 16-row panels (packed.h), for the AVX2 path (CPUs without
// AVX-512 VNNI, core/cpu.h): the float types, the 32-block int8 formats and the K-quants;
// FP8 keeps the per-row dots there. gemm.h's contract holds lane for lane as
// in gemm_avx512.cpp: an output element's int32 block sums are the same exact integers
// and its float operations the same ones in the same order, so every row has the AVX-512
// kernels' bits (tested) and keeps them in a batch of any size.
//
// Nothing here is visible to baseline code: gemm_panels (gemm.cpp) calls in only after
// checking the CPU.
//
// AVX2 has half the vector width and 16 registers, so the kernels work on 8-row units,
// the two halves of a panel (rows 0-7 and 8-15 of each 64-byte group), and a tile is up
// to 4 activation rows x one unit with its float sums in registers.
//
// Without vpdpbusd an int8 sum is vpmaddubsw (u8 x s8 -> int16 pair sums, saturating) and
// vpmaddwd with ones (pairs -> one int32 per row). Activation codes lie in [-127, 127]
// (quantize_act_gemm), so:
//   nibble codes (0..15; 0..31 with the Q5 types' fifth bit) give pairs of at most
//     2 x 31 x 127; a block's 8 products sum in int16 for the Q4 types (8 x 3810 = 30480),
//     4 at a time for the Q5 types (4 x 7874 = 31496), then widen: exact (Q6_K's 6-bit
//     codes: 2 at a time, 2 x 16002 = 32004, in kq_block);
//   Q8_0's stored codes q + 128 (up to 255) would saturate a pair, so they go back to q,
//     multiplied as |q| x (a with q's sign) (pairs <= 2 x 128 x 127), the per-row dots'
//     way; the sum is q . a directly, the same integer as the offset form's.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_formats.h"
#include "kernels/cpu/packed.h"

namespace ridge::kernels::detail {
namespace {

constexpr int kUnit = 8;  // rows of a unit: one ymm of f32 or int32 lanes
// Activation rows of a prefill / decode-batch tile: the int8 tiles' 4 int16 sums, 4 float
// sums, 2 code vectors and their broadcasts fill the 16 registers; the float tiles' 6 x 2
// FMA chains (12 registers) cover the FMA latency at 2 per cycle.
constexpr int kTileRows = 4;
constexpr int kFloatTileRows = 6;

// Keeps a running sum where it is: without it GCC reassociated a block's int16 / int32
// adds into a tree, computed all of the block's products first and spilled most of them
// to the stack (an integer sum's order changes no result; only the registers it needs).
inline __attribute__((always_inline)) void pin(__m256i& v) { __asm__("" : "+x"(v)); }

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// y[0 .. lanes) of a unit: v, or y + v (add). A partial unit (the matrix's last rows)
// goes through a scratch: the same float add per lane, so the same bits.
inline void put_unit(float* y, __m256 v, int64_t lanes, bool add) {
  if (lanes >= kUnit) {
    _mm256_storeu_ps(y, add ? _mm256_add_ps(_mm256_loadu_ps(y), v) : v);
    return;
  }
  alignas(32) float t[kUnit];
  _mm256_store_ps(t, v);
  for (int64_t l = 0; l < lanes; ++l) y[l] = add ? y[l] + t[l] : t[l];
}

// An MR x NP tile's sums into y (put_unit per unit). Through a scratch, so that the
// accumulators are only ever read as values: with the unit stores taking them directly,
// GCC kept the array in memory and stored every accumulator in every iteration of the
// reduction loop (the store port became the bound).
template <int MR, int NP>
inline __attribute__((always_inline)) void put_tile(const __m256 (&acc)[MR][NP][2], float* y, int64_t ldy,
                                                    int64_t lanes, bool add) {
  alignas(32) float out[MR][NP][2][kUnit];
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) {
      _mm256_store_ps(out[i][p][0], acc[i][p][0]);
      _mm256_store_ps(out[i][p][1], acc[i][p][1]);
    }
  for (int i = 0; i < MR; ++i)
    for (int p = 0; p < NP; ++p) {
      const int64_t n = p == NP - 1 ? lanes : 16;
      if (n > 0) put_unit(y + i * ldy + 16 * p, _mm256_load_ps(out[i][p][0]), n, add);
      if (n > kUnit) put_unit(y + i * ldy + 16 * p + kUnit, _mm256_load_ps(out[i][p][1]), n - kUnit, add);
    }
}

// Line o of a stream whose panel starts at `panel`, or past the panel's end the line in
// the panel `group` later (a function: as a lambda inside stream_ahead, GCC 12 left no
// prefetch of it in the object code).
inline __attribute__((always_inline)) void ask_line(const uint8_t* panel, int64_t ps, int64_t group, int64_t o) {
  _mm_prefetch(reinterpret_cast<const char*>(o < ps ? panel + o : panel + group * ps + (o - ps)), _MM_HINT_T0);
}

// Prefetches the lines `dist` past [off, off + bytes) of NP panels at stride ps, going on
// past a panel's end in the panel NP later, the next group's; with kLineStarts (Q8_0's
// decode) the lines that start in the range, each line of a stream once
// (gemm_avx512_common.h stream_ahead says why and for which formats).
template <int NP, bool kLineStarts = false>
inline __attribute__((always_inline)) void stream_ahead(const uint8_t* w, int64_t ps, int64_t off, int64_t bytes,
                                                        int64_t dist) {
  const int64_t at = off + dist;
  for (int p = 0; p < NP; ++p) {
    const uint8_t* panel = w + p * ps;
    if (kLineStarts && bytes % 64 != 0) {
      const int64_t first = at + (-(reinterpret_cast<intptr_t>(panel) + at) & 63);  // the first line start >= at
      for (int64_t i = 0; i < bytes / 64; ++i) ask_line(panel, ps, NP, first + 64 * i);
      if (first + 64 * (bytes / 64) < at + bytes) ask_line(panel, ps, NP, first + 64 * (bytes / 64));
    } else {
      for (int64_t j = 0; j < bytes; j += 64) ask_line(panel, ps, NP, at + j);
    }
  }
}

// ---- float weights ------------------------------------------------------------------
// A column of a panel: 16 rows of L's element; half h is 8 of them.
struct LoadF32 {
  static __m256 at(const uint8_t* p, int h) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * h); }
  static constexpr int64_t kColBytes = 64;
};
struct LoadF16 {
  static __m256 at(const uint8_t* p, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
  }
  static constexpr int64_t kColBytes = 32;
};
struct LoadBF16 {
  static __m256 at(const uint8_t* p, int h) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static constexpr int64_t kColBytes = 32;
};

// MR rows x NP panels (both halves) over the whole reduction: per kGemmKc chunk a
// sequential FMA chain from zero per lane, added into y in order (gemm.h).
// lanes: valid rows of the last panel (16 unless the matrix ends inside it).
template <int MR, int NP, bool kAhead, typename L>
void kern_float(const uint8_t* w, int64_t ps, const float* x, int64_t ldx, int64_t k, float* y, int64_t ldy,
                int64_t lanes, int64_t ahead) {
  for (int64_t k0 = 0; k0 < k; k0 += kGemmKc) {
    const int64_t k1 = std::min(k, k0 + kGemmKc);
    __m256 acc[MR][NP][2];
    for (int i = 0; i < MR; ++i)
      for (int p = 0; p < NP; ++p) acc[i][p][0] = acc[i][p][1] = _mm256_setzero_ps();
    for (int64_t c = k0; c < k1; ++c) {
      if constexpr (kAhead)
        if ((c & (64 / L::kColBytes - 1)) == 0) stream_ahead<NP>(w, ps, c * L::kColBytes, 64, ahead);
      __m256 wv[NP][2];
      for (int p = 0; p < NP; ++p) {
        wv[p][0] = L::at(w + p * ps + c * L::kColBytes, 0);
        wv[p][1] = L::at(w + p * ps + c * L::kColBytes, 1);
      }
      for (int i = 0; i < MR; ++i) {
        const __m256 xb = _mm256_broadcast_ss(x + i * ldx + c);
        for (int p = 0; p < NP; ++p) {
          acc[i][p][0] = _mm256_fmadd_ps(wv[p][0], xb, acc[i][p][0]);
          acc[i][p][1] = _mm256_fmadd_ps(wv[p][1], xb, acc[i][p][1]);
        }
      }
    }
    put_tile<MR, NP>(acc, y, ldy, lanes, k0 > 0);
  }
}

// ---- 32-block int8 weights ----------------------------------------------------------
// The exact int32 sums of one block for MR activation rows x unit h of a panel: c, the
// block's codes (FmtInfo::kCodes past its start); ab, the rows' ActQ8 of the block at
// stride lda. Each sum starts at minus the offset the unsigned codes carry.
template <int MR, Fmt F>
inline __attribute__((always_inline)) void unit_isums(const uint8_t* c, int h, const ActQ8* ab, int64_t lda,
                                                      __m256i (&s)[MR]) {
  using I = FmtInfo<F>;
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (F == Fmt::Q8_0) {
    const __m256i x80 = _mm256_set1_epi8(char(0x80));
    for (int i = 0; i < MR; ++i) s[i] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i q = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + g * 64 + h * 32)), x80);
      const __m256i aq = _mm256_abs_epi8(q);
      for (int i = 0; i < MR; ++i) {
        const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast4(ab[i * lda].qs + 4 * g), q));
        s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(p, ones));
        if constexpr (MR == 1) pin(s[i]);  // decode; the tiles measured faster unpinned
      }
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      if constexpr (I::kOffset != 0) {
        int32_t pair;  // -kOffset x (sum16[0] + sum16[1]) in every lane
        std::memcpy(&pair, ab[i * lda].sum16, 4);
        s[i] = _mm256_madd_epi16(_mm256_set1_epi32(pair), _mm256_set1_epi16(int16_t(-I::kOffset)));
      } else {
        s[i] = _mm256_setzero_si256();
      }
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    const __m256i hv = I::kHigh ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 256 + h * 32))
                                : _mm256_setzero_si256();
    __m256i t[MR];
    for (int i = 0; i < MR; ++i) t[i] = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + g * 64 + h * 32));
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (I::kHigh) {  // bit g of a row's byte for lo, bit 4 + g for hi, to bit 4
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_sll_epi16(hv, _mm_cvtsi32_si128(4 - g)), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srl_epi16(hv, _mm_cvtsi32_si128(g)), bit4));
      }
      for (int i = 0; i < MR; ++i) {
        const int8_t* q = ab[i * lda].qs;
        t[i] = _mm256_add_epi16(t[i], _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(q + 4 * g)),
                                                       _mm256_maddubs_epi16(hi, bcast4(q + 16 + 4 * g))));
        pin(t[i]);
      }
      if (I::kHigh && g == 1)  // 4 products of 5-bit codes: widen before the int16 sums could overflow
        for (int i = 0; i < MR; ++i) {
          s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(t[i], ones));
          t[i] = _mm256_setzero_si256();
        }
    }
    for (int i = 0; i < MR; ++i) s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(t[i], ones));
  }
}

// One block into the float sums of MR rows x unit h:
//   acc = fma(float(isum), d_w d_a, acc);  acc = fma(m_w, d_a sum_a, acc)  (_1 only)
template <int MR, Fmt F>
inline __attribute__((always_inline)) void unit_block(const uint8_t* blk, int h, const ActQ8* ab, int64_t lda,
                                                      __m256 (&acc)[MR]) {
  using I = FmtInfo<F>;
  __m256i s[MR];
  unit_isums<MR, F>(blk + I::kCodes, h, ab, lda, s);
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
  for (int i = 0; i < MR; ++i) {
    const ActQ8& q = ab[i * lda];
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(dw, _mm256_set1_ps(q.d)), acc[i]);
    if constexpr (I::kMin) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 32 + 16 * h)));
      acc[i] = _mm256_fmadd_ps(mw, _mm256_set1_ps(q.d * float(q.sum())), acc[i]);
    }
  }
}

// Decode: one activation row x NP panels (both units each), every block of the panels
// read once, NP weight streams with a prefetch `ahead` bytes in front.
template <int NP, Fmt F>
void int8_decode(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t nb, float* y, int64_t lanes, int64_t ahead) {
  constexpr int64_t kBB = FmtInfo<F>::kBlockBytes;
  __m256 acc[NP][2][1];
  for (int p = 0; p < NP; ++p) acc[p][0][0] = acc[p][1][0] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    stream_ahead<NP, F == Fmt::Q8_0>(w, ps, b * kBB, kBB, ahead);
    for (int p = 0; p < NP; ++p) {
      unit_block<1, F>(w + p * ps + b * kBB, 0, a + b, 0, acc[p][0]);
      unit_block<1, F>(w + p * ps + b * kBB, 1, a + b, 0, acc[p][1]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t n = p == NP - 1 ? lanes : 16;
    if (n > 0) put_unit(y + 16 * p, acc[p][0][0], n, false);
    if (n > kUnit) put_unit(y + 16 * p + kUnit, acc[p][1][0], n - kUnit, false);
  }
}

// MR rows x unit h of one panel over every block (prefill, decode batches): the unit's
// weights come into L1 with the first row tile and stay there for the others.
template <int MR, Fmt F>
void int8_tile(const uint8_t* w, int h, const ActQ8* a, int64_t lda, int64_t nb, float* y, int64_t ldy, int64_t lanes) {
  constexpr int64_t kBB = FmtInfo<F>::kBlockBytes;
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) unit_block<MR, F>(w + b * kBB, h, a + b, lda, acc);
  for (int i = 0; i < MR; ++i) put_unit(y + i * ldy, acc[i], lanes, false);
}

// ---- K-quant super-blocks (packed_kquant.cpp) -------------------------------------
// 32-block b of a super-block is sub-block b (Q6_K: sub-blocks 2b, 2b + 1), so one
// activation block meets one (scale, min) pair per row, in gemm_kquant_avx512.h's order:
//   Q4_K / Q5_K: acc = fma(float(isum), (d sc_b) d_a, acc);  acc = fnma(dmin m_b, d_a sum_a, acc)
//   Q6_K:        acc = fma(float(isum_h - 32 sum16_h), (d sc_{2b+h}) d_a, acc), h = 0, 1
enum class KFmt { Q4_K, Q5_K, Q6_K };
template <KFmt K>
inline constexpr int64_t kSuperBytes = K == KFmt::Q4_K ? 16 * 148 : K == KFmt::Q5_K ? 16 * 180 : 16 * 210;

// 8 bytes at p widened to floats, unsigned or signed.
inline __m256 u8x8_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 f16x8_ps(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// The top 2 bits of group g's Q6_K codes (packed_kquant.cpp) at bits 4..5 of each byte
// (16-bit shifts: what crosses a byte lands outside the mask).
inline __m256i q6_high(__m256i hb, int g) {
  const __m256i m = _mm256_set1_epi8(0x30);
  switch (g) {
    case 0: return _mm256_and_si256(_mm256_slli_epi16(hb, 4), m);
    case 1: return _mm256_and_si256(_mm256_slli_epi16(hb, 2), m);
    case 2: return _mm256_and_si256(hb, m);
    default: return _mm256_and_si256(_mm256_srli_epi16(hb, 2), m);
  }
}

// Sub-block b of super-block sb (one panel) into the float sums of MR rows x unit u.
template <int MR, KFmt K>
inline __attribute__((always_inline)) void kq_block(const uint8_t* sb, int u, int b, const ActQ8* ab, int64_t lda,
                                                    __m256 (&acc)[MR]) {
  if constexpr (K != KFmt::Q6_K) {
    constexpr bool kQ5 = K == KFmt::Q5_K;
    __m256i s[MR];  // the codes as Q4_1's / Q5_1's (no offset: the min does it)
    unit_isums<MR, kQ5 ? Fmt::Q5_1 : Fmt::Q4_1>(sb + 320 + b * (kQ5 ? 320 : 256), u, ab, lda, s);
    const __m256 scf = _mm256_mul_ps(u8x8_ps(sb + 64 + b * 16 + kUnit * u), f16x8_ps(sb + 16 * u));
    const __m256 mf = _mm256_mul_ps(u8x8_ps(sb + 192 + b * 16 + kUnit * u), f16x8_ps(sb + 32 + 16 * u));
    for (int i = 0; i < MR; ++i) {
      const ActQ8& q = ab[i * lda];
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(scf, _mm256_set1_ps(q.d)), acc[i]);
      acc[i] = _mm256_fnmadd_ps(mf, _mm256_set1_ps(q.d * float(q.sum())), acc[i]);
    }
  } else {
    // Codes 0..63: a pair is at most 2 x 63 x 127, so the int16 sums widen every 2 groups.
    const uint8_t* bp = sb + 288 + b * 384;
    const __m256i hb0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + 256 + 32 * u));
    const __m256i hb1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + 320 + 32 * u));
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256i s0[MR], s1[MR], t0[MR], t1[MR];
    for (int i = 0; i < MR; ++i) {
      s0[i] = _mm256_set1_epi32(-32 * ab[i * lda].sum16[0]);
      s1[i] = _mm256_set1_epi32(-32 * ab[i * lda].sum16[1]);
      t0[i] = t1[i] = _mm256_setzero_si256();
    }
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + g * 64 + 32 * u));
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), q6_high(hb0, g));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), q6_high(hb1, g));
      for (int i = 0; i < MR; ++i) {
        const int8_t* q = ab[i * lda].qs;
        t0[i] = _mm256_add_epi16(t0[i], _mm256_maddubs_epi16(lo, bcast4(q + 4 * g)));
        t1[i] = _mm256_add_epi16(t1[i], _mm256_maddubs_epi16(hi, bcast4(q + 16 + 4 * g)));
        pin(t0[i]);
        pin(t1[i]);
      }
      if (g % 2 == 1)
        for (int i = 0; i < MR; ++i) {
          s0[i] = _mm256_add_epi32(s0[i], _mm256_madd_epi16(t0[i], ones));
          s1[i] = _mm256_add_epi32(s1[i], _mm256_madd_epi16(t1[i], ones));
          t0[i] = t1[i] = _mm256_setzero_si256();
        }
    }
    const __m256 dv = f16x8_ps(sb + 16 * u);
    const __m256 sc0 = _mm256_mul_ps(i8x8_ps(sb + 32 + 2 * b * 16 + kUnit * u), dv);
    const __m256 sc1 = _mm256_mul_ps(i8x8_ps(sb + 32 + (2 * b + 1) * 16 + kUnit * u), dv);
    for (int i = 0; i < MR; ++i) {
      const __m256 da = _mm256_set1_ps(ab[i * lda].d);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0[i]), _mm256_mul_ps(sc0, da), acc[i]);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[i]), _mm256_mul_ps(sc1, da), acc[i]);
    }
  }
}

// Decode: one row x NP panels, as int8_decode.
template <int NP, KFmt K>
void kq_decode(const uint8_t* w, int64_t ps, const ActQ8* a, int64_t ns, float* y, int64_t lanes, int64_t ahead) {
  constexpr int64_t kSB = kSuperBytes<K>;
  __m256 acc[NP][2][1];
  for (int p = 0; p < NP; ++p) acc[p][0][0] = acc[p][1][0] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s)
    for (int b = 0; b < 8; ++b) {
      stream_ahead<NP>(w, ps, s * kSB + b * (kSB / 8), kSB / 8, ahead);
      for (int p = 0; p < NP; ++p) {
        kq_block<1, K>(w + p * ps + s * kSB, 0, b, a + s * 8 + b, 0, acc[p][0]);
        kq_block<1, K>(w + p * ps + s * kSB, 1, b, a + s * 8 + b, 0, acc[p][1]);
      }
    }
  for (int p = 0; p < NP; ++p) {
    const int64_t n = p == NP - 1 ? lanes : 16;
    if (n > 0) put_unit(y + 16 * p, acc[p][0][0], n, false);
    if (n > kUnit) put_unit(y + 16 * p + kUnit, acc[p][1][0], n - kUnit, false);
  }
}

template <int MR, KFmt K>
void kq_tile(const uint8_t* w, int u, const ActQ8* a, int64_t lda, int64_t ns, float* y, int64_t ldy, int64_t lanes) {
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s)
    for (int b = 0; b < 8; ++b) kq_block<MR, K>(w + s * kSuperBytes<K>, u, b, a + s * 8 + b, lda, acc);
  for (int i = 0; i < MR; ++i) put_unit(y + i * ldy, acc[i], lanes, false);
}

// ---- the call: rows [m0, m1) x panels [p0, p1) ---------------------------------------

// f(R, r) over rows [0, rows) in tiles of kR, then the rest as one smaller tile.
template <int kR, class Fn>
inline void row_tiles(int64_t rows, Fn&& f) {
  int64_t r = 0;
  for (; r + kR <= rows; r += kR) f(std::integral_constant<int, kR>{}, r);
  switch (rows - r) {
    case 5: if constexpr (kR > 5) f(std::integral_constant<int, 5>{}, r); return;
    case 4: if constexpr (kR > 4) f(std::integral_constant<int, 4>{}, r); return;
    case 3: return f(std::integral_constant<int, 3>{}, r);
    case 2: return f(std::integral_constant<int, 2>{}, r);
    case 1: return f(std::integral_constant<int, 1>{}, r);
    default: return;
  }
}

template <typename L>
void float_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t ps = panel_bytes(g.type, g.k);
  const auto* x = static_cast<const float*>(g.act);
  auto lanes = [&](int64_t p_end) { return std::min<int64_t>(16, g.n_out - (p_end - 1) * kPanelRows); };
  if (m1 - m0 == 1) {
    int64_t p = p0;
    const float* xr = x + m0 * g.lda;
    float* yr = g.y + m0 * g.ldy;
    if (g.streams >= 4)
      for (; p + 4 <= p1; p += 4)
        kern_float<1, 4, true, L>(g.packed + p * ps, ps, xr, g.lda, g.k, yr + 16 * p, g.ldy, lanes(p + 4), g.ahead);
    for (; p + 2 <= p1; p += 2)
      kern_float<1, 2, true, L>(g.packed + p * ps, ps, xr, g.lda, g.k, yr + 16 * p, g.ldy, lanes(p + 2), g.ahead);
    for (; p < p1; ++p)
      kern_float<1, 1, true, L>(g.packed + p * ps, ps, xr, g.lda, g.k, yr + 16 * p, g.ldy, lanes(p + 1), g.ahead);
    return;
  }
  for (int64_t p = p0; p < p1; ++p)
    row_tiles<kFloatTileRows>(m1 - m0, [&](auto R, int64_t r) {
      const int64_t m = m0 + r;
      kern_float<decltype(R)::value, 1, false, L>(g.packed + p * ps, ps, x + m * g.lda, g.lda, g.k,
                                                   g.y + m * g.ldy + 16 * p, g.ldy, lanes(p + 1), 0);
    });
}

// What the block formats' calls share: decode in groups of 4 (g.streams), 2 and 1
// panels, otherwise each 8-row unit of each panel in row tiles of kR.
//   decode(NP, w: first panel, ps, a: the row's ActQ8, y, lanes of the last panel)
//   tile(MR, w: the panel, u: its unit, a: the tile's first row, y, lanes of the unit)
template <int kR, class Decode, class Tile>
void block_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1, Decode&& decode, Tile&& tile) {
  const int64_t ps = panel_bytes(g.type, g.k);
  const auto* a = static_cast<const ActQ8*>(g.act);
  auto lanes = [&](int64_t p_end) { return std::min<int64_t>(16, g.n_out - (p_end - 1) * kPanelRows); };
  if (m1 - m0 == 1) {
    int64_t p = p0;
    const ActQ8* ar = a + m0 * g.lda;
    float* yr = g.y + m0 * g.ldy;
    if (g.streams >= 4)
      for (; p + 4 <= p1; p += 4) decode(std::integral_constant<int, 4>{}, g.packed + p * ps, ps, ar, yr + 16 * p, lanes(p + 4));
    for (; p + 2 <= p1; p += 2) decode(std::integral_constant<int, 2>{}, g.packed + p * ps, ps, ar, yr + 16 * p, lanes(p + 2));
    for (; p < p1; ++p) decode(std::integral_constant<int, 1>{}, g.packed + p * ps, ps, ar, yr + 16 * p, lanes(p + 1));
    return;
  }
  for (int64_t p = p0; p < p1; ++p)
    for (int u = 0; u < 2; ++u) {
      const int64_t n = std::min<int64_t>(kUnit, lanes(p + 1) - kUnit * u);
      if (n <= 0) continue;
      row_tiles<kR>(m1 - m0, [&](auto R, int64_t r) {
        const int64_t m = m0 + r;
        tile(R, g.packed + p * ps, u, a + m * g.lda, g.y + m * g.ldy + 16 * p + kUnit * u, n);
      });
    }
}

template <Fmt F>
void int8_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t nb = g.k / 32;
  block_panels<kTileRows>(
      g, m0, m1, p0, p1,
      [&](auto NP, const uint8_t* w, int64_t ps, const ActQ8* a, float* y, int64_t lanes) {
        int8_decode<decltype(NP)::value, F>(w, ps, a, nb, y, lanes, g.ahead);
      },
      [&](auto MR, const uint8_t* w, int u, const ActQ8* a, float* y, int64_t lanes) {
        int8_tile<decltype(MR)::value, F>(w, u, a, g.lda, nb, y, g.ldy, lanes);
      });
}

// Q6_K's tiles take 2 rows: two int16 and two int32 sums per row would spill at 4.
template <KFmt K>
void kq_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t ns = g.k / 256;
  block_panels<K == KFmt::Q6_K ? 2 : kTileRows>(
      g, m0, m1, p0, p1,
      [&](auto NP, const uint8_t* w, int64_t ps, const ActQ8* a, float* y, int64_t lanes) {
        kq_decode<decltype(NP)::value, K>(w, ps, a, ns, y, lanes, g.ahead);
      },
      [&](auto MR, const uint8_t* w, int u, const ActQ8* a, float* y, int64_t lanes) {
        kq_tile<decltype(MR)::value, K>(w, u, a, g.lda, ns, y, g.ldy, lanes);
      });
}
}  // namespace

bool gemm_avx2_has(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

void gemm_panels_avx2(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  switch (g.type) {
    case DType::F32: return float_panels<LoadF32>(g, m0, m1, p0, p1);
    case DType::F16: return float_panels<LoadF16>(g, m0, m1, p0, p1);
    case DType::BF16: return float_panels<LoadBF16>(g, m0, m1, p0, p1);
    case DType::Q8_0: return int8_panels<Fmt::Q8_0>(g, m0, m1, p0, p1);
    case DType::Q4_0: return int8_panels<Fmt::Q4_0>(g, m0, m1, p0, p1);
    case DType::Q4_1: return int8_panels<Fmt::Q4_1>(g, m0, m1, p0, p1);
    case DType::Q5_0: return int8_panels<Fmt::Q5_0>(g, m0, m1, p0, p1);
    case DType::Q5_1: return int8_panels<Fmt::Q5_1>(g, m0, m1, p0, p1);
    case DType::Q4_K: return kq_panels<KFmt::Q4_K>(g, m0, m1, p0, p1);
    case DType::Q5_K: return kq_panels<KFmt::Q5_K>(g, m0, m1, p0, p1);
    case DType::Q6_K: return kq_panels<KFmt::Q6_K>(g, m0, m1, p0, p1);
    default: return;
  }
}

// The scalar quantize_act_gemm's bits: amax exact, d = amax / 127 and 1 / d in f32,
// x * (1 / d) rounded to nearest even (vcvtps2dq in the default MXCSR mode is lrintf),
// clamped to [-127, 127].
void quantize_act_gemm_avx2(const float* x, ActQ8* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + 8 * j);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[j], vid)), lim), nlim);
    // packs work per 128-bit lane: the 4-byte groups come out as q0 q1 q2 q3 of the low
    // halves, then of the high halves; the permute puts them back in element order.
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), _mm256_permutevar8x32_epi32(b, order));
    auto hsum = [](__m256i s) {
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
      return _mm_cvtsi128_si32(t);
    };
    y[i].d = d;
    y[i].sum16[0] = int16_t(hsum(_mm256_add_epi32(q[0], q[1])));
    y[i].sum16[1] = int16_t(hsum(_mm256_add_epi32(q[2], q[3])));
  }
}

}  // namespace ridge::kernels::detail
