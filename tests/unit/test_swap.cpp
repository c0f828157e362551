// Swap I/O that fails must never end the process or lose a request: a failed write or
// read turns that sequence's swap-in into a recompute, every request still gets its full
// output (the same tokens and logits as alone), and every block stays accounted for.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/swap_space.h"
#include "model/mkmodel.h"
#include "model/model.h"

namespace ridge {
namespace {

TEST(SwapFaults, ParsesSpecsAndRefusesBadOnes) {
  const SwapFaults f = SwapFaults::parse("write=0.25,read=0.5,short=1,enospc=0,seed=7");
  EXPECT_EQ(f.write, 0.25);
  EXPECT_EQ(f.read, 0.5);
  EXPECT_EQ(f.short_io, 1.0);
  EXPECT_EQ(f.seed, 7u);
  EXPECT_TRUE(f.any());
  EXPECT_FALSE(SwapFaults::parse("").any());
  EXPECT_FALSE(SwapFaults::parse("seed=3").any());
  EXPECT_THROW(SwapFaults::parse("write"), Error);
  EXPECT_THROW(SwapFaults::parse("write=x"), Error);
  EXPECT_THROW(SwapFaults::parse("write=1.5"), Error);
  EXPECT_THROW(SwapFaults::parse("disk=0.1"), Error);
}

TEST(SwapSpace, ADirectoryThatCannotHoldItIsAnErrorAtStart) {
  KVLayout kl{1, 1, 8, 8, 16, 4, DType::F16};
  KVCache kv(kl);
  EXPECT_THROW(SwapSpace(kv, int64_t(1) << 20, "/nonexistent-ridge-dir"), Error);
  EXPECT_THROW(SwapSpace(kv, 1, "/tmp"), Error);  // holds no block
}

// Out and back with every write, then every read, failing: the data is reported lost,
// never returned as if intact, and the slots come back to the free list either way.
TEST(SwapSpace, FailedWritesAndReadsAreReportedNotFatal) {
  KVLayout kl{2, 2, 8, 8, 16, 4, DType::F16};
  KVCache kv(kl);
  const int64_t bytes = 8 * kv.block_bytes();
  std::vector<int32_t> blocks{0, 1};
  for (const char* spec : {"write=1", "read=1", "enospc=1", "short=1", ""}) {
    SwapSpace sw(kv, bytes, "/tmp", SwapFaults::parse(spec));
    std::memset(kv.k_tile(0, 0, 0), 0x5a, size_t(kv.k_block_bytes()));
    const std::vector<int64_t> slots = sw.swap_out(blocks);
    EXPECT_EQ(sw.free_blocks(), 6);
    std::memset(kv.k_tile(0, 0, 0), 0, size_t(kv.k_block_bytes()));
    const bool ok = sw.swap_in(slots, std::vector<int32_t>{2, 3});
    const bool want = std::string(spec) == "short=1" || std::string(spec).empty();
    EXPECT_EQ(ok, want) << spec;
    EXPECT_EQ(sw.free_blocks(), 8) << spec;
    if (ok) {
      EXPECT_EQ(*static_cast<const uint8_t*>(kv.k_tile(0, 2, 0)), 0x5a) << spec;
      EXPECT_EQ(sw.n_io_errors(), 0) << spec;
    } else {
      EXPECT_GT(sw.n_io_errors(), 0) << spec;
    }
  }
}

// 48 greedy requests through a pool for about three, preempting by swap with random
// write and read errors (EIO, ENOSPC) and short transfers: each request's tokens and
// logits equal its run alone, the invariants hold after every step, and the failures
// were fallbacks to recompute, counted.
TEST(Engine, SwapFaultsFallBackToRecomputeWithOutputUnchanged) {
  const std::string path = testing::TempDir() + "/engine-swapfault.gguf";
  make_model({"llama", "tiny", DType::Q8_0, 3, "", 0, 2}, path);
  auto m = Model::load(path);
  const HParams& h = m->hparams();
  KVLayout kl{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, 16, 0, DType::F16};
  std::mt19937_64 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 48; ++i) {
    std::vector<int32_t> p{1};
    const int len = 1 + int(rng() % 40);
    for (int j = 0; j < len; ++j) p.push_back(3 + int32_t(rng() % uint64_t(h.n_vocab - 3)));
    prompts.push_back(p);
  }
  const int32_t max_tokens = 12;
  RequestParams p;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  p.capture_logits = true;

  EngineConfig base;
  base.threads = 2;
  base.max_num_seqs = 16;
  base.max_num_batched_tokens = 64;
  base.prefix_cache = false;
  std::vector<std::vector<int32_t>> alone_tokens;
  std::vector<std::vector<float>> alone_logits;
  {
    Engine e(*m, nullptr, base);
    for (const auto& pr : prompts) {
      const int64_t id = e.add_request(pr, p);
      while (e.has_work()) e.step();
      const Sequence* s = e.get(id);
      alone_tokens.emplace_back(s->tokens.begin() + s->n_prompt, s->tokens.end());
      alone_logits.push_back(s->logits);
      e.release(id);
    }
  }

  int64_t total_fallbacks = 0;
  for (const char* spec : {"write=0.2,short=0.3,seed=1", "read=0.3,short=0.5,seed=2",
                           "write=0.1,read=0.1,enospc=0.1,short=0.3,seed=3"}) {
    EngineConfig c = base;
    c.kv_cache_bytes = 3 * (41 + 1 + max_tokens) * kl.bytes_per_token();
    c.preemption = PreemptionMode::Swap;
    c.swap_bytes = int64_t(64) << 20;
    c.swap_faults = spec;
    c.prefix_cache = true;
    Engine e(*m, nullptr, c);
    std::vector<int64_t> ids;
    for (const auto& pr : prompts) ids.push_back(e.add_request(pr, p));
    while (e.has_work()) {
      e.step();
      e.check_invariants();
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const Sequence* s = e.get(ids[i]);
      ASSERT_TRUE(s->finished());
      EXPECT_EQ(s->finish_reason, "length");
      ASSERT_EQ(std::vector<int32_t>(s->tokens.begin() + s->n_prompt, s->tokens.end()), alone_tokens[i])
          << spec << ", request " << i;
      ASSERT_EQ(s->logits.size(), alone_logits[i].size());
      EXPECT_EQ(std::memcmp(s->logits.data(), alone_logits[i].data(), s->logits.size() * 4), 0)
          << spec << ", request " << i << ": logits differ";
    }
    EXPECT_EQ(e.blocks().n_free() + e.prefix_cache()->n_evictable(), e.blocks().n_total()) << spec;
    std::printf("%-44s preemptions %4lld  swaps %4lld  fallbacks %3lld\n", spec, (long long)e.n_preemptions(),
                (long long)e.n_swaps(), (long long)e.stats().swap_fallbacks);
    EXPECT_GE(e.n_swaps(), 10) << spec;
    EXPECT_GT(e.stats().swap_fallbacks, 0) << spec;
    EXPECT_LT(e.stats().swap_fallbacks, e.n_swaps()) << spec;
    total_fallbacks += e.stats().swap_fallbacks;
  }
  EXPECT_GT(total_fallbacks, 3);
}

}  // namespace
}  // namespace ridge
