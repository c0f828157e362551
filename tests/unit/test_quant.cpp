// src/quant: GGUF block formats (layout, dequantize, quantize), the Q8A activation form,
// and the dot kernels on every path this CPU has, against an independent decoder written
// here from the GGUF byte layout (offsets, not the library's structs).
//
// Tolerances (relative to M = sum_i |w_i| |a_i|, where for the affine formats |w_i| is
// taken as |scale part| + |min part| so that cancellation between the two cannot make
// the bound meaningless):
//   kDotTol = 1e-5 for every type and path. All dots accumulate in f32: plain-float rows
//   over >= 8 independent accumulators, quantized rows as exact integer sums per block
//   scaled by one f32 product per block. The error is a few f32 roundings per term plus
//   the accumulation over <= n/8 (or n/32) terms, about sqrt(terms) * 6e-8 relative on
//   random data, far under 1e-5; a wrong nibble, lane or scale is off by O(M / n) or more.
//   No f16 rounding happens inside a dot (f16 -> f32 is exact, Q8A scales are f32).
// Dequantize is compared for exact equality: the formulas (ggml's) are fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace ridge::quant {
namespace {

constexpr double kDotTol = 1e-5;

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                           DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F8_E4M3_B128, DType::MXFP4};
const DType kQuantizable[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                              DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1};

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(best_isa()); ++i) v.push_back(Isa(i));
  return v;
}

std::string tname(DType t) { return std::string(dtype_name(t)); }

// ---- independent reference decoder (from byte offsets) -------------------------------

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

// f16 decoded with ldexp: a second opinion on ridge::f16_to_f32.
float half_ref(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float s = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return m ? std::numeric_limits<float>::quiet_NaN() : s * INFINITY;
  if (e == 0) return s * std::ldexp(float(m), -24);
  return s * std::ldexp(float(1024 + m), e - 25);
}

void scale_min_ref(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

struct Decoded {
  std::vector<float> w;     // [n] values
  std::vector<double> mag;  // [n] |scale part| + |min part| (|w| for symmetric formats)
};

// Element e of a row, one element at a time, straight from the GGUF byte layout.
Decoded decode_ref(DType t, const std::vector<uint8_t>& row, int64_t n) {
  Decoded r{std::vector<float>(size_t(n)), std::vector<double>(size_t(n))};
  const auto& info = dtype_info(t);
  for (int64_t e = 0; e < n; ++e) {
    const uint8_t* b = row.data() + (e / info.block_size) * info.type_size;
    const int j = int(e % info.block_size);
    float v = 0, scale_part = 0, min_part = 0;
    switch (t) {
      case DType::F32: std::memcpy(&v, b, 4); break;
      case DType::F16: v = half_ref(rd16(b)); break;
      case DType::BF16: v = bf16_to_f32(rd16(b)); break;
      case DType::Q4_0: {  // d@0 qs@2
        const int nib = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        v = scale_part = float(nib - 8) * half_ref(rd16(b));
        break;
      }
      case DType::Q4_1: {  // d@0 m@2 qs@4
        const int nib = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
        scale_part = float(nib) * half_ref(rd16(b));
        min_part = half_ref(rd16(b + 2));
        v = scale_part + min_part;
        break;
      }
      case DType::Q5_0: {  // d@0 qh@2 qs@6
        const int nib = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
        const int q = nib | int((rd32(b + 2) >> j) & 1) << 4;
        v = scale_part = float(q - 16) * half_ref(rd16(b));
        break;
      }
      case DType::Q5_1: {  // d@0 m@2 qh@4 qs@8
        const int nib = j < 16 ? (b[8 + j] & 15) : (b[8 + j - 16] >> 4);
        const int q = nib | int((rd32(b + 4) >> j) & 1) << 4;
        scale_part = float(q) * half_ref(rd16(b));
        min_part = half_ref(rd16(b + 2));
        v = scale_part + min_part;
        break;
      }
      case DType::Q8_0:  // d@0 qs@2
        v = scale_part = float(int8_t(b[2 + j])) * half_ref(rd16(b));
        break;
      case DType::MXFP4: {  // e@0 qs@1: E2M1 x 2^(e-127), E2M1 = (-1)^s 2^(E-1) (1 + M/2), or M/2 at E = 0
        const int code = j < 16 ? (b[1 + j] & 15) : (b[1 + j - 16] >> 4);
        const int sgn = code >> 3, E = (code >> 1) & 3, M = code & 1;
        const double e2m1 = (E == 0 ? M * 0.5 : std::ldexp(1.0 + M * 0.5, E - 1)) * (sgn ? -1 : 1);
        v = scale_part = float(e2m1 * std::ldexp(1.0, int(b[0]) - 127));
        break;
      }
      case DType::F8_E4M3_B128: {  // d@0 (f32) qs@4
        const uint32_t d = rd32(b);
        float df;
        std::memcpy(&df, &d, 4);
        v = scale_part = fp8_e4m3_to_f32(b[4 + j]) * df;
        break;
      }
      case DType::Q4_K:    // d@0 dmin@2 scales@4 qs@16
      case DType::Q5_K: {  // d@0 dmin@2 scales@4 qh@16 qs@48
        const bool five = t == DType::Q5_K;
        const uint8_t* qs = b + (five ? 48 : 16);
        const int sub = j / 32, chunk = j / 64, l = j % 32;
        int q = (j % 64 < 32) ? (qs[32 * chunk + l] & 15) : (qs[32 * chunk + l] >> 4);
        if (five) q |= ((b[16 + l] >> sub) & 1) << 4;
        int sc, m;
        scale_min_ref(b + 4, sub, sc, m);
        scale_part = half_ref(rd16(b)) * float(sc) * float(q);
        min_part = half_ref(rd16(b + 2)) * float(m);
        v = scale_part - min_part;
        break;
      }
      case DType::Q6_K: {  // ql@0 qh@128 scales@192 d@208
        const int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
        const uint8_t qlb = b[64 * h + l + 32 * (g & 1)];
        const int lo = g < 2 ? (qlb & 15) : (qlb >> 4);
        const int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
        const int sc = int8_t(b[192 + j / 16]);
        v = scale_part = half_ref(rd16(b + 208)) * float(sc) * float((lo | hi << 4) - 32);
        break;
      }
      default: ADD_FAILURE() << "no reference decoder for " << tname(t);
    }
    r.w[size_t(e)] = v;
    r.mag[size_t(e)] = (t == DType::F32 || t == DType::F16 || t == DType::BF16)
                           ? std::fabs(double(v))
                           : std::fabs(double(scale_part)) + std::fabs(double(min_part));
  }
  return r;
}

// ---- random valid rows -------------------------------------------------------------

// A random f16 scale of magnitude in [lo, hi), random sign.
uint16_t rand_scale(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  const float v = u(rng) * ((rng() & 1) ? -1.0f : 1.0f);
  return f32_to_f16(v);
}

void wr16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v); p[1] = uint8_t(v >> 8); }

// Random bytes with finite, moderate f16 scales: every code of every field is exercised.
std::vector<uint8_t> random_row(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(static_cast<size_t>(row_bytes(t, n)));
  for (auto& c : row) c = uint8_t(rng());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const auto& info = dtype_info(t);
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = u(rng);
      if (t == DType::F32) std::memcpy(&row[size_t(4 * i)], &v, 4);
      else wr16(&row[size_t(2 * i)], t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v));
    }
    return row;
  }
  for (int64_t bi = 0; bi < n / info.block_size; ++bi) {
    uint8_t* b = row.data() + bi * info.type_size;
    switch (t) {
      case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
        wr16(b, rand_scale(rng, 0.001f, 0.1f));
        wr16(b + 2, rand_scale(rng, 0.001f, 0.1f));  // m / dmin
        break;
      case DType::Q6_K: wr16(b + 208, rand_scale(rng, 0.001f, 0.1f)); break;
      case DType::MXFP4: b[0] = uint8_t(118 + rng() % 8); break;  // scales 2^-9 .. 2^-2
      case DType::F8_E4M3_B128: {  // an f32 scale, no NaN codes
        const float d = std::uniform_real_distribution<float>(0.001f, 0.1f)(rng);
        std::memcpy(b, &d, 4);
        for (int j = 4; j < 132; ++j)
          if ((b[j] & 0x7F) == 0x7F) b[j] = uint8_t(b[j] - 1);
        break;
      }
      default: wr16(b, rand_scale(rng, 0.001f, 0.1f)); break;
    }
  }
  return row;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  return x;
}

// The activation in the form dot_fn(t) reads, plus its exact values (as doubles).
struct Act {
  std::vector<uint8_t> bytes;
  std::vector<double> val;  // [n]
};

Act make_act(DType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  Act a{std::vector<uint8_t>(size_t(act_row_bytes(t, n))), std::vector<double>(size_t(n))};
  prepare_act(t, x.data(), a.bytes.data(), n);
  if (act_kind(t) == ActKind::F32) {
    for (int64_t i = 0; i < n; ++i) a.val[size_t(i)] = x[size_t(i)];
  } else {
    const auto* b = reinterpret_cast<const BlockQ8A*>(a.bytes.data());
    for (int64_t i = 0; i < n; ++i) a.val[size_t(i)] = double(b[i / 32].d) * b[i / 32].qs[i % 32];
  }
  return a;
}

std::vector<int64_t> lengths(DType t) {
  const int64_t bs = dtype_info(t).block_size;
  if (bs == 1) return {1, 7, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257, 1000, 4099};
  if (bs == 32) return {32, 64, 96, 160, 224, 416, 4128};
  if (bs == 128) return {128, 256, 640, 2304, 4224};
  return {256, 512, 768, 2304, 4352};
}

// ---- layout and known values -------------------------------------------------------

TEST(QuantLayout, BlockSizesMatchDtypeTable) {
  EXPECT_EQ(dtype_info(DType::Q4_0).type_size, int64_t(sizeof(BlockQ4_0)));
  EXPECT_EQ(dtype_info(DType::Q4_1).type_size, int64_t(sizeof(BlockQ4_1)));
  EXPECT_EQ(dtype_info(DType::Q5_0).type_size, int64_t(sizeof(BlockQ5_0)));
  EXPECT_EQ(dtype_info(DType::Q5_1).type_size, int64_t(sizeof(BlockQ5_1)));
  EXPECT_EQ(dtype_info(DType::Q8_0).type_size, int64_t(sizeof(BlockQ8_0)));
  EXPECT_EQ(dtype_info(DType::Q4_K).type_size, int64_t(sizeof(BlockQ4_K)));
  EXPECT_EQ(dtype_info(DType::Q5_K).type_size, int64_t(sizeof(BlockQ5_K)));
  EXPECT_EQ(dtype_info(DType::Q6_K).type_size, int64_t(sizeof(BlockQ6_K)));
  EXPECT_EQ(dtype_info(DType::MXFP4).type_size, int64_t(sizeof(BlockMxfp4)));
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
}

// MXFP4, every scale byte but the NaN one with every code in both nibble positions,
// against the OCP definition (E2M1 value x 2^(e - 127)) computed here with ldexp, rounded
// to f32 (the top scales' 6 x 2^127 is past it: inf, as in ggml); ggml's two denormal
// scales (e < 2) included. Then the dot of each such block with a unit
// activation on every path, exact (every term an integer times a power of two).
TEST(QuantDequant, Mxfp4EveryScaleAndCode) {
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int e = 0; e < 255; ++e) {
    BlockMxfp4 b;
    b.e = uint8_t(e);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
    float y[32];
    dequantize_row(DType::MXFP4, &b, y, 32);
    for (int j = 0; j < 32; ++j) {
      const int code = j < 16 ? j : 15 - (j - 16);
      const double want = e2m1[code & 7] * (code & 8 ? -1 : 1) * std::ldexp(1.0, e - 127);
      ASSERT_EQ(y[j], float(want)) << "e " << e << " element " << j << " code " << code;  // inf past f32's range
    }
    if (e > 250) continue;  // sums past f32's range
    BlockQ8A a{1.0f, 0.0f, {}};
    for (int j = 0; j < 32; ++j) a.qs[j] = int8_t(j % 2 ? 1 : -1);
    double want = 0;
    for (int j = 0; j < 32; ++j) want += double(y[j]) * a.qs[j];
    for (Isa isa : isas())
      ASSERT_EQ(double(dot_fn(DType::MXFP4, isa)(&b, &a, 32)), want) << "e " << e << " " << isa_name(isa);
  }
}

// ggml's quantizer: the scale from the block's largest magnitude, each value to the
// nearest code (the first of two equally near); values that are codes come back exactly.
TEST(QuantQuantize, Mxfp4MatchesGgmlRounding) {
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j % 16 < 8 ? 1.f : -1.f) * e2m1[j % 8] * 0.25f;
  BlockMxfp4 b;
  quantize_row(DType::MXFP4, x, &b, 32);
  EXPECT_EQ(b.e, 125);  // amax 1.5: floor(log2 1.5) - 2 + 127; codes step 2^(125 - 128)
  float y[32];
  dequantize_row(DType::MXFP4, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
  // amax 0.625: e 124, codes x 2^-4 = 0.5 (code 6) and 0.75 (code 7) equally near: 6.
  float tie[32] = {0.625f, -0.625f};
  quantize_row(DType::MXFP4, tie, &b, 32);
  EXPECT_EQ(b.e, 124);
  EXPECT_EQ(b.qs[0] & 15, 6);
  EXPECT_EQ(b.qs[1] & 15, 14);  // -0.5
  float zero[32] = {};
  quantize_row(DType::MXFP4, zero, &b, 32);
  EXPECT_EQ(b.e, 0);
}

TEST(QuantDequant, Q4_0KnownBlock) {
  BlockQ4_0 b{};
  b.d = 0x3C00;  // 1.0
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (j << 4));
  float y[32];
  dequantize_row(DType::Q4_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(j % 16 - 8)) << j;
}

TEST(QuantDequant, Q5_0HighBitPlacement) {
  BlockQ5_0 b{};
  b.d = 0x3C00;
  // Element 0's 5th bit is qh bit 0, element 16's is qh bit 16 (byte 2, bit 0).
  b.qh[0] = 0x01;
  b.qh[2] = 0x01;
  float y[32];
  dequantize_row(DType::Q5_0, &b, y, 32);
  EXPECT_EQ(y[0], 0.0f);    // 16 - 16
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[1], -16.0f);
  EXPECT_EQ(y[17], -16.0f);
}

TEST(QuantDequant, RandomBlocksMatchReferenceDecoder) {
  std::mt19937 rng(1);
  for (DType t : kAllTypes) {
    const int64_t n = dtype_info(t).block_size == 1 ? 37 : 3 * dtype_info(t).block_size;
    for (int rep = 0; rep < 20; ++rep) {
      const auto row = random_row(t, n, rng);
      std::vector<float> got(static_cast<size_t>(n));
      dequantize_row(t, row.data(), got.data(), n);
      const auto ref = decode_ref(t, row, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[size_t(i)], ref.w[size_t(i)]) << tname(t) << " element " << i;
    }
  }
}

// ---- quantize: ggml's rounding rules, and the round-trip error bound ---------------

TEST(QuantQuantize, Q4_0MatchesGgmlRounding) {
  // max |x| is +8 -> d = -1 (sign kept), id = -1: q = min(15, trunc(-x + 8.5)).
  float x[32] = {};
  x[0] = 8.0f;    // -> 0.5 -> 0
  x[1] = -8.0f;   // -> 16.5 -> 16 -> clamped 15
  x[2] = 0.5f;    // -> 8.0 -> 8
  x[3] = -0.5f;   // -> 9.0 -> 9
  x[16] = 2.4f;   // -> 6.1 -> 6
  BlockQ4_0 b;
  quantize_row(DType::Q4_0, x, &b, 32);
  EXPECT_EQ(b.d, f32_to_f16(-1.0f));
  EXPECT_EQ(b.qs[0] & 15, 0);
  EXPECT_EQ(b.qs[1] & 15, 15);
  EXPECT_EQ(b.qs[2] & 15, 8);
  EXPECT_EQ(b.qs[3] & 15, 9);
  EXPECT_EQ(b.qs[0] >> 4, 6);
  EXPECT_EQ(b.qs[4], 8 | (8 << 4));  // zeros -> 8
}

TEST(QuantQuantize, Q8_0RoundsHalvesAwayFromZero) {
  float x[32] = {};
  x[0] = 127.0f;  // d = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  BlockQ8_0 b;
  quantize_row(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 4);
}

TEST(QuantQuantize, Q4_1AndQ5_1AffineCodes) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j % 16);  // min 0, max 15 -> d = 1
  x[5] = 4.5f;                                        // (4.5 + 0.5) truncated -> 5
  BlockQ4_1 b4;
  quantize_row(DType::Q4_1, x, &b4, 32);
  EXPECT_EQ(b4.d, 0x3C00);
  EXPECT_EQ(b4.m, 0);
  EXPECT_EQ(b4.qs[5] & 15, 5);
  EXPECT_EQ(b4.qs[7], 7 | (7 << 4));
  for (int j = 0; j < 32; ++j) x[j] = float(j) - 10.0f;  // min -10, max 21 -> d = 1
  BlockQ5_1 b5;
  quantize_row(DType::Q5_1, x, &b5, 32);
  EXPECT_EQ(b5.d, 0x3C00);
  EXPECT_EQ(b5.m, f32_to_f16(-10.0f));
  float y[32];
  dequantize_row(DType::Q5_1, &b5, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(QuantQuantize, Q5_0ClampsOppositeExtreme) {
  float x[32] = {};
  x[0] = 16.0f;   // d = -1
  x[20] = -16.0f; // 16 + 16.5 -> 32 -> 31 -> value (31 - 16) * -1 = -15
  BlockQ5_0 b;
  quantize_row(DType::Q5_0, x, &b, 32);
  float y[32];
  dequantize_row(DType::Q5_0, &b, y, 32);
  EXPECT_EQ(y[0], 16.0f);
  EXPECT_EQ(y[20], -15.0f);
  EXPECT_EQ(y[1], 0.0f);
}

// Per block bound on |x - dequant(quant(x))|, from the format's step d and the f16
// rounding of d and m (relative 2^-11 each, times the largest code).
double block_bound(DType t, const float* x) {
  double amax = 0, mn = 1e30, mx = -1e30;
  for (int j = 0; j < 32; ++j) {
    amax = std::max(amax, std::fabs(double(x[j])));
    mn = std::min(mn, double(x[j]));
    mx = std::max(mx, double(x[j]));
  }
  const double u = std::ldexp(1.0, -11), tiny = 1e-6 * amax;
  switch (t) {
    case DType::Q8_0: return amax / 127 * (0.5 + 127 * u) + tiny;
    case DType::Q4_0: return amax / 8 * (1.0 + 8 * u) + tiny;    // clamp: one full step
    case DType::Q5_0: return amax / 16 * (1.0 + 16 * u) + tiny;
    case DType::Q4_1: return (mx - mn) / 15 * (0.5 + 15 * u) + std::fabs(mn) * u + tiny;
    case DType::Q5_1: return (mx - mn) / 31 * (0.5 + 31 * u) + std::fabs(mn) * u + tiny;
    default: return 0;
  }
}

TEST(QuantQuantize, RoundTripErrorBound) {
  std::mt19937 rng(2);
  for (DType t : kQuantizable) {
    for (int dist = 0; dist < 5; ++dist) {
      const int64_t n = 32 * 40;
      auto x = random_floats(n, rng, dist == 1 ? 10.0f : 1.0f);
      if (dist == 2) x[77] = 100.0f;                        // an outlier
      if (dist == 3) std::fill(x.begin(), x.begin() + 64, 0.0f);  // zero blocks
      if (dist == 4) std::fill(x.begin() + 64, x.begin() + 96, 0.25f);  // constant block
      std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
      quantize_row(t, x.data(), q.data(), n);
      std::vector<float> y(static_cast<size_t>(n));
      dequantize_row(t, q.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        double bound;
        if (t == DType::F32) bound = 0;
        else if (t == DType::F16) bound = std::fabs(x[size_t(i)]) * std::ldexp(1.0, -11);
        else if (t == DType::BF16) bound = std::fabs(x[size_t(i)]) * std::ldexp(1.0, -8);
        else bound = block_bound(t, &x[size_t(i / 32 * 32)]);
        ASSERT_LE(std::fabs(double(y[size_t(i)]) - x[size_t(i)]), bound)
            << tname(t) << " dist " << dist << " element " << i << " x=" << x[size_t(i)];
      }
    }
  }
}

// ---- activations -------------------------------------------------------------------

TEST(QuantAct, Q8ARoundsToNearestEvenAndKeepsSum) {
  float x[32] = {};
  x[0] = -127.0f;  // d = 1
  x[1] = 2.5f;     // ties to even -> 2
  x[2] = 3.5f;     // -> 4
  x[3] = -2.5f;    // -> -2
  x[4] = 0.49f;
  BlockQ8A b;
  quantize_act_q8a(x, &b, 32);
  EXPECT_EQ(b.d, 1.0f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], -2);
  EXPECT_EQ(b.qs[4], 0);
  EXPECT_EQ(b.s, -123.0f);
}

TEST(QuantAct, Q8AErrorBoundAndZeroBlock) {
  std::mt19937 rng(3);
  auto x = random_floats(32 * 64, rng);
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  std::vector<BlockQ8A> b(64);
  quantize_act_q8a(x.data(), b.data(), int64_t(x.size()));
  EXPECT_EQ(b[0].d, 0.0f);
  EXPECT_EQ(b[0].s, 0.0f);
  for (int i = 0; i < 64; ++i) {
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_GE(b[size_t(i)].qs[j], -127);
      sum += b[size_t(i)].qs[j];
      EXPECT_LE(std::fabs(double(b[size_t(i)].d) * b[size_t(i)].qs[j] - x[size_t(32 * i + j)]),
                0.5001 * b[size_t(i)].d);
    }
    EXPECT_EQ(b[size_t(i)].s, b[size_t(i)].d * float(sum));
  }
}

TEST(QuantAct, KindsAndBytes) {
  EXPECT_EQ(act_kind(DType::F16), ActKind::F32);
  EXPECT_EQ(act_kind(DType::Q6_K), ActKind::Q8A);
  EXPECT_EQ(act_row_bytes(DType::BF16, 10), 40);
  EXPECT_EQ(act_row_bytes(DType::Q4_K, 512), 16 * 40);
}

// ---- dot ---------------------------------------------------------------------------

TEST(QuantDot, EveryTypeEveryPathMatchesDoubleReference) {
  std::mt19937 rng(4);
  double worst = 0;
  for (DType t : kAllTypes) {
    for (int64_t n : lengths(t))
    for (int rep = 0; rep < 3; ++rep) {
      const auto row = random_row(t, n, rng);
      const auto ref = decode_ref(t, row, n);
      const auto act = make_act(t, random_floats(n, rng));
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(ref.w[size_t(i)]) * act.val[size_t(i)];
        mag += ref.mag[size_t(i)] * std::fabs(act.val[size_t(i)]);
      }
      const float scalar = dot_fn(t, Isa::Scalar)(row.data(), act.bytes.data(), n);
      for (Isa isa : isas()) {
        const float got = dot_fn(t, isa)(row.data(), act.bytes.data(), n);
        const double err = std::fabs(double(got) - exact);
        worst = std::max(worst, err / mag);
        EXPECT_LE(err, kDotTol * mag) << tname(t) << " n=" << n << " isa=" << isa_name(isa)
                                      << " got " << got << " want " << exact;
        EXPECT_LE(std::fabs(double(got) - scalar), 2 * kDotTol * mag)
            << tname(t) << " n=" << n << " isa=" << isa_name(isa) << " vs scalar";
      }
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("worst dot error / sum|w a| = %.3g (tolerance %.0e)\n", worst, kDotTol);
}

// With scales 1.0 every term is an integer and every path must be exact: catches a lane
// or nibble mix-up that happened to stay within tolerance.
TEST(QuantDot, LegacyTypesExactWithUnitScales) {
  std::mt19937 rng(5);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    for (int64_t n : {32, 64, 96, 128, 160, 256}) {
      auto row = random_row(t, n, rng);
      const auto& info = dtype_info(t);
      for (int64_t bi = 0; bi < n / 32; ++bi) {
        uint8_t* b = row.data() + bi * info.type_size;
        wr16(b, 0x3C00);
        if (t == DType::Q4_1 || t == DType::Q5_1) wr16(b + 2, 0xBC00);  // m = -1
      }
      std::vector<BlockQ8A> a(size_t(n / 32));
      for (auto& blk : a) {
        int s = 0;
        for (auto& q : blk.qs) s += (q = int8_t(int(rng() % 255) - 127));
        blk.d = 1.0f;
        blk.s = float(s);
      }
      const auto ref = decode_ref(t, row, n);
      double exact = 0;
      for (int64_t i = 0; i < n; ++i) exact += double(ref.w[size_t(i)]) * a[size_t(i / 32)].qs[i % 32];
      for (Isa isa : isas())
        EXPECT_EQ(double(dot_fn(t, isa)(row.data(), a.data(), n)), exact)
            << tname(t) << " n=" << n << " isa=" << isa_name(isa);
    }
  }
}

// Every finite f16 weight, one at a time against a one-hot activation: each path's f16 ->
// f32 conversion (F16C, AVX-512, scalar) must agree with the reference bit for bit.
TEST(QuantDot, F16WeightsConvertExactlyOnEveryPath) {
  std::vector<uint16_t> w(16);
  std::vector<float> a(16);
  for (Isa isa : isas()) {
    const DotFn f = dot_fn(DType::F16, isa);
    for (uint32_t h = 0; h < 0x10000; h += 16) {
      for (int k = 0; k < 16; ++k) w[size_t(k)] = uint16_t(h + uint32_t(k));
      if (((h >> 10) & 31) == 31) continue;  // inf / nan rows
      for (int k = 0; k < 16; ++k) {
        std::fill(a.begin(), a.end(), 0.0f);
        a[size_t(k)] = 1.0f;
        const float got = f(w.data(), a.data(), 16);
        const float want = half_ref(w[size_t(k)]);
        // -0 * 1 summed with +0 terms gives +0: compare values, not sign of zero.
        ASSERT_EQ(got, want) << isa_name(isa) << " h=" << w[size_t(k)];
      }
    }
  }
}

TEST(QuantDot, ValueDependsOnlyOnTheRows) {
  std::mt19937 rng(6);
  for (DType t : kAllTypes) {
    const int64_t n = dtype_info(t).block_size >= 128 ? 512 : 160;
    const auto row = random_row(t, n, rng);
    const auto act = make_act(t, random_floats(n, rng));
    for (Isa isa : isas()) {
      const DotFn f = dot_fn(t, isa);
      const float first = f(row.data(), act.bytes.data(), n);
      // Same bytes at other addresses (4-byte steps keep f32 / f16 alignment; GGUF aligns tensors).
      for (size_t off : {4u, 8u, 36u, 68u}) {
        std::vector<uint8_t> w2(row.size() + off), a2(act.bytes.size() + off);
        std::memcpy(w2.data() + off, row.data(), row.size());
        std::memcpy(a2.data() + off, act.bytes.data(), act.bytes.size());
        const float again = f(w2.data() + off, a2.data() + off, n);
        ASSERT_EQ(f32_to_bits(again), f32_to_bits(first)) << tname(t) << " " << isa_name(isa);
      }
    }
  }
}

// ---- errors ------------------------------------------------------------------------

template <typename F>
void expect_error_naming(F f, const std::string& name) {
  try {
    f();
    ADD_FAILURE() << "no ridge::Error thrown for " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST(QuantErrors, UnsupportedTypesThrowNamingTheType) {
  float x[256] = {};
  uint8_t buf[1024] = {};
  expect_error_naming([&] { dequantize_row(DType::Q2_K, buf, x, 256); }, "q2_k");
  expect_error_naming([&] { dequantize_row(DType::Q8_1, buf, x, 32); }, "q8_1");
  expect_error_naming([&] { dot_fn(DType::Q3_K, Isa::Scalar); }, "q3_k");
  expect_error_naming([&] { dot_fn(DType::I8); }, "i8");
  expect_error_naming([&] { quantize_row(DType::Q3_K, x, buf, 256); }, "q3_k");
  expect_error_naming([&] { act_kind(DType::Q8_K); }, "q8_k");
  EXPECT_TRUE(can_quantize(DType::Q6_K));
  EXPECT_FALSE(can_quantize(DType::Q8_K));
  EXPECT_TRUE(can_quantize(DType::Q5_1));
  EXPECT_THROW(dequantize_row(DType::Q4_0, buf, x, 33), Error);
  EXPECT_THROW(quantize_row(DType::Q8_0, x, buf, 48), Error);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_row(DType::Q8_0, x, buf, 32), Error);
}

// ---- f16 / bf16 conversions --------------------------------------------------------

TEST(F16Convert, AllHalvesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    const float r = half_ref(uint16_t(h));
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_bits(f), f32_to_bits(r)) << h;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(F16Convert, RoundingEdgeCases) {
  const float t24 = std::ldexp(1.0f, -24), t25 = std::ldexp(1.0f, -25);
  EXPECT_EQ(f32_to_f16(t24), 0x0001);           // smallest subnormal
  EXPECT_EQ(f32_to_f16(t25), 0x0000);           // tie -> even (0)
  EXPECT_EQ(f32_to_f16(t25 * 1.0001f), 0x0001); // just above the tie
  EXPECT_EQ(f32_to_f16(3 * t25), 0x0002);       // tie between 1 and 2 -> 2
  EXPECT_EQ(f32_to_f16(-t24), 0x8001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14) - t25), 0x0400);  // tie -> smallest normal
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie past max -> inf
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_EQ(f16_to_f32(0x0001), t24);
  EXPECT_EQ(f16_to_f32(0x7C00), INFINITY);
}

TEST(F16Convert, Bf16RoundTripAndTies) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << h;
  }
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1.0f + 1.5f * std::ldexp(1.0f, -8)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(std::ldexp(1.0f, -130)), 0x0008);  // f32 subnormal, exact
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xFF80);
}

}  // namespace
}  // namespace ridge::quant
