// OCP FP8 (quant/fp8.h) against the specification's definition, over every code: the
// scalar conversions, the AVX-512 conversion the attention kernel reads the cache with,
// and quantizing (nearest, ties to even, saturating) against a search over all codes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "model/kv_cache.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace ridge {
namespace {

// The specification's table, written from its text: value = (-1)^s x 2^(E - bias) x
// (1 + M / 2^m) for E > 0, (-1)^s x 2^(1 - bias) x (M / 2^m) for E = 0. E4M3: bias 7,
// S.1111.111 NaN, no infinities. E5M2: bias 15, E = 31 infinities (M = 0) and NaNs.
double spec_value(uint8_t c, bool e4m3) {
  const int m = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, emax_field = e4m3 ? 15 : 31;
  const int s = c >> 7, E = (c >> m) & ((1 << (7 - m)) - 1), M = c & ((1 << m) - 1);
  if (e4m3 && E == emax_field && M == (1 << m) - 1) return std::nan("");
  if (!e4m3 && E == emax_field) return M ? std::nan("") : (s ? -INFINITY : INFINITY);
  const double mag = E == 0 ? std::ldexp(double(M) / (1 << m), 1 - bias) : std::ldexp(1.0 + double(M) / (1 << m), E - bias);
  return s ? -mag : mag;
}

bool same(double a, float b) { return (std::isnan(a) && std::isnan(b)) || (a == double(b) && std::signbit(a) == std::signbit(b)); }

TEST(Fp8, EveryCodeDecodesAsTheSpecificationSays) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_TRUE(same(spec_value(uint8_t(c), true), quant::fp8_e4m3_to_f32(uint8_t(c)))) << "e4m3 code " << c;
    EXPECT_TRUE(same(spec_value(uint8_t(c), false), quant::fp8_e5m2_to_f32(uint8_t(c)))) << "e5m2 code " << c;
  }
  EXPECT_EQ(quant::fp8_e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(quant::fp8_e5m2_to_f32(0x7B), 57344.f);
  EXPECT_EQ(quant::fp8_e4m3_to_f32(0x01), std::ldexp(1.f, -9));   // the smallest subnormal
  EXPECT_EQ(quant::fp8_e5m2_to_f32(0x01), std::ldexp(1.f, -16));
}

// The bf16 kernels' tables (attention's FP8 caches, the FP8 weights' bf16 path) are made
// from these bits: each code's bf16, its sign in bit 15, is the specification's value.
TEST(Fp8, EveryCodesBf16BitsAreItsValue) {
  for (int c = 0; c < 256; ++c) {
    const uint16_t sign = uint16_t((c & 0x80) << 8);
    const float e4m3 = std::bit_cast<float>(uint32_t(sign | quant::fp8_e4m3_bf16_bits(c & 0x7F)) << 16);
    const float e5m2 = std::bit_cast<float>(uint32_t(sign | quant::fp8_e5m2_bf16_bits(c & 0x7F)) << 16);
    EXPECT_TRUE(same(spec_value(uint8_t(c), true), e4m3)) << "e4m3 code " << c;
    EXPECT_TRUE(same(spec_value(uint8_t(c), false), e5m2)) << "e5m2 code " << c;
  }
}

// The nearest finite code by search (ties to the even code: mantissa LSB 0), saturating.
uint8_t spec_quantize(float x, bool e4m3) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  const int max_code = e4m3 ? 0x7E : 0x7B;
  if (a >= spec_value(uint8_t(max_code), e4m3)) return uint8_t(sign | max_code);  // saturation
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= max_code; ++c) {
    const double d = std::fabs(spec_value(uint8_t(c), e4m3) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return uint8_t(sign | best);
}

TEST(Fp8, QuantizeRoundsToNearestEvenAndSaturates) {
  std::vector<float> xs = {0.f, -0.f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e30f,
                           448.f, 464.f, 465.f, 447.f, 57344.f, 61440.f, 1e-30f, std::ldexp(1.f, -10), std::ldexp(3.f, -11)};
  // Every code's value, the midpoints between neighbours (ties), and just either side.
  for (bool e4m3 : {true, false})
    for (int c = 0; c < 127; ++c) {
      const double v = spec_value(uint8_t(c), e4m3), w = spec_value(uint8_t(c + 1), e4m3);
      if (!std::isfinite(v)) continue;
      xs.push_back(float(v));
      if (!std::isfinite(w)) continue;
      const float mid = float((v + w) / 2);
      xs.insert(xs.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY), -mid});
    }
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::bit_cast<float>(uint32_t(rng())));
  for (float x : xs) {
    EXPECT_EQ(quant::f32_to_fp8_e4m3(x), spec_quantize(x, true)) << "e4m3 of " << x;
    EXPECT_EQ(quant::f32_to_fp8_e5m2(x), spec_quantize(x, false)) << "e5m2 of " << x;
  }
}

// The weight kernels' form of a code (a half, x 2^-8) is the specification's value, for
// every finite code; the NaN codes are the ones the loader's scan finds.
TEST(Fp8, WeightUnitOfEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    const double v = spec_value(uint8_t(c), true);
    std::vector<uint8_t> one{uint8_t(c)};
    if (std::isnan(v)) {
      EXPECT_EQ(quant::find_fp8_e4m3_nan(one.data(), 1), 0) << c;
      continue;
    }
    EXPECT_EQ(quant::find_fp8_e4m3_nan(one.data(), 1), -1) << c;
    EXPECT_TRUE(same(v, quant::fp8_e4m3_unit(uint8_t(c)) * 256.f)) << "code " << c;
  }
}

// FP8 weight rows: d = amax / 448, so the block's largest magnitude is the code 448 (or
// -448) exactly; every value within half an E4M3 step (relative 2^-4) of the source;
// a zero block stays zero; a non-finite weight is refused.
TEST(Fp8, WeightRowsQuantizeAndDequantize) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(384), back(384);
  for (auto& v : x) v = nd(rng) * 0.02f;
  for (int j = 128; j < 256; ++j) x[size_t(j)] = 0.f;
  x[300] = -1.5f;  // the third block's extreme, negative
  std::vector<quant::BlockFp8> b(3);
  quant::quantize_row(DType::F8_E4M3_B128, x.data(), b.data(), 384);
  quant::dequantize_row(DType::F8_E4M3_B128, b.data(), back.data(), 384);
  EXPECT_EQ(b[1].d, 0.f);
  EXPECT_EQ(b[2].qs[300 - 256], 0xFE);  // -448
  for (int j = 0; j < 384; ++j) {
    const float d = b[size_t(j / 128)].d;
    // Subnormal codes are evenly spaced by 2^-9 x d; normals within 2^-4 relative.
    EXPECT_LE(std::fabs(back[size_t(j)] - x[size_t(j)]), std::max(std::fabs(x[size_t(j)]) * 0.0625f, std::ldexp(d, -10)) * 1.0001f) << j;
  }
  EXPECT_THROW(quant::quantize_row(DType::F8_E4M3_B128, x.data(), b.data(), 300), Error);  // not whole blocks
  x[5] = NAN;
  EXPECT_THROW(quant::quantize_row(DType::F8_E4M3_B128, x.data(), b.data(), 384), Error);
  // Scales the kernels can use (d x 2^8 stays finite on the f16c path).
  EXPECT_TRUE(quant::fp8_scale_ok(1e30f));
  EXPECT_FALSE(quant::fp8_scale_ok(0x1p120f));
  EXPECT_FALSE(quant::fp8_scale_ok(-INFINITY));
  EXPECT_FALSE(quant::fp8_scale_ok(NAN));
}

// The attention kernels' conversions of the cache's codes, every code, on each SIMD path
// the CPU has.
TEST(Fp8, VectorConversionOfEveryCode) {
  if (int(best_isa()) < int(Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[size_t(c)] = uint8_t(c);
  for (DType t : {DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (const bool avx512 : {false, true}) {
      if (avx512 && best_isa() != Isa::Avx512) continue;
      // Whole runs and each tail width (the 16-, 8- and 1-wide loops), from every offset.
      for (int64_t n : {256, 8 + 3, 1})
        for (int64_t off = 0; off + n <= 256; off += n) {
          std::vector<float> simd(static_cast<size_t>(n)), scalar(static_cast<size_t>(n));
          if (avx512) kernels::detail::kv_codes_to_f32_avx512(t, codes.data() + off, simd.data(), n);
          else kernels::detail::kv_codes_to_f32_avx2(t, codes.data() + off, simd.data(), n);
          kernels::to_f32(t, codes.data() + off, scalar.data(), n);
          for (int64_t c = 0; c < n; ++c)
            ASSERT_TRUE(same(double(scalar[size_t(c)]), simd[size_t(c)]))
                << dtype_name(t) << (avx512 ? " avx512" : " avx2") << " code " << off + c << " (n = " << n
                << "): " << scalar[size_t(c)] << " vs " << simd[size_t(c)];
        }
    }
}

// A head vector so small that its scale is subnormal (1 / scale overflows) reads back as
// zeros, not NaN; one with a NaN reads back NaN; the codes and scales of each position
// are its own.
TEST(Fp8, KvCacheScalesOfTinyAndNanVectors) {
  for (DType t : {DType::I8, DType::F8_E4M3, DType::F8_E5M2}) {
    KVLayout l;
    l.n_layer = 1, l.n_kv_head = 2, l.head_dim_k = 6, l.head_dim_v = 6, l.block_size = 3, l.n_blocks = 2, l.dtype = t;
    KVCache kv(l);
    const std::vector<float> tiny{1e-40f, 0.f, -2e-41f, 0.f, 0.f, 0.f}, nan{1.f, std::nanf(""), 0.f, 0.f, 0.f, 0.f};
    const std::vector<float> big{3.f, -1.5f, 0.25f, 100.f, -7.f, 0.f};
    kv.write_k(0, 1, 1, 2, tiny.data());
    kv.write_v(0, 1, 1, 2, tiny.data());
    kv.write_k(0, 1, 1, 1, nan.data());
    kv.write_k(0, 1, 1, 0, big.data());
    kv.write_v(0, 1, 0, 0, big.data());
    std::vector<float> x(6);
    kv.read_k(0, 1, 1, 2, x.data());
    for (float v : x) EXPECT_EQ(v, 0.f) << dtype_name(t);
    kv.read_v(0, 1, 1, 2, x.data());
    for (float v : x) EXPECT_EQ(v, 0.f) << dtype_name(t);
    kv.read_k(0, 1, 1, 1, x.data());
    for (float v : x) EXPECT_TRUE(std::isnan(v)) << dtype_name(t);
    const double tol = t == DType::I8 ? 100.0 / 127 / 2 : t == DType::F8_E4M3 ? 100.0 / 16 : 100.0 / 8;
    for (bool k : {true, false}) {
      if (k) kv.read_k(0, 1, 1, 0, x.data());
      else kv.read_v(0, 1, 0, 0, x.data());
      for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(x[i], big[i], tol) << dtype_name(t) << (k ? " K " : " V ") << i;
      if (t == DType::I8) {
        EXPECT_NEAR(x[3], 100.f, 1e-4) << "int8: the largest value is a code's exactly";
      }
    }
  }
}

// The FP8 KV scale search (kernels/cpu/convert.h fp8_kv_scale) measures each candidate's
// error with its own rounding to the format's grid: on both paths it is the converter's,
// exactly. Every code's value, the midpoints between neighbours (ties) and an ulp either
// side of them, values past the largest (taken as the largest) and random ones: the error
// of y at scale 1 is (decode(encode(y)) - y)^2, rounded once.
TEST(Fp8, KvScaleErrorsAreTheConvertersRoundings) {
  for (DType t : {DType::F8_E4M3, DType::F8_E5M2}) {
    const bool e4m3 = t == DType::F8_E4M3;
    const auto enc = [&](float y) { return e4m3 ? quant::f32_to_fp8_e4m3(y) : quant::f32_to_fp8_e5m2(y); };
    const auto dec = [&](uint8_t c) { return e4m3 ? quant::fp8_e4m3_to_f32(c) : quant::fp8_e5m2_to_f32(c); };
    std::vector<float> ys;
    std::vector<float> codes;
    for (int c = 0; c < 128; ++c)
      if (std::isfinite(dec(uint8_t(c)))) codes.push_back(dec(uint8_t(c)));
    for (size_t i = 0; i < codes.size(); ++i) {
      ys.push_back(codes[i]);
      if (i + 1 < codes.size()) {
        const float mid = (codes[i] + codes[i + 1]) / 2;  // exact: one more bit
        ys.insert(ys.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)});
      }
    }
    const float max = codes.back();
    ys.insert(ys.end(), {max * 1.01f, max * 1.5f, 1e-30f, 1e-41f});
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    for (int i = 0; i < 2000; ++i) ys.push_back(std::ldexp(1.f + u(rng), int(u(rng) * 40) - (e4m3 ? 12 : 20)));
    const float one = 1.f;
    for (float y : ys) {
      const float yc = std::min(y, max);  // the search's values are at most max (up to a rounding): clamped there
      const float d = dec(enc(yc)) - yc, want = d * d;
      float got = -1;
      kernels::detail::fp8_sq_errors_scalar(t, &y, 1, &one, 1, &got);
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << dtype_name(t) << " scalar y = " << y;
      if (best_isa() == Isa::Avx512) {
        kernels::detail::fp8_sq_errors_avx512(t, &y, 1, &one, 1, &got);
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << dtype_name(t) << " avx512 y = " << y;
      }
    }
  }
}

// The search picks the same scale on every path, one of amax / max x (1 + k / 32), never
// one whose codes give x back worse than amax / max's (within the rounding of the
// comparison), and on heads of 8 Gaussian values about halves the squared error.
TEST(Fp8, KvScaleSearchIsTheSameOnEveryPathAndBetter) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> u(-9.f, 3.f);
  for (DType t : {DType::F8_E4M3, DType::F8_E5M2}) {
    const bool e4m3 = t == DType::F8_E4M3;
    const float max = e4m3 ? quant::kFp8E4M3Max : quant::kFp8E5M2Max;
    const auto back = [&](const std::vector<float>& x, float s) {
      double e = 0;
      for (float v : x) {
        const uint8_t c = e4m3 ? quant::f32_to_fp8_e4m3(v * (1.f / s)) : quant::f32_to_fp8_e5m2(v * (1.f / s));
        const double r = double(e4m3 ? quant::fp8_e4m3_to_f32(c) : quant::fp8_e5m2_to_f32(c)) * s - v;
        e += r * r;
      }
      return e;
    };
    double sum_base = 0, sum_best = 0;
    for (int trial = 0; trial < 600; ++trial) {
      const int64_t n = trial % 5 == 0 ? 13 : trial % 5 == 1 ? 64 : trial % 5 == 2 ? 128 : 8;
      std::vector<float> x(static_cast<size_t>(n));
      const float mag = trial % 7 == 0 ? std::pow(10.f, u(rng)) : 1.f;  // tiny heads reach the subnormals
      for (auto& v : x) v = nd(rng) * mag;
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      set_isa(Isa::Scalar);
      const float s_scalar = kernels::fp8_kv_scale(t, x.data(), n, amax);
      set_isa(best_isa());
      const float s = kernels::fp8_kv_scale(t, x.data(), n, amax);
      ASSERT_EQ(std::bit_cast<uint32_t>(s), std::bit_cast<uint32_t>(s_scalar)) << dtype_name(t) << " trial " << trial;
      const float base = amax / max;
      bool listed = false;
      for (int k = 0; k < kernels::kFp8ScaleSteps; ++k) listed |= s == base * (1.f + float(k) / kernels::kFp8ScaleSteps);
      EXPECT_TRUE(listed) << s << " is not a candidate of amax " << amax;
      const double e_base = back(x, base), e_best = back(x, s);
      EXPECT_LE(e_best, e_base * (1 + 1e-4) + 1e-30) << dtype_name(t) << " trial " << trial;
      if (n == 8 && mag == 1.f) sum_base += e_base, sum_best += e_best;
    }
    EXPECT_LT(sum_best, 0.6 * sum_base) << dtype_name(t) << ": the search gained little on 8-value heads";
  }
}

// Int8 values lie four positions to a slot (kv_view.h), which the AVX-512 attention's
// integer P.V reads: dimension d of slot s at byte ((s / 4) x head_dim_v + d) x 4 + s % 4,
// the slots padded to 4.
TEST(Fp8, Int8ValuesLieFourPositionsToASlot) {
  KVLayout l;
  l.n_layer = 1, l.n_kv_head = 2, l.head_dim_k = 8, l.head_dim_v = 10, l.block_size = 5, l.n_blocks = 1;
  l.dtype = DType::I8;
  KVCache kv(l);
  EXPECT_EQ(kv.v_codes_bytes(), 8 * 10);  // 5 slots padded to 8
  std::vector<float> x(10);
  for (int32_t d = 0; d < 10; ++d) x[size_t(d)] = float(d + 1) * (d % 2 ? -1.f : 1.f);  // amax 10: scale 10/127
  kv.write_v(0, 0, 1, 4, x.data());
  const auto* codes = reinterpret_cast<const int8_t*>(kv.v_tile(0, 0, 1));
  for (int32_t d = 0; d < 10; ++d)
    EXPECT_EQ(codes[(1 * 10 + d) * 4 + 0], int8_t(std::nearbyint(x[size_t(d)] * 12.7f))) << "dimension " << d;
  EXPECT_FLOAT_EQ(kv.v_scales(0, 0, 1)[4], 10.f / 127.f);
  std::vector<float> y(10);
  kv.read_v(0, 0, 1, 4, y.data());
  for (int32_t d = 0; d < 10; ++d) EXPECT_NEAR(y[size_t(d)], x[size_t(d)], 10.f / 254.f + 1e-6f);
}

// Int8 keys lie four dimensions to a slot (kv_view.h), which the AVX-512 attention's
// integer scores read: dimension d of slot s at byte (d / 4 x block_size + s) x 4 + d % 4.
TEST(Fp8, Int8KeysLieFourDimensionsToASlot) {
  KVLayout l;
  l.n_layer = 1, l.n_kv_head = 1, l.head_dim_k = 10, l.head_dim_v = 10, l.block_size = 5, l.n_blocks = 1;
  l.dtype = DType::I8;
  KVCache kv(l);
  EXPECT_EQ(kv.k_codes_bytes(), 5 * 12);  // 10 dimensions padded to 12, per slot
  std::vector<float> x(10);
  for (int32_t d = 0; d < 10; ++d) x[size_t(d)] = float(d + 1) * (d % 2 ? -1.f : 1.f);  // amax 10: scale 10/127
  kv.write_k(0, 0, 0, 3, x.data());
  const auto* codes = reinterpret_cast<const int8_t*>(kv.k_tile(0, 0, 0));
  for (int32_t d = 0; d < 10; ++d)
    EXPECT_EQ(codes[(d / 4 * 5 + 3) * 4 + d % 4], int8_t(std::nearbyint(x[size_t(d)] * 12.7f))) << "dimension " << d;
  EXPECT_FLOAT_EQ(kv.k_scales(0, 0, 0)[3], 10.f / 127.f);
}

}  // namespace
}  // namespace ridge
