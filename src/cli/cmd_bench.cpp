// ridge bench throughput: offline throughput of the engine (all requests submitted at
// once, as vLLM's throughput benchmark does) on synthetic prompts of random token ids;
// --prefix-len P makes the first P tokens of every prompt identical.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/engine.h"
#include "model/model.h"
#include "kernels/cuda/cuda_backend.h"
#include "tools/bench_backend.h"
#include "tools/bench_compare.h"
#include "tools/bench_grammar.h"
#include "tools/bench_kernels.h"
#include "tools/bench_serve.h"
#include "tools/bench_spec.h"
#include "gguf/gguf.h"
#include "perf/peaks.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "perf/tracer.h"

namespace ridge::cli {
namespace {

int bench_throughput(Args& a) {
  apply_config_file(a);
  const std::string path = resolve_model(a);
  const int64_t n = a.integer({"--num-prompts"}, 64, 1, 1 << 20);
  const int64_t in_len = a.integer({"--input-len"}, 128, 1, 1 << 20);
  const int64_t out_len = a.integer({"--output-len"}, 128, 1, 1 << 20);
  const int64_t prefix = a.integer({"--prefix-len"}, 0, 0, 1 << 20);
  const uint64_t seed = uint64_t(a.integer({"--seed"}, 0, 0, INT64_MAX));
  const bool json = a.flag({"--json"});
  const double price = a.number({"--price-per-hour"}, 0, 0, 1e9);
  const auto peaks_file = a.str({"--peaks"});
  const bool op_timing = a.flag({"--op-timing"});  // time every op (what ridge roofline does): its cost
  EngineConfig cfg = engine_config(a);
  const auto trace = a.str({"--trace"});
  a.finish();
  if (prefix > in_len) fail("--prefix-len {} exceeds --input-len {}", prefix, in_len);
  perf::TraceSession trace_session(trace, "bench");

  auto model = load_model_for(path, cfg);
  const int32_t n_vocab = model->hparams().n_vocab;
  std::mt19937_64 rng(seed);
  auto tok = [&] { return int32_t(3 + rng() % uint64_t(std::max(1, n_vocab - 3))); };
  std::vector<int32_t> shared(static_cast<size_t>(prefix));
  for (auto& t : shared) t = tok();
  Engine e(*model, nullptr, cfg);
  e.op_profile().timing = op_timing;
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
  // KV pool use: the peak over steps of blocks referenced (free excluded).
  int32_t kv_peak_blocks = 0;
  Progress progress("bench throughput", n * (in_len + out_len), "tokens");
  while (e.has_work()) {
    const int64_t computed = e.stats().computed_tokens;
    e.step();
    progress.add(e.stats().computed_tokens - computed);
    const KvUsage u = e.kv_usage(/*census=*/false);
    kv_peak_blocks = std::max(kv_peak_blocks, u.blocks_total - u.blocks_free);
  }
  progress.finish();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int32_t kv_total = e.kv_usage(false).blocks_total;
  const double kv_peak = kv_total ? double(kv_peak_blocks) / kv_total : 0;
  // Compute utilization: the time the run's useful operations would take at the peak of
  // the kernel class that ran each op, over the elapsed time (needs --peaks).
  const perf::OpProfile& prof = e.op_profile();
  double at_peak_s = 0, useful_flops = prof.total_flops();
  if (peaks_file) {
    const Peaks pk = load_peaks(*peaks_file);
    for (int i = 0; i < int(perf::Op::kCount); ++i) {
      const perf::OpStat& os = prof.op(perf::Op(i));
      const std::optional<ComputePeak>* peak = os.cls == perf::ComputeClass::Int8Vnni  ? &pk.int8_vnni
                                               : os.cls == perf::ComputeClass::Fp32Fma ? &pk.fp32_fma
                                               : os.cls == perf::ComputeClass::Fp16Fma ? &pk.fp16_fma
                                               : os.cls == perf::ComputeClass::Bf16Dot ? &pk.bf16_dot
                                                                                       : nullptr;
      if (peak && *peak && (*peak)->all > 0) at_peak_s += os.flops / ((*peak)->all * 1e9);
    }
  }
  const double compute_util = peaks_file && s > 0 ? at_peak_s / s : -1;
  const EngineStats& st = e.stats();
  const double mean_batch = st.steps ? double(st.batched_seqs) / double(st.steps) : 0;
  const double hit = st.prompt_tokens ? double(st.prefix_hit_tokens) / double(st.prompt_tokens) : 0;
  // Phase rates: decode-only steps, and steps with prompt work (all of their tokens, so a
  // step mixing a prompt chunk with decodes counts as prefill).
  const double decode_tps = st.decode_s > 0 ? double(st.decode_tokens) / st.decode_s : 0;
  const double prefill_tps = st.prefill_s > 0 ? double(st.computed_tokens - st.decode_tokens) / st.prefill_s : 0;
  const double out_tps = double(st.generated_tokens) / s, total_tps = double(st.prompt_tokens + st.generated_tokens) / s;
  // Cost per million tokens at --price-per-hour: the hour's price over an hour's tokens.
  const double cost_out = price > 0 && out_tps > 0 ? price / 3600.0 / out_tps * 1e6 : 0;
  const double cost_total = price > 0 && total_tps > 0 ? price / 3600.0 / total_tps * 1e6 : 0;
  const double rss = peak_rss_mib();
  // Speculative decoding as vLLM reports it: accepted / proposed tokens, and tokens per
  // verification (the pending token's plus the accepted ones).
  const double spec_rate = st.spec_draft_tokens ? double(st.spec_accepted_tokens) / double(st.spec_draft_tokens) : 0;
  const double spec_len = st.spec_drafts ? 1.0 + double(st.spec_accepted_tokens) / double(st.spec_drafts) : 0;
  if (json) {
    std::printf(
        "{\"model\":\"%s\",\"num_prompts\":%lld,\"input_len\":%lld,\"output_len\":%lld,\"prefix_len\":%lld,"
        "\"prefix_cache\":%s,\"threads\":%d,\"elapsed_s\":%.4f,\"requests_per_s\":%.4f,\"output_tok_per_s\":%.3f,"
        "\"total_tok_per_s\":%.3f,\"mean_batch\":%.3f,\"prefix_hit_rate\":%.4f,\"computed_tokens\":%lld,"
        "\"preemptions\":%lld,\"swaps\":%lld,\"steps\":%lld,\"kv_capacity_tokens\":%lld,\"prefill_tok_per_s\":%.3f,"
        "\"decode_tok_per_s\":%.3f,\"prefill_s\":%.4f,\"decode_s\":%.4f,\"kv_peak_usage\":%.4f,\"peak_rss_mib\":%.1f,"
        "\"useful_gflop\":%.3f,\"compute_utilization\":%.4f,\"price_per_hour\":%g,\"cost_per_m_output_tokens\":%.6f,"
        "\"cost_per_m_total_tokens\":%.6f,\"spec_draft_tokens\":%lld,\"spec_accepted_tokens\":%lld,"
        "\"spec_acceptance_rate\":%.4f,\"spec_mean_accepted_length\":%.4f}\n",
        path.c_str(), (long long)n, (long long)in_len, (long long)out_len, (long long)prefix,
        cfg.prefix_cache ? "true" : "false", e.pool().size(), s, double(n) / s, double(st.generated_tokens) / s,
        double(st.prompt_tokens + st.generated_tokens) / s, mean_batch, hit, (long long)st.computed_tokens,
        (long long)e.n_preemptions(), (long long)e.n_swaps(), (long long)st.steps, (long long)e.kv_capacity_tokens(),
        prefill_tps, decode_tps, st.prefill_s, st.decode_s, kv_peak, rss, useful_flops / 1e9, compute_util, price,
        cost_out, cost_total, (long long)st.spec_draft_tokens, (long long)st.spec_accepted_tokens, spec_rate, spec_len);
  } else {
    std::printf("model %s, %lld prompts x (%lld in, %lld out), shared prefix %lld, prefix cache %s, %d threads\n",
                path.c_str(), (long long)n, (long long)in_len, (long long)out_len, (long long)prefix,
                cfg.prefix_cache ? "on" : "off", e.pool().size());
    std::printf("elapsed          %.3f s\n", s);
    std::printf("requests/s       %.3f\n", double(n) / s);
    std::printf("output tok/s     %.2f\n", out_tps);
    std::printf("total tok/s      %.2f\n", total_tps);
    std::printf("prefill tok/s    %.2f (steps with prompt work, %.3f s)\n", prefill_tps, st.prefill_s);
    std::printf("decode tok/s     %.2f (decode-only steps, %.3f s)\n", decode_tps, st.decode_s);
    std::printf("mean batch       %.2f sequences/step (%lld steps)\n", mean_batch, (long long)st.steps);
    std::printf("prefix hit rate  %.1f%% (%lld of %lld prompt tokens; %lld tokens computed)\n", 100 * hit,
                (long long)st.prefix_hit_tokens, (long long)st.prompt_tokens, (long long)st.computed_tokens);
    std::printf("preemptions      %lld (%lld by swap)\n", (long long)e.n_preemptions(), (long long)e.n_swaps());
    if (st.spec_drafts > 0)
      std::printf("speculative      %.1f%% of %lld proposed tokens accepted, %.2f tokens per verification\n",
                  100 * spec_rate, (long long)st.spec_draft_tokens, spec_len);
    std::printf("KV pool          %lld tokens, peak use %.1f%%; peak RSS %.0f MiB\n", (long long)e.kv_capacity_tokens(),
                100 * kv_peak, rss);
    if (compute_util >= 0)
      std::printf("compute          %.1f GFLOP useful, %.1f%% of the peaks of the kernels' classes\n", useful_flops / 1e9,
                  100 * compute_util);
    else
      std::printf("compute          %.1f GFLOP useful, %.1f GFLOP/s (--peaks FILE for %% of peak)\n", useful_flops / 1e9,
                  useful_flops / 1e9 / s);
    if (price > 0)
      std::printf("cost             %.4f per 1M output tokens, %.4f per 1M tokens (at %g per hour)\n", cost_out,
                  cost_total, price);
  }
  return 0;
}

// bench kernels --device cuda: the CUDA backend's matmuls, against the device's ceilings.
int bench_kernels_cuda(const KernelBenchOptions& o) {
  const kernels::CudaPeaks p = kernels::cuda_peaks();
  auto be = kernels::make_cuda_backend();
  const auto rs = bench_backend_matmul(*be, o.shapes, o.types, o.ms, o.ring_bytes, o.seconds);
  std::printf("device: %s; ceilings: HBM copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", p.device.c_str(), p.hbm_gbs,
              p.bf16_tflops);
  std::printf("%-12s %-5s %5s %6s %7s %10s %8s %7s %9s %7s\n", "shape", "type", "m", "k", "n", "us", "GB/s", "%HBM",
              "TFLOP/s", "%bf16");
  for (const auto& r : rs)
    std::printf("%-12s %-5s %5lld %6lld %7lld %10.1f %8.0f %6.1f%% %9.1f %6.1f%%\n", r.shape.c_str(),
                std::string(dtype_name(r.type)).c_str(), (long long)r.m, (long long)r.k, (long long)r.n_out, r.us,
                r.gbs, 100 * r.gbs / p.hbm_gbs, r.tflops, 100 * r.tflops / p.bf16_tflops);
  return 0;
}

// ridge bench kernels: every matrix kernel on a preset's shapes with % of its ceiling.
int bench_kernels_cmd(Args& a) {
  KernelBenchOptions o;
  const std::string preset = a.str({"--preset"}, "tinyllama-1.1b");
  const std::string types = a.str({"--types"}, "f16,bf16,q8_0,q4_0,q4_k,q6_k");
  const std::string ms = a.str({"--m"}, "1,16,512");
  const std::string shapes = a.str({"--shapes"}, "");
  o.attn_seqs = a.integer({"--attn-seqs"}, 16, 0, 4096);
  o.attn_ctx = a.integer({"--attn-ctx"}, 4096, 1, 1 << 20);
  o.attn_block = int32_t(a.integer({"--attn-block"}, 16, 1, 1024));
  o.attn_dtype = kv_type_flag(a);
  if (const auto order = a.str({"--attn-order"})) {
    using O = KernelBenchOptions::AttnOrder;
    if (*order == "shuffled") o.attn_order = O::Shuffled;
    else if (*order == "ordered") o.attn_order = O::Ordered;
    else if (*order == "reversed") o.attn_order = O::Reversed;
    else if (*order == "turns") o.attn_order = O::Turns;
    else fail("--attn-order: '{}' is not shuffled, ordered, reversed or turns", *order);
  }
  o.threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  kernel_flags(a, o.threads);  // --kernel-cache off: the untuned defaults
  o.ring_bytes = parse_bytes(a.str({"--ring"}, "1G"), "--ring");
  o.seconds = a.number({"--seconds"}, 0.3, 0.0, 600.0);
  const std::string peaks_path = a.str({"--peaks"}, "");
  const std::string json_path = a.str({"--json"}, "");
  const std::string device = a.str({"--device"}, "cpu");
  if (device != "cpu" && device != "cuda") fail("--device {} is not one of cpu, cuda", device);
  a.finish();
  for (const auto& t : split_list(types)) {
    const auto d = dtype_from_name(t);
    if (!d || !dtype_info(*d).supported) fail("--types: '{}' is not a weight type ridge computes with", t);
    o.types.push_back(*d);
  }
  o.ms.clear();
  for (const auto& m : split_list(ms)) {
    char* end = nullptr;
    const long long v = std::strtoll(m.c_str(), &end, 10);
    if (*end || v < 1 || v > 65536) fail("--m: '{}' is not a row count in 1..65536", m);
    o.ms.push_back(v);
  }
  if (o.types.empty() || o.ms.empty()) fail("--types and --m need at least one value each");
  o.preset = preset;
  for (const auto& sh : preset_shapes(preset)) {
    const auto want = split_list(shapes);
    if (want.empty() || std::find(want.begin(), want.end(), sh.name) != want.end()) o.shapes.push_back(sh);
  }
  if (o.shapes.empty()) fail("--shapes: none of '{}' is a shape of {} (attn_q, attn_kv, attn_output, ffn_up, ffn_down, output)", shapes, preset);
  if (device == "cuda") return bench_kernels_cuda(o);
  Peaks peaks;
  if (!peaks_path.empty()) {
    peaks = load_peaks(peaks_path);
  } else {
    std::fprintf(stderr, "measuring the ceilings (ridge peaks; pass --peaks FILE to reuse a measurement)\n");
    PeaksOptions po;
    po.threads = o.threads;
    peaks = measure_peaks(po);
  }
  prepare_kernels();
  const auto rs = bench_kernels(o, peaks);
  std::printf("ceilings: DRAM read %.1f GB/s (%d threads), fp32 FMA %.0f GFLOP/s, int8 VNNI %.0f GOP/s\n",
              peaks.dram_read_gbs.count(peaks.threads) ? peaks.dram_read_gbs.at(peaks.threads) : peaks.dram_read_gbs_max,
              peaks.threads, peaks.fp32_fma ? peaks.fp32_fma->all : 0.0, peaks.int8_vnni ? peaks.int8_vnni->all : 0.0);
  std::printf("%-12s %-5s %5s %6s %6s %-14s %10s %8s %9s %-10s %7s\n", "shape", "type", "m", "k", "n", "path", "us",
              "GB/s", "GFLOP/s", "bound", "%bound");
  for (const auto& r : rs)
    std::printf("%-12s %-5s %5lld %6lld %6lld %-14s %10.1f %8.2f %9.1f %-10s %6.1f%%\n", r.shape.c_str(),
                std::string(dtype_name(r.type)).c_str(), (long long)r.m, (long long)r.k, (long long)r.n_out,
                r.path.c_str(), r.us, r.gbs, r.gflops, r.bound.c_str(), r.pct);
  // Attention reads a sequence's cache blocks in pool order, scattered: its other ceiling.
  for (const auto& r : rs)
    if (r.kernel == "attention" && peaks.dram_scattered_gbs > 0)
      std::printf("attention: %.2f GB/s = %.0f%% of the scattered-read ceiling (%.1f GB/s, %lld-byte pieces)\n", r.gbs,
                  100.0 * r.gbs / peaks.dram_scattered_gbs, peaks.dram_scattered_gbs,
                  static_cast<long long>(kScatterPiece));
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) fail("cannot write {}", json_path);
    const std::string j = kernel_results_json(rs, peaks);
    std::fwrite(j.data(), 1, j.size(), f);
    std::fclose(f);
  }
  return 0;
}

// ridge bench serve: vllm bench serve's load and report against an OpenAI-compatible
// server. Exit status 1 when any request failed, so that a script notices.
int bench_serve_cmd(Args& a) {
  ServeBenchOptions o;
  o.url = a.str({"--url"}, "");
  o.endpoint = a.str({"--endpoint"}, o.endpoint);
  o.model = a.str({"--model"}, "");
  // As the openai clients (and vllm bench serve) do: the key from the environment.
  const char* env_key = std::getenv("OPENAI_API_KEY");
  o.api_key = a.str({"--api-key"}, env_key ? env_key : "");
  o.num_prompts = a.integer({"--num-prompts"}, o.num_prompts, 1, 1 << 24);
  const std::string rate = a.str({"--request-rate"}, "inf");
  o.max_concurrency = a.integer({"--max-concurrency"}, 0, 1, 1 << 24);
  o.input_len = a.integer({"--input-len"}, o.input_len, 1, 1 << 24);
  o.output_len = a.integer({"--output-len"}, o.output_len, 1, 1 << 24);
  o.prefix_len = a.integer({"--prefix-len"}, 0, 0, 1 << 24);
  o.vocab_max = int32_t(a.integer({"--vocab-max"}, o.vocab_max, 11, INT32_MAX));
  o.seed = uint64_t(a.integer({"--seed"}, 0, 0, INT64_MAX));
  const double ttft = a.number({"--slo-ttft"}, -1, 0, 1e9), tpot = a.number({"--slo-tpot"}, -1, 0, 1e9);
  o.timeout_s = a.number({"--timeout-s"}, o.timeout_s, 1e-3, 1e7);
  o.price_per_hour = a.number({"--price-per-hour"}, 0, 0, 1e9);
  const std::string json_path = a.str({"--json"}, "");
  a.finish();
  if (ttft >= 0) o.slo_ttft_ms = ttft;
  if (tpot >= 0) o.slo_tpot_ms = tpot;
  if (rate != "inf") {
    errno = 0;
    char* end = nullptr;
    o.request_rate = std::strtod(rate.c_str(), &end);
    if (rate.empty() || *end || errno || !std::isfinite(o.request_rate) || o.request_rate <= 0)
      fail("--request-rate expects requests/s > 0 or inf, got '{}'", rate);
  }
  // Opened first: a long run must not end in "cannot write" (the process exit closes it
  // if the run throws).
  std::FILE* file = nullptr;
  if (!json_path.empty() && json_path != "-" && !(file = std::fopen(json_path.c_str(), "w")))
    fail("cannot write --json {}", json_path);
  const ServeBenchRun run = run_serve_bench(o);
  const ServeMetrics m = compute_serve_metrics(run, o);
  // With --json - the JSON alone goes to stdout, for a pipe.
  std::fputs(serve_report_table(m, run, o).c_str(), json_path == "-" ? stderr : stdout);
  if (!json_path.empty()) {
    const std::string j = serve_report_json(m, run, o);
    std::fwrite(j.data(), 1, j.size(), file ? file : stdout);
    if (file) std::fclose(file);
  }
  return m.failed ? 1 : 0;
}

// ridge bench compare A.json B.json: B's speedup over A per metric, with the noise band
// of repeated runs (a JSON array of results, or one result per line, on either side).
int bench_compare_cmd(Args& a) {
  const std::string metrics = a.str({"--metric"}, "");
  const std::string json_path = a.str({"--json"}, "");
  const auto files = a.positional();
  a.finish();
  if (files.size() != 2) fail("usage: ridge bench compare A.json B.json [--metric NAME,...] [--json FILE]");
  const auto ra = tools::load_bench_runs(files[0]), rb = tools::load_bench_runs(files[1]);
  const auto ms = tools::compare_runs(ra, rb, split_list(metrics));
  std::fputs(tools::compare_table(ms, files[0], ra.size(), files[1], rb.size()).c_str(), stdout);
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) fail("cannot write --json {}", json_path);
    const std::string j = tools::compare_json(ms, files[0], ra.size(), files[1], rb.size());
    std::fwrite(j.data(), 1, j.size(), f);
    std::fclose(f);
  }
  return 0;
}

// ridge bench spec: decode with and without speculative decoding, with its prediction.
int bench_spec_cmd(Args& a) {
  const std::string path = resolve_model(a);
  tools::SpecBenchOptions o;
  const auto prompt = a.str({"-p", "--prompt"});
  const auto prompt_file = a.str({"--prompt-file"});
  const int64_t n = a.integer({"--num-prompts"}, 1, 1, 4096);
  const int64_t in_len = a.integer({"--input-len"}, 32, 1, 1 << 20);
  o.output_len = int32_t(a.integer({"--output-len"}, 128, 2, 1 << 20));
  o.runs = int(a.integer({"--runs"}, 3, 1, 100));
  o.seed = uint64_t(a.integer({"--seed"}, 1, 0, INT64_MAX));
  const std::string acc = a.str({"--acceptance"}, "0.3,0.6,0.9");
  const std::string methods = a.str({"--methods"}, "ngram,replay");
  const bool json = a.flag({"--json"});
  o.engine = engine_config(a);
  o.k = o.engine.speculative.num_speculative_tokens;
  a.finish();
  if (prompt && prompt_file) fail("give -p or --prompt-file, not both");
  o.ngram = false;
  bool replay = false;
  for (const auto& m : split_list(methods)) {
    if (m == "ngram") o.ngram = true;
    else if (m == "suffix") o.suffix = true;
    else if (m == "draft") {
      if (o.engine.speculative.draft_model.empty()) fail("--methods draft needs --draft-model FILE");
      o.draft_model = o.engine.speculative.draft_model;
    }
    else if (m == "replay") replay = true;
    else fail("--methods: '{}' is not one of ngram, suffix, draft, replay", m);
  }
  o.replay_acceptance.clear();
  if (replay)
    for (const auto& s : split_list(acc)) {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (end == s.c_str() || *end || !(v >= 0 && v <= 1)) fail("--acceptance: '{}' is not a number in [0, 1]", s);
      o.replay_acceptance.push_back(v);
    }

  auto model = load_model_for(path, o.engine);
  std::vector<std::string> texts;
  if (prompt) texts.push_back(*prompt);
  if (prompt_file) texts = read_prompt_lines(*prompt_file, "--prompt-file");
  if (!texts.empty()) {
    auto tok = load_tokenizer(path, *model);
    for (int64_t i = 0; i < n; ++i) o.prompts.push_back(tok->encode(texts[size_t(i) % texts.size()], true));
  } else {  // random tokens: replay sets the acceptance, prompt lookup finds little
    std::mt19937_64 rng(o.seed);
    const int32_t v = model->hparams().n_vocab;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> p;
      while (int64_t(p.size()) < in_len) p.push_back(int32_t(3 + rng() % uint64_t(std::max(1, v - 3))));
      o.prompts.push_back(std::move(p));
    }
  }
  const auto rows = tools::run_spec_bench(*model, o);
  if (json) {
    for (const auto& r : rows)
      std::printf("{\"model\":\"%s\",\"case\":\"%s\",\"num_prompts\":%lld,\"output_len\":%d,\"k\":%d,\"runs\":%d,"
                  "\"threads\":%d,\"decode_tok_per_s\":%.3f,\"plain_tok_per_s\":%.3f,\"speedup\":%.4f,"
                  "\"predicted_speedup\":%.4f,\"acceptance\":%.4f,\"tokens_per_step\":%.4f,\"rows_per_step\":%.4f,"
                  "\"ms_per_step\":%.4f,\"same_output\":%s}\n",
                  path.c_str(), r.name.c_str(), (long long)n, o.output_len, o.k, o.runs, o.engine.threads,
                  r.decode_tok_per_s, r.plain_tok_per_s, r.speedup, r.predicted_speedup, r.acceptance,
                  r.tokens_per_step, r.rows_per_step, r.ms_per_step, r.same_output ? "true" : "false");
  } else {
    std::printf("model %s, %lld prompts, %d tokens each, k = %d, median of %d interleaved runs\n", path.c_str(),
                (long long)n, o.output_len, o.k, o.runs);
    std::printf("%-34s %10s %8s %9s %10s %10s %9s %9s %s\n", "case", "decode t/s", "speedup", "predicted",
                "acceptance", "tok/step", "rows/step", "ms/step", "output");
    for (const auto& r : rows)
      std::printf("%-34s %10.2f %7.3fx %8.3fx %10.3f %10.2f %9.2f %9.2f %s\n", r.name.c_str(), r.decode_tok_per_s,
                  r.speedup, r.predicted_speedup, r.acceptance, r.tokens_per_step, r.rows_per_step, r.ms_per_step,
                  r.same_output ? "same" : "DIFFERS");
  }
  for (const auto& r : rows)
    if (!r.same_output) fail("bench spec: the {} run's output differs from the plain run's", r.name);
  return 0;
}

}  // namespace

// ridge bench grammar: structured output's mask cost per token on a model's vocabulary.
int bench_grammar_cmd(Args& a) {
  tools::GrammarBenchOptions o;
  o.docs = int32_t(a.integer({"--docs"}, 8, 1, 100000));
  o.max_tokens = int32_t(a.integer({"--max-tokens"}, 256, 1, 1 << 20));
  o.seed = uint64_t(a.integer({"--seed"}, 1, 0, INT64_MAX));
  const bool json = a.flag({"--json"});
  o.lazy_tables = a.flag({"--lazy-tables"});
  while (auto f = a.str({"--schema"})) o.schema_files.push_back(*f);
  const Vocabulary vocab = load_vocabulary(a);
  const std::unique_ptr<Tokenizer>& tok = vocab.tok;
  a.finish();
  const auto rows = tools::run_grammar_bench(*tok, o);
  if (!json)
    std::printf("vocabulary %d tokens; %d documents per schema, at most %d tokens each\n%-12s %10s %9s %7s %8s %8s %10s "
                "%10s %10s %8s %9s\n",
                tok->n_vocab(), o.docs, o.max_tokens, "schema", "compile ms", "tables ms", "tables", "MiB", "tokens",
                "mean us", "p99 us", "max us", "hits", "complete");
  for (const auto& r : rows) {
    if (json)
      std::printf("{\"schema\":\"%s\",\"n_vocab\":%d,\"compile_ms\":%.3f,\"tables_ms\":%.3f,\"tables\":%lld,"
                  "\"tables_mib\":%.2f,\"tokens\":%lld,\"mask_us_mean\":%.2f,\"mask_us_p99\":%.2f,\"mask_us_max\":%.2f,"
                  "\"hit_rate\":%.4f,\"completed\":%d}\n",
                  r.name.c_str(), tok->n_vocab(), r.compile_ms, r.tables_ms, (long long)r.tables, r.tables_mib,
                  (long long)r.tokens, r.mask_us_mean, r.mask_us_p99, r.mask_us_max, r.hit_rate, r.completed);
    else
      std::printf("%-12s %10.2f %9.1f %7lld %8.1f %8lld %10.1f %10.1f %10.1f %7.1f%% %6d/%d\n", r.name.c_str(),
                  r.compile_ms, r.tables_ms, (long long)r.tables, r.tables_mib, (long long)r.tokens, r.mask_us_mean,
                  r.mask_us_p99, r.mask_us_max, 100 * r.hit_rate, r.completed, o.docs);
  }
  return 0;
}

int cmd_bench(Args& a) {
  const auto sub = a.subcommand();
  if (!sub) fail("usage: ridge bench throughput|kernels|serve|compare|spec|grammar [options] (see ridge --help)");
  if (*sub == "throughput") return bench_throughput(a);
  if (*sub == "kernels") return bench_kernels_cmd(a);
  if (*sub == "serve") return bench_serve_cmd(a);
  if (*sub == "compare") return bench_compare_cmd(a);
  if (*sub == "spec") return bench_spec_cmd(a);
  if (*sub == "grammar") return bench_grammar_cmd(a);
  fail("unknown benchmark '{}' (throughput, kernels, serve, compare, spec, grammar)", *sub);
}

}  // namespace ridge::cli
