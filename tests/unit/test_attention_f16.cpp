// The F16 cache's half-arithmetic way (kernels/cpu/attention_f16_avx512.h, AttnDots::F16)
// where its numbers leave the ordinary: queries far from 1 in magnitude (the power-of-two
// scaling), keys and values whose half sums overflow (the row's redo on the f32 way), and
// whether the emulation test_attention.cpp holds it to (attention_f16_emulation.h) tells
// it from its near neighbours. The ordinary shapes, windows,
// sinks and grouping run there, in check_case. Skipped where the CPU lacks AVX512-FP16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "kernels/cpu/attention.h"
#include "model/kv_cache.h"
#include "attention_f16_emulation.h"
#include "isa_guard.h"

namespace ridge::kernels {
namespace {

// One layer, one KV head, blocks of bs slots in reverse order; K and V from the functions
// given.
struct F16Cache {
  KVLayout l;
  std::unique_ptr<KVCache> kv;
  std::vector<int32_t> table;
  int32_t n_ctx;

  template <class KF, class VF>
  F16Cache(int32_t d, int32_t n_ctx_, KF kf, VF vf, int32_t bs = 16) : n_ctx(n_ctx_) {
    l.n_layer = 1, l.n_kv_head = 1, l.head_dim_k = d, l.head_dim_v = d, l.block_size = bs, l.dtype = DType::F16;
    l.n_blocks = (n_ctx + bs - 1) / bs;
    kv = std::make_unique<KVCache>(l);
    for (int32_t b = 0; b < l.n_blocks; ++b) table.push_back(l.n_blocks - 1 - b);
    std::vector<float> x(static_cast<size_t>(d));
    for (int32_t p = 0; p < n_ctx; ++p) {
      for (int32_t i = 0; i < d; ++i) x[size_t(i)] = kf(p, i);
      kv->write_k(0, table[size_t(p / bs)], 0, p % bs, x.data());
      for (int32_t i = 0; i < d; ++i) x[size_t(i)] = vf(p, i);
      kv->write_v(0, table[size_t(p / bs)], 0, p % bs, x.data());
    }
  }
  std::vector<float> row(bool k, int32_t p) const {
    std::vector<float> r(static_cast<size_t>(l.head_dim_k));
    const int32_t bs = l.block_size;
    if (k) kv->read_k(0, table[size_t(p / bs)], 0, p % bs, r.data());
    else kv->read_v(0, table[size_t(p / bs)], 0, p % bs, r.data());
    return r;
  }
  // All rows in one call on the given way (true: F16), asserting that it is the one taken.
  std::vector<float> run(const std::vector<float>& q, int32_t n_q, float scale, bool halves) const {
    detail::set_attention_f16_arith(halves);
    EXPECT_EQ(detail::attention_dots(l), halves ? detail::AttnDots::F16 : detail::AttnDots::F32);
    const int32_t d = l.head_dim_k;
    std::vector<float> out(size_t(n_q * d)), scratch(size_t(attention_scratch_floats(l, n_q)));
    const AttnArgs a{kv.get(), 0, table, n_ctx, scale, {}};
    attention_group(a, 0, n_q, q.data(), d, out.data(), d, scratch.data());
    return out;
  }
  // The F16 way's arithmetic over the whole context (test::f16_way_emulation), with
  // chunks of score_dims dimensions and value_keys positions.
  std::vector<double> emulation(const float* q, float scale, int32_t score_dims = detail::kF16ScoreDims,
                                int32_t value_keys = detail::kF16ValueKeys) const {
    const auto K = [&](int32_t p) { return row(true, p); };
    const auto V = [&](int32_t p) { return row(false, p); };
    return test::f16_way_emulation(K, V, 0, n_ctx, q, l.head_dim_k, l.head_dim_v, scale, score_dims, value_keys,
                                   detail::attention_tile_blocks(l.block_size) * l.block_size);
  }
  // softmax(q K^T scale) V in double.
  std::vector<double> reference(const float* q, float scale) const {
    const int32_t d = l.head_dim_k;
    std::vector<double> s(static_cast<size_t>(n_ctx)), out(static_cast<size_t>(d), 0.0);
    double mx = -INFINITY, sum = 0;
    for (int32_t p = 0; p < n_ctx; ++p) {
      const std::vector<float> k = row(true, p);
      double dot = 0;
      for (int32_t i = 0; i < d; ++i) dot += double(q[i]) * k[size_t(i)];
      s[size_t(p)] = dot * scale, mx = std::max(mx, s[size_t(p)]);
    }
    for (int32_t p = 0; p < n_ctx; ++p) {
      const double e = std::exp(s[size_t(p)] - mx);
      sum += e;
      const std::vector<float> v = row(false, p);
      for (int32_t i = 0; i < d; ++i) out[size_t(i)] += e * v[size_t(i)];
    }
    for (double& o : out) o /= sum;
    return out;
  }
};

std::vector<float> normal(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, sigma);
  std::vector<float> x(n);
  for (float& e : x) e = g(rng);
  return x;
}

// Queries of magnitude 1e-6 and 1e4 with the softmax scale making their scores O(1):
// scaled by a power of two into [1, 2) the rows keep a half's 11 bits (unscaled, the
// small ones would be subnormal halves, the large ones' products overflow), and the
// outputs are the emulation's (test::f16_way_emulation) within kTolF16Emulation.
TEST(AttentionF16, QueriesOfAnyMagnitudeKeepTheirPrecision) {
  if (!test::f16_here()) GTEST_SKIP() << "no AVX512-FP16 on this CPU: the F16 way is not taken here";
  test::IsaGuard guard;
  const int32_t d = 64, n_ctx = 150, n_q = 4;
  const std::vector<float> kx = normal(size_t(n_ctx * d), 1.f, 1), vx = normal(size_t(n_ctx * d), 1.f, 2);
  const F16Cache c(d, n_ctx, [&](int32_t p, int32_t i) { return kx[size_t(p * d + i)]; },
                   [&](int32_t p, int32_t i) { return vx[size_t(p * d + i)]; });
  for (const float mag : {1e-6f, 1e4f}) {
    std::vector<float> q = normal(size_t(n_q * d), mag, 3);
    const float scale = 1.f / (mag * 4.f);
    const std::vector<float> got = c.run(q, n_q, scale, true);
    double worst = 0;
    for (int32_t r = 0; r < n_q; ++r) {
      const std::vector<double> want = c.emulation(q.data() + r * d, scale, detail::kF16ScoreDims);
      for (int32_t i = 0; i < d; ++i) {
        const double e = std::fabs(got[size_t(r * d + i)] - want[size_t(i)]) / 4.0;  // of max |v| ~ 4
        ASSERT_LE(e, test::kTolF16Emulation) << "magnitude " << mag << " row " << r << " element " << i;
        worst = std::max(worst, e);
      }
    }
    std::printf("[AttentionF16] |q| ~ %g: largest difference from the emulation %.2e of max|v|\n", double(mag), worst);
  }
}

// Half sums that overflow: values of 30000 (32 of them past 65504), keys of 5000 or
// more that agree in sign with a row (its 32 products past it). Each row that overflows is redone on the f32
// way, so the results are finite and the f32 way's: bit for bit for a flat softmax over
// huge values (the scores are exact zeros either way, the P.V all on the f32 way), and
// within 1e-3 of max |v| for a peaked one over huge keys (its one-hot P.V is exact in
// halves too).
TEST(AttentionF16, OverflowingHalfSumsAreRedoneOnTheF32Way) {
  if (!test::f16_here()) GTEST_SKIP() << "no AVX512-FP16 on this CPU: the F16 way is not taken here";
  test::IsaGuard guard;
  const int32_t d = 64, n_ctx = 200;
  const std::vector<float> kx = normal(size_t(n_ctx * d), 1.f, 4), vx = normal(size_t(n_ctx * d), 1.f, 5);
  {
    const F16Cache c(d, n_ctx, [&](int32_t p, int32_t i) { return kx[size_t(p * d + i)]; },
                     [&](int32_t, int32_t i) { return i % 2 ? 30000.f : -29984.f; });
    const std::vector<float> q(size_t(3 * d), 0.f);  // equal scores: every probability 1
    const std::vector<float> h = c.run(q, 3, 0.125f, true), f = c.run(q, 3, 0.125f, false);
    for (size_t i = 0; i < h.size(); ++i) {
      ASSERT_TRUE(std::isfinite(h[i])) << "element " << i;
      ASSERT_EQ(std::memcmp(&h[i], &f[i], 4), 0) << "element " << i << ": " << h[i] << " vs the f32 way's " << f[i];
    }
  }
  {
    // Keys of 5000 to 25000 with row 0's signs: its scaled products all add up.
    const std::vector<float> q = normal(size_t(3 * d), 1.f, 6);
    const F16Cache c(d, n_ctx,
                     [&](int32_t p, int32_t i) {
                       return std::copysign(10000.f * (1.f + std::fabs(kx[size_t(p * d)])) / 2.f, q[size_t(i)]);
                     },
                     [&](int32_t p, int32_t i) { return vx[size_t(p * d + i)]; });
    const std::vector<float> h = c.run(q, 3, 0.125f, true), f = c.run(q, 3, 0.125f, false);
    for (size_t i = 0; i < h.size(); ++i) {
      ASSERT_TRUE(std::isfinite(h[i])) << "element " << i;
      ASSERT_NEAR(h[i], f[i], 1e-3 * 4) << "element " << i;
    }
  }
}

// The emulation tells the kernel's arithmetic from its neighbours': on test_attention.cpp's
// kind of data (N(0, 1) keys and values, rows up to 4.5 sigma, dk 128, 300 positions) the
// kernel is within kTolF16Emulation of it, while the same emulation with score or value
// chunks of half the length, value chunks counted from absolute positions rather than
// each tile's first (blocks of 80: tiles of 80 positions), the double softmax over the
// rounded rows (no half sums), or another row's output are each further off than that.
TEST(AttentionF16, EmulationTellsTheKernelFromItsNeighbours) {
  if (!test::f16_here()) GTEST_SKIP() << "no AVX512-FP16 on this CPU: the F16 way is not taken here";
  test::IsaGuard guard;
  const int32_t d = 128, n_ctx = 300, n_q = 8;
  const std::vector<float> kx = normal(size_t(n_ctx * d), 1.f, 7), vx = normal(size_t(n_ctx * d), 1.f, 8);
  std::vector<float> q = normal(size_t(n_q * d), 1.f, 9);
  for (int32_t r = 0; r < n_q; ++r)
    for (int32_t i = 0; i < d; ++i) q[size_t(r * d + i)] *= 1.f + 0.5f * float(r);
  const float scale = 1.f / std::sqrt(float(d));
  for (const int32_t bs : {16, 80}) {
    const F16Cache c(d, n_ctx, [&](int32_t p, int32_t i) { return kx[size_t(p * d + i)]; },
                     [&](int32_t p, int32_t i) { return vx[size_t(p * d + i)]; }, bs);
    const std::vector<float> got = c.run(q, n_q, scale, true);
    // Largest differences, of max |v| ~ 4: from the emulation, from it with half-length
    // score chunks, half-length value chunks, value chunks from absolute positions, from
    // no half sums, from another row.
    double own = 0, sd = 0, vk = 0, abs_pos = 0, exact = 0, other = 0;
    for (int32_t r = 0; r < n_q; ++r) {
      const float* qr0 = q.data() + r * d;
      const std::vector<double> want = c.emulation(qr0, scale);
      const std::vector<double> half_sd = c.emulation(qr0, scale, detail::kF16ScoreDims / 2);
      const std::vector<double> half_vk = c.emulation(qr0, scale, detail::kF16ScoreDims, detail::kF16ValueKeys / 2);
      // Tiles of the whole context: chunks at absolute multiples of kF16ValueKeys.
      const auto K = [&](int32_t p) { return c.row(true, p); };
      const auto V = [&](int32_t p) { return c.row(false, p); };
      std::vector<double> absolute;
      if (bs == 80) absolute = test::f16_way_emulation(K, V, 0, n_ctx, qr0, d, d, scale, detail::kF16ScoreDims,
                                                       detail::kF16ValueKeys, n_ctx);
      std::vector<float> qr(static_cast<size_t>(d));
      const int e = test::f16_query_exponent(qr0, d);
      for (int32_t i = 0; i < d; ++i) qr[size_t(i)] = std::ldexp(float(_Float16(std::ldexp(qr0[i], e))), -e);
      const std::vector<double> no_halves = c.reference(qr.data(), scale);
      for (int32_t i = 0; i < d; ++i) {
        const double g = got[size_t(r * d + i)];
        own = std::max(own, std::fabs(g - want[size_t(i)]) / 4);
        sd = std::max(sd, std::fabs(g - half_sd[size_t(i)]) / 4);
        vk = std::max(vk, std::fabs(g - half_vk[size_t(i)]) / 4);
        if (bs == 80) abs_pos = std::max(abs_pos, std::fabs(g - absolute[size_t(i)]) / 4);
        exact = std::max(exact, std::fabs(g - no_halves[size_t(i)]) / 4);
        other = std::max(other, std::fabs(got[size_t((r + 1) % n_q * d + i)] - want[size_t(i)]) / 4);
      }
    }
    std::printf("[AttentionF16] blocks of %d: from the emulation %.2e; with half-length score chunks %.2e, value "
                "chunks %.2e, value chunks from absolute positions %.2e; no half sums %.2e; another row %.2e (of "
                "max|v|)\n", bs, own, sd, vk, abs_pos, exact, other);
    EXPECT_LE(own, test::kTolF16Emulation) << bs;
    EXPECT_GT(sd, test::kTolF16Emulation) << bs;
    EXPECT_GT(vk, test::kTolF16Emulation) << bs;
    if (bs == 80) {
      EXPECT_GT(abs_pos, test::kTolF16Emulation);
    }
    EXPECT_GT(exact, test::kTolF16Emulation) << bs;
    EXPECT_GT(other, 100 * test::kTolF16Emulation) << bs;
  }
}

}  // namespace
}  // namespace ridge::kernels
