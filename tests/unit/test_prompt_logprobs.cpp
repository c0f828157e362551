// Prompt logprobs (RequestParams::prompt_logprobs) on stories260K: each prompt token's
// logprob from the prefill equals the one the same token gets when it is the next token
// of its prefix, scored one position at a time; with chunked prefill, with the prefix
// cache holding the prompt already, batched with other requests, and with max_tokens 0.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

// The tolerance on a logprob. The forward is batch-invariant (a row's logits do not
// depend on the other rows of its step), so they agree to the bit in practice; the bound
// leaves room for the log-softmax's summation order only.
constexpr float kTol = 1e-5f;

// log p(prompt[p] | prompt[0..p)) for p = 1.., from requests of one prefix each.
std::vector<float> one_at_a_time(const Model& m, const Tokenizer& tok, const std::vector<int32_t>& prompt) {
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  cfg.prefix_cache = false;
  Engine e(m, &tok, cfg);
  std::vector<float> out;
  for (size_t p = 1; p < prompt.size(); ++p) {
    RequestParams rp;
    rp.max_tokens = 1;
    rp.capture_logits = true;
    const int64_t id = e.add_request(std::vector<int32_t>(prompt.begin(), prompt.begin() + std::ptrdiff_t(p)), rp);
    while (e.has_work()) e.step();
    const RequestOutput o = e.output(id);
    out.push_back(token_logprobs(o.logits.data(), m.hparams().n_vocab, prompt[p], 0).logprob);
    e.release(id);
  }
  return out;
}

TEST(PromptLogprobs, EqualTheNextTokenLogprobsOfEachPrefix) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  const std::vector<int32_t> prompt =
      tok->encode("Once upon a time, there was a little girl named Lily. She liked to play with her red ball.", true);
  ASSERT_GT(prompt.size(), 20u);
  const std::vector<float> ref = one_at_a_time(*m, *tok, prompt);

  struct Case {
    const char* name;
    int32_t budget;     // max_num_batched_tokens: 8 chunks the prompt
    bool warm_cache;    // the same prompt ran before, so the prefix cache holds it
    int32_t max_tokens;
  };
  for (const Case& c : {Case{"one chunk", 2048, false, 4}, Case{"chunks of 8", 8, false, 4},
                        Case{"prefix cache warm", 2048, true, 4}, Case{"max_tokens 0", 8, true, 0}}) {
    SCOPED_TRACE(c.name);
    EngineConfig cfg;
    cfg.threads = 2;
    cfg.kv_cache_bytes = int64_t(16) << 20;
    cfg.max_num_batched_tokens = c.budget;
    Engine e(*m, tok.get(), cfg);
    RequestParams plain;
    plain.max_tokens = 4;
    plain.sampling.temperature = 0;
    if (c.warm_cache) {
      const int64_t w = e.add_request(prompt, plain);
      while (e.has_work()) e.step();
      e.release(w);
    }
    RequestParams rp = plain;
    rp.max_tokens = c.max_tokens;
    rp.prompt_logprobs = 3;
    rp.logprobs = 1;
    // Batched beside a request that wants none (and does use the cache).
    const int64_t other = e.add_request(prompt, plain);
    const int64_t id = e.add_request(prompt, rp);
    while (e.has_work()) {
      e.step();
      e.check_invariants();
    }
    const RequestOutput o = e.output(id);
    EXPECT_EQ(o.stats.cached_tokens, 0) << "a scored prompt does not come from the cache";
    if (c.warm_cache) {
      EXPECT_GT(e.output(other).stats.cached_tokens, 0);
    }
    ASSERT_EQ(o.prompt_logprobs.size(), prompt.size() - 1);
    for (size_t p = 0; p < ref.size(); ++p) {
      EXPECT_NEAR(o.prompt_logprobs[p].logprob, ref[p], kTol) << "prompt token " << p + 1;
      ASSERT_EQ(o.prompt_logprobs[p].top.size(), 3u);
      EXPECT_GE(o.prompt_logprobs[p].top[0].second, o.prompt_logprobs[p].logprob);
      EXPECT_GE(o.prompt_logprobs[p].rank, 1);
      EXPECT_EQ(o.prompt_logprobs[p].rank == 1, o.prompt_logprobs[p].top[0].first == prompt[p + 1]);
    }
    EXPECT_EQ(o.tokens.size(), size_t(c.max_tokens));
    EXPECT_EQ(o.logprobs.size(), size_t(c.max_tokens)) << "nothing is drawn for a request of max_tokens 0";
    EXPECT_EQ(std::string(o.stats.finish_reason), "length");
    // Scoring the prompt changes nothing about what follows it.
    if (c.max_tokens > 0) {
      EXPECT_EQ(o.tokens, e.output(other).tokens);
    }
  }
}

// More scored prompt tokens than one step may run (kPromptLogitsChunk): they wait their turn.
TEST(PromptLogprobs, ManyScoredPromptsShareTheStepsRows) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  const std::vector<int32_t> prompt = tok->encode("Once upon a time, there was a little dog. The dog was happy. It ran.", true);
  const std::vector<float> ref = one_at_a_time(*m, *tok, prompt);
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  Engine e(*m, tok.get(), cfg);
  std::vector<int64_t> ids;
  const int n = int(2 * kPromptLogitsChunk / int32_t(prompt.size())) + 2;
  for (int r = 0; r < n; ++r) {
    RequestParams rp;
    rp.max_tokens = 2;
    rp.prompt_logprobs = 0;
    ids.push_back(e.add_request(prompt, rp));
  }
  int64_t steps = 0;
  while (e.has_work()) {
    e.step();
    e.check_invariants();
    ++steps;
  }
  EXPECT_GE(steps, 4) << "the scored rows were spread over steps";
  for (int64_t id : ids) {
    const RequestOutput o = e.output(id);
    ASSERT_EQ(o.prompt_logprobs.size(), ref.size());
    for (size_t p = 0; p < ref.size(); ++p) EXPECT_NEAR(o.prompt_logprobs[p].logprob, ref[p], kTol);
  }
}

TEST(PromptLogprobs, SurviveAPreemptionByRecompute) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  const std::vector<int32_t> prompt = tok->encode("Once upon a time, there was a little dog. The dog was happy.", true);
  const std::vector<float> ref = one_at_a_time(*m, *tok, prompt);
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.block_size = 16;
  cfg.kv_cache_tokens = 160;  // 10 blocks for 6 requests of ~60 tokens: preemptions
  cfg.max_num_batched_tokens = 16;
  Engine e(*m, tok.get(), cfg);
  std::vector<int64_t> ids;
  for (int r = 0; r < 6; ++r) {
    RequestParams rp;
    rp.max_tokens = 40;
    rp.sampling.temperature = 0;
    rp.prompt_logprobs = 0;
    ids.push_back(e.add_request(prompt, rp));
  }
  while (e.has_work()) {
    e.step();
    e.check_invariants();
  }
  EXPECT_GT(e.n_preemptions(), 0);
  for (int64_t id : ids) {
    const RequestOutput o = e.output(id);
    ASSERT_EQ(o.prompt_logprobs.size(), ref.size());
    for (size_t p = 0; p < ref.size(); ++p) EXPECT_NEAR(o.prompt_logprobs[p].logprob, ref[p], kTol);
  }
}

}  // namespace
}  // namespace ridge
