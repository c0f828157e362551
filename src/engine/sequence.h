// One request as the engine sees it: its tokens, how many of them have K/V in the cache,
// the KV blocks it holds, and its sampling state. The scheduler moves it between states;
// the model runner reads its block table; nobody else touches it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/config.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ridge {

enum class SeqStatus { Waiting, Running, Swapped, Finished };

// A reasoning model's thinking held to a number of tokens: once that many have been
// drawn inside the thinking, the tokens that close it are forced (the model then answers
// from what it has thought so far, as Qwen3's and vLLM's budgets do).
struct ThinkingBudget {
  int32_t budget = -1;          // tokens inside the thinking; < 0: no limit
  bool inside = false;          // the prompt opened the thinking (DeepSeek-R1's templates)
  std::vector<int32_t> open;    // the tokens that open it (`<think>`)
  std::vector<int32_t> end;     // the tokens that close it (`</think>`): the model's own close
  std::vector<int32_t> force;   // what is forced at the budget (`\n</think>\n\n`)
};

struct RequestParams {
  SamplingParams sampling;
  int32_t max_tokens = 64;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int32_t priority = 0;          // lower runs first
  bool capture_logits = false;   // keep each step's logits (tests)
  bool margins = false;          // record each step's top-2 logit margin (the oracle's tie check)
  int32_t logprobs = -1;         // >= 0: record each token's logprob and this many top alternatives
  // >= 0: the logprob of every prompt token after the first (and this many alternatives),
  // from logit rows of the prefill; the prefix cache is not consulted for such a request
  // (a cached prefix has no logits). With max_tokens 0 the request ends after its prompt.
  int32_t prompt_logprobs = -1;
  // Speculative decoding for this request: a method (None: off) and the most tokens
  // proposed per step; unset, the engine's configuration decides.
  std::optional<SpeculativeConfig> speculative;
  // Structured output: every generated token must keep the text inside this grammar
  // (grammar/grammar.h); null: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  ThinkingBudget thinking;
};

struct Sequence {
  Sequence(int64_t id, std::vector<int32_t> prompt, const RequestParams& p, int32_t n_vocab, uint64_t arrival)
      : id(id), tokens(std::move(prompt)), n_prompt(int32_t(tokens.size())), params(p),
        sampler(p.sampling, n_vocab), arrival(arrival) {}

  int64_t id;
  std::vector<int32_t> tokens;   // prompt + generated
  int32_t n_prompt;
  // Multi-head latent attention: positions below this run attention in the expanded form
  // (model/mla_form.h), the rest absorbed; the prompt's length or 0, fixed at arrival so
  // that a recompute after a preemption computes every position as the first time did.
  int32_t n_expand = 0;
  RequestParams params;
  Sampler sampler;
  uint64_t arrival;              // admission order (FCFS tie-break)
  // The grammar's state after the generated tokens (params.grammar; made by the engine).
  std::unique_ptr<grammar::Matcher> matcher;

  SeqStatus status = SeqStatus::Waiting;
  int32_t n_computed = 0;        // tokens whose K/V are in the cache (prefix hits included)
  BlockTable blocks;
  int32_t n_prefix_hit = 0;      // prompt tokens served by the prefix cache (last admission)
  int32_t n_preemptions = 0;
  std::vector<int32_t> swap_src;  // pages to copy out (already freed) this step
  std::vector<int64_t> swap_slots;  // where its KV lives in the swap space while Swapped
  int32_t n_inserted_blocks = 0; // full blocks already recorded in the prefix cache
  uint64_t waiting_since_step = 0;  // for priority aging
  std::string finish_reason;     // "stop", "length", "abort"
  std::vector<float> margins;    // top-2 logit margin per generated token (params.margins)
  std::vector<float> logits;     // [generated][n_vocab] when params.capture_logits
  std::vector<TokenLogprobs> logprobs;  // [generated] when params.logprobs >= 0
  std::vector<TokenLogprobs> prompt_logprobs;  // [n_prompt - 1]: prompt tokens 1.. (params.prompt_logprobs)

  // Speculative decoding: this step's proposal (the tokens after the pending one, run
  // with it and verified), the most to propose (0: the request does not speculate), the
  // decaying counts of accepted draft tokens and of rejections (its acceptance per
  // token, SpecPolicy), and the totals.
  std::vector<int32_t> draft;
  int32_t spec_k = 0;
  double spec_acc = 0, spec_rej = 0;
  int32_t spec_idle = 0;  // decode steps with a proposal not worth a row since it last verified one
  // A cheap proposal not taken, scored against the tokens that follow (Engine::score_shadow):
  // its tokens and how many of them matched so far.
  std::vector<int32_t> spec_shadow;
  int32_t spec_shadow_ok = 0;
  int32_t spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // The draft is the span the grammar forces (jump-forward), not a proposer's guess; the
  // decaying counts of its tokens the model took and of its spans cut short.
  bool draft_forced = false;
  // Thinking budget (params.thinking): where the output stands, the tokens thought so
  // far, and how many of the forced close have been drawn.
  enum class Think : uint8_t { Before, Inside, Forcing, Done } think = Think::Before;
  int32_t think_tokens = 0, think_forced = 0;
  double jump_acc = 0, jump_rej = 0;

  // Attribution: this sequence's share of each step it rode in (the step's time x its
  // tokens / the step's tokens), by kind of work. Recompute is prompt or generated tokens
  // run again after a preemption dropped their KV.
  double prefill_share_s = 0, decode_share_s = 0, recompute_share_s = 0;
  int32_t max_computed = 0;      // high-water mark of n_computed (what recompute re-runs)

  int32_t n_generated() const { return int32_t(tokens.size()) - n_prompt; }
  // Tokens still to run through the model: the prompt (or, after a preemption by
  // recompute, prompt + generated) and then one per decode step.
  int32_t pending() const { return int32_t(tokens.size()) - n_computed; }
  bool finished() const { return status == SeqStatus::Finished; }
  // Prompt positions still to be scored (params.prompt_logprobs): their prefill needs a
  // logit row per token.
  bool needs_prompt_logits() const {
    return params.prompt_logprobs >= 0 && int32_t(prompt_logprobs.size()) < n_prompt - 1;
  }
};

}  // namespace ridge
