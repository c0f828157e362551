// ridge bench throughput: offline throughput of the engine (all requests submitted at
// once, as vLLM's throughput benchmark does) on synthetic prompts of random token ids;
// --prefix-len P makes the first P tokens of every prompt identical.
#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"

namespace ridge::cli {
namespace {

int bench_throughput(Args& a) {
  const std::string path = resolve_model(a);
  const int64_t n = a.integer({"--num-prompts"}, 64, 1, 1 << 20);
  const int64_t in_len = a.integer({"--input-len"}, 128, 1, 1 << 20);
  const int64_t out_len = a.integer({"--output-len"}, 128, 1, 1 << 20);
  const int64_t prefix = a.integer({"--prefix-len"}, 0, 0, 1 << 20);
  const uint64_t seed = uint64_t(a.integer({"--seed"}, 0, 0, INT64_MAX));
  const bool json = a.flag({"--json"});
  EngineConfig cfg = engine_config(a);
  a.finish();
  if (prefix > in_len) fail("--prefix-len {} exceeds --input-len {}", prefix, in_len);

  auto model = Model::load(path);
  const int32_t n_vocab = model->hparams().n_vocab;
  std::mt19937_64 rng(seed);
  auto tok = [&] { return int32_t(3 + rng() % uint64_t(std::max(1, n_vocab - 3))); };
  std::vector<int32_t> shared(static_cast<size_t>(prefix));
  for (auto& t : shared) t = tok();
  Engine e(*model, nullptr, cfg);
  RequestParams p;
  p.max_tokens = int32_t(out_len);
  p.ignore_eos = true;
  p.sampling.temperature = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> prompt = shared;
    while (int64_t(prompt.size()) < in_len) prompt.push_back(tok());
    e.add_request(std::move(prompt), p);
  }
  while (e.has_work()) e.step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats& st = e.stats();
  const double mean_batch = st.steps ? double(st.batched_seqs) / double(st.steps) : 0;
  const double hit = st.prompt_tokens ? double(st.prefix_hit_tokens) / double(st.prompt_tokens) : 0;
  if (json) {
    std::printf(
        "{\"model\":\"%s\",\"num_prompts\":%lld,\"input_len\":%lld,\"output_len\":%lld,\"prefix_len\":%lld,"
        "\"prefix_cache\":%s,\"threads\":%d,\"elapsed_s\":%.4f,\"requests_per_s\":%.4f,\"output_tok_per_s\":%.3f,"
        "\"total_tok_per_s\":%.3f,\"mean_batch\":%.3f,\"prefix_hit_rate\":%.4f,\"computed_tokens\":%lld,"
        "\"preemptions\":%lld,\"swaps\":%lld,\"steps\":%lld,\"kv_capacity_tokens\":%lld}\n",
        path.c_str(), (long long)n, (long long)in_len, (long long)out_len, (long long)prefix,
        cfg.prefix_cache ? "true" : "false", e.pool().size(), s, double(n) / s, double(st.generated_tokens) / s,
        double(st.prompt_tokens + st.generated_tokens) / s, mean_batch, hit, (long long)st.computed_tokens,
        (long long)e.n_preemptions(), (long long)e.n_swaps(), (long long)st.steps, (long long)e.kv_capacity_tokens());
  } else {
    std::printf("model %s, %lld prompts x (%lld in, %lld out), shared prefix %lld, prefix cache %s, %d threads\n",
                path.c_str(), (long long)n, (long long)in_len, (long long)out_len, (long long)prefix,
                cfg.prefix_cache ? "on" : "off", e.pool().size());
    std::printf("elapsed          %.3f s\n", s);
    std::printf("requests/s       %.3f\n", double(n) / s);
    std::printf("output tok/s     %.2f\n", double(st.generated_tokens) / s);
    std::printf("total tok/s      %.2f\n", double(st.prompt_tokens + st.generated_tokens) / s);
    std::printf("mean batch       %.2f sequences/step (%lld steps)\n", mean_batch, (long long)st.steps);
    std::printf("prefix hit rate  %.1f%% (%lld of %lld prompt tokens; %lld tokens computed)\n", 100 * hit,
                (long long)st.prefix_hit_tokens, (long long)st.prompt_tokens, (long long)st.computed_tokens);
    std::printf("preemptions      %lld (%lld by swap)\n", (long long)e.n_preemptions(), (long long)e.n_swaps());
    std::printf("KV pool          %lld tokens\n", (long long)e.kv_capacity_tokens());
  }
  return 0;
}

}  // namespace

int cmd_bench(Args& a) {
  const auto sub = a.subcommand();
  if (!sub) fail("usage: ridge bench throughput [options] (see ridge --help)");
  if (*sub == "throughput") return bench_throughput(a);
  fail("unknown benchmark '{}' (throughput)", *sub);
}

}  // namespace ridge::cli
