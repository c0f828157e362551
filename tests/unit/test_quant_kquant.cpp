// K-quant quantizers (Q4_K, Q5_K, Q6_K): round-trip error on several distributions,
// exact cases, determinism, block independence, and the dot kernels on rows they produce.
//
// Error figure: e = rms(dequant(quant(x)) - x) / rms(x) over the whole row. The bounds
// are the measured values (seeded, so fixed numbers) with ~25% headroom. Measured on
// gaussian rows: q4_k 0.072, q5_k 0.036, q6_k 0.0175, against q4_0 0.085, q5_0 0.043,
// q8_0 0.0053 (the printed table has every distribution). For comparison, a uniform
// quantizer with step s has rms error s/sqrt(12): each extra bit halves it.
// Dot tolerance: as test_quant.cpp, 1e-5 relative to sum |w_i| |a_i|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/quantize_model.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace ridge::quant {
namespace {

const DType kKTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::string tname(DType t) { return std::string(dtype_name(t)); }

enum class Dist { Gauss, GaussOutliers, Uniform, Laplace, Tiny, Large, Shifted };
const Dist kDists[] = {Dist::Gauss, Dist::GaussOutliers, Dist::Uniform, Dist::Laplace,
                       Dist::Tiny, Dist::Large, Dist::Shifted};
const char* dist_name(Dist d) {
  switch (d) {
    case Dist::Gauss: return "gauss";
    case Dist::GaussOutliers: return "gauss+outliers";
    case Dist::Uniform: return "uniform";
    case Dist::Laplace: return "laplace";
    case Dist::Tiny: return "tiny(1e-3)";
    case Dist::Large: return "large(300)";
    case Dist::Shifted: return "gauss+2";
  }
  return "?";
}

std::vector<float> make_row(Dist d, int64_t n, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::exponential_distribution<float> ex(1.0f);
  for (auto& v : x) {
    switch (d) {
      case Dist::Gauss: v = g(rng); break;
      case Dist::GaussOutliers: v = (rng() % 100 == 0) ? 20.0f * g(rng) : g(rng); break;
      case Dist::Uniform: v = u(rng); break;
      case Dist::Laplace: v = ex(rng) * ((rng() & 1) ? 1.0f : -1.0f); break;
      case Dist::Tiny: v = 1e-3f * g(rng); break;
      case Dist::Large: v = 300.0f * g(rng); break;
      case Dist::Shifted: v = 2.0f + g(rng); break;
    }
  }
  return x;
}

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, int64_t(x.size()))));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  return q;
}

std::vector<float> roundtrip(DType t, const std::vector<float>& x) {
  const auto q = quantize(t, x);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  return y;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    s += double(x[i]) * x[i];
  }
  return s > 0 ? std::sqrt(e / s) : std::sqrt(e);
}

// Bound on the relative rms error per type: the largest measured over the distributions
// (gauss+outliers, whose outliers stretch their sub-blocks' steps) plus ~25%.
double bound(DType t) {
  switch (t) {
    case DType::Q4_K: return 0.12;
    case DType::Q5_K: return 0.062;
    case DType::Q6_K: return 0.039;
    default: return 0;
  }
}

TEST(QuantKQuant, RoundTripErrorWithinBounds) {
  std::mt19937 rng(21);
  std::printf("%-16s %8s %8s %8s %8s %8s %8s\n", "dist", "q4_k", "q5_k", "q6_k", "q4_0", "q5_0", "q8_0");
  for (Dist d : kDists) {
    for (int64_t n : {int64_t(256), int64_t(256 * 24)}) {
      const auto x = make_row(d, n, rng);
      double e[6];
      int k = 0;
      for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q5_0, DType::Q8_0})
        e[k++] = rel_rmse(x, roundtrip(t, x));
      if (n > 256)
        std::printf("%-16s %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f\n", dist_name(d), e[0], e[1], e[2], e[3], e[4], e[5]);
      for (int i = 0; i < 3; ++i)
        EXPECT_LE(e[i], bound(kKTypes[i])) << tname(kKTypes[i]) << " " << dist_name(d) << " n=" << n;
      // More bits, less error; and a K type beats the legacy type of the same width.
      EXPECT_LT(e[2], e[1]) << dist_name(d) << " n=" << n << ": q6_k vs q5_k";
      EXPECT_LT(e[1], e[0]) << dist_name(d) << " n=" << n << ": q5_k vs q4_k";
      EXPECT_LT(e[0], e[3]) << dist_name(d) << " n=" << n << ": q4_k vs q4_0";
      EXPECT_LT(e[1], e[4]) << dist_name(d) << " n=" << n << ": q5_k vs q5_0";
      EXPECT_LT(e[5], e[2]) << dist_name(d) << " n=" << n << ": q8_0 vs q6_k";
    }
  }
}

// Every element within one step of its sub-block: a wrongly packed code is off by whole
// steps (or 16 steps for a misplaced high bit), which the rms figure could hide.
TEST(QuantKQuant, EveryElementWithinItsSubBlockRange) {
  std::mt19937 rng(22);
  for (DType t : kKTypes) {
    const int sub = t == DType::Q6_K ? 16 : 32;
    for (Dist d : kDists) {
      const auto x = make_row(d, 256 * 8, rng);
      const auto y = roundtrip(t, x);
      for (size_t s = 0; s < x.size(); s += size_t(sub)) {
        float lo = 0, hi = 0;
        for (int i = 0; i < sub; ++i) {
          lo = std::min(lo, x[s + size_t(i)]);
          hi = std::max(hi, x[s + size_t(i)]);
        }
        // Codes: 15, 31 steps over [min(lo,0), hi]; Q6_K: 64 over [-amax, amax]. A sub-block
        // far below its super-block's largest gets a coarse 6-bit scale: measured worst
        // 0.11 (q4_k), 0.12 (q5_k), 0.05 (q6_k) of the range. A misplaced high bit is off by
        // 16 steps (>= 0.25 of the range), a swapped nibble by a random amount.
        const double range = double(hi) - lo;
        for (int i = 0; i < sub; ++i)
          ASSERT_LE(std::fabs(double(y[s + size_t(i)]) - x[s + size_t(i)]), 0.15 * range + 1e-6)
              << tname(t) << " " << dist_name(d) << " element " << s + size_t(i);
      }
    }
  }
}

TEST(QuantKQuant, ZeroAndConstantRows) {
  for (DType t : kKTypes) {
    const std::vector<float> zero(512, 0.0f);
    for (float v : roundtrip(t, zero)) ASSERT_EQ(v, 0.0f) << tname(t);
    for (float c : {0.25f, -0.25f, 3.0f, -1e-3f}) {
      const std::vector<float> x(512, c);
      const auto y = roundtrip(t, x);
      // Exact up to the rounding of d (and dmin) to f16 and of the 6/8-bit sub-block scale
      // against it: 2^-11 relative for a normal half, up to ~0.4% where d is subnormal.
      const double tol = std::fabs(c) * (std::fabs(c) < 0.01f ? 5e-3 : 2e-3);
      for (float v : y) ASSERT_NEAR(v, c, tol) << tname(t) << " c=" << c;
    }
    // Half zeros, half a constant, inside one super-block: zeros stay exact where the
    // format can place 0 on a code (every type here can: min clamps to <= 0, Q6_K is
    // symmetric).
    std::vector<float> x(256, 0.0f);
    std::fill(x.begin() + 128, x.end(), 0.7f);
    const auto y = roundtrip(t, x);
    for (size_t i = 0; i < 128; ++i) ASSERT_EQ(y[i], 0.0f) << tname(t) << " " << i;
    for (size_t i = 128; i < 256; ++i) ASSERT_NEAR(y[i], 0.7f, 0.7f * 2e-3) << tname(t) << " " << i;
  }
}

// Magnitudes where d drops into f16 subnormals and below. Measured relative error at
// sigma 1e-4 / 1e-5 / 1e-6: q4_k 0.078 / 0.075 / 0.087, q5_k 0.037 / 0.037 / 0.091,
// q6_k 0.017 / 0.022 / 0.11; from 1e-8 down everything rounds to 0 (error 1.0). The result
// stays finite and the error never exceeds the row itself.
TEST(QuantKQuant, TinyMagnitudesStayFiniteAndBounded) {
  std::mt19937 rng(23);
  for (DType t : kKTypes) {
    for (float scale : {1e-4f, 1e-5f, 1e-6f, 1e-8f, 1e-12f, 1e-20f, 1e-38f}) {
      auto x = make_row(Dist::Gauss, 512, rng);
      for (auto& v : x) v *= scale;
      const auto y = roundtrip(t, x);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << tname(t) << " scale " << scale;
      const double e = rel_rmse(x, y);
      const double b = scale >= 1e-5f ? bound(t) : scale >= 1e-6f ? 0.15 : 1.0 + 1e-6;
      EXPECT_LE(e, b) << tname(t) << " scale " << scale;
    }
  }
}

TEST(QuantKQuant, DeterministicAndBlockIndependent) {
  std::mt19937 rng(24);
  for (DType t : kKTypes) {
    const auto x = make_row(Dist::GaussOutliers, 256 * 6, rng);
    const auto a = quantize(t, x), b = quantize(t, x);
    ASSERT_EQ(a, b) << tname(t);
    // Super-block 3 quantized on its own gives the same bytes as within the row.
    const std::vector<float> one(x.begin() + 3 * 256, x.begin() + 4 * 256);
    const auto q1 = quantize(t, one);
    const size_t bs = size_t(dtype_info(t).type_size);
    ASSERT_TRUE(std::equal(q1.begin(), q1.end(), a.begin() + 3 * bs)) << tname(t);
  }
}

// Dequantize is the reference: dot_fn on the quantized row (every ISA path) must equal
// sum(dequantized w * activation as the kernel sees it) within the dot tolerance, and be
// near the f32 dot of the original x (the quantization error, here bounded loosely).
TEST(QuantKQuant, DotMatchesDequantizedDot) {
  constexpr double kDotTol = 1e-5;
  std::mt19937 rng(25);
  for (DType t : kKTypes) {
    for (int64_t n : {int64_t(256), int64_t(512), int64_t(2304), int64_t(4096)}) {
      for (Dist d : {Dist::Gauss, Dist::GaussOutliers, Dist::Shifted}) {
        const auto x = make_row(d, n, rng);
        const auto a = make_row(Dist::Gauss, n, rng);
        const auto q = quantize(t, x);
        std::vector<float> w(static_cast<size_t>(n));
        dequantize_row(t, q.data(), w.data(), n);
        std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(t, n)));
        prepare_act(t, a.data(), act.data(), n);
        const auto* blk = reinterpret_cast<const BlockQ8A*>(act.data());
        double exact = 0, mag = 0, f32dot = 0, f32mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double av = double(blk[i / 32].d) * blk[i / 32].qs[i % 32];
          exact += double(w[size_t(i)]) * av;
          mag += std::fabs(double(w[size_t(i)]) * av);
          f32dot += double(x[size_t(i)]) * a[size_t(i)];
          f32mag += std::fabs(double(x[size_t(i)]) * a[size_t(i)]);
        }
        for (int isa = 0; isa <= int(best_isa()); ++isa) {
          const float got = dot_fn(t, Isa(isa))(q.data(), act.data(), n);
          // The kernels split d*sc*q - dmin*m per sub-block; the min part is not in |w|,
          // so allow for it through the activation sums (|dmin*m| <= |w| + |d*sc*q|).
          EXPECT_LE(std::fabs(double(got) - exact), 4 * kDotTol * mag + 1e-6)
              << tname(t) << " n=" << n << " " << dist_name(d) << " isa=" << isa_name(Isa(isa));
          EXPECT_LE(std::fabs(double(got) - f32dot), 0.1 * f32mag)
              << tname(t) << " n=" << n << " " << dist_name(d) << " vs f32 dot";
        }
      }
    }
  }
}

TEST(QuantKQuant, BadInputThrows) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> buf(4096);
  for (DType t : kKTypes) {
    EXPECT_TRUE(can_quantize(t));
    EXPECT_THROW(quantize_row(t, x.data(), buf.data(), 320), Error) << tname(t);
    x[300] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(quantize_row(t, x.data(), buf.data(), 512), Error) << tname(t);
    x[300] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THROW(quantize_row(t, x.data(), buf.data(), 512), Error) << tname(t);
    x[300] = 1.0f;
    // Values whose super-block scale overflows f16 are refused, not written as inf.
    x[7] = 3e9f;
    EXPECT_THROW(quantize_row(t, x.data(), buf.data(), 512), Error) << tname(t);
    x[7] = 1.0f;
  }
  EXPECT_FALSE(can_quantize(DType::Q8_K));
  EXPECT_FALSE(can_quantize(DType::Q3_K));
}

}  // namespace
}  // namespace ridge::quant

// ---- llama-quantize's mixes (model/quantize_model.h) -----------------------------------

namespace ridge {
namespace {

QuantTarget target(const char* name) {
  auto t = quant_target_from_name(name);
  EXPECT_TRUE(t.has_value()) << name;
  return t.value_or(QuantTarget{"", DType::F32, QuantMix::None, 0});
}

// A TinyLlama-shaped model: 22 layers, rows of 2048 (5632 for ffn_down).
DType tl(const QuantTarget& tg, const std::string& name, int layer = -1, bool has_output = true) {
  const int64_t ne0 = name.find("ffn_down") != std::string::npos ? 5632 : 2048;
  const int n_dims = name.find("norm") != std::string::npos ? 1 : 2;
  return quant_tensor_type(tg, name, DType::F16, n_dims, ne0, layer, 22, has_output);
}

std::string blk(int i, const char* t) { return "blk." + std::to_string(i) + "." + t + ".weight"; }

TEST(QuantMix, NamesAndFileTypes) {
  EXPECT_EQ(target("q4_k_s").file_type, 14u);
  EXPECT_EQ(target("Q4_K_M").file_type, 15u);
  EXPECT_EQ(target("q5_k_s").file_type, 16u);
  EXPECT_EQ(target("q5_k_m").file_type, 17u);
  EXPECT_EQ(target("q6_k").file_type, 18u);
  EXPECT_EQ(target("q8_0").file_type, 7u);
  EXPECT_EQ(target("q4_k_m").base, DType::Q4_K);
  EXPECT_EQ(target("q4_k").mix, QuantMix::None);
  EXPECT_FALSE(quant_target_from_name("q3_k_xl").has_value());
  EXPECT_FALSE(quant_target_from_name("q8_k").has_value());
  EXPECT_FALSE(quant_target_from_name("").has_value());
  const std::string names = quant_target_names();
  for (const char* n : {"f16", "q4_0", "q5_1", "q4_k", "q4_k_m", "q5_k_s", "q6_k"})
    EXPECT_NE(names.find(n), std::string::npos) << n << " in " << names;
}

// use_more_bits over 22 layers: i < 2, i >= 19, or (i - 2) % 3 == 2.
TEST(QuantMix, Q4_K_MFollowsLlamaQuantize) {
  const auto tg = target("q4_k_m");
  const int more[] = {0, 1, 4, 7, 10, 13, 16, 19, 20, 21};
  for (int i = 0; i < 22; ++i) {
    const bool m = std::find(std::begin(more), std::end(more), i) != std::end(more);
    EXPECT_EQ(tl(tg, blk(i, "attn_v"), i), m ? DType::Q6_K : DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "ffn_down"), i), m ? DType::Q6_K : DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "attn_q"), i), DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "attn_k"), i), DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "attn_output"), i), DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "ffn_gate"), i), DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "ffn_up"), i), DType::Q4_K) << i;
    EXPECT_EQ(tl(tg, blk(i, "attn_norm"), i), DType::F16) << i;  // vectors keep their type
  }
  EXPECT_EQ(tl(tg, "output.weight"), DType::Q6_K);
  EXPECT_EQ(tl(tg, "token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(tl(tg, "token_embd.weight", -1, /*has_output=*/false), DType::Q6_K);  // tied
  EXPECT_EQ(tl(tg, "blk.3.attn_qkv.weight", 3), DType::Q5_K);
}

TEST(QuantMix, OtherMixes) {
  const auto s4 = target("q4_k_s"), m5 = target("q5_k_m"), s5 = target("q5_k_s"), q6 = target("q6_k");
  for (int i = 0; i < 22; ++i) {
    EXPECT_EQ(tl(s4, blk(i, "attn_v"), i), i < 4 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(tl(s4, blk(i, "ffn_down"), i), i < 2 ? DType::Q5_K : DType::Q4_K) << i;
    EXPECT_EQ(tl(s5, blk(i, "attn_v"), i), DType::Q5_K) << i;
    EXPECT_EQ(tl(s5, blk(i, "ffn_down"), i), DType::Q5_K) << i;
    EXPECT_EQ(tl(q6, blk(i, "ffn_down"), i), DType::Q6_K) << i;
  }
  EXPECT_EQ(tl(m5, blk(4, "attn_v"), 4), DType::Q6_K);
  EXPECT_EQ(tl(m5, blk(5, "attn_v"), 5), DType::Q5_K);
  EXPECT_EQ(tl(m5, blk(3, "attn_qkv"), 3), DType::Q6_K);
  for (const auto& tg : {s4, m5, s5, q6}) EXPECT_EQ(tl(tg, "output.weight"), DType::Q6_K) << tg.name;
  EXPECT_EQ(tl(s5, "token_embd.weight"), DType::Q5_K);
}

TEST(QuantMix, RowLengthFallbacks) {
  const auto m4 = target("q4_k_m"), m5 = target("q5_k_m"), q6 = target("q6_k"), p8 = target("q8_0");
  // Rows of 896 (Qwen2.5-0.5B): no 256 block; the output goes to q8_0.
  const auto t = [](const QuantTarget& tg, const char* name, int64_t ne0, int layer) {
    return quant_tensor_type(tg, name, DType::F32, 2, ne0, layer, 24, true);
  };
  EXPECT_EQ(t(m4, "blk.5.attn_q.weight", 896, 5), DType::Q5_0);
  EXPECT_EQ(t(m4, "blk.0.attn_v.weight", 896, 0), DType::Q8_0);  // q6_k -> q8_0
  EXPECT_EQ(t(m5, "blk.5.attn_q.weight", 896, 5), DType::Q5_1);
  EXPECT_EQ(t(q6, "blk.5.attn_q.weight", 896, 5), DType::Q8_0);
  EXPECT_EQ(t(m4, "output.weight", 896, -1), DType::Q8_0);
  EXPECT_EQ(t(m4, "blk.6.ffn_down.weight", 4864, 6), DType::Q4_K);  // 4864 = 19 x 256
  EXPECT_EQ(t(m4, "blk.5.ffn_down.weight", 4864, 5), DType::Q6_K);  // (5 - 24/8) % 3 == 2
  // Rows that fit no block at all: f16.
  EXPECT_EQ(t(m4, "blk.5.attn_q.weight", 48, 5), DType::F16);
  EXPECT_EQ(t(q6, "output.weight", 48, -1), DType::F16);
  EXPECT_EQ(t(p8, "blk.5.attn_q.weight", 48, 5), DType::F16);
  EXPECT_EQ(t(p8, "output.weight", 896, -1), DType::Q8_0);  // plain types: no per-tensor rules
  // Plain q4_k / q5_k: the same fallbacks, no per-tensor rules.
  EXPECT_EQ(t(target("q4_k"), "output.weight", 2048, -1), DType::Q4_K);
  EXPECT_EQ(t(target("q5_k"), "blk.0.attn_q.weight", 128, 0), DType::Q5_1);
}

// End to end on the tiny preset: the file holds what the rules say, says its ftype, loads.
TEST(QuantMix, QuantizeTinyModelQ4_K_M) {
  const std::string dir = testing::TempDir();
  const std::string f32 = dir + "/kq-tiny.gguf", out = dir + "/kq-tiny-q4_k_m.gguf";
  MkModelOptions o;
  o.preset = "tiny";
  make_model(o, f32);
  const QuantizeReport r = quantize_model(f32, out, target("q4_k_m"), 2);
  auto f = gguf::File::open(out);
  EXPECT_EQ(f->get_uint("general.file_type").value_or(0), 15u);
  const auto type_of = [&](std::string_view name) {
    for (const auto& t : f->tensors())
      if (t.name == name) return t.type;
    ADD_FAILURE() << "no tensor " << name;
    return DType::F32;
  };
  // 2 layers: layer 1 (>= 7*2/8) is a more-bits layer, layer 0 is not.
  EXPECT_EQ(type_of("blk.0.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(type_of("blk.1.ffn_down.weight"), DType::Q6_K);
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), DType::Q5_0);  // rows of 128: q4_k -> q5_0
  EXPECT_EQ(type_of("blk.1.attn_v.weight"), DType::Q8_0);  // q6_k -> q8_0
  EXPECT_EQ(type_of("output.weight"), DType::Q8_0);
  EXPECT_EQ(type_of("blk.0.attn_norm.weight"), DType::F32);
  EXPECT_EQ(r.types.at(DType::Q4_K), 1);
  EXPECT_EQ(r.types.at(DType::Q6_K), 1);
  EXPECT_EQ(r.converted + r.fallback + r.kept, int(f->tensors().size()));
  EXPECT_NO_THROW(Model::load(out));
  EXPECT_THROW(quantize_model(out, out, target("q6_k"), 2), Error);  // same file
}

}  // namespace
}  // namespace ridge
