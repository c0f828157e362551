// Latent attention's cache (KVLayout::v_in_k: a value is its key's last dv dimensions):
// attention over it against a cache holding the same values in V tiles, bit for bit where
// the same kernel runs, on every ISA and way the CPU has (the kernels themselves are
// checked against a double reference in test_attention.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "model/kv_cache.h"
#include "isa_guard.h"

namespace ridge::kernels {
namespace {

using test::IsaGuard;

// Blocks 0..n-1 in a random order: a block table whose neighbours are not adjacent.
std::vector<int32_t> shuffled_table(int32_t n, std::mt19937& rng) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(best_isa()); ++i) v.push_back(Isa(i));
  return v;
}

// Multi-head latent attention's cache keeps a value as its key's last dv dimensions
// (KVLayout::v_in_k): attention over it must give what a cache holding the same values
// in V tiles gives, bit for bit where the same kernel runs (scalar, AVX-512; AVX2 runs the
// portable path for it, so within rounding there), whatever the block size, with or
// without a window, and reading nothing past the context (NaN elsewhere). Both ways of
// a BF16 cache: the f32 way, and where the CPU has them AVX512-BF16 vectors (the shapes
// they take: P.V with the rows across the lanes, the values' pairs broadcast from the
// keys, against pv_bf16 over a V tile, which the reference tests above cover; 40 rows are
// three groups of lanes, the last part empty).
TEST(AttentionValuesInKeys, SameAsValuesInTheirOwnTiles) {
  IsaGuard guard;
  struct Shape {
    int32_t dk, dv, bs, n_ctx, n_q;
  };
  std::vector<Fp8Path> ways{Fp8Path::F16c};
  if (fp8_bf16_available()) ways.push_back(Fp8Path::Bf16);
  // Latent values take the f32 way: so must an F16 cache's own tiles here (its half
  // arithmetic, AttnDots::F16, is checked against its emulation in test_attention.cpp).
  detail::set_attention_f16_arith(false);
  for (const Fp8Path way : ways)
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const Shape& sh : {Shape{80, 64, 16, 50, 4}, Shape{576, 512, 16, 70, 16}, Shape{40, 24, 8, 37, 3},
                            Shape{80, 64, 32, 90, 5}, Shape{48, 32, 64, 130, 2}, Shape{80, 64, 1, 9, 16},
                            Shape{64, 32, 16, 45, 8}, Shape{96, 64, 32, 97, 5}, Shape{64, 64, 128, 300, 3},
                            Shape{576, 512, 64, 133, 9}, Shape{576, 512, 16, 300, 40}}) {
      if (way == Fp8Path::Bf16 && t != DType::BF16) continue;
      set_fp8_path(way);
      KVLayout a;
      a.n_layer = 1, a.n_kv_head = 1, a.head_dim_k = sh.dk, a.head_dim_v = sh.dv, a.block_size = sh.bs, a.dtype = t;
      a.n_blocks = (sh.n_ctx + sh.bs - 1) / sh.bs + 2;
      KVLayout b = a;
      b.v_in_k = true;
      KVCache ca(a), cb(b);
      EXPECT_EQ(cb.total_bytes(), int64_t(a.n_blocks) * sh.bs * sh.dk * int64_t(dtype_info(t).type_size));
      std::mt19937 rng(uint32_t(sh.dk * 31 + sh.bs));
      std::normal_distribution<float> g(0.f, 1.f);
      const std::vector<int32_t> table = shuffled_table(a.n_blocks, rng);
      std::vector<float> k(size_t(sh.dk)), nan(size_t(sh.dk), std::numeric_limits<float>::quiet_NaN());
      for (int32_t blk = 0; blk < a.n_blocks; ++blk)
        for (int32_t s = 0; s < sh.bs; ++s) {
          ca.write_k(0, blk, 0, s, nan.data()), cb.write_k(0, blk, 0, s, nan.data());
          ca.write_v(0, blk, 0, s, nan.data());
        }
      for (int32_t p = 0; p < sh.n_ctx; ++p) {
        for (auto& e : k) e = g(rng);
        const int32_t blk = table[size_t(p / sh.bs)], s = p % sh.bs;
        ca.write_k(0, blk, 0, s, k.data()), cb.write_k(0, blk, 0, s, k.data());
        ca.write_v(0, blk, 0, s, k.data() + (sh.dk - sh.dv));
        std::vector<float> va(size_t(sh.dv)), vb(size_t(sh.dv));
        ca.read_v(0, blk, 0, s, va.data()), cb.read_v(0, blk, 0, s, vb.data());
        ASSERT_EQ(va, vb) << "read_v of a value kept in its key";
      }
      std::vector<float> q(size_t(sh.n_q * sh.dk));
      for (auto& e : q) e = g(rng);
      const float scale = 1.f / std::sqrt(float(sh.dk));
      // Each row its own context (a prompt's rows sharing the tiles, AttnArgs::row_ctx):
      // ascending, 3 positions apart, the last the whole context.
      std::vector<int32_t> rows(size_t(sh.n_q));
      for (int32_t i = 0; i < sh.n_q; ++i) rows[size_t(i)] = std::max(1, sh.n_ctx - 3 * (sh.n_q - 1 - i));
      for (Isa isa : isas())
      for (const int32_t window : {0, 21, -1}) {  // -1: the rows' own contexts
        set_isa(isa);
        const std::string name = std::string(dtype_name(t)) + " dk=" + std::to_string(sh.dk) + " bs=" +
                                 std::to_string(sh.bs) + " isa=" + std::string(isa_name(isa)) +
                                 (window < 0 ? std::string(" row contexts") : " window=" + std::to_string(window)) +
                                 (way == Fp8Path::Bf16 ? " bf16 vectors" : "");
        if (way == Fp8Path::Bf16 && isa == Isa::Avx512) {  // the way under test is the one taken
          ASSERT_EQ(attention_dots_in_bf16(b), sh.dk % 32 == 0 && sh.dv % 32 == 0 && sh.bs % 16 == 0) << name;
        }
        std::vector<float> oa(size_t(sh.n_q * sh.dv)), ob(oa.size());
        std::vector<float> sa(size_t(attention_scratch_floats(a, sh.n_q)), std::numeric_limits<float>::quiet_NaN());
        std::vector<float> sb(size_t(attention_scratch_floats(b, sh.n_q)), std::numeric_limits<float>::quiet_NaN());
        AttnArgs aa{&ca, 0, table, sh.n_ctx, scale, {}}, ab{&cb, 0, table, sh.n_ctx, scale, {}};
        aa.window = ab.window = std::max(window, 0);
        if (window < 0) aa.row_ctx = ab.row_ctx = rows;
        attention_group(aa, 0, sh.n_q, q.data(), sh.dk, oa.data(), sh.dv, sa.data());
        attention_group(ab, 0, sh.n_q, q.data(), sh.dk, ob.data(), sh.dv, sb.data());
        for (size_t i = 0; i < oa.size(); ++i) {
          ASSERT_TRUE(std::isfinite(ob[i])) << name << " element " << i;
          if (isa == Isa::Avx2) ASSERT_NEAR(ob[i], oa[i], 2e-5 * (1 + std::fabs(oa[i]))) << name << " element " << i;
          else ASSERT_EQ(ob[i], oa[i]) << name << " element " << i;
        }
      }
    }
}

// A BF16 cache's layout with the values in V tiles, and the same with them in the keys
// (KVLayout::v_in_k).
std::pair<KVLayout, KVLayout> bf16_value_layouts(int32_t dk, int32_t dv, int32_t bs, int32_t nkv, int32_t n_blocks) {
  KVLayout a;
  a.n_layer = 1, a.n_kv_head = nkv, a.head_dim_k = dk, a.head_dim_v = dv, a.block_size = bs, a.dtype = DType::BF16;
  a.n_blocks = n_blocks;
  KVLayout b = a;
  b.v_in_k = true;
  return {a, b};
}

// Two KV heads of 12 query rows each in one call: the lanes' first group of 16 rows holds
// both heads' rows (each head's tile then runs with the other's lanes masked), the second
// group only the second head's last 8. Bit for bit against the values in V tiles, with a
// window and with the rows' own contexts.
TEST(AttentionValuesInKeys, RowGroupsAcrossHeads) {
  IsaGuard guard;
  const int32_t dk = 96, dv = 64, bs = 16, n_ctx = 150, nkv = 2, group = 12;
  const auto [a, b] = bf16_value_layouts(dk, dv, bs, nkv, (n_ctx + bs - 1) / bs);
  if (!attention_latent_lanes(b)) GTEST_SKIP() << "the lanes' P.V needs AVX512-BF16 vectors";
  KVCache ca(a), cb(b);
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  const std::vector<int32_t> table = shuffled_table(a.n_blocks, rng);
  std::vector<float> k(static_cast<size_t>(dk));
  for (int32_t p = 0; p < a.n_blocks * bs; ++p)
    for (int32_t h = 0; h < nkv; ++h) {
      for (auto& e : k) e = g(rng);
      const int32_t blk = table[size_t(p / bs)], sl = p % bs;
      ca.write_k(0, blk, h, sl, k.data()), cb.write_k(0, blk, h, sl, k.data());
      ca.write_v(0, blk, h, sl, k.data() + (dk - dv));
    }
  std::vector<float> q(size_t(nkv * group * dk));
  for (auto& e : q) e = g(rng);
  std::vector<int32_t> rows(static_cast<size_t>(group));
  for (int32_t i = 0; i < group; ++i) rows[size_t(i)] = n_ctx - 5 * (group - 1 - i);
  set_isa(Isa::Avx512);
  for (const int32_t window : {0, 40, -1}) {
    std::vector<float> oa(size_t(nkv * group * dv)), ob(oa.size());
    std::vector<float> sa(size_t(attention_scratch_floats(a, nkv * group)), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> sb(size_t(attention_scratch_floats(b, nkv * group)), std::numeric_limits<float>::quiet_NaN());
    AttnArgs aa{&ca, 0, table, n_ctx, 0.1f, {}}, ab{&cb, 0, table, n_ctx, 0.1f, {}};
    aa.window = ab.window = std::max(window, 0);
    if (window < 0) aa.row_ctx = ab.row_ctx = rows;
    attention_heads(aa, 0, nkv, group, q.data(), dk, oa.data(), dv, sa.data());
    attention_heads(ab, 0, nkv, group, q.data(), dk, ob.data(), dv, sb.data());
    for (size_t i = 0; i < oa.size(); ++i) {
      ASSERT_TRUE(std::isfinite(ob[i])) << "window " << window << " element " << i;
      ASSERT_EQ(ob[i], oa[i]) << "window " << window << " element " << i;
    }
  }
}

// A window that starts at an odd position: the key before it shares its pair, so the
// lanes' P.V reads that pair with the earlier key masked to +0, as pv_bf16 masks it; an
// infinite value there (a weight of 0 times it would be NaN) must not reach the rows.
TEST(AttentionValuesInKeys, KeyBeforeTheWindowIsNotMultiplied) {
  IsaGuard guard;
  const int32_t dk = 576, dv = 512, bs = 16, n_ctx = 40, window = 21, n_q = 16;  // the window starts at 19
  const auto [a, b] = bf16_value_layouts(dk, dv, bs, 1, 3);
  if (!attention_latent_lanes(b)) GTEST_SKIP() << "the lanes' P.V needs AVX512-BF16 vectors";
  KVCache ca(a), cb(b);
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.f, 1.f);
  const std::vector<int32_t> table{2, 0, 1};
  std::vector<float> k(static_cast<size_t>(dk));
  for (int32_t p = 0; p < 3 * bs; ++p) {
    for (auto& e : k) e = g(rng);
    if (p == n_ctx - window - 1)
      for (int32_t d = dk - dv; d < dk; ++d) k[size_t(d)] = std::numeric_limits<float>::infinity();
    const int32_t blk = table[size_t(p / bs)], sl = p % bs;
    ca.write_k(0, blk, 0, sl, k.data()), cb.write_k(0, blk, 0, sl, k.data());
    ca.write_v(0, blk, 0, sl, k.data() + (dk - dv));
  }
  std::vector<float> q(size_t(n_q * dk));
  for (auto& e : q) e = g(rng);
  set_isa(Isa::Avx512);
  std::vector<float> oa(size_t(n_q * dv)), ob(oa.size());
  std::vector<float> sa(size_t(attention_scratch_floats(a, n_q))), sb(size_t(attention_scratch_floats(b, n_q)));
  AttnArgs aa{&ca, 0, table, n_ctx, 0.05f, {}}, ab{&cb, 0, table, n_ctx, 0.05f, {}};
  aa.window = ab.window = window;
  attention_group(aa, 0, n_q, q.data(), dk, oa.data(), dv, sa.data());
  attention_group(ab, 0, n_q, q.data(), dk, ob.data(), dv, sb.data());
  for (size_t i = 0; i < oa.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ob[i])) << "element " << i;
    ASSERT_EQ(ob[i], oa[i]) << "element " << i;
  }
}

// An 8-bit latent cache keeps a value as its key's codes from v_dim0 on, with the key's
// scale (one per position for all its dimensions). Against a cache with V tiles holding
// those same codes and scales, the outputs are the same bits where the same kernel runs:
// scalar; AVX-512 int8, which transposes the codes into a V tile's layout per tile and
// head; FP8 on f32 FMAs (the values converted out of the keys as a BF16 cache's f32 way
// does) and on AVX512-BF16 vectors where the CPU has them (the latent rows converted to
// bf16 per tile and head, P.V with the rows across the lanes as a BF16 cache's, against
// pv_fp8 over the V tile); AVX2 runs the portable path for them, so within rounding
// there. Blocks of whole and partial four-slot quads, dimensions that fill no 16-lane
// vector, two KV heads in one call, windows, NaN in every slot past the context. And the
// cache is the K tiles and their scales alone.
TEST(AttentionValuesInKeys, EightBitSameAsCodesInTheirOwnTiles) {
  IsaGuard guard;
  struct Shape {
    int32_t dk, dv, bs, n_ctx, n_q, nkv = 1;
  };
  bool vectors = false;  // an FP8 case took the bf16 vectors
  for (const DType t : {DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (const Shape& sh : {Shape{576, 512, 16, 300, 16}, Shape{576, 512, 64, 133, 9}, Shape{80, 64, 16, 50, 4, 2},
                            Shape{44, 20, 12, 50, 5}, Shape{36, 28, 6, 40, 3}, Shape{64, 64, 32, 97, 2},
                            Shape{80, 64, 1, 9, 16}, Shape{96, 64, 128, 260, 20}, Shape{96, 64, 16, 70, 12, 2}}) {
      KVLayout a;
      a.n_layer = 1, a.n_kv_head = sh.nkv, a.head_dim_k = sh.dk, a.head_dim_v = sh.dv, a.block_size = sh.bs;
      a.dtype = t, a.n_blocks = (sh.n_ctx + sh.bs - 1) / sh.bs + 2;
      KVLayout b = a;
      b.v_in_k = true;
      ASSERT_TRUE(b.values_in_keys_allowed());
      KVCache ca(a), cb(b);
      EXPECT_EQ(cb.total_bytes(), int64_t(a.n_blocks) * sh.nkv * sh.bs * ((sh.dk + 3) / 4 * 4 + 4));
      std::mt19937 rng(uint32_t(sh.dk * 17 + sh.bs + int(t)));
      std::normal_distribution<float> g(0.f, 1.f);
      const std::vector<int32_t> table = shuffled_table(a.n_blocks, rng);
      std::vector<float> k(size_t(sh.dk)), nan(size_t(sh.dk), std::numeric_limits<float>::quiet_NaN());
      for (int32_t blk = 0; blk < a.n_blocks; ++blk)
        for (int32_t h = 0; h < sh.nkv; ++h)
          for (int32_t s = 0; s < sh.bs; ++s) {
            ca.write_k(0, blk, h, s, nan.data()), cb.write_k(0, blk, h, s, nan.data());
            ca.write_v(0, blk, h, s, nan.data());
          }
      const int32_t v0 = sh.dk - sh.dv;
      for (int32_t p = 0; p < sh.n_ctx; ++p)
        for (int32_t h = 0; h < sh.nkv; ++h) {
          for (auto& e : k) e = g(rng);
          const int32_t blk = table[size_t(p / sh.bs)], s = p % sh.bs;
          ca.write_k(0, blk, h, s, k.data()), cb.write_k(0, blk, h, s, k.data());
          // The reference's V tile: the key's codes and scale, as they lie in b's K tile.
          const uint8_t* kc = cb.k_tile(0, blk, h);
          uint8_t* vc = ca.v_tile(0, blk, h);
          for (int32_t d = 0; d < sh.dv; ++d) vc[a.v_element(s, d)] = kc[b.k_element(v0 + d, s)];
          ca.v_scales(0, blk, h)[s] = cb.k_scales(0, blk, h)[s];
          std::vector<float> va(size_t(sh.dv)), vb(size_t(sh.dv));
          ca.read_v(0, blk, h, s, va.data()), cb.read_v(0, blk, h, s, vb.data());
          ASSERT_EQ(va, vb) << "read_v of a value kept in its key";
        }
      std::vector<float> q(size_t(sh.n_q * sh.nkv * sh.dk));
      for (auto& e : q) e = g(rng);
      const float scale = 1.f / std::sqrt(float(sh.dk));
      std::vector<Fp8Path> ways{Fp8Path::F16c};
      if (t != DType::I8 && fp8_bf16_available()) ways.push_back(Fp8Path::Bf16);
      for (const Fp8Path way : ways)
        for (Isa isa : isas())
          for (const int32_t window : {0, 21}) {
            set_isa(isa), set_fp8_path(way), set_amx(false);
            const std::string name = std::string(dtype_name(t)) + " dk=" + std::to_string(sh.dk) + " dv=" +
                                     std::to_string(sh.dv) + " bs=" + std::to_string(sh.bs) + " kv heads " +
                                     std::to_string(sh.nkv) + " isa=" + std::string(isa_name(isa)) +
                                     (way == Fp8Path::Bf16 ? " bf16 vectors" : "") + " window=" + std::to_string(window);
            if (isa == Isa::Avx512 && way == Fp8Path::Bf16) {
              ASSERT_EQ(attention_latent_lanes(b), sh.dk % 32 == 0 && sh.dv % 32 == 0 && sh.bs % 16 == 0) << name;
              vectors |= attention_latent_lanes(b);
            }
            const int32_t rows = sh.n_q * sh.nkv;
            std::vector<float> oa(size_t(rows * sh.dv)), ob(oa.size());
            std::vector<float> sa(size_t(attention_scratch_floats(a, rows)), std::numeric_limits<float>::quiet_NaN());
            std::vector<float> sb(size_t(attention_scratch_floats(b, rows)), std::numeric_limits<float>::quiet_NaN());
            AttnArgs aa{&ca, 0, table, sh.n_ctx, scale, {}}, ab{&cb, 0, table, sh.n_ctx, scale, {}};
            aa.window = ab.window = window;
            attention_heads(aa, 0, sh.nkv, sh.n_q, q.data(), sh.dk, oa.data(), sh.dv, sa.data());
            attention_heads(ab, 0, sh.nkv, sh.n_q, q.data(), sh.dk, ob.data(), sh.dv, sb.data());
            for (size_t i = 0; i < oa.size(); ++i) {
              ASSERT_TRUE(std::isfinite(ob[i])) << name << " element " << i;
              if (isa == Isa::Avx2) ASSERT_NEAR(ob[i], oa[i], 2e-2 * (1 + std::fabs(oa[i]))) << name << " element " << i;
              else ASSERT_EQ(ob[i], oa[i]) << name << " element " << i;
            }
          }
    }
  if (best_isa() != Isa::Avx512) std::printf("[AttentionValuesInKeys] no AVX-512: the portable path only\n");
  else if (!vectors) std::printf("[AttentionValuesInKeys] no AVX512-BF16 vectors here: FP8's f32 way only\n");
}

}  // namespace
}  // namespace ridge::kernels
