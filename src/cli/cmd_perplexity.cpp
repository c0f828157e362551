// ridge perplexity: llama-perplexity's measure. The text is cut into windows of CTX
// tokens (BOS replacing each window's first token when the model adds BOS); each window
// is evaluated from an empty cache and scored on its second half only, so every scored
// token has at least CTX/2 tokens of context. PPL = exp(mean negative log-likelihood).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {

int cmd_perplexity(Args& a) {
  const std::string path = resolve_model(a);
  auto file = a.str({"-f", "--file"});
  const int64_t n_ctx_arg = a.integer({"-c", "--ctx-size"}, 0, 0, 1 << 20);
  GenOptions opt = gen_options(a);
  a.finish();
  if (!file) fail("perplexity needs -f TEXT_FILE");
  std::ifstream in(*file, std::ios::binary);
  if (!in) fail("cannot read {}", *file);
  std::stringstream ss;
  ss << in.rdbuf();

  auto model = Model::load(path);
  auto tok = Tokenizer::from_gguf(model->file());
  const HParams& h = model->hparams();
  const int64_t n_ctx = n_ctx_arg > 0 ? n_ctx_arg : std::min<int64_t>(h.n_ctx_train, 512);
  RIDGE_CHECK(n_ctx >= 8, "context {} is too small (at least 8)", n_ctx);
  const std::vector<int32_t> tokens = tok->encode(ss.str(), tok->add_bos());
  if (int64_t(tokens.size()) < 2 * n_ctx)
    fail("{} has {} tokens; at least 2 x ctx = {} are needed (use a smaller -c)", *file, tokens.size(), 2 * n_ctx);
  const int64_t n_chunks = int64_t(tokens.size()) / n_ctx;

  ThreadPool pool(opt.threads > 0 ? opt.threads : default_thread_count());
  KVLayout kl{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, opt.block_size,
              int32_t((n_ctx + opt.block_size - 1) / opt.block_size), opt.kv_dtype};
  KVCache kv(kl);
  std::vector<int32_t> table(size_t(kl.n_blocks));
  for (int32_t b = 0; b < kl.n_blocks; ++b) table[size_t(b)] = b;
  Forward fwd(*model, kv, pool);

  const int64_t first = n_ctx / 2;
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "perplexity: %lld chunks of %lld tokens, scoring the second half of each\n",
               (long long)n_chunks, (long long)n_ctx);
  std::vector<double> lp(size_t(h.n_vocab));
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (tok->add_bos()) chunk[0] = tok->bos();
    // Batches of at most -b tokens; the positions continue through the same blocks.
    std::vector<float> logits;
    for (int64_t p = 0; p < n_ctx; p += opt.max_batch_tokens) {
      const int64_t n = std::min<int64_t>(opt.max_batch_tokens, n_ctx - p);
      Batch b;
      b.add(std::span<const int32_t>(chunk).subspan(size_t(p), size_t(n)), int32_t(p), table, Logits::All);
      auto lg = fwd.run(b);
      logits.insert(logits.end(), lg.begin(), lg.end());
    }
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      const float* row = logits.data() + j * h.n_vocab;
      double mx = row[0];
      for (int32_t v = 1; v < h.n_vocab; ++v) mx = std::max(mx, double(row[v]));
      double se = 0;
      for (int32_t v = 0; v < h.n_vocab; ++v) se += std::exp(double(row[v]) - mx);
      const double l = -(double(row[tokens[size_t(c * n_ctx + j + 1)]]) - mx - std::log(se));
      nll += l;
      nll2 += l * l;
      ++count;
    }
    std::fprintf(stdout, "[%lld]%.4f%s", (long long)(c + 1), std::exp(nll / double(count)), c + 1 < n_chunks ? "," : "\n");
    std::fflush(stdout);
  }
  const double mean = nll / double(count);
  const double var = nll2 / double(count) - mean * mean;
  const double err = std::exp(mean) * std::sqrt(std::max(0.0, var) / double(count - 1));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", std::exp(mean), err);
  std::fprintf(stderr, "%lld tokens scored in %.2f s (%.1f tok/s evaluated)\n", (long long)count, secs,
               double(n_chunks * n_ctx) / secs);
  return 0;
}

}  // namespace ridge::cli
