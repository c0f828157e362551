// kernels/cpu/gemm: the packed-panel GEMM against a double-precision reference, and the
// batch-invariance contract: a row's output is bit for bit the same whatever the number
// of rows in the call, the thread count, or the panel grouping.
//
// Tolerance: |y - ref| <= 1e-5 * M, M = sum_k |w_k| |a_k| (the bound test_quant.cpp uses
// for the dots). For float weights ref uses the f32 activations; for Q8_0 / Q4_0 it uses
// the activations as the GEMM quantized them (dequantized back), so what is left is f32
// accumulation: a chain of <= 256 FMAs per chunk or one FMA per 32-block, ~1e-6 relative
// at worst on these sizes; a wrong lane, nibble, offset or scale is off by O(M / k).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/tuning.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace ridge::kernels {
namespace {

struct Mat {
  DType type;
  int64_t k, n_out;
  std::vector<uint8_t> rows, panels;
  std::vector<float> deq;  // [n_out][k] dequantized
  bool fp8_bf16 = false;   // packed for the bf16 FP8 path (the CPU's default path)
  WeightView view(bool packed) const {
    return {type, k, n_out, rows.data(), packed ? panels.data() : nullptr, packed && fp8_bf16};
  }
};

Mat make(DType t, int64_t k, int64_t n_out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Mat m{t, k, n_out, {}, {}, {}, t == DType::F8_E4M3_B128 && fp8_path() == Fp8Path::Bf16};
  const int64_t rb = row_bytes(t, k);
  m.rows.resize(size_t(rb * n_out));
  m.deq.resize(size_t(k * n_out));
  std::vector<float> src(static_cast<size_t>(k));
  for (int64_t r = 0; r < n_out; ++r) {
    const float scale = r % 7 == 3 ? 1e-3f : 1.f;  // rows of very different magnitude
    for (auto& v : src) v = nd(rng) * scale;
    quant::quantize_row(t, src.data(), m.rows.data() + r * rb, k);
    quant::dequantize_row(t, m.rows.data() + r * rb, m.deq.data() + r * k, k);
  }
  m.panels.resize(size_t(packed_bytes(t, k, n_out)));
  const int64_t np = (n_out + kPanelRows - 1) / kPanelRows;
  pack_panels(t, k, n_out, m.rows.data(), m.panels.data(), 0, np, m.fp8_bf16);
  return m;
}

std::vector<float> acts(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = nd(rng);
  if (m > 1)
    for (int64_t j = 0; j < k; ++j) x[size_t(k + j)] = 0.f;  // an all-zero row (d = 0 blocks)
  return x;
}

bool is_int8(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::F8_E4M3_B128; }
bool is_fp8(DType t) { return t == DType::F8_E4M3_B128; }
bool is_kquant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// The activation values the GEMM actually multiplies by.
std::vector<float> effective_acts(DType t, const std::vector<float>& x, int64_t m, int64_t k) {
  if (is_fp8(t) && fp8_path() == Fp8Path::Bf16) {  // bf16 activations (gemm.h)
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
    return out;
  }
  if (!is_int8(t)) return x;
  std::vector<float> out(x.size());
  std::vector<ActQ8> blocks(static_cast<size_t>(k / 32));
  for (int64_t i = 0; i < m; ++i) {
    quantize_act_gemm(x.data() + i * k, blocks.data(), k);
    for (int64_t b = 0; b < k / 32; ++b)
      for (int j = 0; j < 32; ++j) out[size_t(i * k + b * 32 + j)] = blocks[size_t(b)].d * blocks[size_t(b)].qs[j];
  }
  return out;
}

std::vector<float> run(ThreadPool& pool, const Mat& w, const std::vector<float>& x, int64_t m, bool packed) {
  Matmul mm;
  std::vector<float> y(static_cast<size_t>(m * w.n_out), -7.f);
  mm.run(pool, w.view(packed), x.data(), m, y.data());
  return y;
}

struct Shape {
  int64_t k, n_out;
};

// Each test runs on every CPU path with a packed GEMM (AVX-512, AVX2) that this CPU has.
class GemmTest : public ::testing::TestWithParam<std::tuple<DType, Isa>> {
 protected:
  DType type() const { return std::get<0>(GetParam()); }
  void SetUp() override {
    const Isa isa = std::get<1>(GetParam());
    if (isa > best_isa()) GTEST_SKIP() << "this CPU has no " << isa_name(isa);
    set_isa(isa);
    if (!gemm_available(type())) GTEST_SKIP() << "no packed GEMM for " << dtype_name(type()) << " on " << isa_name(isa);
  }
  void TearDown() override { set_isa(best_isa()); }
};

TEST_P(GemmTest, MatchesDoubleReferenceOnOddShapes) {
  const DType t = type();
  std::vector<Shape> shapes{{32, 1}, {64, 17}, {96, 33}, {320, 100}, {544, 48}, {1024, 31}};
  if (!is_int8(t)) shapes.insert(shapes.end(), {{7, 5}, {300, 19}, {513, 16}});
  if (is_kquant(t)) shapes = {{256, 1}, {256, 17}, {512, 33}, {768, 100}, {1024, 31}};
  if (is_fp8(t)) shapes = {{128, 1}, {128, 17}, {256, 33}, {384, 100}, {640, 48}, {1024, 31}};
  ThreadPool pool(2);
  for (const Shape& s : shapes)
    for (int64_t m : {1, 2, 3, 5, 7, 13, 50}) {
      const Mat w = make(t, s.k, s.n_out, uint32_t(s.k * 31 + s.n_out));
      const auto x = acts(m, s.k, uint32_t(m * 7 + s.k));
      const auto xe = effective_acts(t, x, m, s.k);
      const auto y = run(pool, w, x, m, true);
      double worst = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < s.n_out; ++r) {
          double ref = 0, mag = 0;
          for (int64_t j = 0; j < s.k; ++j) {
            const double p = double(w.deq[size_t(r * s.k + j)]) * xe[size_t(i * s.k + j)];
            ref += p;
            mag += std::fabs(p);
          }
          const double err = std::fabs(y[size_t(i * s.n_out + r)] - ref) / std::max(mag, 1e-30);
          worst = std::max(worst, err);
          ASSERT_LE(err, 1e-5) << dtype_name(t) << " k=" << s.k << " n_out=" << s.n_out << " m=" << m << " row " << i
                               << " col " << r << ": " << y[size_t(i * s.n_out + r)] << " vs " << ref;
        }
      (void)worst;
    }
}

TEST_P(GemmTest, RowsAreBitwiseIndependentOfBatchAndThreads) {
  const DType t = type();
  // k long enough that a batch splits each reduction into several passes where it still
  // runs in passes (gemm_avx512.cpp: 256 float columns, 2 super-blocks of Q6_K) while a
  // single row runs it in one. 5, 6, 9, 23 and 48 rows are one row chunk, a decode
  // batch (every integer format runs block by block in row tiles of at most 4: the
  // K-quants 4 + 1, 4 + 2, 4 + 4 + 1, 5 x 4 + 3, the 32-block formats as even as the rows
  // allow, 2 + 3, 3 + 3, 3 x 3, 3 + 5 x 4; the others in passes); 61 is two (prefill:
  // one pass per tile).
  // 11 panels (the last partial) give decode batches tasks of 4, 4 and 2 + 1 panels; 12
  // (the last partial) end on a group of 4 with its last panel masked.
  const int64_t k = is_kquant(t) ? 1792 : is_int8(t) ? 1600 : is_fp8(t) ? 1664 : 800;
  ThreadPool p1(1), p2(2);
  for (const int64_t n_out : {166, 182})
    for (const int64_t m : {5, 6, 9, 23, 48, 61}) {
      SCOPED_TRACE("n_out = " + std::to_string(n_out) + ", m = " + std::to_string(m));
      const Mat w = make(t, k, n_out, uint32_t(11 + n_out));
      const auto x = acts(m, k, uint32_t(12 + m));
      const auto all2 = run(p2, w, x, m, true);
      const auto all1 = run(p1, w, x, m, true);
      ASSERT_EQ(0, std::memcmp(all1.data(), all2.data(), all1.size() * sizeof(float)));
      for (int64_t i = 0; i < m; ++i) {
        const std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
        const auto yi = run(p2, w, xi, 1, true);
        ASSERT_EQ(0, std::memcmp(yi.data(), all2.data() + i * n_out, size_t(n_out) * sizeof(float)))
            << dtype_name(t) << ": row " << i << " alone differs from the same row in a batch of " << m;
      }
      if (m < 10) continue;
      // Rows 3..9 as their own call: tiles start at a different row.
      const std::vector<float> xs(x.begin() + 3 * k, x.begin() + 10 * k);
      const auto ys = run(p2, w, xs, 7, true);
      ASSERT_EQ(0, std::memcmp(ys.data(), all2.data() + 3 * n_out, ys.size() * sizeof(float)));
    }
}

TEST_P(GemmTest, AgreesWithThePerRowDots) {
  const DType t = type();
  const int64_t k = 1024, n_out = 70, m = 9;
  const Mat w = make(t, k, n_out, 5);
  // The per-row dots take f32 activations: give them the ones the GEMM rounds to (bf16
  // path), which it rounds to themselves.
  const auto x = effective_acts(t, acts(m, k, 6), m, k);
  ThreadPool pool(2);
  const auto yp = run(pool, w, x, m, true), yd = run(pool, w, x, m, false);
  for (size_t i = 0; i < yp.size(); ++i) {
    double mag = 0;
    const int64_t row = int64_t(i) / n_out, col = int64_t(i) % n_out;
    for (int64_t j = 0; j < k; ++j) mag += std::fabs(double(w.deq[size_t(col * k + j)]) * x[size_t(row * k + j)]);
    ASSERT_NEAR(yp[i], yd[i], 2e-5 * mag + 1e-30) << dtype_name(t) << " element " << i;
    // FP8's scalar dot is the f16c path's order (gemm.h): the same bits. (The AVX2 dot,
    // which the per-row route runs here, sums in 4 x 8 lanes.)
    if (is_fp8(t) && fp8_path() == Fp8Path::F16c) {
      const float scalar = quant::dot_fn(t, Isa::Scalar)(w.rows.data() + col * row_bytes(t, k), x.data() + row * k, k);
      ASSERT_EQ(yp[i], scalar) << "element " << i;
    }
  }
}

// MXFP4 panels with every scale byte but the ones whose products overflow f32 (row r has
// e = r in both its blocks, e < 2 the subnormal scales) and random codes in both nibble
// positions: the AVX-512 GEMM (decode, a decode batch, a prefill chunk) against the
// per-row dots on the same 8-bit activations, within f32 rounding of their sums.
TEST(GemmMxfp4, EveryScaleByte) {
  if (best_isa() != Isa::Avx512) GTEST_SKIP() << "MXFP4's packed GEMM is AVX-512's";
  struct Restore {
    Isa saved = active_isa();
    ~Restore() { set_isa(saved); }
  } restore;
  set_isa(Isa::Avx512);
  const int64_t k = 64, n_out = 241;
  Mat w{DType::MXFP4, k, n_out, {}, {}, {}};
  w.rows.resize(size_t(n_out * row_bytes(DType::MXFP4, k)));
  std::mt19937 rng(3);
  for (int64_t r = 0; r < n_out; ++r)
    for (int b = 0; b < 2; ++b) {
      auto& blk = reinterpret_cast<quant::BlockMxfp4*>(w.rows.data() + r * row_bytes(DType::MXFP4, k))[b];
      blk.e = uint8_t(r);
      for (auto& q : blk.qs) q = uint8_t(rng());
    }
  w.deq.resize(size_t(k * n_out));
  for (int64_t r = 0; r < n_out; ++r)
    quant::dequantize_row(DType::MXFP4, w.rows.data() + r * row_bytes(DType::MXFP4, k), w.deq.data() + r * k, k);
  w.panels.resize(size_t(packed_bytes(DType::MXFP4, k, n_out)));
  pack_panels(DType::MXFP4, k, n_out, w.rows.data(), w.panels.data(), 0, (n_out + kPanelRows - 1) / kPanelRows);
  ThreadPool pool(2);
  for (const int64_t m : {1, 5, 40}) {
    const auto x = acts(m, k, uint32_t(m));
    const auto yp = run(pool, w, x, m, true), yd = run(pool, w, x, m, false);
    for (size_t i = 0; i < yp.size(); ++i) {
      // f32 rounding of the sums, relative to M = sum |w| |x| (the file's other bounds);
      // and at the smallest scales the product of the scale and the activations' d is
      // subnormal (an absolute error up to 2^-150), which the integer sums (|s| < 2^16,
      // two blocks) grow to under 1e-40.
      const int64_t row = int64_t(i) / n_out, col = int64_t(i) % n_out;
      double mag = 0;
      for (int64_t j = 0; j < k; ++j) mag += std::fabs(double(w.deq[size_t(col * k + j)]) * x[size_t(row * k + j)]);
      ASSERT_NEAR(yp[i], yd[i], 1e-6 * mag + 1e-40) << "m " << m << " row " << col;
    }
  }
}

// A RowSource's rows give the bits of the same rows passed in (run and run_fused), on 1
// and 2 threads, decode batches and prefill chunks; the source is called once per row.
TEST_P(GemmTest, RowSourceGivesTheRowsBits) {
  const DType t = type();
  const int64_t k = is_kquant(t) ? 512 : is_fp8(t) ? 384 : 320, n_out = 96;
  const WeightView v{t, k, n_out, nullptr, nullptr};
  const Mat w = make(t, k, n_out, 21);
  if (!is_int8(t)) {
    EXPECT_FALSE(Matmul::takes_rows(w.view(true)));
    return;
  }
  EXPECT_FALSE(Matmul::takes_rows(v));  // unpacked
  ASSERT_TRUE(Matmul::takes_rows(w.view(true)));
  ThreadPool p1(1), p2(2);
  for (ThreadPool* pool : {&p1, &p2})
    for (const int64_t m : {1, 5, 16, 61}) {
      const auto x = acts(m, k, uint32_t(m + 40));
      std::vector<int> calls(static_cast<size_t>(m), 0);
      auto row = [&](int64_t i, float* out) {
        ++calls[size_t(i)];
        std::memcpy(out, x.data() + i * k, size_t(k) * sizeof(float));
      };
      const auto want = run(*pool, w, x, m, true);
      Matmul mm;
      std::vector<float> y(want.size(), -7.f), a(static_cast<size_t>(m * 32)), b(static_cast<size_t>(m * 64));
      mm.run(*pool, w.view(true), RowSource::of(row), m, y.data());
      ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float))) << dtype_name(t) << " m " << m;
      for (int c : calls) ASSERT_EQ(c, 1);
      mm.run_fused(*pool, w.view(true), RowSource::of(row), m, {{32, a.data()}, {64, b.data()}});
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_EQ(0, std::memcmp(a.data() + i * 32, want.data() + i * n_out, 32 * sizeof(float))) << "m " << m;
        ASSERT_EQ(0, std::memcmp(b.data() + i * 64, want.data() + i * n_out + 32, 64 * sizeof(float))) << "m " << m;
      }
    }
}

// A group of matmuls in one pass (a mixture of experts' active experts) gives each item the
// bits it gets alone: items of 0, 1, 3 and 61 rows, a fused item split in two outputs, and
// items whose rows are silu(gate) * up, on 1 and 2 threads.
TEST_P(GemmTest, GroupedMatmulGivesEachItemsBits) {
  const DType t = type();
  const int64_t k = is_kquant(t) ? 512 : is_fp8(t) ? 384 : 320, n_out = 96;
  if (!is_int8(t) || !Matmul::takes_rows(make(t, k, n_out, 1).view(true))) return;
  std::vector<Mat> ws;
  for (uint32_t i = 0; i < 4; ++i) ws.push_back(make(t, k, n_out, 31 + i));
  const std::vector<int64_t> ms = {1, 0, 3, 61};
  ThreadPool p1(1), p2(2);
  for (ThreadPool* pool : {&p1, &p2}) {
    std::vector<std::vector<float>> xs, gates, ups, want, got(4), got2(4);
    std::vector<WeightView> views;
    for (size_t i = 0; i < 4; ++i) views.push_back(ws[i].view(true));
    std::vector<GroupedMatmul> items, silu_items;
    for (size_t i = 0; i < 4; ++i) {
      const int64_t m = ms[i];
      xs.push_back(acts(m, k, uint32_t(70 + i)));
      gates.push_back(acts(m, k, uint32_t(80 + i)));
      ups.push_back(acts(m, k, uint32_t(90 + i)));
      want.push_back(run(*pool, ws[i], xs[i], m, true));
      got[i].assign(size_t(m * n_out), -7.f);
      got2[i].assign(size_t(m * n_out), -7.f);
      GroupedMatmul it;
      it.w = &views[i], it.x = xs[i].data(), it.m = m;
      if (i == 2) {  // a fused weight's two outputs
        it.n_outs = 2;
        it.outs[0] = {32, got[i].data()};
        it.outs[1] = {64, got[i].data() + m * 32};
      } else {
        it.outs[0] = {n_out, got[i].data()};
      }
      items.push_back(it);
      GroupedMatmul sg;
      sg.w = &views[i], sg.gate = gates[i].data(), sg.up = ups[i].data(), sg.m = m, sg.outs[0] = {n_out, got2[i].data()};
      silu_items.push_back(sg);
    }
    Matmul mm;
    mm.run_grouped(*pool, items);
    mm.run_grouped(*pool, silu_items);
    for (size_t i = 0; i < 4; ++i) {
      const int64_t m = ms[i];
      for (int64_t r = 0; r < m; ++r) {
        if (i == 2) {
          ASSERT_EQ(0, std::memcmp(got[i].data() + r * 32, want[i].data() + r * n_out, 32 * sizeof(float)));
          ASSERT_EQ(0, std::memcmp(got[i].data() + m * 32 + r * 64, want[i].data() + r * n_out + 32, 64 * sizeof(float)));
        } else {
          ASSERT_EQ(0, std::memcmp(got[i].data() + r * n_out, want[i].data() + r * n_out, size_t(n_out) * sizeof(float)))
              << dtype_name(t) << " item " << i << " row " << r;
        }
      }
      if (m == 0) continue;  // nothing to compare (and no buffer: memcmp takes no null)
      // silu(gate) * up made inside: the bits of a RowSource of those rows.
      auto row = [&](int64_t r, float* out) { swiglu(gates[i].data() + r * k, ups[i].data() + r * k, out, k); };
      std::vector<float> ws_want(size_t(m * n_out), -7.f);
      mm.run(*pool, views[i], RowSource::of(row), m, ws_want.data());
      ASSERT_EQ(0, std::memcmp(got2[i].data(), ws_want.data(), ws_want.size() * sizeof(float))) << "item " << i;
    }
  }
}

// Candidate v of p over base (left set), on each pool: y's bits must be want's.
void expect_candidate_bits(DType t, const Mat& w, const std::vector<float>& x, int64_t m, const KernelTuning& base,
                           const TunableParam& p, int32_t v, const std::vector<float>& want,
                           std::initializer_list<ThreadPool*> pools) {
  KernelTuning tn = base;
  tn.of(t).*p.field = v;
  set_kernel_tuning(tn);
  for (ThreadPool* pool : pools) {
    const auto got = run(*pool, w, x, m, true);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
        << dtype_name(t) << " m = " << m << " " << p.name << " = " << v << " on " << pool->size() << " threads";
  }
}

// Every candidate of every tunable parameter (tuning.h), for this type, gives the bits the
// defaults give: one row, decode batches of 3, 9 and 16 rows (tiles 3; 3 x 3 or 4 + 4 + 1;
// 4 x 4) and a prefill chunk of 61, on 1 and 2 threads. 65 panels (the last partial) are
// enough for tasks of 16 panels on one thread and 8 on two, and leave one panel after
// decode's groups of 4 or 2 streams.
TEST_P(GemmTest, EveryTuningCandidateGivesTheDefaultsBits) {
  const DType t = type();
  const int64_t k = is_kquant(t) ? 512 : is_fp8(t) ? 384 : 320, n_out = 1034;
  const Mat w = make(t, k, n_out, 5);
  ThreadPool p1(1), p2(2);
  const KernelTuning saved = kernel_tuning();
  const KernelTuning defaults = default_tuning();
  for (const int64_t m : {1, 3, 9, 16, 61}) {
    const auto x = acts(m, k, uint32_t(40 + m));
    set_kernel_tuning(defaults);
    const auto want = run(p2, w, x, m, true);
    for (const TunableParam& p : tunable_params())
      for (const int32_t v : p.candidates) expect_candidate_bits(t, w, x, m, defaults, p, v, want, {&p1, &p2});
  }
  set_kernel_tuning(saved);
}

// The larger task sizes take a matrix of more panels to reach: 260 panels on one thread
// make decode tasks of 64 (and of 32) and decode batch tasks of 16, also as a fused
// matmul's two outputs, whose tasks are sized over both.
TEST(KernelTuning, LongTasksGiveTheDefaultsBits) {
  const KernelTuning saved = kernel_tuning();
  ThreadPool p1(1), p2(2);
  for (const DType t : {DType::Q4_0, DType::Q8_0}) {
    if (!gemm_available(t)) continue;
    const int64_t k = 64, n_out = 16 * 260;
    const Mat w = make(t, k, n_out, 9);
    for (const int64_t m : {1, 5}) {
      const auto x = acts(m, k, uint32_t(70 + m));
      set_kernel_tuning(default_tuning());
      const auto want = run(p2, w, x, m, true);
      const TunableParam& p = *find_tunable(m == 1 ? "task_panels" : "batch_task_panels");
      for (const int32_t v : p.candidates) {
        expect_candidate_bits(t, w, x, m, default_tuning(), p, v, want, {&p1, &p2});  // leaves v set
        for (ThreadPool* pool : {&p1, &p2}) {
          const int64_t h = n_out / 2;  // a multiple of 16: [m][h] each
          std::vector<float> y0(static_cast<size_t>(m * h)), y1(static_cast<size_t>(m * h));
          Matmul mm;
          mm.run_fused(*pool, w.view(true), x.data(), m, {{h, y0.data()}, {h, y1.data()}});
          for (int64_t r = 0; r < m; ++r) {
            ASSERT_EQ(0, std::memcmp(y0.data() + r * h, want.data() + r * n_out, size_t(h) * sizeof(float)))
                << dtype_name(t) << " fused, m = " << m << " " << p.name << " = " << v << " row " << r;
            ASSERT_EQ(0, std::memcmp(y1.data() + r * h, want.data() + r * n_out + h, size_t(h) * sizeof(float)))
                << dtype_name(t) << " fused, m = " << m << " " << p.name << " = " << v << " row " << r;
          }
        }
      }
    }
  }
  set_kernel_tuning(saved);
}

TEST(KernelTuning, RejectsValuesOutsideTheCandidates) {
  const KernelTuning saved = kernel_tuning();
  KernelTuning tn = default_tuning();
  tn.of(DType::Q4_0).decode_streams = 3;
  EXPECT_THROW(set_kernel_tuning(tn), Error);
  EXPECT_EQ(kernel_tuning(), saved);
  EXPECT_THROW(tn.of(DType::Q8_K), Error);
  EXPECT_EQ(&std::as_const(tn).of(DType::Q8_K).decode_ahead, &std::as_const(tn).of(DType::I8).decode_ahead);
  for (const TunableParam& p : tunable_params())
    EXPECT_TRUE(valid_value(p, default_tuning().of(DType::Q8_0).*p.field)) << p.name;
  EXPECT_EQ(tunable_for(*find_tunable("batch_even"), DType::Q4_0), !gemm_on_avx2(DType::Q4_0));
  EXPECT_TRUE(tunable_for(*find_tunable("decode_ahead"), DType::Q4_0));
  EXPECT_FALSE(tunable_for(*find_tunable("batch_even"), DType::Q4_K));
  EXPECT_FALSE(tunable_for(*find_tunable("batch_ahead"), DType::F16));
  EXPECT_EQ(find_tunable("no_such"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Types, GemmTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                                              DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                                                              DType::Q5_K, DType::Q6_K, DType::F8_E4M3_B128, DType::MXFP4),
                                            ::testing::Values(Isa::Avx512, Isa::Avx2)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::string(isa_name(std::get<1>(info.param)));
                         });

// The AVX2 kernels give the AVX-512 kernels' bits (the same integers and the same float
// operations per lane: gemm_avx2.cpp), for decode, decode batches and prefill chunks,
// a partial last panel included. Needs a CPU with both.
TEST(GemmIsas, Avx2GivesAvx512Bits) {
  if (best_isa() != Isa::Avx512) GTEST_SKIP() << "needs the AVX-512 path to compare against";
  ThreadPool pool(2);
  for (const DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    // k: 2 float chunks and a part (the K-quants: 2 super-blocks); 65 panels, the last of 10 rows
    const int64_t k = is_kquant(t) ? 512 : 576, n_out = 1034;
    const Mat w = make(t, k, n_out, 11);
    for (const int64_t m : {1, 3, 16, 61}) {
      const auto x = acts(m, k, uint32_t(70 + m));
      set_isa(Isa::Avx512);
      const auto want = run(pool, w, x, m, true);
      set_isa(Isa::Avx2);
      ASSERT_TRUE(gemm_available(t));
      const auto got = run(pool, w, x, m, true);
      set_isa(best_isa());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << dtype_name(t) << " m = " << m;
    }
  }
}

// The AMX tile kernels (gemm_amx.cpp) give the AVX-512 kernels' bits for every 32-block
// format: decode batches and prefill chunks, row groups of every size (2 to 16 rows, and
// the overlapping last group of 17, 33, 61 and 100 rows), several 32-block chunks of the
// codes (k = 2080: 65 blocks), a partial last panel, 1 and 2 threads. Needs a CPU with AMX.
TEST(GemmAmx, GivesTheAvx512Bits) {
  if (!amx_supported()) GTEST_SKIP() << "this CPU (or its OS) offers no AMX-INT8";
  struct Restore {
    bool amx = amx_active();
    ~Restore() {
      set_amx_min_rows(0);
      set_amx(amx);
      set_isa(best_isa());
    }
  } restore;
  set_isa(Isa::Avx512);
  set_amx_min_rows(2);
  ThreadPool p1(1), p2(2);
  for (const DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::MXFP4}) {
    const int64_t k = 2080, n_out = 170;
    const Mat w = make(t, k, n_out, 21);
    for (const int64_t m : {2, 3, 5, 9, 16, 17, 33, 48, 61, 100}) {
      const auto x = acts(m, k, uint32_t(90 + m));
      set_amx(false);
      const auto want = run(p2, w, x, m, true);
      set_amx(true);
      ASSERT_TRUE(amx_active());
      const auto got2 = run(p2, w, x, m, true), got1 = run(p1, w, x, m, true);
      EXPECT_EQ(0, std::memcmp(got2.data(), want.data(), want.size() * sizeof(float))) << dtype_name(t) << " m = " << m;
      EXPECT_EQ(0, std::memcmp(got1.data(), want.data(), want.size() * sizeof(float))) << dtype_name(t) << " m = " << m;
    }
  }
}

// RIDGE_ISA below avx512 turns the tile kernels off with the AVX-512 ones.
TEST(GemmAmx, FollowsTheIsa) {
  if (!amx_supported()) GTEST_SKIP() << "this CPU (or its OS) offers no AMX-INT8";
  const bool was = amx_active();
  set_amx(true);
  set_isa(Isa::Avx2);
  EXPECT_FALSE(amx_active());
  set_isa(best_isa());
  EXPECT_TRUE(amx_active());
  set_amx(was);
}

// FP8 weights holding every finite E4M3 code (subnormals, the extremes, both zeros) in
// every lane position, on both paths the CPU has: the value is within f32 accumulation
// (1e-5 of sum |w a|) of the exact sum of e4m3(code) x d x a in double, a taken as the
// path rounds it (bf16: to bf16); the f16c path gives the scalar dot's bits (quant's
// dot_fp8, the definition of its order); each path's rows are bitwise the same at 1 row,
// a decode batch and a prefill chunk, on 1 and 2 threads.
TEST(GemmFp8, EveryCodeInEveryLaneOnEveryPath) {
  set_isa(best_isa());
  if (!gemm_available(DType::F8_E4M3_B128)) GTEST_SKIP() << "no packed GEMM on this CPU";
  // 5 blocks: a decode batch's passes of 4 (gemm_avx512.cpp) continue from y in the fifth.
  // 40 outputs: a panel pair and a partial third panel (its lanes masked).
  const int64_t k = 640, n_out = 40, rb = row_bytes(DType::F8_E4M3_B128, k);
  std::vector<uint8_t> rows(size_t(rb * n_out));
  std::mt19937 rng(9);
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t b = 0; b < k / 128; ++b) {
      auto* blk = reinterpret_cast<quant::BlockFp8*>(rows.data() + r * rb) + b;
      blk->d = std::ldexp(1.0f + float(rng() % 1000) / 1000.f, int(rng() % 40) - 20);
      for (int j = 0; j < 128; ++j) {
        uint8_t c = uint8_t((r * 37 + b * 128 + j * 3) & 0xFF);  // every code, shifted per row and block
        if ((c & 0x7F) == 0x7F) c = uint8_t(c - 1);  // no NaN codes (loading refuses them)
        blk->qs[j] = c;
      }
    }
  std::vector<Fp8Path> paths{Fp8Path::F16c};
  if (fp8_bf16_available()) paths.push_back(Fp8Path::Bf16);
  else std::printf("note: this CPU has no AVX512-BF16 + VBMI: only the f16c FP8 path runs\n");
  const quant::DotFn dot = quant::dot_fn(DType::F8_E4M3_B128, Isa::Scalar);
  ThreadPool p1(1), p2(2);
  for (const Fp8Path path : paths) {
    SCOPED_TRACE(fp8_path_name(path));
    const bool bf16 = path == Fp8Path::Bf16;
    std::vector<uint8_t> panels(size_t(packed_bytes(DType::F8_E4M3_B128, k, n_out)));
    pack_panels(DType::F8_E4M3_B128, k, n_out, rows.data(), panels.data(), 0, (n_out + kPanelRows - 1) / kPanelRows, bf16);
    const WeightView v{DType::F8_E4M3_B128, k, n_out, rows.data(), panels.data(), bf16};
    const auto x61 = acts(61, k, 61);
    std::vector<float> all(size_t(61 * n_out));
    Matmul().run(p2, v, x61.data(), 61, all.data());
    for (const int64_t m : {1, 3, 9, 20}) {
      const auto x = acts(m, k, uint32_t(m));
      std::vector<float> xe = x;  // the activations as the path rounds them
      if (bf16)
        for (float& e : xe) e = bf16_to_f32(f32_to_bf16(e));
      std::vector<float> y(size_t(m * n_out)), y1(size_t(m * n_out));
      Matmul().run(p2, v, x.data(), m, y.data());
      Matmul().run(p1, v, x.data(), m, y1.data());
      ASSERT_EQ(0, std::memcmp(y.data(), y1.data(), y.size() * sizeof(float))) << "1 vs 2 threads, m " << m;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n_out; ++r) {
          const float got = y[size_t(i * n_out + r)];
          if (path == Fp8Path::F16c) {
            ASSERT_EQ(got, dot(rows.data() + r * rb, x.data() + i * k, k)) << "m " << m << " row " << i << " col " << r;
          }
          double ref = 0, mag = 0;
          for (int64_t j = 0; j < k; ++j) {
            const auto* blk = reinterpret_cast<const quant::BlockFp8*>(rows.data() + r * rb) + j / 128;
            const double p = double(quant::fp8_e4m3_to_f32(blk->qs[j % 128])) * blk->d * xe[size_t(i * k + j)];
            ref += p;
            mag += std::fabs(p);
          }
          ASSERT_NEAR(got, ref, 1e-5 * mag + 1e-30) << "m " << m << " row " << i << " col " << r;
        }
    }
    // A row alone gives its bits in the 61-row prefill call, whose weights (f16c) are
    // converted once for all its row tiles or by each tile (convert_once).
    std::vector<float> y1(static_cast<size_t>(n_out));
    for (int64_t i = 0; i < 61; ++i) {
      const std::vector<float> xi(x61.begin() + i * k, x61.begin() + (i + 1) * k);
      Matmul().run(p2, v, xi.data(), 1, y1.data());
      ASSERT_EQ(0, std::memcmp(y1.data(), all.data() + i * n_out, size_t(n_out) * sizeof(float))) << "row " << i;
    }
    const KernelTuning saved = kernel_tuning();
    for (const int32_t once : {0, 1}) {
      KernelTuning tn = saved;
      tn.of(DType::F8_E4M3_B128).convert_once = once;
      set_kernel_tuning(tn);
      std::vector<float> again(all.size());
      Matmul().run(p2, v, x61.data(), 61, again.data());
      EXPECT_EQ(0, std::memcmp(again.data(), all.data(), all.size() * sizeof(float))) << "convert_once " << once;
    }
    set_kernel_tuning(saved);
  }
}

// The bf16 path's activation rounding gives f32_to_bf16's bits: ties both ways, NaN
// (quieted), infinities, subnormals, the largest finite values, and a tail of 7.
TEST(GemmFp8, ActivationRoundingIsF32ToBf16) {
  if (best_isa() != Isa::Avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7fc00001u, 0xff800001u, 0x7f800000u,
                                0xff800000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0, 0x80000000u};
  std::mt19937 rng(2);
  while (bits.size() < 16 * 7 + 7) bits.push_back(uint32_t(rng()));
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> y(x.size());
  detail::round_bf16_avx512(x.data(), y.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], f32_to_bf16(x[i])) << std::hex << bits[i];
}

// On every path (the AVX-512 quantizer must give the scalar one's bits).
TEST(GemmAct, SameCodesAsTheDotActivations) {
  for (int isa = 0; isa <= int(best_isa()); ++isa) {
  set_isa(Isa(isa));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> x(256);
  for (auto& v : x) v = nd(rng);
  for (int j = 64; j < 96; ++j) x[size_t(j)] = 0.f;  // a zero block
  // amax 127 gives d = 1, so x + 0.5 are exact ties: both must round to even.
  for (int j = 96; j < 128; ++j) x[size_t(j)] = float(j - 111) + 0.5f;
  x[96] = 127.f;
  x[200] = -x[201] * 4;  // a negative extreme
  std::vector<quant::BlockQ8A> a(8);
  std::vector<ActQ8> g(8);
  quant::quantize_act_q8a(x.data(), a.data(), 256);
  quantize_act_gemm(x.data(), g.data(), 256);
  for (int b = 0; b < 8; ++b) {
    EXPECT_EQ(a[size_t(b)].d, g[size_t(b)].d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(a[size_t(b)].qs[j], g[size_t(b)].qs[j]);
      sum += g[size_t(b)].qs[j];
    }
    EXPECT_EQ(sum, g[size_t(b)].sum());
  }
  }
  set_isa(best_isa());
}

}  // namespace
}  // namespace ridge::kernels
