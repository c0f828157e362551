// Sampler: greedy, penalties, truncation (top-k / top-p / min-p), seeded reproducibility
// and the empirical distribution of the draws.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace ridge {
namespace {

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = float(int64_t(g() % 2001) - 1000) / 100.0f;  // [-10, 10]
  return v;
}

SamplingParams plain() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

TEST(Sampler, ArgmaxAndMargin) {
  const std::vector<float> l = {1.0f, 3.0f, -2.0f, 3.0f, 2.5f};
  EXPECT_EQ(argmax(l.data(), 5), 1);  // the lowest index on ties
  EXPECT_FLOAT_EQ(top2_margin(l.data(), 5), 0.0f);
  const std::vector<float> m = {NAN, 0.5f, 2.0f, 1.25f};
  EXPECT_EQ(argmax(m.data(), 4), 2);
  EXPECT_FLOAT_EQ(top2_margin(m.data(), 4), 0.75f);
  EXPECT_TRUE(std::isinf(top2_margin(m.data() + 1, 1)));
}

// Rows longer than the vectorized lanes, against a scalar reference: NaNs anywhere, ties
// in different lanes (the lowest index wins), odd lengths, all -inf and all NaN.
TEST(Sampler, ArgmaxAndMarginLongRows) {
  std::mt19937_64 g(7);
  for (int n : {2, 15, 16, 17, 33, 1000, 32000}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v = random_logits(n, g());
      for (int j = 0; j < n / 10; ++j) v[g() % uint64_t(n)] = NAN;
      if (trial % 3 == 0) v[g() % uint64_t(n)] = 11.0f, v[g() % uint64_t(n)] = 11.0f;  // a tie at the top
      int32_t ref = -1;
      for (int i = 0; i < n; ++i)
        if (!std::isnan(v[i]) && (ref < 0 || v[i] > v[ref])) ref = i;
      if (ref < 0) ref = 0;
      ASSERT_EQ(argmax(v.data(), n), ref) << "n " << n << " trial " << trial;
      float second = -INFINITY;
      for (int i = 0; i < n; ++i)
        if (i != ref && !std::isnan(v[i])) second = std::max(second, v[i]);
      ASSERT_EQ(top2_margin(v.data(), n), v[ref] - second) << "n " << n;
    }
  }
  std::vector<float> ninf(40, -INFINITY), nan(40, NAN);
  ninf[0] = NAN;
  EXPECT_EQ(argmax(ninf.data(), 40), 1);
  EXPECT_EQ(argmax(nan.data(), 40), 0);
  // The margin of those is the first maximum minus the rest: -inf - -inf and NaN - ...
  EXPECT_TRUE(std::isnan(top2_margin(ninf.data(), 40)));
  EXPECT_TRUE(std::isnan(top2_margin(nan.data(), 40)));
  nan[37] = 2.5f;  // one number among NaNs, in the tail lanes: nothing to its second place
  EXPECT_EQ(top2_margin(nan.data(), 40), INFINITY);
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p, 1000);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto l = random_logits(1000, seed);
    const int32_t want = argmax(l.data(), 1000);
    EXPECT_EQ(s.sample(l.data(), {}), want);
  }
}

TEST(Sampler, TopK1IsGreedy) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p, 500);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto l = random_logits(500, seed + 100);
    const int32_t want = argmax(l.data(), 500);
    EXPECT_EQ(s.sample(l.data(), {}), want);
  }
}

TEST(Sampler, PenaltiesChangeTheRightLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.penalty_last_n = 4;
  Sampler s(p, 8);
  std::vector<float> l = {1.0f, 4.0f, -2.0f, 6.0f, 3.0f, 0.0f, 5.0f, 2.0f};
  const std::vector<float> orig = l;
  // Window = the last 4: {3, 1, 2, 2}; token 6 and the out-of-range ids sit outside or are ignored.
  const std::vector<int32_t> hist = {6, 6, 3, 1, 2, 2};
  const int32_t got = s.sample(l.data(), hist);
  EXPECT_FLOAT_EQ(l[3], 6.0f / 2 - 0.25f - 0.5f);         // once, positive: divided
  EXPECT_FLOAT_EQ(l[1], 4.0f / 2 - 0.25f - 0.5f);         // once
  EXPECT_FLOAT_EQ(l[2], -2.0f * 2 - 2 * 0.25f - 0.5f);    // twice, negative: multiplied
  for (int i : {0, 4, 5, 6, 7}) EXPECT_EQ(l[size_t(i)], orig[size_t(i)]) << i;
  EXPECT_EQ(got, 6);  // 5.0 now leads

  // penalty_last_n = 0 disables; < 0 uses the whole history.
  p.penalty_last_n = 0;
  Sampler off(p, 8);
  std::vector<float> l2 = orig;
  off.sample(l2.data(), hist);
  EXPECT_EQ(l2, orig);
  p.penalty_last_n = -1;
  Sampler all(p, 8);
  std::vector<float> l3 = orig;
  all.sample(l3.data(), std::vector<int32_t>{6, 6, 9, -1});
  EXPECT_FLOAT_EQ(l3[6], 5.0f / 2 - 2 * 0.25f - 0.5f);
}

TEST(Sampler, SeededDrawsReproduce) {
  SamplingParams p;  // the defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.seed = 1234;
  Sampler a(p, 2000), b(p, 2000);
  p.seed = 1235;
  Sampler c(p, 2000);
  int differ = 0;
  for (uint64_t step = 0; step < 200; ++step) {
    auto la = random_logits(2000, step), lb = la, lc = la;
    // Flatten so the truncation leaves many candidates and the draws vary.
    for (auto* v : {&la, &lb, &lc})
      for (auto& x : *v) x *= 0.1f;
    const int32_t ta = a.sample(la.data(), {}), tb = b.sample(lb.data(), {}), tc = c.sample(lc.data(), {});
    EXPECT_EQ(ta, tb) << step;
    differ += ta != tc;
  }
  EXPECT_GT(differ, 20);  // another seed gives another sequence
}

TEST(Sampler, EmpiricalFrequenciesMatch) {
  // p = softmax(log q) = q for a known q; check every bin over 20k draws.
  const std::vector<double> q = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02};
  const int n = int(q.size()), draws = 20000;
  SamplingParams p = plain();
  p.seed = 42;
  Sampler s(p, n);
  std::vector<int> hits(size_t(n), 0);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) l[size_t(k)] = float(std::log(q[size_t(k)]));
    ++hits[size_t(s.sample(l.data(), {}))];
  }
  double chi2 = 0;
  for (int k = 0; k < n; ++k) {
    const double e = q[size_t(k)] * draws;
    chi2 += (hits[size_t(k)] - e) * (hits[size_t(k)] - e) / e;
    // Per bin: within 5 standard deviations of the binomial.
    EXPECT_NEAR(hits[size_t(k)], e, 5 * std::sqrt(e * (1 - q[size_t(k)]))) << "bin " << k;
  }
  EXPECT_LT(chi2, 22.46);  // chi-square, 6 degrees of freedom, p = 0.001
}

TEST(Sampler, TemperatureSharpens) {
  // At T = 0.5 the probabilities are q^2 renormalized.
  const std::vector<double> q = {0.5, 0.3, 0.2};
  SamplingParams p = plain();
  p.temperature = 0.5f;
  p.seed = 7;
  Sampler s(p, 3);
  std::vector<int> hits(3, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
    ++hits[size_t(s.sample(l.data(), {}))];
  }
  const double z = 0.25 + 0.09 + 0.04;
  for (int k = 0; k < 3; ++k) {
    const double pk = q[size_t(k)] * q[size_t(k)] / z, e = pk * draws;
    EXPECT_NEAR(hits[size_t(k)], e, 5 * std::sqrt(e * (1 - pk))) << k;
  }
}

TEST(Sampler, TopPExcludesTheTail) {
  // q = 0.5, 0.3, 0.15, 0.05: top_p 0.75 keeps {0, 1} (0.5 < 0.75 <= 0.8).
  std::vector<float> base = {float(std::log(0.15)), float(std::log(0.5)), float(std::log(0.05)), float(std::log(0.3))};
  SamplingParams p = plain();
  p.top_p = 0.75f;
  p.seed = 3;
  Sampler s(p, 4);
  std::vector<int> hits(4, 0);
  for (int i = 0; i < 20000; ++i) {
    auto l = base;
    ++hits[size_t(s.sample(l.data(), {}))];
  }
  EXPECT_EQ(hits[0], 0);
  EXPECT_EQ(hits[2], 0);
  // Renormalized over the kept two: 0.5 / 0.8 and 0.3 / 0.8.
  EXPECT_NEAR(hits[1] / 20000.0, 0.625, 0.02);
  EXPECT_NEAR(hits[3] / 20000.0, 0.375, 0.02);
}

TEST(Sampler, MinPExcludesUnlikelyTokens) {
  // min_p 0.2 of p_max 0.5: keeps p >= 0.1 -> {0.5, 0.3, 0.15}, drops 0.05 and 0.0x.
  std::vector<float> base;
  for (double x : {0.5, 0.3, 0.15, 0.05, 0.0, 0.0}) base.push_back(x > 0 ? float(std::log(x)) : -30.0f);
  SamplingParams p = plain();
  p.min_p = 0.2f;
  p.seed = 5;
  Sampler s(p, 6);
  std::vector<int> hits(6, 0);
  for (int i = 0; i < 20000; ++i) {
    auto l = base;
    ++hits[size_t(s.sample(l.data(), {}))];
  }
  EXPECT_EQ(hits[3] + hits[4] + hits[5], 0);
  EXPECT_GT(hits[2], 0);
  EXPECT_NEAR(hits[0] / 20000.0, 0.5 / 0.95, 0.02);
}

TEST(Sampler, TopKExcludes) {
  std::vector<float> base = {0.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f};
  SamplingParams p = plain();
  p.top_k = 3;
  p.seed = 9;
  Sampler s(p, 8);
  std::vector<int> hits(8, 0);
  for (int i = 0; i < 5000; ++i) {
    auto l = base;
    ++hits[size_t(s.sample(l.data(), {}))];
  }
  for (int k = 0; k < 5; ++k) EXPECT_EQ(hits[size_t(k)], 0) << k;
  for (int k = 5; k < 8; ++k) EXPECT_GT(hits[size_t(k)], 0) << k;
}

TEST(Sampler, BadParamsThrow) {
  SamplingParams p;
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(Sampler(p, 10), Error);
  EXPECT_THROW(Sampler(SamplingParams{}, 0), Error);
}

}  // namespace
}  // namespace ridge
