// The engine: requests in, token streams out. One step = schedule -> propose (speculative
// drafts) -> (swap copies) -> build batch -> forward -> sample and verify -> postprocess
// (stop checks, prefix-cache inserts, rollback of rejected drafts, freeing). The engine knows sequences and blocks, not HTTP; it is single-threaded (the
// server drives it from one loop thread).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/threadpool.h"
#include "engine/block_manager.h"
#include "engine/config.h"
#include "engine/draft_proposer.h"
#include "engine/model_runner.h"
#include "engine/proposer.h"
#include "engine/radix_cache.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/spec_policy.h"
#include "engine/suffix_proposer.h"
#include "engine/swap_space.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ridge {

class Tokenizer;


// One new token of one request, or its end. A step may give a request several (accepted
// speculative tokens), in order.
struct TokenEvent {
  int64_t id;
  int32_t token;                // -1 when a request ends without a new token (abort)
  bool finished;
  // Both point into the request's state: valid until the next step() or its release().
  std::string_view finish_reason;           // "stop", "length" or "abort" when finished
  const TokenLogprobs* logprobs = nullptr;  // when the request asked for them
};

// What a request cost and where its time went, readable at any point until release().
struct RequestStats {
  int32_t prompt_tokens = 0, generated_tokens = 0;
  int32_t cached_tokens = 0;   // prompt tokens the prefix cache served (its last admission)
  int32_t preemptions = 0;
  bool scheduled = false;      // has been given work (or finished) at least once
  // Its share of every step it rode in (the step's time x its tokens / the step's tokens),
  // by kind of work; recompute is tokens run again after a preemption dropped their KV.
  double prefill_s = 0, decode_s = 0, recompute_s = 0;
  int32_t spec_draft_tokens = 0, spec_accepted_tokens = 0;  // speculative decoding
  std::string_view finish_reason;  // empty while it runs; valid until release()
};

// Everything a finished request produced (Generator, tests).
struct RequestOutput {
  std::vector<int32_t> tokens;          // generated
  std::vector<float> margins;           // top-2 logit margin of each step
  std::vector<float> logits;            // [tokens][n_vocab] when captured
  std::vector<TokenLogprobs> logprobs;  // [tokens] when asked for
  std::vector<TokenLogprobs> prompt_logprobs;  // [prompt tokens - 1] when asked for (params.prompt_logprobs)
  RequestStats stats;
};

// The KV pool and prefix cache as a router or a metrics page sees them, in pages (a
// block of a model with window layers is several pages: engine/block_manager.h).
struct KvUsage {
  int32_t blocks_total = 0, blocks_free = 0;
  int32_t blocks_in_use = 0;      // referenced by requests
  int32_t blocks_cached = 0;      // held only by the prefix cache
  int32_t blocks_evictable = 0;   // prefix-cache blocks that eviction could free now
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;        // prompt tokens of all requests
  int64_t computed_tokens = 0;      // tokens run through the model (prefill + decode + recompute)
  int64_t prefix_hit_tokens = 0;    // prompt tokens served by the prefix cache
  int64_t generated_tokens = 0;
  int64_t batched_seqs = 0;         // sum over steps of sequences in the batch
  double prefill_s = 0, decode_s = 0;  // steps with prompt work / decode-only steps
  int64_t decode_tokens = 0;        // tokens produced by decode-only steps
  int64_t decode_steps = 0, decode_rows = 0;  // decode-only steps, and the tokens they ran (drafts too)
  int64_t spec_decode_steps = 0, spec_decode_rows = 0;  // those of them that verified drafts
  // Query-key pairs attention scored (each row against the positions before it and its
  // own): what grows a step's time with context, beside its rows (tools/tune_model.h).
  double attn_pairs = 0;
  int64_t swap_fallbacks = 0;       // swapped-out sequences recomputed because swap I/O failed
  // Speculative decoding, as vLLM counts it: proposals verified, tokens proposed and
  // accepted, and accepted per draft position ([i]: drafts whose token i was accepted).
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  // Time spent proposing (a draft model's forwards; the lookups), in all steps and in
  // decode-only steps (part of decode_s).
  double spec_propose_s = 0, spec_propose_decode_s = 0;
  // Structured output: tokens drawn under a grammar, and the time their masks and
  // accepts took (summed over the pool's threads).
  int64_t grammar_tokens = 0;
  double grammar_s = 0;
  // Jump-forward: forced spans run as drafts, their tokens, and those the model took.
  int64_t jump_drafts = 0, jump_tokens = 0, jump_accepted = 0;
};

// A cheap proposal the policy did not take (s.spec_shadow), scored against tok, the next
// token s produced: at its end or first mismatch, the acceptance a verification would
// have measured joins s's decaying counts (engine.cpp says why that is exact).
void score_shadow(Sequence& s, int32_t tok);
void clear_shadow(Sequence& s);

class Engine {
 public:
  Engine(const Model& model, const Tokenizer* tok, const EngineConfig& cfg);
  ~Engine();

  // Throws ridge::Error when the request can never fit (prompt + max_tokens beyond the
  // KV pool or the model's context) or has no tokens.
  int64_t add_request(std::vector<int32_t> prompt, const RequestParams& p);
  // complete: the driver ended a normal completion (a stop string matched), so its text
  // is what a finished request's is to the proposers that learn from it.
  void abort(int64_t id, bool complete = false);
  // The proposer of SpecMethod::External requests; must outlive the engine's steps.
  void set_proposer(Proposer* p) { external_ = p; }
  // The cross-request suffix store (null until a request or the config uses it) and the
  // draft model's proposer (null without --draft-model).
  const SuffixProposer* suffix_proposer() const { return suffix_.get(); }
  const DraftModelProposer* draft_proposer() const { return draft_.get(); }
  std::vector<TokenEvent> step();
  bool has_work() const { return n_unfinished_ > 0; }

  // Finished and unfinished requests stay readable until released. The drivers (server,
  // generate, benches) read requests through these; get() is the engine's own view.
  RequestStats request_stats(int64_t id) const;  // throws ridge::Error for an unknown id
  RequestOutput output(int64_t id) const;
  bool finished(int64_t id) const;
  // census: walk the prefix tree for the blocks only it holds (not per token); without
  // it, blocks_cached and blocks_evictable are 0 and blocks_in_use counts them too.
  KvUsage kv_usage(bool census = true) const;
  const Sequence* get(int64_t id) const;
  void release(int64_t id);

  const EngineStats& stats() const { return stats_; }
  int64_t n_preemptions() const { return sched_->n_preemptions(); }
  int64_t n_swaps() const { return sched_->n_swaps(); }
  const BlockManager& blocks() const { return *bm_; }
  const RadixCache* prefix_cache() const { return radix_.get(); }
  // KV-cache events of the prefix cache (engine/kv_events.h), for a router: recorded
  // from set_kv_events(true) on, taken after each step. None without a prefix cache.
  void set_kv_events(bool on) {
    if (radix_) radix_->record_events(on);
  }
  std::vector<KvEvent> take_kv_events() { return radix_ ? radix_->take_events() : std::vector<KvEvent>{}; }
  int32_t n_running() const { return sched_->n_running(); }
  int32_t n_waiting() const { return sched_->n_waiting(); }
  // The longest sequence the pool holds alone (window layers bounded by their window).
  int64_t kv_capacity_tokens() const { return bm_->max_tokens_one_seq(cfg_.max_num_batched_tokens); }
  int64_t kv_pool_bytes() const { return runner_->kv_pool_bytes(); }
  // The forward's buffers at their largest (a full token budget, a logit row per sequence).
  int64_t activation_bytes() const;
  const EngineConfig& config() const { return cfg_; }
  // Online tuning (server/auto_tune.h), from the next step on. The token budget may go
  // from 1 up to the configured max_num_batched_tokens (the activations are sized for
  // that); the speculation depth caps the configured num_speculative_tokens of every
  // sequence that did not choose its own (0: no cap). Throws ridge::Error out of range.
  void set_token_budget(int32_t n);
  int32_t token_budget() const { return sched_->token_budget(); }
  void set_spec_depth_cap(int32_t k);
  int32_t spec_depth_cap() const { return spec_depth_cap_; }
  ThreadPool& pool() { return pool_; }
  // The forward's per-op roofline accounting (perf/op_profile.h), accumulating over steps.
  perf::OpProfile& op_profile() { return runner_->profile(); }
  // Every block's ref count equals the references held by sequences and the prefix
  // cache; free + referenced = total. Throws ridge::Error naming what is wrong.
  void check_invariants() const;

  // The vocabulary as grammars see it, made on first use (the engine's thread, or before
  // it starts: a server builds its grammars' token tables over it).
  const std::shared_ptr<const grammar::TokenTrie>& token_trie() const;

 private:
  class Cost;
  struct StepTally {
    int32_t n_decodes = 0;   // chunks that were one decode token (with drafts or not)
    int64_t produced = 0;    // tokens sampled
    int64_t n_finished = 0;
    bool prompt_work = false;  // a chunk carried prompt (or recompute) tokens
    int32_t n_verified = 0;    // chunks that verified proposals
    std::vector<int32_t> advanced;  // [chunks] tokens each chunk's n_computed moved by
  };
  // What sample() drew: chunk i's tokens are tokens[rows_[i] .. rows_[i] + count[i]).
  struct Sampled {
    std::vector<int32_t> tokens;  // [logit rows]
    std::vector<int32_t> count;   // [chunks]
  };
  // The phases of step(), in order.
  SchedulerOutput schedule();
  void speculate(SchedulerOutput& so);
  // Jump-forward: where a constrained sequence's grammar forces the next bytes, they are
  // its draft this step (the longest tokens that spell them), verified like any other:
  // the output is token-by-token decoding's, in fewer steps where the model takes the
  // same tokens. Needs no speculative method; goes before any proposer.
  void jump_forward(SchedulerOutput& so);
  static constexpr int32_t kMaxJump = 16;  // forced tokens run in one step, at most
  void move_kv(const SchedulerOutput& so);
  std::span<const float> execute(const SchedulerOutput& so);
  void score_prompts(const SchedulerOutput& so, std::span<const float> logits);
  Sampled sample(const SchedulerOutput& so, std::span<const float> logits);
  std::vector<TokenEvent> postprocess(const SchedulerOutput& so, const Sampled& sampled, StepTally& t);
  void account(const SchedulerOutput& so, const StepTally& t, double seconds);
  void finish(Sequence* s, const char* reason);
  // Draws chunk i's tokens: one row, or a verified proposal's rows while they agree.
  int32_t sample_chunk(const ScheduledChunk& c, const float* logits, int32_t* out, int thread);
  bool stops(const Sequence& s, int32_t tok) const;  // EOS (unless ignored) or a stop id
  static void think_init(Sequence& s);               // the thinking budget's first state
  static void think_step(Sequence& s, int32_t tok);  // ... after a drawn token
  void on_verified(Sequence* s, int32_t n_draft, int32_t n_accepted);
  bool probe(const SchedulerOutput& so, int32_t n_decodes, const std::vector<int32_t>& avail,
             const std::vector<bool>& deferred, std::vector<int32_t>& take);  // whether it added a token to verify
  void ask_costly(const SchedulerOutput& so, const std::vector<Proposer*>& later, std::vector<int32_t>& take);
  int32_t ask_cheap(Sequence& s, Proposer* p, int32_t n, std::vector<float>* confidence);
  const SpeculativeConfig& spec_config(const Sequence& s) const;
  Proposer* proposer(SpecMethod m) const;  // null for Ngram (made per request) and None
  void time_target_rows();
  std::vector<bool> dear_asks(const SchedulerOutput& so, int32_t n_decodes, const std::vector<int32_t>& want) const;
  void make_suffix();
  void retire(const Sequence& s, bool learn);  // tell the proposers a sequence ended

  // A constrained sequence's proposal cut to what its grammar allows.
  int32_t grammar_prefix(Sequence& s, int32_t take);

  const Model& model_;
  const Tokenizer* tok_;
  mutable std::shared_ptr<const grammar::TokenTrie> trie_;
  EngineConfig cfg_;
  int32_t spec_depth_cap_ = 0;  // set_spec_depth_cap
  ThreadPool pool_;
  std::unique_ptr<BlockManager> bm_;
  std::unique_ptr<RadixCache> radix_;
  std::unique_ptr<Cost> cost_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<ModelRunner> runner_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> seqs_;
  int64_t next_id_ = 1;
  int64_t n_unfinished_ = 0;
  uint64_t arrivals_ = 0;
  double prefill_s_per_token_ = 1e-3;  // measured; feeds the recompute-or-swap choice
  SpecPolicy spec_policy_;
  double probe_credit_ = 0;
  static constexpr double kSpecProbeShare = 0.01;  // of the decode time that probes may take
  static constexpr double kSpecRepaySteps = 16;    // dear_asks: steps to repay a catch-up
  Proposer* external_ = nullptr;
  std::unique_ptr<SuffixProposer> suffix_;
  std::unique_ptr<Model> draft_model_;
  std::unique_ptr<DraftModelProposer> draft_;  // declared after pool_ and draft_model_: destroyed before them
  double draft_catchup_s_ = 0;  // of this step
  // With a draft model: what a verified row adds to a one-row step at least, timed at
  // load (time_target_rows).
  double target_row_s_ = 0;
  double propose_s_ = 0;        // of this step
  EngineStats stats_;
  std::vector<int32_t> rows_;
  std::vector<int32_t> swap_pages_;  // a swap-in's pages (scratch)
  std::vector<int32_t> prompt_rows_;  // [chunks] the first of a scored prompt chunk's rows, or -1
  std::vector<double> grammar_s_;          // per pool thread: this step's time in grammar masks and accepts
  std::vector<std::vector<float>> raw_;  // per pool thread: [n_vocab] a logit row before sampling, for logprobs
};

}  // namespace ridge
