// The engine under load: continuous batching, chunked prefill, preemption (recompute and
// swap), the prefix cache and aborts must never change a sequence's output, and must
// leave every block accounted for.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

std::vector<std::vector<int32_t>> random_prompts(int n, int max_len, uint64_t seed, int32_t n_vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p{1};
    const int len = 1 + int(rng() % uint64_t(max_len));
    for (int j = 0; j < len; ++j) p.push_back(3 + int32_t(rng() % uint64_t(n_vocab - 3)));
    out.push_back(p);
  }
  return out;
}

std::vector<GenRequest> greedy(const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  std::vector<GenRequest> reqs;
  for (const auto& p : prompts) {
    GenRequest r;
    r.prompt = p;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.capture_logits = true;
    reqs.push_back(r);
  }
  return reqs;
}

void expect_same(const std::vector<GenResult>& a, const std::vector<GenResult>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].tokens, b[i].tokens) << what << ", request " << i;
    ASSERT_EQ(a[i].logits.size(), b[i].logits.size()) << what;
    EXPECT_EQ(std::memcmp(a[i].logits.data(), b[i].logits.data(), a[i].logits.size() * 4), 0)
        << what << ", request " << i << ": logits differ";
  }
}

struct Scenario {
  std::string name;
  GenOptions opt;
};

// 64 prompts of random lengths through the engine with max_num_seqs 16, under several
// configurations, against each prompt run alone.
void run_scenarios(const Model& m, int max_tokens, int max_prompt, MlaPrefill form = MlaPrefill::Auto) {
  const auto prompts = random_prompts(64, max_prompt, 5, m.hparams().n_vocab);
  GenOptions base;
  base.mla_prefill = form;
  base.threads = 2;
  base.max_num_seqs = 16;
  std::vector<GenResult> alone;
  for (const auto& p : prompts) {
    GenOptions o = base;
    o.prefix_cache = false;
    alone.push_back(Generator(m, nullptr, o).run(greedy({p}, max_tokens))[0]);
  }
  const int64_t per_seq_tokens = max_prompt + 1 + max_tokens;
  std::vector<Scenario> sc;
  sc.push_back({"batched", base});
  Scenario chunked{"chunked prefill (8-token budget)", base};
  chunked.opt.max_num_batched_tokens = 8;
  sc.push_back(chunked);
  // A pool for about three sequences: sixteen running ones must preempt many times.
  Scenario rec{"small pool, recompute", base};
  rec.opt.kv_tokens = 3 * per_seq_tokens;
  sc.push_back(rec);
  Scenario swp{"small pool, swap", base};
  swp.opt.kv_tokens = 3 * per_seq_tokens;
  swp.opt.preemption = PreemptionMode::Swap;
  swp.opt.swap_bytes = int64_t(1) << 30;
  sc.push_back(swp);
  Scenario aut{"small pool, auto, chunked", base};
  aut.opt.kv_tokens = 3 * per_seq_tokens;
  aut.opt.preemption = PreemptionMode::Auto;
  aut.opt.swap_bytes = int64_t(1) << 30;
  aut.opt.max_num_batched_tokens = 24;
  sc.push_back(aut);
  for (const auto& s : sc) {
    Generator g(m, nullptr, s.opt);
    const auto res = g.run(greedy(prompts, max_tokens));
    expect_same(alone, res, s.name);
    std::printf("%-36s steps %5lld  mean batch %5.2f  preemptions %4lld  swaps %4lld\n", s.name.c_str(),
                (long long)g.stats().steps, g.stats().mean_batch, (long long)g.stats().preemptions,
                (long long)g.stats().swaps);
    if (s.opt.kv_tokens > 0) {
      EXPECT_GE(g.stats().preemptions, 10) << s.name;
      if (s.opt.preemption == PreemptionMode::Swap) {
        EXPECT_EQ(g.stats().swaps, g.stats().preemptions) << s.name;
      }
    }
  }
}

TEST(Engine, SixtyFourRandomPromptsMatchAloneOnRandomModel) {
  const std::string path = testing::TempDir() + "/engine-llama.gguf";
  make_model({"llama", "tiny", DType::Q8_0, 3, "", 0, 2}, path);
  auto m = Model::load(path);
  run_scenarios(*m, 12, 40);
}

TEST(Engine, SixtyFourRandomPromptsMatchAloneOnAMixtureOfExperts) {
  const std::string path = testing::TempDir() + "/engine-qwen3moe.gguf";
  make_model({"qwen3moe", "qwen3moe-tiny", DType::Q8_0, 3, "", 0, 2}, path);
  auto m = Model::load(path);
  run_scenarios(*m, 12, 40);
}

TEST(Engine, SixtyFourRandomPromptsMatchAloneOnLatentAttention) {
  const std::string path = testing::TempDir() + "/engine-deepseek2.gguf";
  make_model({"deepseek2", "deepseek-v3-tiny", DType::Q8_0, 3, "", 0, 2}, path);
  auto m = Model::load(path);
  // Prompts in each form; a recompute after a preemption runs the generated tokens
  // absorbed after an expanded prompt, in one chunk.
  run_scenarios(*m, 12, 40, MlaPrefill::Expanded);
  run_scenarios(*m, 12, 40, MlaPrefill::Absorbed);
}

// Latent attention's contexts past one segment (kernels/cpu/attention_step.h): a request
// decoded alone (a step of one token: its segments spread over the threads) and among
// others, prompts in one step or in chunks, preempted and recomputed: the same logits.
TEST(Engine, LongLatentContextsMatchAlone) {
  const std::string path = testing::TempDir() + "/engine-deepseek2-long.gguf";
  make_model({"deepseek2", "deepseek-v2-lite-tiny", DType::Q8_0, 3, "", 0, 2, 2048}, path);
  auto m = Model::load(path);
  ASSERT_TRUE(m->hparams().mla());
  std::mt19937_64 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (const int len : {2100, 30, 600, 1030}) {
    std::vector<int32_t> p{1};
    while (int(p.size()) < len) p.push_back(3 + int32_t(rng() % uint64_t(m->hparams().n_vocab - 3)));
    prompts.push_back(p);
  }
  for (MlaPrefill form : {MlaPrefill::Absorbed, MlaPrefill::Auto}) {
    GenOptions base;
    base.threads = 2;
    base.mla_prefill = form;
    base.prefix_cache = false;
    std::vector<GenResult> alone;
    for (const auto& p : prompts) {
      alone.push_back(Generator(*m, nullptr, base).run(greedy({p}, 16))[0]);
      ASSERT_EQ(alone.back().tokens.size(), 16u) << "a prompt of " << p.size();
    }
    GenOptions chunked = base;
    chunked.max_num_batched_tokens = 256;
    GenOptions small = base;
    small.kv_tokens = 3800;  // the prompts fit, their answers do not: preemptions, recomputed
    for (const auto& [name, o] : {std::pair{"batched", base}, std::pair{"chunked prefill", chunked},
                                  std::pair{"small pool, recompute", small}}) {
      const auto res = Generator(*m, nullptr, o).run(greedy(prompts, 16));
      expect_same(alone, res, std::string(name) + (form == MlaPrefill::Absorbed ? ", absorbed" : ", auto"));
      int32_t preempted = 0;
      for (const auto& r : res) preempted += r.preemptions;
      if (o.kv_tokens > 0) {
        EXPECT_GT(preempted, 0) << name;
      }
    }
  }
}

// Multi-turn: the second request's prompt is the first's prompt, its answer and more. An
// expanded prompt's blocks are shared (in their own namespace), its answer's are not
// (they were computed absorbed after expanded ones, which no fresh prompt does): with
// the prefix cache the second request matches the first prompt's full blocks only, and
// its logits are those without the cache.
TEST(Engine, ExpandedPromptsShareTheirPromptBlocksOnly) {
  const std::string path = testing::TempDir() + "/engine-deepseek2-turns.gguf";
  make_model({"deepseek2", "deepseek-v2-lite-tiny", DType::F16, 3, "", 0, 2}, path);
  auto m = Model::load(path);
  const std::vector<int32_t> first = random_prompts(1, 40, 17, m->hparams().n_vocab)[0];
  std::vector<int32_t> p1 = first;
  while (p1.size() < 40) p1.push_back(5 + int32_t(p1.size()));
  for (MlaPrefill form : {MlaPrefill::Expanded, MlaPrefill::Absorbed}) {
    GenOptions o;
    o.threads = 2;
    o.mla_prefill = form;
    const auto r1 = Generator(*m, nullptr, o).run(greedy({p1}, 20))[0];
    std::vector<int32_t> p2 = p1;
    p2.insert(p2.end(), r1.tokens.begin(), r1.tokens.end());
    for (int32_t i = 0; i < 10; ++i) p2.push_back(7 + 3 * i);
    o.max_num_seqs = 1;  // the first turn finishes (its blocks cached) before the second starts
    auto reqs = greedy({p1, p2}, 8);
    reqs[0].max_tokens = 20;
    const auto a = Generator(*m, nullptr, o).run(reqs);
    o.prefix_cache = false;
    const auto b = Generator(*m, nullptr, o).run(reqs);
    const std::string what = std::string("second turn, ") + mla_prefill_name(form);
    expect_same(b, a, what);
    EXPECT_EQ(a[0].tokens, r1.tokens) << what;
    // 40 prompt tokens: two full blocks expanded; absorbed, the answer's blocks too.
    EXPECT_EQ(a[1].prefix_hit_tokens, form == MlaPrefill::Expanded ? 32 : 48) << what;
  }
}

TEST(Engine, SixtyFourRandomPromptsMatchAloneOnStories260K) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  run_scenarios(*m, 16, 48);
}

// Requests sharing a 512-token prefix compute it once.
TEST(Engine, PrefixCacheComputesASharedPrefixOnce) {
  const std::string path = testing::TempDir() + "/engine-prefix.gguf";
  make_model({"qwen3", "tiny", DType::F32, 4, "", 0, 2}, path);
  auto m = Model::load(path);
  auto shared = random_prompts(1, 1, 9, 512)[0];
  while (shared.size() < 512) shared.push_back(3 + int32_t(shared.size() * 7 % 500));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    auto p = shared;
    for (int j = 0; j <= i; ++j) p.push_back(10 + i * 3 + j);
    prompts.push_back(p);
  }
  GenOptions o;
  o.threads = 2;
  o.max_num_seqs = 1;  // one at a time: each later request finds the prefix cached
  Generator with(*m, nullptr, o);
  const auto a = with.run(greedy(prompts, 4));
  o.prefix_cache = false;
  Generator without(*m, nullptr, o);
  const auto b = without.run(greedy(prompts, 4));
  expect_same(b, a, "prefix cache on vs off");
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += int64_t(p.size());
  // Without the cache every prompt token is computed; with it the 512 shared tokens
  // (32 full blocks) are computed once.
  EXPECT_EQ(without.stats().prefix_hit_tokens, 0);
  EXPECT_EQ(with.stats().prefix_hit_tokens, 5 * 512);
  EXPECT_EQ(with.stats().computed_tokens, without.stats().computed_tokens - 5 * 512);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_EQ(a[i].prefix_hit_tokens, 512);
}

// Eviction under pressure: a pool too small to keep every prefix keeps outputs right.
TEST(Engine, PrefixCacheEvictionUnderPressureKeepsOutputs) {
  const std::string path = testing::TempDir() + "/engine-evict.gguf";
  make_model({"llama", "tiny", DType::F16, 6, "", 0, 2}, path);
  auto m = Model::load(path);
  // In each group of ten, the last five repeat the first five with one more token: some
  // prefixes are still cached when their repeat arrives, others were evicted already.
  auto prompts = random_prompts(40, 60, 11, 512);
  for (size_t g = 0; g < 40; g += 10)
    for (size_t i = 0; i < 5; ++i) {
      prompts[g + 5 + i] = prompts[g + i];
      prompts[g + 5 + i].push_back(77);
    }
  GenOptions o;
  o.threads = 2;
  o.max_num_seqs = 4;
  o.kv_tokens = 6 * 80;
  Generator g(*m, nullptr, o);
  const auto a = g.run(greedy(prompts, 8));
  o.prefix_cache = false;
  o.kv_tokens = 0;
  const auto b = Generator(*m, nullptr, o).run(greedy(prompts, 8));
  expect_same(b, a, "under eviction pressure");
  EXPECT_GT(g.stats().prefix_hit_tokens, 0);
  EXPECT_GT(g.stats().evicted_blocks, 0);
  std::printf("prefix hits %lld tokens, evicted %lld blocks\n", (long long)g.stats().prefix_hit_tokens,
              (long long)g.stats().evicted_blocks);
}

// 200 requests, aborted at random points: every block comes back.
TEST(Engine, RandomAbortsLeaveNoBlockBehind) {
  const std::string path = testing::TempDir() + "/engine-abort.gguf";
  make_model({"qwen2", "tiny", DType::Q4_0, 8, "", 0, 2}, path);
  auto m = Model::load(path);
  EngineConfig c;
  c.threads = 2;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 64;
  KVLayout kl{m->hparams().n_layer, m->hparams().n_head_kv, m->hparams().head_dim_k, m->hparams().head_dim_v, 16, 0,
              DType::F16};
  c.kv_cache_bytes = 8 * 96 * kl.bytes_per_token();  // tight: preemptions too
  c.preemption = PreemptionMode::Auto;
  c.swap_bytes = int64_t(64) << 20;
  Engine e(*m, nullptr, c);
  std::mt19937_64 rng(17);
  const auto prompts = random_prompts(200, 50, 13, 512);
  std::vector<int64_t> ids;
  RequestParams p;
  p.sampling.temperature = 0.7f;
  p.max_tokens = 30;
  size_t next = 0;
  int aborted = 0;
  while (next < prompts.size() || e.has_work()) {
    for (int k = 0; k < 3 && next < prompts.size(); ++k) {
      p.sampling.seed = next;
      ids.push_back(e.add_request(prompts[next++], p));
    }
    e.step();
    e.check_invariants();
    if (!ids.empty() && rng() % 3 == 0) {
      e.abort(ids[rng() % ids.size()]);
      ++aborted;
      e.check_invariants();
    }
  }
  EXPECT_GT(aborted, 50);
  for (int64_t id : ids) ASSERT_TRUE(e.get(id)->finished());
  const int32_t evictable = e.prefix_cache()->n_evictable();
  EXPECT_EQ(e.blocks().n_free() + evictable, e.blocks().n_total());
  std::vector<int32_t> tree;
  e.prefix_cache()->collect_blocks(tree);
  for (int32_t b : tree) EXPECT_EQ(e.blocks().ref_count(b), 1);  // only the tree holds them
  std::printf("aborted %d, preemptions %lld, swaps %lld, evictable %d of %d blocks\n", aborted,
              (long long)e.n_preemptions(), (long long)e.n_swaps(), evictable, e.blocks().n_total());
}

TEST(Engine, RequestsThatCanNeverFitAreRefused) {
  const std::string path = testing::TempDir() + "/engine-refuse.gguf";
  make_model({"llama", "tiny", DType::F32, 1, "", 0, 2}, path);
  auto m = Model::load(path);
  EngineConfig c;
  c.threads = 1;
  KVLayout kl{m->hparams().n_layer, m->hparams().n_head_kv, m->hparams().head_dim_k, m->hparams().head_dim_v, 16, 0,
              DType::F16};
  c.kv_cache_bytes = 64 * kl.bytes_per_token();
  Engine e(*m, nullptr, c);
  RequestParams p;
  p.max_tokens = 60;
  EXPECT_THROW(e.add_request(std::vector<int32_t>(10, 5), p), Error);
  EXPECT_THROW(e.add_request({}, p), Error);
  EXPECT_THROW(e.add_request({1, 99999}, p), Error);
  c.preemption = PreemptionMode::Swap;  // no swap space
  EXPECT_THROW(Engine(*m, nullptr, c), Error);
}

}  // namespace
}  // namespace ridge
