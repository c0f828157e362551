// model/kl_divergence: the reference file's round trip, the statistics against their
// definitions on random distributions, and every way a base file can be wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/kl_divergence.h"

namespace ridge {
namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("ridge-kl-") + std::to_string(::getpid()) + name)).string();
}

std::vector<double> log_probs(const std::vector<float>& logits) {
  double mx = -INFINITY, se = 0;
  for (float x : logits) mx = std::max(mx, double(x));
  for (float x : logits) se += std::exp(double(x) - mx);
  std::vector<double> lp;
  for (float x : logits) lp.push_back(double(x) - mx - std::log(se));
  return lp;
}

struct Rows {
  std::vector<std::vector<float>> base, run;
  std::vector<int32_t> target;
};

// n rows of a vocabulary of v: the run is the base plus noise of size `noise`.
Rows random_rows(int n, int v, float noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 3.f), e(0.f, 1.f);
  Rows r;
  for (int i = 0; i < n; ++i) {
    std::vector<float> b(static_cast<size_t>(v)), q(static_cast<size_t>(v));
    for (int k = 0; k < v; ++k) b[size_t(k)] = g(rng), q[size_t(k)] = b[size_t(k)] + noise * e(rng);
    r.base.push_back(b);
    r.run.push_back(q);
    r.target.push_back(int32_t(rng() % uint32_t(v)));
  }
  return r;
}

void write_base(const std::string& path, const Rows& r, int v, int64_t n_ctx, const std::vector<int32_t>& tokens) {
  KlBaseWriter w(path, v, n_ctx, tokens);
  for (const auto& b : r.base) w.add(b);
  w.finish();
}

TEST(KlDivergence, StatisticsMatchTheirDefinitions) {
  const int n = 300, v = 50;
  const std::vector<int32_t> tokens{1, 2, 3, 4, 5};
  const Rows r = random_rows(n, v, 0.3f, 7);
  const std::string path = temp_path("stats");
  write_base(path, r, v, 64, tokens);

  KlComparison c(path, v, 64, tokens);
  for (int i = 0; i < n; ++i) c.add(r.run[size_t(i)], r.target[size_t(i)]);
  const KlReport rep = c.report();

  std::vector<double> kl;
  double nll = 0, nll_b = 0;
  int same = 0;
  for (int i = 0; i < n; ++i) {
    const auto p = log_probs(r.base[size_t(i)]), q = log_probs(r.run[size_t(i)]);
    double k = 0;
    for (int x = 0; x < v; ++x) k += std::exp(p[size_t(x)]) * (p[size_t(x)] - q[size_t(x)]);
    kl.push_back(k);
    same += std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(q.begin(), q.end()) - q.begin();
    nll -= q[size_t(r.target[size_t(i)])];
    nll_b -= p[size_t(r.target[size_t(i)])];
  }
  double mean = 0;
  for (double k : kl) mean += k / n;
  std::sort(kl.begin(), kl.end());
  // The base stores f32 log-probabilities: a relative 1e-6 of each term.
  EXPECT_EQ(rep.n, n);
  EXPECT_NEAR(rep.mean_kl, mean, 1e-5 * mean + 1e-7);
  EXPECT_NEAR(rep.max_kl, kl.back(), 1e-5 * kl.back() + 1e-7);
  EXPECT_NEAR(rep.median, kl[size_t(0.5 * (n - 1) + 0.5)], 1e-5);
  EXPECT_NEAR(rep.p99, kl[size_t(0.99 * (n - 1) + 0.5)], 1e-5);
  EXPECT_DOUBLE_EQ(rep.top1, double(same) / n);
  EXPECT_NEAR(rep.ppl, std::exp(nll / n), 1e-9 * std::exp(nll / n));
  EXPECT_NEAR(rep.ppl_base, std::exp(nll_b / n), 1e-5 * std::exp(nll_b / n));
  EXPECT_GT(rep.mean_kl, 0.0);
  EXPECT_LT(rep.top1, 1.0);  // the noise moves some top tokens
  EXPECT_NE(format_kl_report(rep).find("same top-1"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(KlDivergence, ARunAgainstItselfIsZero) {
  const int n = 40, v = 17;
  const std::vector<int32_t> tokens{9, 8, 7};
  const Rows r = random_rows(n, v, 0.f, 3);
  const std::string path = temp_path("self");
  write_base(path, r, v, 16, tokens);
  KlComparison c(path, v, 16, tokens);
  for (int i = 0; i < n; ++i) c.add(r.base[size_t(i)], r.target[size_t(i)]);
  const KlReport rep = c.report();
  EXPECT_LT(rep.max_kl, 1e-6);
  EXPECT_EQ(rep.top1, 1.0);
  EXPECT_NEAR(rep.ppl, rep.ppl_base, 1e-5 * rep.ppl);
  std::filesystem::remove(path);
}

void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(KlDivergence, AWrongBaseIsAClearError) {
  const int v = 10;
  const std::vector<int32_t> tokens{1, 2, 3};
  const Rows r = random_rows(5, v, 0.f, 1);
  const std::string path = temp_path("bad");
  write_base(path, r, v, 32, tokens);
  expect_error([&] { KlComparison(path, v + 1, 32, tokens); }, "vocabulary of 10");
  expect_error([&] { KlComparison(path, v, 64, tokens); }, "-c 32");
  expect_error([&] { KlComparison(path, v, 32, std::vector<int32_t>{1, 2, 4}); }, "other tokens");
  expect_error([&] { KlComparison(temp_path("missing"), v, 32, tokens); }, "cannot read");
  {  // fewer rows scored than the base holds, and more
    KlComparison c(path, v, 32, tokens);
    for (int i = 0; i < 4; ++i) c.add(r.base[size_t(i)], 0);
    expect_error([&] { (void)c.report(); }, "scored 4");
    c.add(r.base[4], 0);
    expect_error([&] { c.add(r.base[4], 0); }, "has 5 rows");
    expect_error([&] { c.add(std::vector<float>(3), 0); }, "row of 3");
  }
  // Cut short: the header promises more rows than the file holds.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4 * v);
  {
    KlComparison c(path, v, 32, tokens);
    for (int i = 0; i < 4; ++i) c.add(r.base[size_t(i)], 0);
    expect_error([&] { c.add(r.base[4], 0); }, "ends after 4");
  }
  // Not a base at all, and a base whose writer never finished.
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("GGUF and more bytes than a header, for sure, surely more than forty", f);
  std::fclose(f);
  expect_error([&] { KlComparison(path, v, 32, tokens); }, "not a KL-divergence base");
  {
    KlBaseWriter w(path, v, 32, tokens);
    w.add(r.base[0]);
  }  // destroyed without finish()
  expect_error([&] { KlComparison(path, v, 32, tokens); }, "did not finish");
  expect_error([&] { KlBaseWriter(temp_path("no/such/dir/x"), v, 32, tokens); }, "cannot create");
  std::filesystem::remove(path);
}

// A full disk: /dev/full takes the open and fails every write.
TEST(KlDivergence, AFullDiskIsAnError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::vector<int32_t> tokens{1};
  expect_error(
      [&] {
        KlBaseWriter w("/dev/full", 4096, 32, tokens);
        for (int i = 0; i < 16; ++i) w.add(std::vector<float>(4096, 0.f));
        w.finish();
      },
      "/dev/full");
}

}  // namespace
}  // namespace ridge
