// The row ops' SIMD paths against scalar references computed here in double, on odd
// lengths (tails) and extreme values, with stated tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "kernels/cpu/ops.h"
#include "isa_guard.h"

namespace ridge::kernels {
namespace {

using test::IsaGuard;

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Scalar};
  if (best_isa() >= Isa::Avx2) v.push_back(Isa::Avx2);
  if (best_isa() >= Isa::Avx512) v.push_back(Isa::Avx512);
  return v;
}

TEST(Ops, SwigluMatchesDoubleReference) {
  IsaGuard g;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (Isa isa : isas()) {
    set_isa(isa);
    for (int64_t n : {1, 15, 16, 17, 100, 5632}) {
      std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      for (auto& v : gate) v = nd(rng);
      for (auto& v : up) v = nd(rng);
      if (n >= 4) gate[0] = -100.f, gate[1] = 100.f, gate[2] = 0.f, gate[3] = -87.9f;
      swiglu(gate.data(), up.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double gd = gate[size_t(i)];
        const double ref = gd / (1.0 + std::exp(-gd)) * up[size_t(i)];
        // A few ulp of exp plus one rounding each for the add, divide and multiply.
        EXPECT_NEAR(out[size_t(i)], ref, 4e-6 * std::abs(ref) + 1e-30) << "isa " << int(isa) << " n " << n << " i " << i;
      }
    }
  }
}

// gpt-oss's clamped SwiGLU against its definition in double, on gates and ups on both
// sides of the clamps (+-7), far past them, at 0, and NaN (which stays NaN).
TEST(Ops, SwigluOaiMatchesDoubleReference) {
  IsaGuard g;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 6.f);
  for (Isa isa : isas()) {
    set_isa(isa);
    for (int64_t n : {1, 15, 16, 17, 100, 2880}) {
      std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      for (auto& v : gate) v = nd(rng);
      for (auto& v : up) v = nd(rng);
      if (n >= 8) {
        gate[0] = -100.f, gate[1] = 100.f, gate[2] = 0.f, gate[3] = 7.f, gate[4] = 6.99f, gate[5] = -60.f;
        up[0] = 100.f, up[1] = -100.f, up[2] = 7.5f, up[3] = -7.f;
        gate[6] = std::numeric_limits<float>::quiet_NaN(), up[7] = std::numeric_limits<float>::quiet_NaN();
      }
      swiglu_oai(gate.data(), up.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double x = std::min(double(gate[size_t(i)]), 7.0), y = std::clamp(double(up[size_t(i)]), -7.0, 7.0);
        const double ref = x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
        if (std::isnan(gate[size_t(i)]) || std::isnan(up[size_t(i)])) {
          EXPECT_TRUE(std::isnan(out[size_t(i)])) << "isa " << int(isa) << " i " << i;
          continue;
        }
        // A few ulp of exp plus one rounding each for the scale, add, divide, y + 1 and the
        // products.
        EXPECT_NEAR(out[size_t(i)], ref, 6e-6 * std::abs(ref) + 1e-30) << "isa " << int(isa) << " n " << n << " i " << i;
      }
    }
  }
}

TEST(Ops, RmsNormAndAddMatchReference) {
  IsaGuard g;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (Isa isa : isas()) {
    set_isa(isa);
    for (int64_t n : {1, 7, 16, 33, 2048}) {
      std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n)), y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
      for (auto& v : x) v = nd(rng) * 3.f;
      for (auto& v : w) v = nd(rng);
      double ss = 0;
      for (float v : x) ss += double(v) * v;
      const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-5);
      rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
      rms_norm(x.data(), nullptr, z.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = double(x[size_t(i)]) * scale * w[size_t(i)];
        EXPECT_NEAR(y[size_t(i)], ref, 1e-6 * std::abs(ref) + 1e-12) << "isa " << int(isa) << " n " << n;
        EXPECT_NEAR(z[size_t(i)], double(x[size_t(i)]) * scale, 1e-6 * std::abs(x[size_t(i)] * scale)) << n;
      }
      std::vector<float> a = x;
      add_inplace(a.data(), w.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[size_t(i)], x[size_t(i)] + w[size_t(i)]);  // exact: one rounding
    }
  }
}

// LayerNorm (scalar: every ISA runs the one loop) against double, on rows with a large
// common offset (where E[x^2] - mean^2 would cancel) and a constant row (variance 0: eps).
TEST(Ops, LayerNormMatchesDoubleReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {1, 7, 16, 33, 768}) {
    for (float offset : {0.f, 1000.f}) {
      std::vector<float> x(static_cast<size_t>(n)), w(x.size()), b(x.size()), y(x.size());
      for (auto& v : x) v = offset + nd(rng) * 3.f;
      for (auto& v : w) v = nd(rng);
      for (auto& v : b) v = nd(rng);
      double mean = 0, var = 0;
      for (float v : x) mean += v;
      mean /= double(n);
      for (float v : x) var += (v - mean) * (v - mean);
      const double scale = 1.0 / std::sqrt(var / double(n) + 1e-5);
      layer_norm(x.data(), w.data(), b.data(), y.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) {
        const double c = (double(x[size_t(i)]) - mean) * scale, ref = c * w[size_t(i)] + b[size_t(i)];
        // The float subtraction of the mean (exact to an ulp of x, which the offset makes
        // 6e-5 of a unit) and three roundings; relative to the row's O(1) values.
        EXPECT_NEAR(y[size_t(i)], ref, (offset > 0 ? 2e-4 : 1e-6) * (std::abs(c * w[size_t(i)]) + std::abs(b[size_t(i)]) + 1))
            << "n " << n << " offset " << offset << " i " << i;
      }
    }
  }
  std::vector<float> flat(64, 2.5f), w(64, 1.f), b(64, 0.25f), y(64);
  layer_norm(flat.data(), w.data(), b.data(), y.data(), 64, 1e-5f);
  for (float v : y) EXPECT_EQ(v, 0.25f);  // x - mean is exactly 0: the bias alone
}

// GELU (tanh form) against its definition in double, over the range where tanh bends and
// far out, where it is x or 0, on every path and tail length; NaN stays NaN.
TEST(Ops, GeluMatchesDoubleReference) {
  IsaGuard g;
  std::vector<float> x0;
  for (int i = -2000; i <= 2000; ++i) x0.push_back(float(i) / 200.f);  // [-10, 10]
  for (float v : {-1e4f, -80.f, -20.f, 20.f, 80.f, 1e4f, 0.f, -0.f, 1e-30f}) x0.push_back(v);
  for (Isa isa : isas()) {
    set_isa(isa);
    for (size_t n : {x0.size(), size_t(1), size_t(7), size_t(9), size_t(17)}) {
      std::vector<float> x(x0.end() - std::ptrdiff_t(n), x0.end()), y(n);
      gelu(x.data(), y.data(), int64_t(n));
      for (size_t i = 0; i < n; ++i) {
        const double v = x[i], ref = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
        // tanhf's (or the vector exp's and reciprocal's) few ulp and the products'
        // roundings, relative to |x| (the output's scale where the result is a difference).
        EXPECT_NEAR(y[i], ref, 1e-6 * std::abs(v) + 1e-37) << "isa " << int(isa) << " x " << v;
      }
      gelu(x.data(), x.data(), int64_t(n));  // in place
      EXPECT_EQ(x, y) << "isa " << int(isa);
    }
    float nan = std::numeric_limits<float>::quiet_NaN(), out = 0;
    gelu(&nan, &out, 1);
    EXPECT_TRUE(std::isnan(out)) << "isa " << int(isa);
  }
}

// RoPE's SIMD path gives the scalar loop's bits (the same two rounded products and one
// rounded sum per output), in both pair layouts, with tails of every length.
TEST(Ops, RopeSimdMatchesScalarBits) {
  IsaGuard g;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (bool neox : {false, true})
    for (int32_t rope_dim : {2, 6, 14, 16, 18, 32, 34, 62, 64, 96, 128}) {
      RopeParams p;
      p.rope_dim = rope_dim;
      p.neox = neox;
      p.freq_base = 10000.f;
      for (int32_t pos : {0, 1, 17, 4095}) {
        std::vector<float> cs(static_cast<size_t>(rope_dim));
        rope_cache(p, pos, cs.data());
        std::vector<float> x(static_cast<size_t>(rope_dim + 5));  // dims past rope_dim stay
        for (auto& v : x) v = nd(rng);
        std::vector<float> want = x, got = x;
        set_isa(Isa::Scalar);
        rope_apply(p, cs.data(), want.data());
        set_isa(best_isa());
        rope_apply(p, cs.data(), got.data());
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << "neox " << neox << " rope_dim " << rope_dim << " pos " << pos << " i " << i;
      }
    }
}

}  // namespace
}  // namespace ridge::kernels

namespace ridge::kernels {
namespace {

std::vector<int32_t> route_ids(const std::vector<float>& logits, const MoeRouting& r, std::vector<float>* w = nullptr) {
  std::vector<int32_t> ids(size_t(r.k));
  std::vector<float> ws(size_t(r.k));
  moe_route_row(logits.data(), r, ids.data(), ws.data());
  if (w) *w = ws;
  return ids;
}

// DeepSeek V3's routing: the bias moves the choice, never the weights.
TEST(MoeRoute, SigmoidBiasChoosesButDoesNotWeigh) {
  const std::vector<float> logits{0.f, 1.f, 2.f, 3.f}, bias{10.f, 0.f, 0.f, 0.f};
  MoeRouting r{4, 2, /*sigmoid=*/true, bias.data(), 0, 0, /*norm=*/false, /*scale=*/2.f};
  std::vector<float> w;
  EXPECT_EQ(route_ids(logits, r, &w), (std::vector<int32_t>{0, 3}));
  EXPECT_NEAR(w[0], 2.0 * 0.5, 1e-6);
  EXPECT_NEAR(w[1], 2.0 / (1.0 + std::exp(-3.0)), 1e-6);
  r.norm = true;  // renormalized, then scaled: they sum to the scale
  route_ids(logits, r, &w);
  EXPECT_NEAR(w[0] + w[1], 2.0, 1e-6);
}

// Grouped choice: the best expert is out when its group (scored by its two best) is not
// among the groups kept.
TEST(MoeRoute, GroupsLimitTheChoice) {
  const std::vector<float> logits(8, 0.f);  // sigmoid 0.5 each: the bias alone decides
  const std::vector<float> bias{0.3f, 0.3f, 0.35f, 0.35f, 0.9f, -0.5f, 0.f, 0.f};
  MoeRouting r{8, 2, true, bias.data(), 0, 0, true, 1.f};
  EXPECT_EQ(route_ids(logits, r), (std::vector<int32_t>{4, 2}));
  r.n_groups = 4, r.n_groups_used = 2;  // groups 1 (1.7) and 0 (1.6) stay; 2 (1.4) goes
  EXPECT_EQ(route_ids(logits, r), (std::vector<int32_t>{2, 3}));
  r.n_groups_used = 3;
  EXPECT_EQ(route_ids(logits, r), (std::vector<int32_t>{4, 2}));
}

// qwen3moe / Mixtral: softmax over all experts, the top k in descending order (ties: the
// lower id), their probabilities over their sum; against a plain double computation.
TEST(MoeRoute, SoftmaxTopKRenormalizedMatchesReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (int it = 0; it < 200; ++it) {
    const int32_t ne = 4 + it % 61, k = 1 + it % std::min(8, ne);
    std::vector<float> logits(static_cast<size_t>(ne));
    for (auto& v : logits) v = it % 7 == 0 ? float(int(nd(rng))) : nd(rng);  // some with ties
    MoeRouting r{ne, k, false, nullptr, 0, 0, true, 1.f};
    std::vector<float> w;
    const std::vector<int32_t> ids = route_ids(logits, r, &w);
    std::vector<int32_t> order(static_cast<size_t>(ne));
    for (int32_t e = 0; e < ne; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    double z = 0, sum = 0;
    const double mx = *std::max_element(logits.begin(), logits.end());
    for (float v : logits) z += std::exp(double(v) - mx);
    for (int32_t j = 0; j < k; ++j) sum += std::exp(double(logits[size_t(order[size_t(j)])]) - mx) / z;
    for (int32_t j = 0; j < k; ++j) {
      ASSERT_EQ(ids[size_t(j)], order[size_t(j)]) << "case " << it << " slot " << j;
      EXPECT_NEAR(w[size_t(j)], std::exp(double(logits[size_t(order[size_t(j)])]) - mx) / z / sum, 1e-6);
    }
  }
}

}  // namespace
}  // namespace ridge::kernels
