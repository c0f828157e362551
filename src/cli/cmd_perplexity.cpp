// ridge perplexity -m MODEL -f TEXT [-c CTX] [--kl-divergence-base FILE [--kl-divergence]]:
// see model/perplexity.h and model/kl_divergence.h for the method.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/kl_divergence.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {

int cmd_perplexity(Args& a) {
  const std::string path = resolve_model(a);
  auto file = a.str({"-f", "--file"});
  const int64_t n_ctx_arg = a.integer({"-c", "--ctx-size"}, 0, 0, 1 << 20);
  // llama-perplexity's pair: --kl-divergence-base FILE alone writes the reference's
  // log-probabilities; with --kl-divergence it compares this run against them.
  const auto kl_base = a.str({"--kl-divergence-base"});
  const bool kl = a.flag({"--kl-divergence"});
  GenOptions opt;
  forward_config(a, opt);
  a.finish();
  if (!file) fail("perplexity needs -f TEXT_FILE");
  if (kl && !kl_base) fail("--kl-divergence needs --kl-divergence-base FILE (written by a first run without --kl-divergence)");
  std::ifstream in(*file, std::ios::binary);
  if (!in) fail("cannot read {}", *file);
  std::stringstream ss;
  ss << in.rdbuf();

  prepare_kernels();

  auto model = Model::load(path);
  auto tok = load_tokenizer(path, *model);
  const std::vector<int32_t> tokens = tok->encode(ss.str(), tok->add_bos());
  PerplexityOptions po;
  po.n_ctx = n_ctx_arg > 0 ? n_ctx_arg : std::min<int64_t>(model->hparams().n_ctx_train, 512);
  po.batch_tokens = opt.max_num_batched_tokens;
  po.block_size = opt.block_size;
  po.kv_dtype = opt.kv_dtype;
  po.mla_prefill = opt.mla_prefill;
  po.bos = tok->add_bos() ? tok->bos() : -1;
  if (int64_t(tokens.size()) < 2 * po.n_ctx)
    fail("{} has {} tokens; at least 2 x ctx = {} are needed (use a smaller -c)", *file, tokens.size(), 2 * po.n_ctx);
  std::unique_ptr<KlBaseWriter> writer;
  std::unique_ptr<KlComparison> compare;
  const int32_t n_vocab = model->hparams().n_vocab;
  if (kl_base && kl) {
    compare = std::make_unique<KlComparison>(*kl_base, n_vocab, po.n_ctx, tokens);
    po.on_scored = [&](std::span<const float> row, int32_t next) { compare->add(row, next); };
  } else if (kl_base) {
    writer = std::make_unique<KlBaseWriter>(*kl_base, n_vocab, po.n_ctx, tokens);
    po.on_scored = [&](std::span<const float> row, int32_t) { writer->add(row); };
  }
  ThreadPool pool(opt.threads > 0 ? opt.threads : default_thread_count());
  std::fprintf(stderr, "perplexity: %zu tokens, windows of %lld, scoring the second half of each\n", tokens.size(),
               (long long)po.n_ctx);
  const auto t0 = std::chrono::steady_clock::now();
  const PerplexityResult r = perplexity(*model, pool, tokens, po, [](int64_t c, double ppl) {
    std::printf("[%lld]%.4f,", (long long)(c + 1), ppl);
    std::fflush(stdout);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  if (writer) {
    writer->finish();
    std::fprintf(stderr, "KL-divergence base: %lld rows of %d log-probabilities in %s\n", (long long)r.n_scored, n_vocab,
                 kl_base->c_str());
  }
  if (compare) std::printf("%s", format_kl_report(compare->report()).c_str());
  std::fprintf(stderr, "%lld tokens scored in %.2f s (%.1f tok/s evaluated)\n", (long long)r.n_scored, secs,
               double(r.n_chunks * po.n_ctx) / secs);
  return 0;
}

}  // namespace ridge::cli
