#include "model/perplexity.h"

#include <cmath>

#include "core/error.h"
#include "core/progress.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace ridge {

PerplexityResult perplexity(const Model& m, ThreadPool& pool, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& o, const std::function<void(int64_t, double)>& on_chunk) {
  const HParams& h = m.hparams();
  RIDGE_CHECK(o.n_ctx >= 8, "perplexity context {} is too small (at least 8)", o.n_ctx);
  RIDGE_CHECK(o.batch_tokens > 0, "perplexity batch must be positive");
  if (int64_t(tokens.size()) < 2 * o.n_ctx)
    fail("the text has {} tokens; at least 2 x ctx = {} are needed (use a smaller context)", tokens.size(), 2 * o.n_ctx);
  KVLayout kl = kv_layout_for(h, o.block_size, int32_t((o.n_ctx + o.block_size - 1) / o.block_size), o.kv_dtype);
  KVCache kv(kl);
  // One window at a time, always from position 0: the same blocks serve every window.
  std::vector<int32_t> table(size_t(kl.n_blocks));
  for (int32_t b = 0; b < kl.n_blocks; ++b) table[size_t(b)] = b;
  const auto backend = kernels::make_cpu_backend(pool);
  Forward fwd(m, kv, *backend);

  PerplexityResult r;
  r.n_chunks = int64_t(tokens.size()) / o.n_ctx;
  const int64_t first = o.n_ctx / 2;
  double nll = 0, nll2 = 0;
  std::vector<float> logits;  // [n_ctx][n_vocab]
  Progress progress("perplexity", r.n_chunks * o.n_ctx, "tokens");
  // A window is a prompt: latent attention runs it in the form a prompt of its length
  // would (model/mla_form.h).
  const int32_t expand = mla_expand_until(h, mla_types(m, o.kv_dtype), o.mla_prefill, int32_t(o.n_ctx), o.block_size);
  for (int64_t c = 0; c < r.n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * o.n_ctx, tokens.begin() + (c + 1) * o.n_ctx);
    if (o.bos >= 0) chunk[0] = o.bos;
    logits.clear();
    for (int64_t p = 0; p < o.n_ctx; p += o.batch_tokens) {
      const int64_t n = std::min<int64_t>(o.batch_tokens, o.n_ctx - p);
      Batch b;
      b.add(std::span<const int32_t>(chunk).subspan(size_t(p), size_t(n)), int32_t(p), table, Logits::All, expand);
      const auto lg = fwd.run(b);
      logits.insert(logits.end(), lg.begin(), lg.end());
    }
    for (int64_t j = first; j < o.n_ctx - 1; ++j) {
      const float* row = logits.data() + j * h.n_vocab;
      double mx = row[0];
      for (int32_t v = 1; v < h.n_vocab; ++v) mx = std::max(mx, double(row[v]));
      double se = 0;
      for (int32_t v = 0; v < h.n_vocab; ++v) se += std::exp(double(row[v]) - mx);
      const int32_t next = tokens[size_t(c * o.n_ctx + j + 1)];
      if (o.on_scored) o.on_scored(std::span<const float>(row, size_t(h.n_vocab)), next);
      const double l = -(double(row[next]) - mx - std::log(se));
      nll += l;
      nll2 += l * l;
      ++r.n_scored;
    }
    progress.set_detail(fmt::format("chunk {}/{}, ppl {:.4f}", c + 1, r.n_chunks, std::exp(nll / double(r.n_scored))));
    progress.add(o.n_ctx);
    if (on_chunk) on_chunk(c, std::exp(nll / double(r.n_scored)));
  }
  const double mean = nll / double(r.n_scored);
  const double var = std::max(0.0, nll2 / double(r.n_scored) - mean * mean);
  r.ppl = std::exp(mean);
  r.ppl_err = r.n_scored > 1 ? r.ppl * std::sqrt(var / double(r.n_scored - 1)) : 0;
  return r;
}

}  // namespace ridge
