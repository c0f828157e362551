// Token sampling from one row of logits: penalties, then greedy or
// top-k -> temperature softmax -> top-p -> min-p -> a seeded draw. Deterministic across
// platforms and standard libraries: the RNG is std::mt19937_64 (fully specified by the
// standard) and the uniform variate is built from its bits, not by a distribution class.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace ridge {

struct SamplingParams {
  float temperature = 0.8f;         // <= 0 means greedy
  int32_t top_k = 40;               // <= 0: off
  float top_p = 0.95f;              // >= 1: off
  float min_p = 0.05f;              // <= 0: off
  float repetition_penalty = 1.0f;  // llama.cpp/HF style: logit>0 ? logit/p : logit*p, on tokens in the window
  int32_t penalty_last_n = 64;      // the window: the last n tokens of history; 0: no penalties; < 0: all history
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // OpenAI style: -= presence + count*frequency
  uint64_t seed = 0;                // the per-sequence RNG seed
  std::vector<std::pair<int32_t, float>> logit_bias;  // (id, bias) added after the penalties (OpenAI logit_bias)
};

class Sampler {
 public:
  Sampler(const SamplingParams& p, int32_t n_vocab);

  // logits[n_vocab] may be modified in place (penalties); history = previous tokens
  // (prompt + generated) for the penalties. Returns the chosen token id.
  int32_t sample(float* logits, std::span<const int32_t> history);

  const SamplingParams& params() const { return p_; }

 private:
  void apply_penalties(float* logits, std::span<const int32_t> history);
  double uniform01();  // [0, 1) with 53 random bits

  SamplingParams p_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  struct Cand {
    float logit;
    float p;  // exp((logit - max) / T): unnormalized, the max is 1
    int32_t id;
  };
  std::vector<Cand> cand_;  // reused between calls
  std::vector<std::pair<int32_t, int32_t>> counts_;  // penalty window: (id, occurrences)
};

// One generated token's log-probabilities under the model's raw distribution (before
// penalties, bias and temperature, as vLLM reports them by default).
struct TokenLogprobs {
  float logprob = 0;                          // of the chosen token
  int32_t rank = 1;                           // 1 + the tokens more likely than it
  std::vector<std::pair<int32_t, float>> top; // the k most likely (id, logprob), most likely first
};
// log-softmax of logits[n] at `chosen`, plus the top k; ties in the top k by lower id.
TokenLogprobs token_logprobs(const float* logits, int32_t n, int32_t chosen, int32_t k);

// The index of the largest logit, the lowest index on ties (NaN never wins).
int32_t argmax(const float* logits, int32_t n);
// logit[best] - logit[second best]: how decided a greedy choice is (+inf when n < 2).
float top2_margin(const float* logits, int32_t n);

}  // namespace ridge
