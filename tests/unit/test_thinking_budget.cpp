// The thinking budget (RequestParams::thinking) on stories260K: the tokens up to the budget
// are the model's own, then the close is forced, and speculation changes nothing.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

std::vector<int32_t> run(const Model& m, const Tokenizer& tok, const RequestParams& p, bool speculate) {
  EngineConfig cfg;
  cfg.threads = 2;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  if (speculate) {
    cfg.speculative.method = SpecMethod::Ngram;
    cfg.speculative.num_speculative_tokens = 4;
    cfg.speculative.prompt_lookup_min = 1;
    cfg.speculative.adaptive = false;  // every proposal verified: the forced rows meet drafts
  }
  Engine e(m, &tok, cfg);
  const int64_t id = e.add_request(tok.encode("Once upon a time there was a little girl. Once upon a time", true), p);
  while (e.has_work()) e.step();
  return e.output(id).tokens;
}

TEST(ThinkingBudget, ForcesTheCloseAtTheBudgetAndOnlyThen) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  RequestParams p;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.sampling.temperature = 0;
  const std::vector<int32_t> plain = run(*m, *tok, p, false);
  ASSERT_EQ(plain.size(), 24u);
  // The thinking opens at the first token that did not come before (position i).
  size_t i = 1;
  while (std::find(plain.begin(), plain.begin() + std::ptrdiff_t(i), plain[i]) != plain.begin() + std::ptrdiff_t(i)) ++i;
  ASSERT_LT(i + 8, plain.size());
  const std::vector<int32_t> force = tok->encode(" zebra", false);
  ASSERT_GE(force.size(), 2u);
  p.thinking.open = {plain[i]};
  p.thinking.end = {force.back()};
  p.thinking.force = force;
  p.thinking.budget = 4;
  for (bool spec : {false, true}) {
    SCOPED_TRACE(spec ? "speculating" : "plain");
    const std::vector<int32_t> out = run(*m, *tok, p, spec);
    ASSERT_EQ(out.size(), 24u);
    // The model's own tokens through the open and 4 thought tokens, then the close.
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + std::ptrdiff_t(i + 5), plain.begin()));
    EXPECT_TRUE(std::equal(force.begin(), force.end(), out.begin() + std::ptrdiff_t(i + 5)));
  }
  // Started inside with no budget: the close comes first.
  p.thinking.inside = true;
  p.thinking.budget = 0;
  std::vector<int32_t> out = run(*m, *tok, p, false);
  EXPECT_TRUE(std::equal(force.begin(), force.end(), out.begin()));
  // The model closes the thinking itself before the budget: nothing is forced.
  p.thinking.inside = false;
  p.thinking.budget = 100;
  p.thinking.end = {plain[i + 3]};
  EXPECT_EQ(run(*m, *tok, p, true), plain);
  // No budget: no change.
  p.thinking.budget = -1;
  EXPECT_EQ(run(*m, *tok, p, false), plain);
}

}  // namespace
}  // namespace ridge
