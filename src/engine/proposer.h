// Speculative decoding's proposers: what might follow a sequence, guessed cheaply, for
// the target model to verify in one forward pass (engine.cpp, Engine::speculate).
//
// Every proposer is deterministic: a proposal is a token list, not a distribution (the
// draft model drafts greedily). The engine verifies row by row with the sequence's own
// sampler and keeps a draft token only when the sampler drew exactly it; the first draw
// that differs is kept as the correction. With a one-hot proposal distribution that is
// exactly rejection sampling (accept with min(1, p/q) = p(draft), resample from the
// normalized residual p without the draft), and since each produced token is one draw
// from the same logits with the same history and RNG as without speculation, the output
// is token for token the one decoding without it gives, greedy or sampled, seeded or not.
//
// The proposers: prompt lookup (here), suffix decoding over all requests' text
// (suffix_proposer.h) and a draft model (draft_proposer.h).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

class Proposer {
 public:
  // One sequence's question: what follows `tokens` (prompt and generated tokens; the
  // last is the one the step runs)? Up to max_tokens tokens are appended to *out.
  struct Ask {
    int64_t seq;
    std::span<const int32_t> tokens;
    int32_t max_tokens;
    std::vector<int32_t>* out;
    // Where the proposer has a measure of its own: one entry per proposed token, the
    // chance that it and every token before it are right (suffix decoding's vote share).
    // The engine's policy weighs it with the sequence's measured acceptance. May be null.
    std::vector<float>* confidence = nullptr;
  };
  virtual ~Proposer() = default;
  // Every speculating sequence of a step at once (a draft model batches them).
  virtual void propose(std::span<const Ask> asks) = 0;
  // Proposing costs time per token (a draft model's forward passes): the engine decides
  // how many tokens a step verifies first and asks for that many. A proposer that is not
  // costly is asked for all it may propose, and what it finds informs that decision.
  virtual bool costly() const { return false; }
  // Seconds a proposal for this sequence would spend before its first token, beyond
  // the cost per token (a draft model catching up on text it has not seen): the engine
  // weighs it before probing a sequence it has not speculated on for a while.
  virtual double setup_seconds(int64_t /*seq*/, std::span<const int32_t> /*tokens*/) const { return 0; }
  // Seconds each proposed position costs a step that asks n_seqs sequences at once (a
  // draft model's forward over them), at least: the engine does not let a proposer whose
  // tokens cost as much as the target's own explore at all. 0 where it is negligible.
  virtual double token_seconds(int32_t /*n_seqs*/) const { return 0; }
  // A sequence ended; `tokens` are its prompt and output when it finished normally
  // (empty when aborted). Proposers that keep state per sequence drop it here.
  virtual void retire(int64_t /*seq*/, std::span<const int32_t> /*tokens*/) {}
};

// A proposer that looks at one sequence at a time.
class SequenceProposer : public Proposer {
 public:
  void propose(std::span<const Ask> asks) final {
    for (const Ask& a : asks) propose_one(a.tokens, a.max_tokens, *a.out);
  }
  virtual void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const = 0;
};

// Prompt lookup (vLLM's "ngram"): the last n tokens, n from max_n down to min_n, found
// earlier in the sequence's own prompt and output; what followed the latest such match
// is the proposal. No model, no state.
class NgramProposer final : public SequenceProposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n);
  void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const override;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace ridge
