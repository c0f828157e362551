// Runs a set of requests to completion through the engine (continuous batching, paged
// KV, prefix cache, preemption): the path `generate` uses for one prompt or a file of
// them, and the tests for many.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "model/model.h"

namespace ridge {

class Tokenizer;

// The engine's configuration (engine/config.h, one vocabulary for every driver) plus what
// a run to completion adds. Its defaults differ from the server's in two places: the
// token budget (a chunk of 512 suits one user) and the pool (sized to the requests).
struct GenOptions : EngineConfig {
  GenOptions() { max_num_batched_tokens = 512; }
  int64_t kv_tokens = 0;            // KV pool capacity in tokens; 0: see pool_for_requests
  // With neither kv_tokens nor kv_cache_bytes: true sizes the pool to what the requests
  // need, false leaves it to mem_fraction as the server does.
  bool pool_for_requests = true;
  std::function<void(const Engine&)> on_engine;  // called once the engine is built (budget lines)
};

struct GenRequest {
  std::vector<int32_t> prompt;      // token ids, BOS included when wanted
  int32_t max_tokens = 64;
  SamplingParams sampling;
  bool ignore_eos = false;
  bool capture_logits = false;      // keep every step's logits (tests)
  bool margins = true;              // record each step's top-2 logit margin
  int32_t priority = 0;
  std::shared_ptr<const grammar::Grammar> grammar;  // structured output (null: none)
};

struct GenResult {
  std::vector<int32_t> tokens;      // generated ids
  std::vector<float> margins;       // top-2 logit margin of each step
  std::vector<float> logits;        // [tokens][n_vocab] when captured
  std::string finish_reason;        // "stop" (EOS) or "length"
  double ttft_s = 0;                // from run() start to the first token
  int32_t prefix_hit_tokens = 0;
  int32_t preemptions = 0;
};

struct GenStats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double prefill_s = 0;             // steps that carried prompt tokens
  double decode_s = 0;              // steps with decodes only
  int64_t decode_tokens = 0;        // tokens produced by decode-only steps
  int64_t steps = 0;
  int64_t computed_tokens = 0;      // tokens run through the model (recompute included)
  int64_t prefix_hit_tokens = 0;
  int64_t preemptions = 0, swaps = 0;
  int64_t evicted_blocks = 0;       // prefix-cache blocks evicted under pressure
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;  // speculative decoding
  int64_t grammar_tokens = 0;       // structured output: tokens drawn under a grammar
  double grammar_s = 0;             // and their masks' and accepts' time, over all threads
  int64_t jump_drafts = 0, jump_tokens = 0, jump_accepted = 0;  // forced spans verified as drafts
  double mean_batch = 0;            // sequences per step
  double wall_s = 0;
};

class Generator {
 public:
  Generator(const Model& model, const Tokenizer* tok, const GenOptions& opt);
  ~Generator();

  using OnToken = std::function<void(size_t request, int32_t token)>;
  std::vector<GenResult> run(const std::vector<GenRequest>& reqs, const OnToken& on_token = {});

  const GenStats& stats() const { return stats_; }
  int threads() const { return threads_; }

 private:
  const Model& model_;
  const Tokenizer* tok_;
  GenOptions opt_;
  int threads_;
  GenStats stats_;
};

}  // namespace ridge
