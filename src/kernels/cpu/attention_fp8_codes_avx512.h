// FP8 codes (E4M3, E5M2) to bf16 on AVX-512 VBMI, for the attention's FP8 paths: the
// AVX512-BF16 vectors' (attention_fp8_vec_avx512.h) and the AMX tiles'
// (attention_fp8_tiles_avx512.h). Included by attention_avx512.cpp only, through them.
// Every E4M3 and E5M2 value is a bf16 value, so the conversion is exact: a table of the
// 128 magnitudes' bf16 bits, looked up a byte at a time.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_avx512_common.h"
#include "quant/fp8.h"

namespace ridge::kernels::detail {
namespace {

#define FP8_CODES_TARGET __attribute__((target("avx512vbmi,avx512bf16")))

// A lookup table of 16-bit words for the 128 magnitudes of each FP8 format, split into
// low and high bytes (vpermi2b looks up bytes): bits(t, magnitude) gives the words.
struct Bf16Bytes {
  alignas(64) uint8_t lo[2][128], hi[2][128];  // [E4M3, E5M2][magnitude]
};
template <class Bits>
constexpr Bf16Bytes make_fp8_bytes(Bits bits) {
  Bf16Bytes t{};
  for (int f = 0; f < 2; ++f)
    for (int c = 0; c < 128; ++c) {
      const uint16_t b = bits(f ? DType::F8_E5M2 : DType::F8_E4M3, c);
      t.lo[f][c] = uint8_t(b & 0xFF), t.hi[f][c] = uint8_t(b >> 8);
    }
  return t;
}
constexpr uint16_t exact_bits(DType t, int magnitude) {
  return t == DType::F8_E5M2 ? quant::fp8_e5m2_bf16_bits(magnitude) : quant::fp8_e4m3_bf16_bits(magnitude);
}
alignas(64) constexpr Bf16Bytes kBf16Bytes = make_fp8_bytes(exact_bits);

// codes_to_pairs unpacks low and high bytes within 128-bit lanes: its first result's word w
// is input slot 16(w / 8) + w % 8, its second's slot 16(w / 8) + 8 + w % 8. The slot that
// must hold logical code x of the 64 (the first result words 0-31, the second 32-63):
constexpr int slot_code(int s) { return s % 16 < 8 ? 8 * (s / 16) + s % 16 : 32 + 8 * (s / 16) + s % 16 - 8; }
// Logical codes of two K pair rows from 4 rows of 16 keys (dimensions d..d+3, 64 bytes):
// code 2j + t is row t's key j, code 32 + 2j + t row 2 + t's.
constexpr int k_code_source(int x) { return 32 * (x / 32) + 16 * (x % 2) + (x % 32) / 2; }
// Of a V pair row of 16 dimensions each for dimension groups g, g + 1: 32 dimensions of
// key j in bytes 0-31 of one source, of key j + 1 in the other's (index 64 +): code 2n + t
// is key t's dimension n, code 32 + 2n + t its dimension 16 + n.
constexpr int v_code_source(int x) { return 64 * (x % 2) + 16 * (x / 32) + (x % 32) / 2; }
// id: 64 codes in their own order (codes_to_bf16 then stores bytes 0-31's and 32-63's).
struct ByteIndex {
  alignas(64) uint8_t k[64], v[64], id[64];
};
constexpr ByteIndex make_byte_index() {
  ByteIndex b{};
  for (int s = 0; s < 64; ++s)
    b.k[s] = uint8_t(k_code_source(slot_code(s))), b.v[s] = uint8_t(v_code_source(slot_code(s))), b.id[s] = uint8_t(slot_code(s));
  return b;
}
alignas(64) constexpr ByteIndex kByteIndex = make_byte_index();

struct Bf16Lut {
  __m512i lo0, lo1, hi0, hi1;
};
template <DType T>
ATTN_INLINE Bf16Lut lut_of(const Bf16Bytes& b) {
  constexpr int f = T == DType::F8_E5M2 ? 1 : 0;
  return {_mm512_load_si512(b.lo[f]), _mm512_load_si512(b.lo[f] + 64), _mm512_load_si512(b.hi[f]),
          _mm512_load_si512(b.hi[f] + 64)};
}
template <DType T>
ATTN_INLINE Bf16Lut bf16_lut() {
  return lut_of<T>(kBf16Bytes);
}

// 64 codes (in the slot order above) -> logical codes 0-31 as the 32 bf16 words of lo,
// 32-63 of hi: two vpermi2b lookups by the magnitude bits (they ignore bit 7), the sign
// ORed into the high byte.
FP8_CODES_TARGET ATTN_INLINE void codes_to_pairs(const Bf16Lut& t, __m512i v, __m512i& lo, __m512i& hi) {
  const __m512i l = _mm512_permutex2var_epi8(t.lo0, v, t.lo1);
  const __m512i h = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, v, t.hi1), v, _mm512_set1_epi8(char(0x80)), 0xF8);
  lo = _mm512_unpacklo_epi8(l, h);
  hi = _mm512_unpackhi_epi8(l, h);
}
// The same, stored: 32 bf16 words at out0, 32 at out1.
FP8_CODES_TARGET ATTN_INLINE void codes_to_bf16(const Bf16Lut& t, __m512i v, uint8_t* out0, uint8_t* out1) {
  __m512i lo, hi;
  codes_to_pairs(t, v, lo, hi);
  _mm512_store_si512(out0, lo);
  _mm512_store_si512(out1, hi);
}

}  // namespace
}  // namespace ridge::kernels::detail
