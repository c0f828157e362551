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

inline constexpr float kFp8E4M3Max = 448.f;
inline constexpr float kFp8E5M2Max = 57344.f;

}  // namespace ridge::quant
