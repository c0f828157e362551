#include "quant/fp8.h"

#include <bit>
#include <cmath>
#include <limits>

#include "core/fp16.h"

namespace ridge::quant {
namespace {

// A normal or subnormal code's magnitude from its fields (m mantissa bits, bias b).
float decode(uint32_t sign, uint32_t exp, uint32_t man, int m, int bias) {
  const float mag = exp == 0 ? std::ldexp(float(man), 1 - bias - m) : std::ldexp(float((1u << m) | man), int(exp) - bias - m);
  return sign ? -mag : mag;
}

// |x| (finite, below the format's saturation point) to the code without its sign:
// m mantissa bits, bias b, ties to even. Normals round f32's mantissa at bit 23 - m (the
// carry into the exponent is the next binade's code, as it should be); below the smallest
// normal 2^(1-b) the grid is evenly spaced by 2^(1-b-m), and the code is the count of
// steps (the count 2^m is the smallest normal's code).
uint32_t encode_mag(float a, int m, int bias) {
  const uint32_t u = std::bit_cast<uint32_t>(a);
  const int e = int(u >> 23) - 127;
  if (e < 1 - bias) return uint32_t(std::nearbyint(std::ldexp(a, bias - 1 + m)));
  const int drop = 23 - m;
  const uint32_t r = u + ((1u << (drop - 1)) - 1) + ((u >> drop) & 1);
  const uint32_t exp = (r >> 23) - 127 + uint32_t(bias), man = (r >> drop) & ((1u << m) - 1);
  return (exp << m) | man;
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t c) {
  const uint32_t s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  return decode(s, e, m, 3, 7);
}

float fp8_e5m2_to_f32(uint8_t c) {
  const uint32_t s = c >> 7, e = (c >> 2) & 31, m = c & 3;
  if (e == 31) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    return s ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return decode(s, e, m, 2, 15);
}

namespace {
// Saturating: |x| at or past the largest finite value (max_code's) becomes it.
uint8_t encode(float x, int m, int bias, float max, uint32_t max_code) {
  if (std::isnan(x)) return 0x7F;
  const uint32_t s = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (!(a < max)) return uint8_t(s | max_code);  // infinity too
  const uint32_t c = encode_mag(a, m, bias);
  return uint8_t(s | (c > max_code ? max_code : c));
}
}  // namespace

float fp8_e4m3_unit(uint8_t c) {
  return f16_to_f32(uint16_t(((c & 0x80u) << 8) | ((c & 0x7Fu) << 7)));
}

int64_t find_fp8_e4m3_nan(const uint8_t* codes, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if ((codes[i] & 0x7F) == 0x7F) return i;
  return -1;
}

uint8_t f32_to_fp8_e4m3(float x) { return encode(x, 3, 7, kFp8E4M3Max, 0x7E); }
uint8_t f32_to_fp8_e5m2(float x) { return encode(x, 2, 15, kFp8E5M2Max, 0x7B); }

}  // namespace ridge::quant
