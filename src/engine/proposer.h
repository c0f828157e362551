// Speculative decoding's proposers: what might follow a sequence, guessed cheaply, for
// the target model to verify in one forward pass (engine.cpp, Engine::speculate).
//
// Every proposer is deterministic: a proposal is a token list, not a distribution. The
// engine verifies row by row with the sequence's own sampler and keeps a draft token
// only when the sampler drew exactly it; the first draw that differs is kept as the
// correction. With a one-hot proposal distribution that is exactly rejection sampling
// (accept with min(1, p/q) = p(draft), resample from the normalized residual p without
// the draft), and since each produced token is one draw from the same logits with the
// same history and RNG as without speculation, the output is token for token the one
// decoding without it gives, greedy or sampled, seeded or not.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Appends to out up to max_tokens tokens guessed to follow `tokens` (prompt and
  // generated tokens; the last is the one the step runs). May append none.
  virtual void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const = 0;
};

// Prompt lookup (vLLM's "ngram"): the last n tokens, n from max_n down to min_n, found
// earlier in the sequence's own prompt and output; what followed the latest such match
// is the proposal. No model, no state.
class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n);
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const override;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace ridge
