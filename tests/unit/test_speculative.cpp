// Speculative decoding (engine/proposer.h, Engine::speculate): a proposal verified in the
// target's forward pass changes nothing a request sees. Every case runs the same requests
// with and without speculation and compares generated tokens, every logit bit (the
// verification rows are the batch-invariant forward's rows) and logprobs; greedy and
// seeded sampling with penalties alike (proposer.h says why sampling stays exact too).
// The engine's block accounting is checked after every step, so rejected drafts that
// leave a block behind, or a prefix-cache entry over unverified tokens, fail here.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/draft_proposer.h"
#include "engine/engine.h"
#include "engine/proposer.h"
#include "engine/suffix_proposer.h"
#include "engine/spec_policy.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "test_util.h"

namespace ridge {
namespace {

std::vector<int32_t> propose(const NgramProposer& p, std::vector<int32_t> toks, int32_t k) {
  std::vector<int32_t> out;
  p.propose_one(toks, k, out);
  return out;
}

TEST(NgramProposer, LongestThenLatestMatch) {
  const NgramProposer p(1, 3);
  // "5 6 7" occurred at 0 (then 8 9) and the last three tokens are "5 6 7" again.
  EXPECT_EQ(propose(p, {5, 6, 7, 8, 9, 1, 5, 6, 7}, 2), (std::vector<int32_t>{8, 9}));
  // Two earlier matches of "1 2": the latest (followed by 4) wins.
  EXPECT_EQ(propose(p, {1, 2, 3, 1, 2, 4, 0, 1, 2}, 1), (std::vector<int32_t>{4}));
  // The longer match wins over a later shorter one: "9 1 2" -> 3, although "1 2" -> 4 is later.
  EXPECT_EQ(propose(p, {9, 1, 2, 3, 1, 2, 4, 9, 1, 2}, 1), (std::vector<int32_t>{3}));
  // The proposal stops at the end of the sequence (a match near the end).
  EXPECT_EQ(propose(p, {7, 7, 7}, 5), (std::vector<int32_t>{7}));
  EXPECT_TRUE(propose(p, {1, 2, 3, 4}, 4).empty());  // nothing repeats
  EXPECT_TRUE(propose(p, {1, 1}, 0).empty());         // nothing asked
  EXPECT_TRUE(propose(p, {1}, 3).empty());
  EXPECT_TRUE(propose(NgramProposer(2, 3), {4, 5, 1, 5}, 3).empty());  // a 1-token match is below min
  EXPECT_THROW(NgramProposer(0, 2), ridge::Error);
  EXPECT_THROW(NgramProposer(3, 2), ridge::Error);
}

// The one-pass search against the definition: for n from max down to min, the latest
// earlier occurrence of the last n tokens, on random texts of few distinct tokens.
TEST(NgramProposer, OnePassEqualsTheDefinition) {
  auto reference = [](std::span<const int32_t> t, int64_t min_n, int64_t max_n, int32_t k) {
    const int64_t L = int64_t(t.size());
    for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= min_n; --n)
      for (int64_t s = L - n - 1; s >= 0; --s)
        if (std::equal(t.end() - n, t.end(), t.begin() + s))
          return std::vector<int32_t>(t.begin() + s + n, t.begin() + std::min(L, s + n + k));
    return std::vector<int32_t>{};
  };
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t L = 1 + int64_t(rng() % 40), vocab = 2 + int64_t(rng() % 5);
    const int64_t min_n = 1 + int64_t(rng() % 3), max_n = min_n + int64_t(rng() % 4);
    const int32_t k = 1 + int32_t(rng() % 6);
    std::vector<int32_t> t(static_cast<size_t>(L));
    for (auto& v : t) v = int32_t(rng() % uint64_t(vocab));
    ASSERT_EQ(propose(NgramProposer(int32_t(min_n), int32_t(max_n)), t, k), reference(t, min_n, max_n, k))
        << "trial " << trial;
  }
}

std::vector<int32_t> suffix_propose(SuffixProposer& p, std::vector<int32_t> toks, int32_t k) {
  std::vector<int32_t> out;
  p.propose_one(toks, k, out);
  return out;
}

TEST(SuffixProposer, LongestMatchThenMostFrequentContinuation) {
  SuffixProposer p({1000, 0.1});
  EXPECT_TRUE(suffix_propose(p, {8, 2, 3}, 4).empty());  // nothing stored, nothing repeats
  p.add(std::vector<int32_t>{1, 2, 3, 4, 5});
  EXPECT_EQ(suffix_propose(p, {9, 2, 3}, 4), (std::vector<int32_t>{4, 5}));  // another request's text
  EXPECT_EQ(suffix_propose(p, {9, 2, 3}, 1), (std::vector<int32_t>{4}));
  // Votes: three stored texts continue "2 3" with 6 7, one with 9; the majority wins, and
  // where the voters run out of text the proposal ends.
  SuffixProposer v({1000, 0.1});
  for (int i = 0; i < 3; ++i) v.add(std::vector<int32_t>{1, 2, 3, 6, 7});
  v.add(std::vector<int32_t>{1, 2, 3, 9, 9, 9});
  EXPECT_EQ(suffix_propose(v, {5, 2, 3}, 8), (std::vector<int32_t>{6, 7}));
  // Its confidence, which the engine's policy weighs: 3 of 4 voters, then all 3 left.
  std::vector<int32_t> out;
  std::vector<float> conf;
  v.propose_one(std::vector<int32_t>{5, 2, 3}, 8, out, &conf);
  ASSERT_EQ(conf.size(), out.size());
  EXPECT_FLOAT_EQ(conf[0], 0.75f);
  EXPECT_FLOAT_EQ(conf[1], 0.75f);
  // The longest match votes alone: "5 6 2 3" matches one text over four tokens.
  v.add(std::vector<int32_t>{5, 6, 2, 3, 8});
  EXPECT_EQ(suffix_propose(v, {5, 6, 2, 3}, 2), (std::vector<int32_t>{8}));
  // Confidence: an even split (0.5) is below a floor of 0.6, so nothing is proposed.
  SuffixProposer split({1000, 0.6});
  split.add(std::vector<int32_t>{1, 2, 3, 4});
  split.add(std::vector<int32_t>{1, 2, 3, 5});
  EXPECT_TRUE(suffix_propose(split, {7, 2, 3}, 3).empty());
  // The sequence's own text votes too (prompt lookup with nothing stored).
  SuffixProposer self({1000, 0.1});
  EXPECT_EQ(suffix_propose(self, {1, 2, 3, 9, 1, 2}, 3), (std::vector<int32_t>{3, 9, 1}));
  EXPECT_THROW(SuffixProposer({10, 1.5}), Error);
}

TEST(SuffixProposer, BoundedLeastRecentlyUsed) {
  SuffixProposer p({10, 0.1});
  p.add(std::vector<int32_t>{1, 1, 1, 1, 1});
  p.add(std::vector<int32_t>{2, 2, 2, 2, 2});
  EXPECT_EQ(p.n_cached_tokens(), 10);
  EXPECT_EQ(suffix_propose(p, {0, 1, 1}, 1), (std::vector<int32_t>{1}));  // uses the first: now the most recent
  p.add(std::vector<int32_t>{3, 3, 3, 3, 3});                             // evicts the second
  EXPECT_EQ(p.n_docs(), 2);
  EXPECT_EQ(p.n_cached_tokens(), 10);
  EXPECT_TRUE(suffix_propose(p, {0, 2, 2}, 1).empty());
  EXPECT_EQ(suffix_propose(p, {0, 1, 1}, 1), (std::vector<int32_t>{1}));
  EXPECT_EQ(suffix_propose(p, {0, 3, 3}, 1), (std::vector<int32_t>{3}));
  p.add(std::vector<int32_t>(11, 4));  // longer than the whole store: not kept
  EXPECT_EQ(p.n_docs(), 2);
  p.retire(7, {});  // an aborted request teaches nothing
  EXPECT_EQ(p.n_docs(), 2);
}

struct Req {
  std::vector<int32_t> prompt;
  RequestParams p;
};
struct Out {
  RequestOutput o;
  std::string finish;  // o.stats.finish_reason points into the engine, gone after run()
  int64_t drafted = 0, accepted = 0;
};

// Runs the requests to completion, all submitted at once, checking the engine's
// invariants after every step.
std::vector<Out> run(const Model& m, EngineConfig cfg, const std::vector<Req>& reqs, EngineStats* st = nullptr) {
  cfg.threads = 2;
  Engine e(m, nullptr, cfg);
  std::vector<int64_t> ids;
  for (const auto& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
  while (e.has_work()) {
    e.step();
    e.check_invariants();
  }
  std::vector<Out> out;
  for (int64_t id : ids) {
    Out o{e.output(id), std::string(e.request_stats(id).finish_reason)};
    o.drafted = o.o.stats.spec_draft_tokens;
    o.accepted = o.o.stats.spec_accepted_tokens;
    out.push_back(std::move(o));
  }
  if (st) *st = e.stats();
  return out;
}

void expect_same(const std::vector<Out>& a, const std::vector<Out>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const RequestOutput &x = a[i].o, &y = b[i].o;
    ASSERT_EQ(x.tokens, y.tokens) << what << ", request " << i;
    ASSERT_EQ(a[i].finish, b[i].finish) << what << ", request " << i;
    ASSERT_EQ(x.logits.size(), y.logits.size()) << what;
    EXPECT_EQ(std::memcmp(x.logits.data(), y.logits.data(), x.logits.size() * 4), 0) << what << ", request " << i;
    ASSERT_EQ(x.logprobs.size(), y.logprobs.size()) << what;
    for (size_t j = 0; j < x.logprobs.size(); ++j) {
      EXPECT_EQ(x.logprobs[j].logprob, y.logprobs[j].logprob) << what << ", request " << i << " token " << j;
      EXPECT_EQ(x.logprobs[j].top, y.logprobs[j].top) << what << ", request " << i << " token " << j;
    }
  }
}

// Prompts that repeat themselves (so prompt lookup finds matches from the first step):
// a random phrase said two or three times, then the start of it once more.
std::vector<Req> repeating_prompts(int n, int32_t n_vocab, uint64_t seed, int max_tokens, bool sampled) {
  std::mt19937_64 rng(seed);
  std::vector<Req> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> phrase;
    const int len = 3 + int(rng() % 10);
    for (int j = 0; j < len; ++j) phrase.push_back(3 + int32_t(rng() % uint64_t(n_vocab - 3)));
    Req r;
    r.prompt = {1};
    for (int rep = 0; rep < 2 + int(rng() % 2); ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.begin() + 1 + int(rng() % uint64_t(len - 1)));
    r.p.max_tokens = max_tokens;
    r.p.ignore_eos = true;
    r.p.capture_logits = true;
    r.p.logprobs = i % 3 == 0 ? 2 : -1;
    if (sampled) {
      r.p.sampling.temperature = 0.9f;
      r.p.sampling.seed = 100 + uint64_t(i);
      r.p.sampling.repetition_penalty = 1.05f;
      r.p.sampling.frequency_penalty = 0.1f;
    } else {
      r.p.sampling.temperature = 0;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The same requests without speculation, then with it under scheduling that stresses it:
// batched, a small token budget (drafts compete with prompt chunks), a KV pool so small
// that sequences are preempted mid-speculation (recompute and swap), no prefix cache.
// These run at a fixed depth, so what is proposed does not depend on timing; one more
// case runs the adaptive policy (how much it speculates depends on measured step times,
// so only its output is checked).
void same_with_and_without(const Model& m, int max_tokens, bool sampled, int64_t min_accepted,
                           SpeculativeConfig sc = SpeculativeConfig::make(SpecMethod::Ngram, 5, 1, 4, false),
                           DType kv = DType::F16) {
  const auto reqs = repeating_prompts(24, m.hparams().n_vocab, 11, max_tokens, sampled);
  EngineConfig base;
  base.max_num_seqs = 8;
  base.kv_cache_bytes = int64_t(64) << 20;
  base.kv_dtype = kv;
  const auto plain = run(m, base, reqs);

  EngineConfig spec = base;
  spec.speculative = sc;
  struct Case {
    std::string name;
    EngineConfig cfg;
  };
  std::vector<Case> cases{{"batched", spec}};
  cases.push_back({"8-token budget", spec});
  cases.back().cfg.max_num_batched_tokens = 8;
  KVLayout kl{m.hparams().n_layer, m.hparams().n_head_kv, m.hparams().head_dim_k, m.hparams().head_dim_v, 16, 0,
              spec.kv_dtype};
  const int64_t small = 3 * (48 + max_tokens) * kl.bytes_per_token();
  cases.push_back({"small pool, recompute", spec});
  cases.back().cfg.kv_cache_bytes = small;
  cases.push_back({"small pool, swap", spec});
  cases.back().cfg.kv_cache_bytes = small;
  cases.back().cfg.preemption = PreemptionMode::Swap;
  cases.back().cfg.swap_bytes = int64_t(256) << 20;
  cases.push_back({"no prefix cache, k = 1", spec});
  cases.back().cfg.prefix_cache = false;
  cases.back().cfg.speculative.num_speculative_tokens = 1;
  cases.push_back({"adaptive, small pool", spec});
  cases.back().cfg.kv_cache_bytes = small;
  cases.back().cfg.speculative.adaptive = true;
  for (const Case& c : cases) {
    EngineStats st;
    const auto got = run(m, c.cfg, reqs, &st);
    expect_same(plain, got, c.name);
    std::printf("%-24s drafts %5lld  drafted %6lld  accepted %6lld  steps %5lld\n", c.name.c_str(),
                (long long)st.spec_drafts, (long long)st.spec_draft_tokens, (long long)st.spec_accepted_tokens,
                (long long)st.steps);
    if (!c.cfg.speculative.adaptive) {
      EXPECT_GT(st.spec_draft_tokens, 0) << c.name << ": nothing was proposed, nothing was tested";
      EXPECT_GE(st.spec_accepted_tokens, min_accepted) << c.name;
    }
    int64_t per_pos = 0;
    for (int64_t a : st.spec_accepted_per_pos) per_pos += a;
    EXPECT_EQ(per_pos, st.spec_accepted_tokens) << c.name;
  }
}

class SpeculativeRandomModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::TempDir() + "/spec-llama.gguf";
    make_model({"llama", "tiny", DType::Q8_0, 3, "", 0, 2}, path);
    model_ = Model::load(path).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static Model* model_;
};
Model* SpeculativeRandomModel::model_ = nullptr;

TEST_F(SpeculativeRandomModel, GreedyOutputUnchanged) { same_with_and_without(*model_, 24, false, 0); }
TEST_F(SpeculativeRandomModel, SeededSamplingUnchanged) { same_with_and_without(*model_, 24, true, 0); }
// The 8-bit KV caches under the same stress (their scales travel with the blocks through
// swap, the prefix cache and rollback): the output is the plain run's with that cache.
TEST_F(SpeculativeRandomModel, EightBitKvCaches) {
  const SpeculativeConfig sc = SpeculativeConfig::make(SpecMethod::Ngram, 5, 1, 4, false);
  same_with_and_without(*model_, 16, false, 0, sc, DType::I8);
  same_with_and_without(*model_, 16, true, 0, sc, DType::F8_E4M3);
  same_with_and_without(*model_, 16, false, 0, sc, DType::F8_E5M2);
}

// Real text repeats itself, so here drafts are accepted, many of them.
TEST(SpeculativeStories260K, GreedyAndSampledOutputUnchanged) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  same_with_and_without(*m, 48, false, 1);
  same_with_and_without(*m, 48, true, 1);
}

// Draft models: the target quantized to q4_0 (nearly the same predictions), and cut to
// its first layer (a poor draft: most proposals rejected). Either way the output is the
// one decoding without speculation gives, under the same stress as prompt lookup.
class SpeculativeDraftModel : public SpeculativeRandomModel {
 protected:
  static std::string draft(const char* name, DType t, int32_t layers) {
    const std::string path = testing::TempDir() + "/" + name;
    make_model({"llama", "tiny", t, 3, "", layers, 2}, path);
    return path;
  }
};

TEST_F(SpeculativeDraftModel, QuantizedCopyGreedyAndSampled) {
  SpeculativeConfig sc = SpeculativeConfig::make(SpecMethod::Draft, 4, 2, 4, false);
  sc.draft_model = draft("draft-q4.gguf", DType::Q4_0, 0);
  same_with_and_without(*model_, 24, false, 1, sc);
  same_with_and_without(*model_, 24, true, 1, sc);
}

// The target as its own draft: greedy drafts are the target's own choices, computed by
// the batch-invariant forward in other batches, so every one of them is accepted.
TEST_F(SpeculativeDraftModel, ItselfAsDraftAcceptsEverything) {
  const auto reqs = repeating_prompts(8, model_->hparams().n_vocab, 6, 20, false);
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(64) << 20;
  const auto plain = run(*model_, cfg, reqs);
  cfg.speculative = SpeculativeConfig::make(SpecMethod::Draft, 5, 2, 4, false);
  cfg.speculative.draft_model = draft("draft-same.gguf", DType::Q8_0, 0);
  EngineStats st;
  expect_same(plain, run(*model_, cfg, reqs, &st), "itself as draft");
  EXPECT_GT(st.spec_draft_tokens, 8 * 10);
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
}

TEST_F(SpeculativeDraftModel, LayerTruncatedCopy) {
  SpeculativeConfig sc = SpeculativeConfig::make(SpecMethod::Draft, 3, 2, 4, false);
  sc.draft_model = draft("draft-1layer.gguf", DType::Q8_0, 1);
  same_with_and_without(*model_, 20, false, 0, sc);
}

// The draft's pool is small: shadows are dropped least recently used first, and a
// sequence that does not fit gets no proposal; nothing changes what is produced.
TEST_F(SpeculativeDraftModel, DraftPoolPressure) {
  const auto reqs = repeating_prompts(8, model_->hparams().n_vocab, 4, 16, false);
  EngineConfig base;
  base.kv_cache_bytes = int64_t(64) << 20;
  const auto plain = run(*model_, base, reqs);
  EngineConfig cfg = base;
  cfg.speculative = SpeculativeConfig::make(SpecMethod::Draft, 4, 2, 4, false);
  cfg.speculative.draft_model = draft("draft-pressure.gguf", DType::Q8_0, 0);
  cfg.threads = 2;
  Engine e(*model_, nullptr, cfg);
  // Same bytes per token for both: half the memory each.
  EXPECT_EQ(e.kv_pool_bytes(), e.draft_proposer()->kv_pool_bytes());
  std::vector<int64_t> ids;
  for (const auto& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
  while (e.has_work()) {
    e.step();
    e.check_invariants();
    e.draft_proposer()->blocks().check_invariants();
  }
  EXPECT_EQ(e.draft_proposer()->n_shadows(), 0) << "finished sequences keep draft KV";
  EXPECT_EQ(e.draft_proposer()->blocks().n_free(), e.draft_proposer()->blocks().n_total());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(e.output(ids[i]).tokens, plain[i].o.tokens) << i;
  EXPECT_GT(e.stats().spec_accepted_tokens, 0);

  // Pools of about three sequences each for eight: the target preempts, the draft drops
  // shadows (the preempted sequences' first) and skips sequences it cannot fit.
  const KVLayout kl{model_->hparams().n_layer, model_->hparams().n_head_kv, model_->hparams().head_dim_k,
                    model_->hparams().head_dim_v, 16, 0, cfg.kv_dtype};
  cfg.kv_cache_bytes = 2 * 3 * (56 + 16 + 4) * kl.bytes_per_token();
  EngineStats st;
  const auto got = run(*model_, cfg, reqs, &st);
  expect_same(plain, got, "draft, small pools");
  EXPECT_GT(st.spec_accepted_tokens, 0);
}

// The draft's warm-up gives its block back; a sequence's catch-up is priced from the
// warm-up and then the measured catch-ups (what a probe and the engine's check of a dear
// draft weigh), and nothing once the shadow has the text.
TEST_F(SpeculativeDraftModel, WarmUpAndCatchUpCost) {
  const auto dm = Model::load(draft("draft-setup.gguf", DType::Q8_0, 1));
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(8) << 20;
  ThreadPool pool(2);
  DraftModelProposer d(*dm, cfg, pool);
  EXPECT_EQ(d.blocks().n_free(), d.blocks().n_total());
  std::vector<int32_t> toks(40);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = int32_t(3 + i % 50);
  EXPECT_GT(d.setup_seconds(7, toks), 0.0) << "priced from the timed warm-up block";
  EXPECT_GT(d.token_seconds(1), 0.0) << "a one-sequence forward, timed at construction";
  EXPECT_EQ(d.token_seconds(4), d.token_seconds(1)) << "no forward of 4 yet: the one below it";
  std::vector<int32_t> out;
  const Proposer::Ask ask{7, toks, 3, &out};
  d.propose({&ask, 1});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_GT(d.catchup_seconds(), 0.0);
  EXPECT_EQ(d.setup_seconds(7, toks), 0.0) << "the shadow ran all of it";
  std::vector<int32_t> longer = toks;
  longer.insert(longer.end(), 30, 5);
  EXPECT_GT(d.setup_seconds(7, longer), 0.0);
  EXPECT_GT(d.setup_seconds(8, longer), d.setup_seconds(7, longer)) << "an unknown sequence starts from nothing";
  d.retire(7, {});
  EXPECT_EQ(d.blocks().n_free(), d.blocks().n_total());
}

// Shadows of one prompt share its whole blocks: in the step they first draft (a leader
// catches up, the others fork from it) and later (from a computed shadow, its verified
// tokens only). The drafts are what a shadow of its own would draft.
TEST_F(SpeculativeDraftModel, ShadowsShareAPromptsBlocks) {
  const auto dm = Model::load(draft("draft-share.gguf", DType::Q8_0, 1));
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(8) << 20;
  ThreadPool pool(2);
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(3 + (i * 7) % 50);
  auto alone = [&](std::span<const int32_t> toks) {
    DraftModelProposer d(*dm, cfg, pool);
    std::vector<int32_t> out;
    const Proposer::Ask ask{1, toks, 4, &out};
    d.propose({&ask, 1});
    return out;
  };
  DraftModelProposer d(*dm, cfg, pool);
  std::vector<int32_t> o1, o2, o3;
  const Proposer::Ask two[] = {{1, prompt, 4, &o1}, {2, prompt, 4, &o2}};
  d.propose(two);
  EXPECT_EQ(d.shared_tokens(), 32) << "two whole blocks of the 39 computed tokens";
  EXPECT_EQ(d.catchup_tokens(), 39) << "the leader's; the follower's last 7 ride in the first drafting forward";
  int32_t shared = 0;
  for (int32_t b = 0; b < d.blocks().n_total(); ++b) shared += d.blocks().ref_count(b) == 2;
  EXPECT_EQ(shared, 2);
  const auto ref = alone(prompt);
  EXPECT_EQ(o1, ref);
  EXPECT_EQ(o2, ref);
  // A later request: the same prompt, then its own text.
  std::vector<int32_t> third = prompt;
  third.insert(third.end(), {9, 8, 7, 6, 5});
  const Proposer::Ask later{3, third, 4, &o3};
  d.propose({&later, 1});
  EXPECT_EQ(d.shared_tokens(), 64);
  EXPECT_EQ(o3, alone(third));
  for (int64_t id : {1, 2, 3}) d.retire(id, {});
  EXPECT_EQ(d.blocks().n_free(), d.blocks().n_total());
  d.blocks().check_invariants();
}

// Requests with one long prompt through the engine, greedy and sampled: the output is
// the plain run's and the draft shared the prompt's blocks.
TEST_F(SpeculativeDraftModel, SharedPromptThroughTheEngine) {
  const int32_t nv = model_->hparams().n_vocab;
  std::vector<int32_t> common(70);
  for (size_t i = 0; i < common.size(); ++i) common[i] = int32_t(1 + (i * 13) % (nv - 1));
  for (const bool sampled : {false, true}) {
    std::vector<Req> reqs;
    for (int r = 0; r < 6; ++r) {
      Req q;
      q.prompt = common;
      q.prompt.push_back(int32_t(1 + r));
      q.p.max_tokens = 16;
      q.p.ignore_eos = true;
      if (sampled) q.p.sampling.temperature = 0.8f, q.p.sampling.seed = uint64_t(100 + r);
      else q.p.sampling.temperature = 0;
      reqs.push_back(q);
    }
    EngineConfig cfg;
    cfg.kv_cache_bytes = int64_t(64) << 20;
    const auto plain = run(*model_, cfg, reqs);
    cfg.speculative = SpeculativeConfig::make(SpecMethod::Draft, 3, 2, 4, false);
    cfg.speculative.draft_model = draft("draft-share-engine.gguf", DType::Q4_0, 0);
    Engine e(*model_, nullptr, cfg);
    std::vector<int64_t> ids;
    for (const auto& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
    while (e.has_work()) {
      e.step();
      e.draft_proposer()->blocks().check_invariants();
    }
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(e.output(ids[i]).tokens, plain[i].o.tokens) << i;
    EXPECT_GE(e.draft_proposer()->shared_tokens(), 5 * 64) << "five of six ran the prompt's 4 whole blocks once";
    EXPECT_EQ(e.draft_proposer()->blocks().n_free(), e.draft_proposer()->blocks().n_total());
  }
}

TEST_F(SpeculativeDraftModel, VocabularyMustMatch) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  cfg.speculative = SpeculativeConfig::make(SpecMethod::Draft, 4, 2, 4, false);
  cfg.speculative.draft_model = testing::TempDir() + "/no-such-draft.gguf";
  EXPECT_THROW(Engine(*model_, nullptr, cfg), Error);
  // Another vocabulary size.
  cfg.speculative.draft_model = testing::TempDir() + "/draft-bigvocab.gguf";
  make_model({"llama", "tinyllama-1.1b", DType::Q4_0, 3, "", 1, 2}, cfg.speculative.draft_model);
  try {
    Engine e(*model_, nullptr, cfg);
    ADD_FAILURE() << "a draft with 32000 tokens was taken for a 512-token target";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("vocabulary"), std::string::npos) << err.what();
  }
  // Draft chosen without a draft model: at the engine, and per request.
  cfg.speculative.draft_model.clear();
  EXPECT_THROW(Engine(*model_, nullptr, cfg), Error);
  cfg.speculative.method = SpecMethod::None;
  Engine e(*model_, nullptr, cfg);
  RequestParams p;
  p.speculative = SpeculativeConfig::make(SpecMethod::Draft, 4, 2, 4, false);
  EXPECT_THROW(e.add_request({1, 2, 3}, p), Error);
}

// Same size, other tokens: a real vocabulary (stories260K's 512 SentencePiece pieces)
// against the synthetic one.
TEST(SpeculativeDraftVocabulary, SameSizeOtherTokens) {
  RIDGE_REQUIRE_SHARED(vocab, "models/stories260K.gguf");
  const std::string t = testing::TempDir() + "/vocab-synthetic.gguf", d = testing::TempDir() + "/vocab-stories.gguf";
  make_model({"llama", "tiny", DType::Q8_0, 3, "", 1, 2}, t);
  make_model({"llama", "tiny", DType::Q8_0, 3, vocab, 1, 2}, d);
  auto target = Model::load(t), draft = Model::load(d);
  ASSERT_EQ(target->hparams().n_vocab, draft->hparams().n_vocab);
  EXPECT_THROW(check_draft_vocabulary(*target, *draft), Error);
  EXPECT_NO_THROW(check_draft_vocabulary(*target, *target));
}

// Suffix decoding: the second time a prompt comes, the first one's output is in the
// store, so nearly all of the continuation is proposed and accepted; the output stays
// the one without speculation.
TEST_F(SpeculativeRandomModel, SuffixLearnsFromFinishedRequests) {
  auto reqs = repeating_prompts(6, model_->hparams().n_vocab, 21, 20, false);
  EngineConfig base;
  base.kv_cache_bytes = int64_t(64) << 20;
  const auto plain = run(*model_, base, reqs);
  EngineConfig cfg = base;
  cfg.speculative = SpeculativeConfig::make(SpecMethod::Suffix, 6, 2, 4, false);
  cfg.threads = 2;
  Engine e(*model_, nullptr, cfg);
  int64_t first_accepted = 0;
  for (int wave = 0; wave < 2; ++wave) {
    std::vector<int64_t> ids;
    for (const auto& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
    while (e.has_work()) {
      e.step();
      e.check_invariants();
    }
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(e.output(ids[i]).tokens, plain[i].o.tokens) << wave << " " << i;
    if (wave == 0) first_accepted = e.stats().spec_accepted_tokens;
  }
  const int64_t second = e.stats().spec_accepted_tokens - first_accepted;
  EXPECT_GE(second, int64_t(reqs.size()) * 15) << "the second wave should replay the first one's outputs";
  EXPECT_EQ(e.suffix_proposer()->n_docs(), int64_t(2 * reqs.size()));
}

// max_tokens and stop ids end a request where they would without speculation, even when
// the stop falls inside an accepted proposal.
TEST_F(SpeculativeRandomModel, StopsWhereItWouldWithout) {
  auto reqs = repeating_prompts(12, model_->hparams().n_vocab, 3, 20, false);
  EngineConfig base;
  base.kv_cache_bytes = int64_t(64) << 20;
  const auto first = run(*model_, base, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    // Stop on the token generated at position 5 + i % 7 (its first occurrence ends it).
    reqs[i].p.stop_token_ids = {first[i].o.tokens[5 + i % 7]};
    reqs[i].p.ignore_eos = false;
    reqs[i].p.max_tokens = 9 + int32_t(i % 5);
  }
  const auto plain = run(*model_, base, reqs);
  EngineConfig spec = base;
  spec.speculative = SpeculativeConfig::make(SpecMethod::Ngram, 8, 1, 3, /*adaptive=*/false);
  const auto got = run(*model_, spec, reqs);
  expect_same(plain, got, "stop ids and max_tokens");
  int stops = 0;
  for (const auto& o : got) stops += o.finish == "stop";
  EXPECT_GT(stops, 0);
}

// A proposer that is almost always wrong: nearly every step rejects, n_computed moves
// one token at a time, every fourth step ends on a block boundary with the rejected
// drafts' block given back, and a pool of about four sequences swaps the others out
// and in. The output must not change, and Engine::check_invariants (after every step)
// holds a swapped-out sequence to exactly the blocks of its computed tokens, what
// swap-in reserves (a table one block longer once left swap-in reading past its
// reservation).
class WrongProposer final : public SequenceProposer {
 public:
  void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const override {
    for (int32_t j = 0; j < max_tokens; ++j) out.push_back(int32_t((tokens.back() * 7 + 13 + j) % 97 + 3));
  }
};

TEST_F(SpeculativeRandomModel, SwapPreemptionRightAfterRejections) {
  auto reqs = repeating_prompts(16, model_->hparams().n_vocab, 9, 20, false);
  EngineConfig base;
  base.block_size = 4;
  base.max_num_seqs = 16;
  KVLayout kl{model_->hparams().n_layer, model_->hparams().n_head_kv, model_->hparams().head_dim_k,
              model_->hparams().head_dim_v, 4, 0, base.kv_dtype};
  base.kv_cache_bytes = 4 * (48 + 20) * kl.bytes_per_token();  // about four sequences' worth
  base.preemption = PreemptionMode::Swap;
  base.swap_bytes = int64_t(256) << 20;
  const auto plain = run(*model_, base, reqs);
  EngineConfig spec = base;
  spec.speculative = SpeculativeConfig::make(SpecMethod::External, 3, 1, 1, /*adaptive=*/false);
  WrongProposer wrong;
  spec.threads = 2;
  Engine e(*model_, nullptr, spec);
  e.set_proposer(&wrong);
  std::vector<int64_t> ids;
  for (const auto& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
  while (e.has_work()) {
    e.step();
    e.check_invariants();
  }
  EXPECT_GT(e.n_swaps(), 0) << "no swap preemption happened: the case was not tested";
  EXPECT_GT(e.stats().spec_draft_tokens, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const RequestOutput o = e.output(ids[i]);
    ASSERT_EQ(o.tokens, plain[i].o.tokens) << "request " << i;
    EXPECT_EQ(std::memcmp(o.logits.data(), plain[i].o.logits.data(), o.logits.size() * 4), 0) << "request " << i;
  }
}

// The token distribution with speculation is the one without it: rejection sampling
// against a deterministic proposal (proposer.h). Two disjoint sets of seeds, one decoded
// plainly and one with every step proposing the plain run's most frequent token at each
// position (likely enough to be accepted often, so a bias toward proposed tokens would
// show), give counts per (position, token) that a chi-square test of homogeneity cannot
// tell apart at the 0.001 level. Fixed seeds: the statistic is the same every run.
class ModeProposer final : public SequenceProposer {
 public:
  ModeProposer(size_t n_prompt, std::vector<int32_t> modes) : n_prompt_(n_prompt), modes_(std::move(modes)) {}
  void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const override {
    for (size_t g = tokens.size() - n_prompt_; g < modes_.size() && int32_t(out.size()) < max_tokens; ++g)
      out.push_back(modes_[g]);
  }

 private:
  size_t n_prompt_;
  std::vector<int32_t> modes_;
};

TEST_F(SpeculativeRandomModel, SampledDistributionUnchanged) {
  constexpr int kSeeds = 1500, kLen = 4;
  const std::vector<int32_t> prompt{1, 17, 99, 42, 7};
  auto sample = [&](uint64_t seed0, Proposer* proposer, EngineStats* st) {
    EngineConfig cfg;
    cfg.kv_cache_bytes = int64_t(64) << 20;
    cfg.max_num_seqs = 64;
    cfg.threads = 2;
    if (proposer) cfg.speculative = SpeculativeConfig::make(SpecMethod::External, kLen - 1, 1, 1, false);
    Engine e(*model_, nullptr, cfg);
    e.set_proposer(proposer);
    RequestParams p;
    p.max_tokens = kLen;
    p.ignore_eos = true;
    p.sampling.temperature = 0.7f;
    p.sampling.top_k = 6;
    p.sampling.top_p = 1;
    p.sampling.min_p = 0;
    std::vector<int64_t> ids;
    for (int i = 0; i < kSeeds; ++i) {
      p.sampling.seed = seed0 + uint64_t(i);
      ids.push_back(e.add_request(prompt, p));
    }
    while (e.has_work()) e.step();
    std::vector<std::vector<int32_t>> out;
    for (int64_t id : ids) out.push_back(e.output(id).tokens);
    if (st) *st = e.stats();
    return out;
  };
  const auto plain = sample(1, nullptr, nullptr);
  std::vector<int32_t> modes;
  for (int j = 0; j < kLen; ++j) {
    std::map<int32_t, int> c;
    for (const auto& o : plain) ++c[o[size_t(j)]];
    modes.push_back(std::max_element(c.begin(), c.end(), [](auto& a, auto& b) { return a.second < b.second; })->first);
  }
  ModeProposer mp(prompt.size(), modes);
  EngineStats st;
  const auto spec = sample(1 + kSeeds, &mp, &st);
  ASSERT_GT(st.spec_accepted_tokens, kSeeds / 4) << "proposals too rarely accepted for the test to see a bias";
  // Bins: (position, token) with at least 10 draws over both sides; the rest of each
  // position pooled into one bin.
  double chi2 = 0;
  int bins = 0;
  for (int j = 1; j < kLen; ++j) {
    std::map<int32_t, std::array<int, 2>> c;
    for (const auto& o : plain) ++c[o[size_t(j)]][0];
    for (const auto& o : spec) ++c[o[size_t(j)]][1];
    std::array<int, 2> rest{0, 0};
    auto add = [&](const std::array<int, 2>& n) {
      const double e = (n[0] + n[1]) / 2.0;  // equal sample sizes
      chi2 += (n[0] - e) * (n[0] - e) / e + (n[1] - e) * (n[1] - e) / e;
      ++bins;
    };
    for (const auto& [tok, n] : c) {
      if (n[0] + n[1] >= 10) add(n);
      else rest[0] += n[0], rest[1] += n[1];
    }
    if (rest[0] + rest[1] > 0) add(rest);
  }
  // Degrees of freedom: (bins - 1) per position (each position's counts sum to kSeeds on
  // both sides); the 0.999 quantile by Wilson-Hilferty (z = 3.090).
  const double df = bins - (kLen - 1);
  const double q = df * std::pow(1 - 2 / (9 * df) + 3.090 * std::sqrt(2 / (9 * df)), 3);
  std::printf("chi-square %.2f over %d bins, %.0f degrees of freedom, 0.999 quantile %.2f; %lld of %lld drafts accepted\n",
              chi2, bins, df, q, (long long)st.spec_accepted_tokens, (long long)st.spec_draft_tokens);
  EXPECT_LT(chi2, q) << "the token distribution with speculation differs from the one without";
  ASSERT_GE(df, 3);
}

// An untaken proposal is scored as a verification would have scored it: the prefix the
// produced tokens match is accepted, the first mismatch is a rejection, then it is done.
TEST(SpecShadow, ScoredLikeAVerification) {
  Sequence s(1, {1, 2, 3}, RequestParams{}, 16, 0);
  score_shadow(s, 4);  // no shadow: nothing to score
  EXPECT_EQ(s.spec_acc, 0.0);
  EXPECT_EQ(s.spec_rej, 0.0);
  s.spec_shadow = {5, 6, 7};
  score_shadow(s, 5);
  score_shadow(s, 6);
  EXPECT_EQ(s.spec_acc, 0.0) << "still open";
  score_shadow(s, 9);
  EXPECT_EQ(s.spec_acc, 2.0);
  EXPECT_EQ(s.spec_rej, 1.0);
  EXPECT_TRUE(s.spec_shadow.empty());
  s.spec_shadow = {8, 9};
  score_shadow(s, 8);
  score_shadow(s, 9);
  EXPECT_DOUBLE_EQ(s.spec_acc, 0.9 * 2 + 2);
  EXPECT_DOUBLE_EQ(s.spec_rej, 0.9 * 1) << "all of it matched: no rejection";
  EXPECT_TRUE(s.spec_shadow.empty());
  score_shadow(s, 3);
  EXPECT_DOUBLE_EQ(s.spec_acc, 0.9 * 2 + 2);
}

// A costly proposer whose every token costs a plain step or more cannot pay even when
// always right (Engine::dear_asks): an adaptive engine never asks it, not even to
// explore; one that costs nothing is asked once the plain step time is known.
class PricedProposer final : public Proposer {
 public:
  explicit PricedProposer(double token_s, int64_t dear_setup_seq = -1)
      : token_s_(token_s), dear_setup_seq_(dear_setup_seq) {}
  void propose(std::span<const Ask> asks) override {
    for (const Ask& a : asks) {
      ++asked;
      seqs.insert(a.seq);
      a.out->assign(size_t(a.max_tokens), a.tokens.back());
    }
  }
  bool costly() const override { return true; }
  double token_seconds(int32_t) const override { return token_s_; }
  double setup_seconds(int64_t seq, std::span<const int32_t>) const override { return seq == dear_setup_seq_ ? 10.0 : 0.0; }
  int64_t asked = 0;
  std::set<int64_t> seqs;

 private:
  double token_s_;
  int64_t dear_setup_seq_;
};

TEST_F(SpeculativeRandomModel, ADraftAsDearAsTheTargetIsNeverAsked) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  cfg.speculative = SpeculativeConfig::make(SpecMethod::External, 4, 1, 1, /*adaptive=*/true);
  const auto reqs = repeating_prompts(1, model_->hparams().n_vocab, 5, 32, false);
  auto asks = [&](double token_s) {
    PricedProposer p(token_s);
    Engine e(*model_, nullptr, cfg);
    e.set_proposer(&p);
    e.add_request(reqs[0].prompt, reqs[0].p);
    while (e.has_work()) e.step();
    return p.asked;
  };
  EXPECT_EQ(asks(10.0), 0) << "ten seconds a token against a step of well under one";
  EXPECT_GT(asks(0.0), 0);
}

// A catch-up the savings cannot repay leaves out that sequence only, not the others the
// same proposer drafts for.
TEST_F(SpeculativeRandomModel, ACatchUpTooLongToRepayLeavesOutOneSequence) {
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(16) << 20;
  cfg.speculative = SpeculativeConfig::make(SpecMethod::External, 4, 1, 1, /*adaptive=*/true);
  const auto reqs = repeating_prompts(2, model_->hparams().n_vocab, 5, 32, false);
  Engine e(*model_, nullptr, cfg);
  std::vector<int64_t> ids;
  for (const auto& r : reqs) ids.push_back(e.add_request(r.prompt, r.p));
  PricedProposer p(0.0, ids[0]);
  e.set_proposer(&p);
  while (e.has_work()) e.step();
  EXPECT_EQ(p.seqs.count(ids[0]), 0u) << "ten seconds of catch-up";
  EXPECT_EQ(p.seqs.count(ids[1]), 1u);
}

// A request chooses: off while the engine speculates, or on while it does not.
TEST_F(SpeculativeRandomModel, PerRequestChoice) {
  auto reqs = repeating_prompts(6, model_->hparams().n_vocab, 5, 16, false);
  for (size_t i = 0; i < reqs.size(); ++i)
    reqs[i].p.speculative = i % 2 ? SpeculativeConfig::make(SpecMethod::None, 4, 2, 4, false)
                                  : SpeculativeConfig::make(SpecMethod::Ngram, 4, 1, 4, false);
  EngineConfig cfg;
  cfg.kv_cache_bytes = int64_t(64) << 20;
  cfg.speculative.adaptive = false;  // no step policy: every step may speculate
  const auto got = run(*model_, cfg, reqs);
  for (size_t i = 1; i < got.size(); i += 2) EXPECT_EQ(got[i].drafted, 0) << i;
  int64_t drafted = 0;
  for (size_t i = 0; i < got.size(); i += 2) drafted += got[i].drafted;
  EXPECT_GT(drafted, 0);
  Req bad = reqs[0];
  bad.p.speculative = SpeculativeConfig::make(SpecMethod::Ngram, 0, 1, 4, true);
  Engine e(*model_, nullptr, cfg);
  EXPECT_THROW(e.add_request(bad.prompt, bad.p), Error);
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// The policy's choice follows the measured step costs: deep proposals while rows are
// nearly free, only near-certain tokens once they cost their share of the step, the
// likeliest first across sequences, each sequence taking a prefix of its proposal.
TEST(SpecPolicy, TakesTheTokensWorthTheirRows) {
  auto chances = [](std::vector<std::pair<double, int>> seqs) {  // (acceptance, proposal length)
    std::vector<SpecPolicy::Candidate> c;
    for (size_t i = 0; i < seqs.size(); ++i) {
      double p = 1;
      for (int j = 0; j < seqs[i].second; ++j) c.push_back({p *= seqs[i].first, i});
    }
    return c;
  };
  auto choose = [&](const SpecPolicy& p, int32_t batch, std::vector<std::pair<double, int>> seqs) {
    auto c = chances(seqs);
    std::vector<int32_t> take(seqs.size(), 0);
    p.choose(batch, batch, c, take);
    return take;
  };
  // Unmeasured: every other step none, the others a cycling few of the likeliest tokens
  // (at least kPriorChance likely), whatever the batch.
  SpecPolicy fresh;
  EXPECT_EQ(choose(fresh, 1, {{0.5, 8}}), std::vector<int32_t>{0});
  fresh.observe(1, 1, false, 0.02);
  EXPECT_EQ(choose(fresh, 1, {{0.5, 8}}), std::vector<int32_t>{1});
  fresh.observe(1, 1, false, 0.02);
  fresh.observe(1, 2, true, 0.02);
  EXPECT_EQ(choose(fresh, 1, {{0.9, 8}}), std::vector<int32_t>{2});
  EXPECT_FALSE(fresh.cost(1).known);
  SpecPolicy fresh16;
  fresh16.observe(16, 16, false, 0.04);
  EXPECT_EQ(choose(fresh16, 16, {{0.5, 4}, {0.9, 4}, {0.6, 4}}), (std::vector<int32_t>{0, 1, 0}));

  // Memory-bound batch 1: 20 ms without drafts, 22 ms + 1 ms per row with them. A 0.9
  // sequence goes deep, a 0.3 one takes two tokens, a 0.02 one none.
  SpecPolicy mem;
  for (int i = 0; i < 60; ++i) {
    const int rows = 1 + i % 9;
    mem.observe(1, rows, rows > 1, rows > 1 ? 0.022 + 0.001 * rows : 0.020);
  }
  EXPECT_EQ(choose(mem, 1, {{0.9, 8}}), std::vector<int32_t>{8});
  EXPECT_EQ(choose(mem, 1, {{0.3, 8}}), std::vector<int32_t>{2});
  EXPECT_EQ(choose(mem, 1, {{0.02, 8}}), std::vector<int32_t>{0});

  // Compute-bound batch 16: 10 ms + 3 ms per row: a row is worth it only above the
  // step's 16 / 58 tokens per ms x 3 ms = 0.83 tokens.
  SpecPolicy busy;
  for (int i = 0; i < 60; ++i) {
    const int rows = 16 + i % 17;
    busy.observe(16, rows, rows > 16, 0.010 + 0.003 * rows);
  }
  const auto b = choose(busy, 16, {{0.6, 4}, {0.99, 4}, {0.3, 4}});
  EXPECT_EQ(b, (std::vector<int32_t>{0, 4, 0}));
  // Batch sizes are measured apart: batch 16's costs say nothing about batch 2.
  EXPECT_FALSE(busy.cost(2).known);
  // Certain tokens pay on either (a sure token for a row), so proposers are asked.
  EXPECT_TRUE(busy.worth_asking(16, 16, 1));
  EXPECT_TRUE(mem.worth_asking(1, 1, 1));
  // Drafts add a 20 ms jump to a 58 ms step and 3 ms per row: even 12 certain tokens
  // (28 in 114 ms against 16 in 58) do not pay, so no proposer need be asked.
  SpecPolicy dear;
  for (int i = 0; i < 60; ++i) {
    const int rows = 16 + i % 17;
    dear.observe(16, rows, rows > 16, rows > 16 ? 0.030 + 0.003 * rows : 0.058);
  }
  EXPECT_FALSE(dear.worth_asking(16, 16, 12));
  EXPECT_TRUE(dear.worth_asking(16, 16, 400)) << "a jump amortized over enough sure tokens";
}

// A batch size not yet measured borrows its neighbor's line once it has plain steps of
// its own: the same jump for the first draft and cost per row, from its own plain step.
TEST(SpecPolicy, NeighborsLine) {
  SpecPolicy p;
  for (int i = 0; i < 60; ++i) {  // 4 decodes: 20 ms, with drafts 22 ms + 1 ms per row
    const int rows = 4 + i % 9;
    p.observe(4, rows, rows > 4, rows > 4 ? 0.022 + 0.001 * rows : 0.020);
  }
  ASSERT_TRUE(p.cost(4).known);
  EXPECT_FALSE(p.cost(4).borrowed);
  EXPECT_FALSE(p.cost(2).known) << "no plain step of its own yet";
  std::vector<SpecPolicy::Candidate> c{{0.5, 0}, {0.25, 0}};
  std::vector<int32_t> take(1, 0);
  p.choose(2, 2, c, take);
  EXPECT_EQ(take[0], 0) << "a plain step first, not the prior's exploration";
  p.observe(2, 2, false, 0.012);
  const SpecPolicy::StepCost b = p.cost(2);
  ASSERT_TRUE(b.known);
  EXPECT_TRUE(b.borrowed);
  EXPECT_NEAR(b.plain_s, 0.012, 1e-9);
  EXPECT_NEAR(b.per_row_s, p.cost(4).per_row_s, 1e-12);
  // 4 decodes: 4 rows with drafts would take 26 ms against 20 plain (a 6 ms jump).
  EXPECT_NEAR(b.at(2, true) - b.plain_s, 0.006, 1e-6);
  EXPECT_FALSE(p.cost(16).known) << "only the next size up or down";
}

// The plain step time a proposer's price is weighed against: none before kPlainSteps
// plain steps, then the lower of their mean and the last (a fresh engine's first steps
// touch new pages and run slow).
TEST(SpecPolicy, PlainSeconds) {
  SpecPolicy p;
  p.observe(1, 1, false, 0.050);
  for (int i = 1; i < SpecPolicy::kPlainSteps; ++i) {
    EXPECT_EQ(p.plain_seconds(1), 0.0) << i;
    p.observe(1, 2, true, 0.100);  // steps with drafts do not count
    p.observe(1, 1, false, 0.010);
  }
  EXPECT_NEAR(p.plain_seconds(1), 0.010, 1e-12);
  EXPECT_EQ(p.plain_seconds(2), 0.0) << "another batch size";
  for (int i = 0; i < 40; ++i) p.observe(1, 1, false, 0.010);
  p.observe(1, 1, false, 0.030);
  EXPECT_GT(p.plain_seconds(1), 0.010);
  EXPECT_LT(p.plain_seconds(1), 0.030) << "the mean, below the last step";
}

TEST(SpecPolicy, StepCostFit) {
  SpecPolicy p;
  // 20 ms without drafts; with them 21 ms + 1.5 ms per row, rows 2..9.
  for (int i = 0; i < 40; ++i) {
    const int rows = 1 + i % 9;
    p.observe(1, rows, rows > 1, rows > 1 ? 0.021 + 0.0015 * rows : 0.020);
  }
  const SpecPolicy::StepCost c = p.cost(1);
  ASSERT_TRUE(c.known);
  EXPECT_NEAR(c.plain_s, 0.020, 1e-9);
  EXPECT_NEAR(c.fixed_s, 0.021, 1e-6);
  EXPECT_NEAR(c.per_row_s, 0.0015, 1e-7);
  // Steps with drafts all of one row count: no slope can be fitted.
  SpecPolicy q;
  for (int i = 0; i < 40; ++i) q.observe(1, 1 + i % 2, i % 2 == 1, 0.02);
  EXPECT_FALSE(q.cost(1).known);
}

}  // namespace
}  // namespace ridge
