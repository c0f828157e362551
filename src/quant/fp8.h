// OCP 8-bit floating point (OFP8, "OCP 8-bit Floating Point Specification", 2023):
//   E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is
//         NaN; largest finite 448; subnormals m/8 x 2^-6.
//   E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits: the top byte of an IEEE half,
//         infinities and NaNs as in IEEE; largest finite 57344.
// Quantizing rounds to nearest, ties to even, and saturates: a magnitude past the largest
// finite value (infinity included) becomes the largest finite value of its sign; NaN
// becomes a NaN code. These are the definitions the SIMD conversions are tested against,
// over all 256 codes.
#pragma once
#include <cstdint>

namespace ridge::quant {

float fp8_e4m3_to_f32(uint8_t c);
float fp8_e5m2_to_f32(uint8_t c);
uint8_t f32_to_fp8_e4m3(float x);
uint8_t f32_to_fp8_e5m2(float x);

// The FP8 weight kernels' form of a code: e4m3(c) x 2^-8, exactly, as the IEEE half with
// bits (sign << 15) | (magnitude bits << 7): the half's 5-bit exponent field holds E4M3's
// 4 bits (so its bias 15 is E4M3's 7 plus 8), subnormals land on half subnormals, and
// one vcvtph2ps makes floats of it (exact, whatever MXCSR's denormal modes say). The
// kernels multiply the block scale by 2^8 instead. Defined for the finite codes only:
// NaN codes (0x7F, 0xFF) read as +-1.875 here, so FP8 weights holding them are refused
// when a model loads (model/arch.cpp TensorLoader::check_fp8).
float fp8_e4m3_unit(uint8_t c);
// The bf16 bits of a code's magnitude (its low 7 bits; the sign goes in bit 15), exact:
// every E4M3 and E5M2 value is a bf16 value (E4M3's subnormals m x 2^-9 are normal
// there). The NaN codes give a quiet NaN, E5M2's infinity bf16's. The bf16 kernels' byte
// tables are made from these at compile time (their code must not run before the CPU
// check, static initializers included).
constexpr uint16_t fp8_e4m3_bf16_bits(int magnitude) {
  const int e = magnitude >> 3, m = magnitude & 7;
  if (magnitude == 0x7F) return 0x7FC0;
  if (e > 0) return uint16_t((e + 120) << 7 | m << 4);
  if (m == 0) return 0;
  const int h = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // subnormal m x 2^-9 = 2^(h - 9) x 1.f
  return uint16_t((118 + h) << 7 | (m - (1 << h)) << (7 - h));
}
constexpr uint16_t fp8_e5m2_bf16_bits(int magnitude) {
  const int e = magnitude >> 2, m = magnitude & 3;
  if (e == 31) return m ? 0x7FC0 : 0x7F80;
  if (e > 0) return uint16_t((e + 112) << 7 | m << 5);
  return m == 0 ? 0 : m == 1 ? uint16_t(111 << 7) : m == 2 ? uint16_t(112 << 7) : uint16_t(112 << 7 | 0x40);
}
// The first NaN code (0x7F or 0xFF) among n bytes, or -1.
int64_t find_fp8_e4m3_nan(const uint8_t* codes, int64_t n);
// A weight block scale the kernels can use: finite, and small enough that d x 2^8 (the
// f16c path's) is too.
inline bool fp8_scale_ok(float d) { return d == d && d < 0x1p119f && d > -0x1p119f; }

inline constexpr float kFp8E4M3Max = 448.f;
inline constexpr float kFp8E5M2Max = 57344.f;

}  // namespace ridge::quant
