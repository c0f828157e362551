// llama-perplexity's measure: the tokens are cut into windows of n_ctx; each window is
// evaluated from an empty cache (BOS replacing its first token when the model adds BOS)
// and scored on its second half only, so every scored token sees at least n_ctx/2 tokens
// of context. PPL = exp(mean negative log-likelihood).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "model/mla_form.h"
#include "model/model.h"

namespace ridge {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int32_t batch_tokens = 512;  // tokens per forward pass within a window
  int32_t block_size = 16;
  DType kv_dtype = DType::F16;
  MlaPrefill mla_prefill = MlaPrefill::Auto;  // latent attention: the form a window runs in
  int32_t bos = -1;            // replaces each window's first token when >= 0
  // Each scored row's logits [n_vocab] and the token that follows, in order (the
  // KL-divergence report, model/kl_divergence.h).
  std::function<void(std::span<const float>, int32_t)> on_scored;
};

struct PerplexityResult {
  double ppl = 0, ppl_err = 0;   // exp(mean NLL) and its standard error
  int64_t n_chunks = 0, n_scored = 0;
};

// on_chunk(chunk, running ppl) after each window. Throws ridge::Error when there are
// fewer than 2 * n_ctx tokens.
PerplexityResult perplexity(const Model& m, ThreadPool& pool, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& o, const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace ridge
