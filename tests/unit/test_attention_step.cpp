// src/kernels/cpu/attention_step: a step's attention plans, and latent attention's context
// in segments folded in position order.
//
// The contract under test is batch invariance: a row's bits depend on its own context
// only, never on the plan (Rows or Segments), the thread count or the other tokens of
// the step; and a context of one segment is the single call it was before segments.
// Accuracy: the folded result against a double-precision softmax over the whole context,
// within kTol of max |v| on the f32 paths (dots over <= 96 terms, sums over <= 2100
// positions, the fold's rescaling a few ulp per segment); the BF16 vector way rounds the
// query and each segment's probabilities to bf16 (attention.h), which the reference
// does not: kTolBf16 bounds that (2^-8 of the weights, with margin).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/threadpool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_step.h"
#include "model/kv_cache.h"
#include "isa_guard.h"

namespace ridge::kernels {
namespace {

constexpr double kTol = 1e-4;
constexpr double kTolBf16 = 2e-2;
// The F16 way's log-sum-exp moves by at most its largest score's error: the half sums of
// 96 dimensions in chunks of 32, a few 2^-11 of sum_d |q_d k_d| x scale (about 30 here).
constexpr double kTolF16Lse = 5e-3;
// Int8: the AVX-512 kernel's query rows and weights rounded to 8 bits (test_attention.cpp's
// kTolQ8 bounds the same).
constexpr double kTolI8 = 2e-2;
constexpr int32_t kHeads = 16;  // query heads over the one latent KV head

using test::IsaGuard;

// Latent attention's cache: one KV head of dk = 32 rope + 64 latent dimensions, its
// value the latent (v_in_k), the tokens' blocks shuffled over the pool, each token its
// own table and context.
struct Latent {
  KVLayout l;
  std::unique_ptr<KVCache> kv;
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::span<const int32_t>> spans;
  std::vector<int32_t> n_ctx;
  std::vector<float> q;  // [tokens][kHeads][dk]

  Latent(DType t, std::vector<int32_t> ctx, bool v_in_k = true, int32_t bs = 16) : n_ctx(std::move(ctx)) {
    l.n_layer = 1, l.n_kv_head = 1, l.head_dim_k = 96, l.head_dim_v = 64, l.block_size = bs, l.dtype = t;
    l.v_in_k = v_in_k;
    int32_t blocks = 0;
    for (int32_t n : n_ctx) blocks += (n + bs - 1) / bs;
    l.n_blocks = std::max(blocks, 1);
    kv = std::make_unique<KVCache>(l);
    std::vector<int32_t> ids(size_t(l.n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(uint32_t(n_ctx.size() * 7 + size_t(t)));
    std::shuffle(ids.begin(), ids.end(), rng);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(size_t(l.head_dim_k));
    for (int32_t b = 0; b < l.n_blocks; ++b)
      for (int32_t s = 0; s < bs; ++s) {
        for (auto& e : x) e = g(rng);
        kv->write_k(0, b, 0, s, x.data());
        if (!v_in_k) kv->write_v(0, b, 0, s, x.data() + (l.head_dim_k - l.head_dim_v));
      }
    size_t next = 0;
    for (int32_t n : n_ctx) {
      const size_t nb = size_t((n + bs - 1) / bs);
      tables.emplace_back(ids.begin() + ptrdiff_t(next), ids.begin() + ptrdiff_t(next + nb));
      next += nb;
    }
    for (const auto& tb : tables) spans.emplace_back(tb);
    q.resize(n_ctx.size() * kHeads * size_t(l.head_dim_k));
    for (auto& e : q) e = 2.f * g(rng);  // a peaked softmax: segments' maxima differ
  }
  int64_t tokens() const { return int64_t(n_ctx.size()); }
  // Tokens [t0, t1) as one step.
  AttnStep step(int64_t t0, int64_t t1, float* out) const {
    AttnStep s;
    s.kv = kv.get(), s.scale = 1.f / std::sqrt(float(l.head_dim_k)), s.n_head = kHeads, s.n_kv_head = 1;
    s.q = q.data() + t0 * kHeads * l.head_dim_k, s.out = out;
    s.tables = std::span(spans).subspan(size_t(t0), size_t(t1 - t0));
    s.n_ctx = std::span(n_ctx).subspan(size_t(t0), size_t(t1 - t0));
    return s;
  }
  // Double-precision softmax(q K^T s) V of token t's head h over its whole context, from
  // the cache's stored values; the query rounded to bf16 first where the kernel does.
  std::vector<double> reference(int64_t t, int32_t h, bool bf16_query, double* lse) const {
    const int32_t dk = l.head_dim_k, dv = l.head_dim_v, n = n_ctx[size_t(t)];
    const float* qr = q.data() + (t * kHeads + h) * dk;
    std::vector<float> k(static_cast<size_t>(dk)), v(static_cast<size_t>(dv));
    std::vector<double> s(static_cast<size_t>(n)), out(static_cast<size_t>(dv), 0.0);
    double mx = -std::numeric_limits<double>::infinity();
    for (int32_t p = 0; p < n; ++p) {
      kv->read_k(0, tables[size_t(t)][size_t(p / l.block_size)], 0, p % l.block_size, k.data());
      double dot = 0;
      for (int32_t d = 0; d < dk; ++d) {
        float qd = qr[d];
        if (bf16_query) {
          uint32_t u;
          std::memcpy(&u, &qd, 4);
          u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
          std::memcpy(&qd, &u, 4);
        }
        dot += double(qd) * k[size_t(d)];
      }
      s[size_t(p)] = dot / std::sqrt(double(dk));
      mx = std::max(mx, s[size_t(p)]);
    }
    double sum = 0;
    for (int32_t p = 0; p < n; ++p) {
      const double w = std::exp(s[size_t(p)] - mx);
      sum += w;
      kv->read_v(0, tables[size_t(t)][size_t(p / l.block_size)], 0, p % l.block_size, v.data());
      for (int32_t d = 0; d < dv; ++d) out[size_t(d)] += w * v[size_t(d)];
    }
    for (auto& e : out) e /= sum;
    if (lse) *lse = mx + std::log(sum);
    return out;
  }
};

// The ways a latent cache's attention runs here: every ISA, and on AVX-512 a BF16 or FP8
// cache's two (f32 FMAs, AVX512-BF16 vectors where the CPU has them).
struct Way {
  Isa isa;
  Fp8Path fp8;
  bool f16 = false;  // an F16 cache's half arithmetic (AttnDots::F16; values in their own tiles)
  std::string name() const {
    return std::string(isa_name(isa)) + (fp8 == Fp8Path::Bf16 ? "+bf16" : "") + (f16 ? "+f16" : "");
  }
  void use() const { set_isa(isa), set_fp8_path(fp8), detail::set_attention_f16_arith(f16); }
};
std::vector<Way> ways(DType t) {
  std::vector<Way> v;
  for (int i = 0; i <= int(best_isa()); ++i) {
    v.push_back({Isa(i), Fp8Path::F16c});
    if (Isa(i) == Isa::Avx512 && (t == DType::BF16 || t == DType::F8_E4M3) && fp8_bf16_available())
      v.push_back({Isa(i), Fp8Path::Bf16});
    if (Isa(i) == Isa::Avx512 && t == DType::F16 && cpu_features().avx512fp16 && detail::attention_f16_built())
      v.push_back({Isa(i), Fp8Path::F16c, true});
  }
  return v;
}

TEST(AttentionStep, SegmentKeysAreWholeBlocksAndTiles) {
  KVLayout l;
  l.n_kv_head = 1, l.head_dim_k = 96, l.head_dim_v = 64, l.v_in_k = true;
  for (int32_t bs : {1, 8, 16, 32, 64, 128, 256, 1024}) {
    l.block_size = bs;
    const int32_t s = attention_segment_keys(l);
    EXPECT_GE(s, kAttnSegmentKeys) << bs;
    EXPECT_EQ(s % bs, 0) << bs;
    EXPECT_EQ(s % detail::kMaxTileKeys, 0) << bs;
  }
  l.v_in_k = false;  // values in their own tiles: one call over the whole context
  l.block_size = 16;
  EXPECT_EQ(attention_segment_keys(l), 0);
}

// Every plan, thread count and batch gives each row the same bits; a context of one
// segment the bits of one attention_heads call over it.
TEST(AttentionStep, PlansThreadsAndBatchesGiveTheSameBits) {
  IsaGuard guard;
  const std::vector<int32_t> ctx{1100, 1, 512, 513, 700};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3}) {
    const Latent c(t, ctx);
    const int32_t dv = c.l.head_dim_v;
    const int64_t row = int64_t(kHeads) * dv;
    for (const Way& w : ways(t)) {
      w.use();
      const std::string name = std::string(dtype_name(t)) + " " + w.name();
      // Each token alone on one thread: the bits every other run must give.
      std::vector<float> want(size_t(c.tokens() * row));
      {
        ThreadPool one(1);
        AttnStepRunner r;
        for (int64_t i = 0; i < c.tokens(); ++i) r.run(one, c.step(i, i + 1, want.data() + i * row), AttnPlan::Rows);
      }
      // A context of one segment: one call, no fold.
      for (int64_t i = 0; i < c.tokens(); ++i) {
        if (c.n_ctx[size_t(i)] > attention_segment_keys(c.l)) continue;
        std::vector<float> o(static_cast<size_t>(row));
        std::vector<float> sc(size_t(attention_scratch_floats(c.l, kHeads)));
        AttnArgs a{c.kv.get(), 0, c.spans[size_t(i)], c.n_ctx[size_t(i)], 1.f / std::sqrt(96.f), {}};
        attention_heads(a, 0, 1, kHeads, c.q.data() + i * kHeads * 96, 96, o.data(), dv, sc.data());
        ASSERT_EQ(0, std::memcmp(o.data(), want.data() + i * row, o.size() * 4)) << name << " token " << i;
      }
      for (int threads : {1, 2, 3})
        for (AttnPlan plan : {AttnPlan::Rows, AttnPlan::Segments, AttnPlan::Auto}) {
          ThreadPool pool(threads);
          AttnStepRunner r;
          std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
          r.run(pool, c.step(0, c.tokens(), got.data()), plan);  // the whole batch
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
              << name << " batch, " << threads << " threads, " << attn_plan_name(plan);
          if (plan != AttnPlan::Auto) {
            EXPECT_EQ(r.last_plan(), plan);
          }
          for (int64_t i : {int64_t(0), int64_t(3)}) {  // alone, as a decode at batch 1
            std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());
            r.run(pool, c.step(i, i + 1, got.data()), plan);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data() + i * row, size_t(row) * 4))
                << name << " token " << i << " alone, " << threads << " threads, " << attn_plan_name(plan);
          }
        }
    }
  }
}

// The folded segments against a double softmax over the whole context.
TEST(AttentionStep, SegmentsFoldToTheWholeContextsSoftmax) {
  IsaGuard guard;
  const std::vector<int32_t> ctx{2100, 700, 1537};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3}) {
    const Latent c(t, ctx);
    const int32_t dv = c.l.head_dim_v;
    for (const Way& w : ways(t)) {
      w.use();
      const bool b16 = w.fp8 == Fp8Path::Bf16;
      ThreadPool pool(2);
      AttnStepRunner r;
      std::vector<float> got(size_t(c.tokens() * kHeads * dv));
      r.run(pool, c.step(0, c.tokens(), got.data()), AttnPlan::Segments);
      for (int64_t i = 0; i < c.tokens(); ++i)
        for (int32_t h = 0; h < kHeads; ++h) {
          const std::vector<double> ref = c.reference(i, h, b16, nullptr);
          double vmax = 0, err = 0;
          for (int32_t d = 0; d < dv; ++d) {
            vmax = std::max(vmax, std::abs(ref[size_t(d)]));
            err = std::max(err, std::abs(ref[size_t(d)] - got[size_t((i * kHeads + h) * dv + d)]));
          }
          // The output's scale: the values are N(0, 1), so max |v| is about 4.
          const bool i8 = t == DType::I8 && w.isa == Isa::Avx512;  // (the portable path reads exact codes)
          EXPECT_LE(err, (i8 ? kTolI8 : b16 ? kTolBf16 : kTol) * 4.0)
              << dtype_name(t) << " " << w.name() << " token " << i << " head " << h << " (max |out| " << vmax << ")";
        }
    }
  }
}

// AttnArgs::lse is each row's log-sum-exp of its scaled scores, on every path, for
// values in the keys and in their own tiles.
TEST(AttentionStep, LogSumExpOfEveryPath) {
  IsaGuard guard;
  for (const bool v_in_k : {true, false})
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3}) {
      const Latent c(t, {300, 77}, v_in_k);
      for (const Way& w : ways(t)) {
        w.use();
        const bool b16 = w.fp8 == Fp8Path::Bf16 && detail::attention_dots(c.l) == detail::AttnDots::Bf16;
        std::vector<float> o(size_t(kHeads * c.l.head_dim_v)), lse(kHeads, std::numeric_limits<float>::quiet_NaN());
        std::vector<float> sc(size_t(attention_scratch_floats(c.l, kHeads)));
        for (int64_t i = 0; i < c.tokens(); ++i) {
          AttnArgs a{c.kv.get(), 0, c.spans[size_t(i)], c.n_ctx[size_t(i)], 1.f / std::sqrt(96.f), {}};
          a.lse = lse.data();
          attention_heads(a, 0, 1, kHeads, c.q.data() + i * kHeads * 96, 96, o.data(), c.l.head_dim_v, sc.data());
          for (int32_t h = 0; h < kHeads; ++h) {
            double want = 0;
            c.reference(i, h, b16, &want);
            const bool h16 = w.f16 && detail::attention_dots(c.l) == detail::AttnDots::F16;
            const double tol = t == DType::I8 && w.isa == Isa::Avx512 ? kTolI8 : h16 ? kTolF16Lse : 1e-4;
            EXPECT_NEAR(lse[size_t(h)], want, tol * std::max(1.0, std::abs(want)))
                << dtype_name(t) << " " << w.name() << (v_in_k ? " values in keys" : "") << " token " << i;
          }
        }
      }
    }
}

TEST(AttentionStep, FoldOfTwoHalvesIsTheWhole) {
  // Two halves of one softmax: o1 over scores {a, b} with lse l1, o2 over {c} with l2.
  const double s[3] = {1.5, -0.25, 3.0}, v[3] = {2.0, -1.0, 0.5};
  const double l1 = std::log(std::exp(s[0]) + std::exp(s[1])), l2 = s[2];
  float o = float((std::exp(s[0]) * v[0] + std::exp(s[1]) * v[1]) / std::exp(l1)), L = float(l1);
  const float o2 = float(v[2]);
  attention_fold(&o, &L, &o2, float(l2), 1);
  const double lall = std::log(std::exp(s[0]) + std::exp(s[1]) + std::exp(s[2]));
  const double want = (std::exp(s[0]) * v[0] + std::exp(s[1]) * v[1] + std::exp(s[2]) * v[2]) / std::exp(lall);
  EXPECT_NEAR(o, want, 1e-6);
  EXPECT_NEAR(L, lall, 1e-6);
  // A segment with no weight leaves the row; a row with none takes the segment.
  const float inf = std::numeric_limits<float>::infinity();
  float keep = 0.75f, Lk = 2.f;
  const float other = 9.f;
  attention_fold(&keep, &Lk, &other, -inf, 1);
  EXPECT_EQ(keep, 0.75f);
  EXPECT_EQ(Lk, 2.f);
  float empty = 0.f, Le = -inf;
  attention_fold(&empty, &Le, &other, 1.25f, 1);
  EXPECT_EQ(empty, 9.f);
  EXPECT_EQ(Le, 1.25f);
}

// Segments where the rows' tasks would split one token's query heads and the busiest
// thread does less; rows otherwise (and always without segments).
TEST(AttentionStep, PlanChoice) {
  if (std::getenv("RIDGE_ATTN_PLAN")) GTEST_SKIP() << "RIDGE_ATTN_PLAN overrides the choice";
  const auto plan = [](const std::vector<int32_t>& ctx, int threads, bool v_in_k = true, int32_t window = 0,
                       DType t = DType::F16) {
    const Latent c(t, ctx, v_in_k);
    std::vector<float> out(size_t(c.tokens() * kHeads * c.l.head_dim_v));
    AttnStep s = c.step(0, c.tokens(), out.data());
    s.window = window;
    return attention_plan(s, threads);
  };
  EXPECT_EQ(plan({4096}, 2), AttnPlan::Segments);
  EXPECT_EQ(plan({2048}, 2), AttnPlan::Segments);  // two segments a thread against 2048 keys of half the rows
  EXPECT_EQ(plan({3072}, 2), AttnPlan::Segments);
  EXPECT_EQ(plan({1100}, 2), AttnPlan::Rows);      // 512 | 512 + 76: no better than half the rows, with the fixed cost
  EXPECT_EQ(plan({1600}, 2), AttnPlan::Rows);      // 1024 | 576: uneven
  EXPECT_EQ(plan({600}, 2), AttnPlan::Rows);       // 512 | 88: the first segment alone outweighs
  EXPECT_EQ(plan({512}, 2), AttnPlan::Rows);       // one segment
  EXPECT_EQ(plan({4096, 4096}, 2), AttnPlan::Rows);  // a task per token: no query split
  EXPECT_EQ(plan({4096, 4096}, 16), AttnPlan::Segments);
  EXPECT_EQ(plan({4096}, 1), AttnPlan::Rows);
  EXPECT_EQ(plan({4096}, 2, false), AttnPlan::Rows);     // no segments without values in the keys
  // P.V with the rows across 16 lanes: half the rows waste half of P.V, nothing is
  // transposed, so two segments beat half the rows where the f32 way's do not.
  const Latent bf(DType::BF16, {1024});
  if (attention_latent_lanes(bf.l)) {
    EXPECT_EQ(plan({1024}, 2, true, 0, DType::BF16), AttnPlan::Segments);
    EXPECT_EQ(plan({1024}, 2), AttnPlan::Rows);
    EXPECT_EQ(plan({600}, 2, true, 0, DType::BF16), AttnPlan::Rows);
    EXPECT_EQ(plan({4096, 4096}, 2, true, 0, DType::BF16), AttnPlan::Rows);
  }
  EXPECT_EQ(plan({4096}, 2, true, 1024), AttnPlan::Rows);  // nor with a window
}

}  // namespace
}  // namespace ridge::kernels
