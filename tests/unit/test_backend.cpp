// kernels/backend.h: every operation of a backend against a plain double-precision
// reference written here, and the interface's batch-invariance contract (a row's result
// is bit for bit the same whatever other rows share the call). The cases take a backend
// factory: a new backend (CUDA next) adds its own to kBackends and passes the same cases.
//
// Tolerances, per op: exact where the op is exact arithmetic (embedding rows, the
// residual add); 1e-5 relative for norms, SwiGLU and RoPE (f32 rounding and the vector
// exp); for a matmul |y - ref| <= tol * M with M = sum_k |w_k| |x_k| (test_gemm.cpp's
// bound): 1e-5 for float weights, 1e-2 for Q8_0 (its activations are quantized to int8
// first, which moves y by up to ~M/127; a wrong lane or row is off by O(M / sqrt(k)));
// attention reads K/V back as stored, so only f32 accumulation is left: 1e-5 of the
// largest |V|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/packed.h"
#include "quant/quant.h"

namespace ridge::kernels {
namespace {

struct BackendCase {
  std::string name;
  std::function<std::unique_ptr<Backend>(ThreadPool&)> make;
};
const std::vector<BackendCase> kBackends = {{"cpu", [](ThreadPool& p) { return make_cpu_backend(p); }}};

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(size_t(n), 0.f);
  for (auto& x : v) x = nd(rng);
  return v;
}

// A weight matrix in GGUF rows and the CPU's packed panels, with its dequantized values.
struct Mat {
  DType type;
  int64_t k, n_out;
  std::vector<uint8_t> rows, panels;
  std::vector<float> deq;  // [n_out][k]
  WeightView view(bool packed) const { return {type, k, n_out, rows.data(), packed ? panels.data() : nullptr}; }
};
Mat make_mat(DType t, int64_t k, int64_t n_out, uint32_t seed) {
  Mat m{t, k, n_out, {}, {}, std::vector<float>(size_t(k * n_out))};
  const int64_t rb = row_bytes(t, k);
  m.rows.resize(size_t(rb * n_out));
  const std::vector<float> src = randn(k * n_out, seed);
  for (int64_t r = 0; r < n_out; ++r) {
    quant::quantize_row(t, src.data() + r * k, m.rows.data() + r * rb, k);
    quant::dequantize_row(t, m.rows.data() + r * rb, m.deq.data() + r * k, k);
  }
  m.panels.resize(size_t(packed_bytes(t, k, n_out)));
  pack_panels(t, k, n_out, m.rows.data(), m.panels.data(), 0, (n_out + kPanelRows - 1) / kPanelRows);
  return m;
}

// The backend's memory, filled from and read back to the host.
struct Dev {
  Activations a;
  int64_t n;
  Dev(Backend& be, const std::vector<float>& host) : a(be), n(int64_t(host.size())) {
    std::copy(host.begin(), host.end(), a.reserve(n));
  }
  Dev(Backend& be, int64_t n_) : a(be), n(n_) { a.reserve(n); }
  float* p() const { return a.data(); }
  std::vector<float> host(Backend& be) const {
    const auto s = be.to_host(a.data(), n);
    return {s.begin(), s.end()};
  }
};

double rms_scale(const float* x, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return 1.0 / std::sqrt(ss / double(n) + double(eps));
}

void expect_rel(const std::vector<float>& got, const std::vector<double>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], tol * std::max(1.0, std::fabs(ref[i]))) << what << " at " << i;
}

// y = x . W^T in double from the dequantized weights, and its bound M per element.
void ref_matmul(const Mat& w, const std::vector<float>& x, int64_t m, std::vector<double>& y, std::vector<double>& mag) {
  y.assign(size_t(m * w.n_out), 0.0);
  mag.assign(size_t(m * w.n_out), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < w.n_out; ++j)
      for (int64_t kk = 0; kk < w.k; ++kk) {
        const double p = double(w.deq[size_t(j * w.k + kk)]) * x[size_t(i * w.k + kk)];
        y[size_t(i * w.n_out + j)] += p;
        mag[size_t(i * w.n_out + j)] += std::fabs(p);
      }
}
void expect_matmul(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                   double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], tol * mag[i] + 1e-30) << what << " at " << i;
}

class BackendOps : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override { be_ = kBackends[GetParam()].make(pool_); }
  // A step of T tokens of one sequence at positions pos0.. over blocks 0.., and a second
  // sequence at pos1.. over the blocks after them, as Forward hands it over.
  void step(int64_t T, int32_t pos0, int64_t T2 = 0, int32_t pos1 = 0, int32_t block_size = 16) {
    tokens_.assign(size_t(T + T2), 0);
    for (size_t i = 0; i < tokens_.size(); ++i) tokens_[i] = int32_t((i * 7 + 3) % 64);
    seq_.clear(), pos_.clear();
    for (int64_t t = 0; t < T; ++t) seq_.push_back(0), pos_.push_back(pos0 + int32_t(t));
    for (int64_t t = 0; t < T2; ++t) seq_.push_back(1), pos_.push_back(pos1 + int32_t(t));
    const int32_t nb0 = (pos0 + int32_t(T) + block_size - 1) / block_size;
    const int32_t nb1 = (pos1 + int32_t(T2) + block_size - 1) / block_size;
    table0_.clear(), table1_.clear();
    // Block tables out of order, so a kernel that assumed table[i] == i would be caught.
    for (int32_t b = 0; b < nb0; ++b) table0_.push_back(nb0 - 1 - b);
    for (int32_t b = 0; b < nb1; ++b) table1_.push_back(nb0 + b);
    tables_ = {table0_, table1_};
    StepInfo s{tokens_, seq_, pos_, tables_, rope_, {}};
    be_->begin_step(s);
  }

  ThreadPool pool_{2};
  std::unique_ptr<Backend> be_;
  RopeParams rope_{64, 10000.f, 1.f, false, nullptr};
  std::vector<int32_t> tokens_, seq_, pos_, table0_, table1_;
  std::vector<std::span<const int32_t>> tables_;
};

TEST_P(BackendOps, ActivationsGrowAndAreAligned) {
  Activations a(*be_);
  float* p = a.reserve(3);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(a.reserve(2), p);  // no growth, same memory
  float* q = a.reserve(1 << 20);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
}

TEST_P(BackendOps, EmbedGathersTokenRows) {
  const Mat table = make_mat(DType::Q8_0, 96, 64, 1);
  step(5, 0, 3, 7);
  Dev x(*be_, int64_t(tokens_.size()) * table.k);
  be_->embed(table.view(false), x.p());
  const auto got = x.host(*be_);
  for (size_t t = 0; t < tokens_.size(); ++t)
    for (int64_t i = 0; i < table.k; ++i)
      ASSERT_EQ(got[t * size_t(table.k) + size_t(i)], table.deq[size_t(tokens_[t] * table.k + i)]) << t << " " << i;
}

TEST_P(BackendOps, RowOps) {
  const int64_t m = 7, n = 96;
  const auto x = randn(m * n, 2), y = randn(m * n, 3), w = randn(n, 4);
  std::vector<double> ref(size_t(m * n));
  Dev dx(*be_, x), dy(*be_, y), out(*be_, m * n);

  be_->rms_norm(dx.p(), w.data(), out.p(), m, n, 1e-5f);
  for (int64_t i = 0; i < m; ++i) {
    const double s = rms_scale(x.data() + i * n, n, 1e-5f);
    for (int64_t j = 0; j < n; ++j) ref[size_t(i * n + j)] = x[size_t(i * n + j)] * s * w[size_t(j)];
  }
  expect_rel(out.host(*be_), ref, 1e-5, "rms_norm");

  const std::vector<int32_t> rows = {6, 0, 3};
  Dev sel(*be_, int64_t(rows.size()) * n);
  be_->rms_norm_rows(dx.p(), rows, w.data(), sel.p(), n, 1e-5f);
  std::vector<double> ref_sel;
  for (int32_t r : rows) ref_sel.insert(ref_sel.end(), ref.begin() + r * n, ref.begin() + (r + 1) * n);
  expect_rel(sel.host(*be_), ref_sel, 1e-5, "rms_norm_rows");

  be_->swiglu(dx.p(), dy.p(), out.p(), m, n);
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = x[i] / (1.0 + std::exp(-double(x[i]))) * y[i];
  expect_rel(out.host(*be_), ref, 1e-5, "swiglu");

  be_->gelu(dx.p(), out.p(), m, n);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = x[i];
    ref[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  expect_rel(out.host(*be_), ref, 1e-5, "gelu");

  const auto b = randn(n, 5);
  be_->layer_norm(dx.p(), w.data(), b.data(), out.p(), m, n, 1e-5f);
  for (int64_t i = 0; i < m; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[size_t(i * n + j)];
    mean /= double(n);
    for (int64_t j = 0; j < n; ++j) var += (x[size_t(i * n + j)] - mean) * (x[size_t(i * n + j)] - mean);
    const double s = 1.0 / std::sqrt(var / double(n) + 1e-5);
    for (int64_t j = 0; j < n; ++j) ref[size_t(i * n + j)] = (x[size_t(i * n + j)] - mean) * s * w[size_t(j)] + b[size_t(j)];
  }
  expect_rel(out.host(*be_), ref, 1e-5, "layer_norm");
  be_->layer_norm_rows(dx.p(), rows, w.data(), b.data(), sel.p(), n, 1e-5f);
  ref_sel.clear();
  for (int32_t r : rows) ref_sel.insert(ref_sel.end(), ref.begin() + r * n, ref.begin() + (r + 1) * n);
  expect_rel(sel.host(*be_), ref_sel, 1e-5, "layer_norm_rows");

  be_->add(dx.p(), dy.p(), m, n);
  const auto sum = dx.host(*be_);
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], x[i] + y[i]) << "add at " << i;
  be_->add_bias(dx.p(), b.data(), m, n);
  const auto biased = dx.host(*be_);
  for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(biased[i], sum[i] + b[i % size_t(n)]) << "add_bias at " << i;
}

// Each token's row of the position table, by its position, whatever its sequence.
TEST_P(BackendOps, AddPositionsByEachTokensPosition) {
  const int64_t n = 40, n_pos = 32;
  step(5, 3, 4, 20);
  const int64_t T = int64_t(tokens_.size());
  const auto table = randn(n_pos * n, 8), x = randn(T * n, 9);
  Dev dx(*be_, x);
  be_->add_positions(table.data(), dx.p(), n);
  const auto got = dx.host(*be_);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(t * n + i)], x[size_t(t * n + i)] + table[size_t(pos_[size_t(t)] * n + i)]) << t << " " << i;
}

// Each matmul form against the reference, and row by row against itself (batch invariance).
TEST_P(BackendOps, Matmuls) {
  const int64_t m = 5;
  for (const DType t : {DType::F16, DType::Q8_0}) {
    const double tol = t == DType::Q8_0 ? 1e-2 : 1e-5;
    const Mat w = make_mat(t, 128, 80, 5);  // 80 = 48 + 32: a fused pair on panel edges
    const auto x = randn(m * w.k, 6);
    std::vector<double> ref, mag;
    ref_matmul(w, x, m, ref, mag);
    Dev dx(*be_, x), y(*be_, m * w.n_out);
    for (const bool packed : {false, true}) {
      const std::string what = std::string(dtype_info(t).name) + (packed ? " packed" : " rows");
      be_->matmul(w.view(packed), dx.p(), m, y.p());
      const auto all = y.host(*be_);
      expect_matmul(all, ref, mag, tol, what);
      for (int64_t i = 0; i < m; ++i) {
        Dev xi(*be_, std::vector<float>(x.begin() + i * w.k, x.begin() + (i + 1) * w.k)), yi(*be_, w.n_out);
        be_->matmul(w.view(packed), xi.p(), 1, yi.p());
        const auto one = yi.host(*be_);
        for (int64_t j = 0; j < w.n_out; ++j)
          ASSERT_EQ(one[size_t(j)], all[size_t(i * w.n_out + j)]) << what << ": row " << i << " alone differs";
      }
    }
    if (!be_->fuses(w.view(true))) continue;
    Dev a(*be_, m * 48), b(*be_, m * 32);
    be_->matmul_fused(w.view(true), dx.p(), m, {{48, a.p()}, {32, b.p()}});
    const auto ya = a.host(*be_), yb = b.host(*be_);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < w.n_out; ++j) {
        const float got = j < 48 ? ya[size_t(i * 48 + j)] : yb[size_t(i * 32 + j - 48)];
        ASSERT_NEAR(got, ref[size_t(i * w.n_out + j)], tol * mag[size_t(i * w.n_out + j)]) << "fused " << i << " " << j;
      }
  }
}

// The fused row ops: the same results as the ops run one after the other.
TEST_P(BackendOps, NormAndActivationInsideTheMatmul) {
  const int64_t m = 4;
  const Mat w = make_mat(DType::Q8_0, 128, 48, 7);
  if (!be_->takes_rows(w.view(true))) GTEST_SKIP() << kBackends[GetParam()].name << " fuses no row op here";
  const auto x = randn(m * w.k, 8), res = randn(m * w.k, 9), nw = randn(w.k, 10);
  Dev dx(*be_, x), dres(*be_, res), y(*be_, m * w.n_out);
  be_->add_norm_matmul(w.view(true), dx.p(), dres.p(), nw.data(), 1e-6f, m, {{w.n_out, y.p()}});
  std::vector<float> xs(x.size()), xn(x.size());
  for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] + res[i];
  for (int64_t i = 0; i < m; ++i) {
    const double s = rms_scale(xs.data() + i * w.k, w.k, 1e-6f);
    for (int64_t j = 0; j < w.k; ++j) xn[size_t(i * w.k + j)] = float(xs[size_t(i * w.k + j)] * s * nw[size_t(j)]);
  }
  std::vector<double> ref, mag;
  ref_matmul(w, xn, m, ref, mag);
  expect_matmul(y.host(*be_), ref, mag, 1e-2, "add_norm_matmul");
  EXPECT_EQ(dx.host(*be_), xs) << "x keeps the residual sum";

  const Mat down = make_mat(DType::Q8_0, 128, 32, 11);
  const auto up = randn(m * down.k, 12);
  Dev dup(*be_, up), yd(*be_, m * down.n_out);
  be_->swiglu_matmul(down.view(true), dres.p(), dup.p(), m, yd.p());
  std::vector<float> act(up.size());
  for (size_t i = 0; i < act.size(); ++i) act[i] = float(res[i] / (1.0 + std::exp(-double(res[i]))) * up[i]);
  ref_matmul(down, act, m, ref, mag);
  expect_matmul(yd.host(*be_), ref, mag, 1e-2, "swiglu_matmul");

  // GELU of x plus a bias inside down's activation pass, and without a bias.
  const auto bias = randn(down.k, 13);
  for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
    be_->gelu_matmul(down.view(true), dup.p(), b, m, yd.p());
    for (size_t i = 0; i < act.size(); ++i) {
      const double v = double(up[i]) + (b ? b[i % size_t(down.k)] : 0.0);
      act[i] = float(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    ref_matmul(down, act, m, ref, mag);
    expect_matmul(yd.host(*be_), ref, mag, 1e-2, b ? "gelu_matmul with a bias" : "gelu_matmul");
  }
}

// RoPE of one head vector in double, as the reference forward defines it.
void ref_rope(const RopeParams& p, int32_t pos, std::vector<double>& x) {
  const int32_t half = p.rope_dim / 2;
  for (int32_t i = 0; i < half; ++i) {
    const double th = double(pos) * p.freq_scale * std::pow(double(p.freq_base), -2.0 * i / p.rope_dim);
    const double c = std::cos(th), s = std::sin(th);
    const int32_t a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
    const double xa = x[size_t(a)], xb = x[size_t(b)];
    x[size_t(a)] = xa * c - xb * s;
    x[size_t(b)] = xa * s + xb * c;
  }
}

// kv_write stores what write_k / write_v store, slot by slot, and kv_read reads back what
// read_k does: every dtype, a value kept in the key (latent attention), KV heads of which
// the step writes a prefix, runs crossing blocks, two sequences.
TEST_P(BackendOps, KvWriteAndReadMatchTheView) {
  const int32_t nkv = 3, bs = 16;
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3}) {
    for (const bool v_in_k : {false, true}) {
      const int32_t dk = v_in_k ? 48 : 40, dv = v_in_k ? 32 : 24;
      KVLayout l{2, nkv, dk, dv, bs, 12, t, v_in_k};
      if (v_in_k && !l.values_in_keys_allowed()) continue;  // FP8 keeps its values apart
      std::vector<uint8_t> a(size_t(KVView(l, nullptr).total_bytes())), b(a.size());
      KVView ka(l, a.data()), kb(l, b.data());
      step(37, 5, 9, 14, bs);  // sequence 0 at 5..41 (three blocks), sequence 1 at 14..22
      const int64_t T = int64_t(tokens_.size());
      const int32_t heads = 2;  // of 3
      const auto k0 = randn(T * heads * dk, 31), v0 = randn(T * heads * dv, 32);
      be_->kv_write(ka, 1, heads, k0.data(), v0.data());
      for (int64_t i = 0; i < T; ++i) {
        const auto& table = seq_[size_t(i)] == 0 ? table0_ : table1_;
        const int32_t p = pos_[size_t(i)];
        for (int32_t h = 0; h < heads; ++h) {
          kb.write_k(1, table[size_t(p / bs)], h, p % bs, k0.data() + (i * heads + h) * dk);
          kb.write_v(1, table[size_t(p / bs)], h, p % bs, v0.data() + (i * heads + h) * dv);
        }
      }
      const std::string what = std::string(dtype_name(t)) + (v_in_k ? " v_in_k" : "");
      EXPECT_EQ(a, b) << what << ": kv_write stored other bytes than write_k / write_v";
      std::vector<float> got(size_t(T * nkv * dk)), want(got.size());
      be_->kv_read(ka, 1, got.data());
      for (int64_t i = 0; i < T; ++i) {
        const auto& table = seq_[size_t(i)] == 0 ? table0_ : table1_;
        const int32_t p = pos_[size_t(i)];
        for (int32_t h = 0; h < nkv; ++h) ka.read_k(1, table[size_t(p / bs)], h, p % bs, want.data() + (i * nkv + h) * dk);
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what << ": kv_read differs from read_k";
    }
  }
}

// qkv_rope then attention over two sequences (a prefill chunk after a cached prefix, and a
// decode row), both against the reference: K/V read back from the cache, softmax in double.
TEST_P(BackendOps, QkvRopeAndAttention) {
  const int32_t nh = 4, nkv = 2, dk = 64, dv = 64, bs = 16, group = nh / nkv;
  for (const bool neox : {false, true}) {
    rope_.neox = neox;
    KVLayout l{1, nkv, dk, dv, bs, 16, DType::F32};
    std::vector<uint8_t> mem(size_t(KVView(l, nullptr).total_bytes()));
    KVView kv(l, mem.data());
    // Sequence 0: 21 tokens from position 0 (two blocks), sequence 1: 1 token at 35.
    step(21, 0, 1, 35, bs);
    // Sequence 1's earlier positions are not written by this step: fill them as a
    // previous step would have.
    const auto k_prev = randn(int64_t(35) * nkv * dk, 20), v_prev = randn(int64_t(35) * nkv * dv, 21);
    for (int32_t p = 0; p < 35; ++p)
      for (int32_t h = 0; h < nkv; ++h) {
        kv.write_k(0, table1_[size_t(p / bs)], h, p % bs, k_prev.data() + (int64_t(p) * nkv + h) * dk);
        kv.write_v(0, table1_[size_t(p / bs)], h, p % bs, v_prev.data() + (int64_t(p) * nkv + h) * dv);
      }
    const int64_t T = int64_t(tokens_.size());
    const auto q0 = randn(T * nh * dk, 13), k0 = randn(T * nkv * dk, 14), v0 = randn(T * nkv * dv, 15);
    const auto bq = randn(nh * dk, 16), bk = randn(nkv * dk, 17), bv = randn(nkv * dv, 18);
    const auto qn = randn(dk, 19), kn = randn(dk, 22);
    Dev q(*be_, q0), k(*be_, k0), v(*be_, v0);
    QkvRopeArgs qa{q.p(), k.p(), v.p(), bq.data(), bk.data(), bv.data(), qn.data(), kn.data(), nh, nkv, dk, dv,
                   1e-6f, &kv, 0};
    be_->qkv_rope(qa);

    // Reference q after bias, norm and RoPE; K/V as stored.
    std::vector<double> qref(q0.size());
    std::vector<float> row(static_cast<size_t>(dk));
    for (int64_t t = 0; t < T; ++t) {
      for (int32_t h = 0; h < nh; ++h) {
        std::vector<double> hv(static_cast<size_t>(dk));
        for (int32_t d = 0; d < dk; ++d) row[size_t(d)] = q0[size_t((t * nh + h) * dk + d)] + bq[size_t(h * dk + d)];
        const double s = rms_scale(row.data(), dk, 1e-6f);
        for (int32_t d = 0; d < dk; ++d) hv[size_t(d)] = row[size_t(d)] * s * qn[size_t(d)];
        ref_rope(rope_, pos_[size_t(t)], hv);
        std::copy(hv.begin(), hv.end(), qref.begin() + (t * nh + h) * dk);
      }
      const auto& table = seq_[size_t(t)] == 0 ? table0_ : table1_;
      const int32_t p = pos_[size_t(t)];
      for (int32_t h = 0; h < nkv; ++h) {
        std::vector<double> hv(static_cast<size_t>(dk));
        for (int32_t d = 0; d < dk; ++d) row[size_t(d)] = k0[size_t((t * nkv + h) * dk + d)] + bk[size_t(h * dk + d)];
        const double s = rms_scale(row.data(), dk, 1e-6f);
        for (int32_t d = 0; d < dk; ++d) hv[size_t(d)] = row[size_t(d)] * s * kn[size_t(d)];
        ref_rope(rope_, p, hv);
        std::vector<float> got(static_cast<size_t>(dk));
        kv.read_k(0, table[size_t(p / bs)], h, p % bs, got.data());
        expect_rel(got, hv, 1e-5, "K in the cache");
        kv.read_v(0, table[size_t(p / bs)], h, p % bs, got.data());
        std::vector<double> vref(static_cast<size_t>(dv));
        for (int32_t d = 0; d < dv; ++d) vref[size_t(d)] = v0[size_t((t * nkv + h) * dv + d)] + bv[size_t(h * dv + d)];
        expect_rel(got, vref, 1e-6, "V in the cache");
      }
    }
    expect_rel(q.host(*be_), qref, 1e-5, neox ? "q (neox)" : "q");

    // Plain, then with a window of 3 positions and a sink per query head (their offsets
    // into the head runs and splits of the tasks).
    std::vector<float> sinks(static_cast<size_t>(nh));
    for (int32_t h = 0; h < nh; ++h) sinks[size_t(h)] = float(h % 4) - 1.5f;
    for (const bool extra : {false, true}) {
      const int32_t window = extra ? 3 : 0;
      Dev out(*be_, T * nh * dv);
      const float scale = 1.f / std::sqrt(float(dk));
      be_->attention({q.p(), out.p(), nh, nkv, dk, dv, scale, &kv, 0, window, extra ? sinks.data() : nullptr});
      const auto got = out.host(*be_), qq = q.host(*be_);
      std::vector<double> ref(got.size());
      double vmax = 0;
      std::vector<float> kr(static_cast<size_t>(dk)), vr(static_cast<size_t>(dv));
      for (int64_t t = 0; t < T; ++t) {
        const auto& table = seq_[size_t(t)] == 0 ? table0_ : table1_;
        for (int32_t h = 0; h < nh; ++h) {
          const int32_t kh = h / group, n_ctx = pos_[size_t(t)] + 1, lo = window ? std::max(0, n_ctx - window) : 0;
          std::vector<double> sc(static_cast<size_t>(n_ctx), -INFINITY);
          double mx = extra ? double(sinks[size_t(h)]) : -1e300, sum = 0;
          for (int32_t p = lo; p < n_ctx; ++p) {
            kv.read_k(0, table[size_t(p / bs)], kh, p % bs, kr.data());
            double dot = 0;
            for (int32_t d = 0; d < dk; ++d) dot += double(qq[size_t((t * nh + h) * dk + d)]) * kr[size_t(d)];
            sc[size_t(p)] = dot * scale;
            mx = std::max(mx, sc[size_t(p)]);
          }
          for (auto& s : sc) sum += (s = std::exp(s - mx));
          if (extra) sum += std::exp(double(sinks[size_t(h)]) - mx);
          for (int32_t p = lo; p < n_ctx; ++p) {
            kv.read_v(0, table[size_t(p / bs)], kh, p % bs, vr.data());
            for (int32_t d = 0; d < dv; ++d) {
              ref[size_t((t * nh + h) * dv + d)] += sc[size_t(p)] / sum * vr[size_t(d)];
              vmax = std::max(vmax, std::fabs(double(vr[size_t(d)])));
            }
          }
        }
      }
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], 1e-5 * vmax) << "attention at " << i << (extra ? " (window and sinks)" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOps, ::testing::Range<size_t>(0, kBackends.size()),
                         [](const ::testing::TestParamInfo<size_t>& i) { return kBackends[i.param].name; });

}  // namespace
}  // namespace ridge::kernels
