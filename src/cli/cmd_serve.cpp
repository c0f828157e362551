// ridge serve: the OpenAI-compatible HTTP server on one model.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "perf/tracer.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tools/tune_trial.h"

namespace ridge::cli {

int cmd_serve(Args& a) {
  apply_config_file(a);
  const std::string path = resolve_model(a);
  server::ServeOptions so;
  so.http.host = a.str({"--host"}, "127.0.0.1");
  so.http.port = uint16_t(a.integer({"--port"}, 8080, 0, 65535));
  so.http.max_body_bytes = parse_bytes(a.str({"--max-body-size"}, "8M"), "--max-body-size");
  so.http.shutdown_timeout_s = a.number({"--shutdown-timeout"}, 10, 0, 3600);
  so.loop.max_waiting = int32_t(a.integer({"--max-waiting"}, 1024, 0, 1 << 24));
  so.api_key = a.str({"--api-key"}, "");
  if (so.api_key.empty())
    if (const char* k = std::getenv("RIDGE_API_KEY")) so.api_key = k;
  const auto served_name = a.str({"--served-model-name"});
  const int64_t max_model_len = a.integer({"--max-model-len"}, 0, 0, 1 << 30);
  const auto template_file = a.str({"--chat-template"});
  const int32_t max_logprobs = int32_t(a.integer({"--max-logprobs"}, 20, 0, 1 << 20));
  const std::string tool_parser = a.str({"--tool-call-parser"}, "auto");
  const std::string reasoning_parser = a.str({"--reasoning-parser"}, "auto");
  const int32_t reasoning_budget = int32_t(a.integer({"--reasoning-budget"}, -1, -1, 1 << 30));
  EngineConfig ec = engine_config(a);
  const auto trace = a.str({"--trace"});
  const auto record = a.str({"--record"});
  server::AutoTuneOptions& at = so.loop.auto_tune;
  at.enabled = a.flag({"--auto-tune"});
  const auto at_slo = a.str({"--auto-tune-slo"});
  const auto at_budget = a.str({"--auto-tune-batched-tokens"});
  const auto at_k = a.str({"--auto-tune-speculative-tokens"});
  at.interval_s = a.number({"--auto-tune-interval"}, at.interval_s, 0.1, 3600);
  server::KvEventsOptions kvo;
  kvo.endpoint = a.str({"--kv-events-endpoint"}, "");
  kvo.replay_endpoint = a.str({"--kv-events-replay-endpoint"}, "");
  kvo.topic = a.str({"--kv-events-topic"}, "");
  kvo.buffer_steps = a.integer({"--kv-events-buffer-steps"}, kvo.buffer_steps, 1, int64_t(1) << 30);
  const std::string kv_format = a.str({"--kv-events-format"}, "map");
  kvo.format.medium = a.str({"--kv-events-medium"}, kvo.format.medium);
  if (kv_format == "array") kvo.format.layout = server::KvEventsFormat::Layout::Array;
  else if (kv_format != "map") fail("--kv-events-format {}: not one of map (vLLM since 2026), array (before)", kv_format);
  if (kvo.format.medium.empty() || kvo.format.medium.size() > 31) fail("--kv-events-medium: 1 to 31 characters");
  a.finish();
  if (kvo.endpoint.empty() && (!kvo.replay_endpoint.empty() || !kvo.topic.empty() || a.given({"--kv-events-buffer-steps"}) ||
                               a.given({"--kv-events-format"}) || a.given({"--kv-events-medium"})))
    fail("--kv-events-replay-endpoint, --kv-events-topic, --kv-events-buffer-steps, --kv-events-format and "
         "--kv-events-medium need --kv-events-endpoint");
  if (!kvo.endpoint.empty() && !ec.prefix_cache)
    fail("--kv-events-endpoint: the events are the prefix cache's, and --no-prefix-cache turns it off");
  if (!at.enabled && (at_slo || at_budget || at_k || a.given({"--auto-tune-interval"})))
    fail("--auto-tune-slo, --auto-tune-batched-tokens, --auto-tune-speculative-tokens and --auto-tune-interval need "
         "--auto-tune");
  if (at_slo) {
    const tools::Slo slo = tools::parse_slo(*at_slo);
    at.ttft_s = slo.ttft_s, at.ttft_pct = slo.ttft_pct, at.tpot_s = slo.tpot_s, at.tpot_pct = slo.tpot_pct;
  }
  auto range = [](const std::string& v, const char* flag, int32_t& lo, int32_t& hi) {
    int a = 0, b = 0;
    char tail = 0;
    if (std::sscanf(v.c_str(), "%d:%d%c", &a, &b, &tail) != 2 || a < 1 || b < a)
      fail("{} {}: expected MIN:MAX with 1 <= MIN <= MAX", flag, v);
    lo = a, hi = b;
  };
  if (at_budget) range(*at_budget, "--auto-tune-batched-tokens", at.min_budget, at.max_budget);
  if (at_k) range(*at_k, "--auto-tune-speculative-tokens", at.min_k, at.max_k);
  // Created before the model loads, so a path that cannot be written fails at once.
  if (record) so.loop.recorder = std::make_shared<TraceRecorder>(*record, server::steady_seconds());
  // Likewise an endpoint that cannot be bound or connected.
  if (!kvo.endpoint.empty()) so.loop.kv_events = std::make_shared<server::KvEventsPublisher>(kvo);
  server::ToolFormat tool_format = server::ToolFormat::None;
  if (tool_parser != "auto") {
    tool_format = server::tool_format_from_name(tool_parser);
    if (tool_format == server::ToolFormat::None)
      fail("--tool-call-parser {}: not one of auto, hermes, llama3_json, mistral, deepseek_v3, openai, json", tool_parser);
  }
  server::ApiContext::Reasoning reasoning = server::ApiContext::Reasoning::Auto;
  if (reasoning_parser == "none") reasoning = server::ApiContext::Reasoning::Off;
  else if (reasoning_parser == "qwen3" || reasoning_parser == "deepseek_r1" || reasoning_parser == "think")
    reasoning = server::ApiContext::Reasoning::On;
  else if (reasoning_parser != "auto")
    fail("--reasoning-parser {}: not one of auto, none, qwen3, deepseek_r1", reasoning_parser);
  // Before the model loads, so a bad path fails at once; closed after the server and the
  // engine are gone (SIGINT/SIGTERM make srv.run() return), or by an error's unwinding.
  perf::TraceSession trace_session(trace, "serve");

  auto model = load_model_for(path, ec);
  auto tok = load_tokenizer(path, *model);
  const HParams& h = model->hparams();

  server::ApiContext ctx;
  ctx.model_name = served_name.value_or(std::filesystem::path(path).filename().string());
  ctx.max_logprobs = max_logprobs;
  ctx.speculative = ec.speculative;
  if (template_file) {
    std::ifstream in(*template_file);
    if (!in) fail("cannot read --chat-template {}", *template_file);
    std::stringstream ss;
    ss << in.rdbuf();
    ctx.chat_template = ss.str();
  } else if (std::filesystem::is_directory(path)) {  // a Hugging Face checkpoint
    std::ifstream in(std::filesystem::path(path) / "tokenizer_config.json");
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    const HfTokenizerConfig cfg = parse_hf_tokenizer_config(ss.str());
    ctx.chat_template = cfg.chat_template;
    ctx.bos_token = cfg.bos_token.value_or("");
    ctx.eos_token = cfg.eos_token.value_or("");
    if (cfg.chat_template.empty())
      std::fprintf(stderr, "serve: %s has no chat template: /v1/chat/completions needs --chat-template FILE\n",
                   path.c_str());
  } else {
    try {
      ctx.chat_template = chat_template_from_gguf(model->file());
    } catch (const Error&) {
      std::fprintf(stderr, "serve: %s has no chat template: /v1/chat/completions needs --chat-template FILE\n",
                   path.c_str());
    }
  }
  if (!std::filesystem::is_directory(path)) {
    ctx.bos_token = gguf_special_token(model->file(), "tokenizer.ggml.bos_token_id");
    ctx.eos_token = gguf_special_token(model->file(), "tokenizer.ggml.eos_token_id");
  }

  ctx.tool_parser = tool_format;
  ctx.reasoning = reasoning;
  ctx.reasoning_budget = reasoning_budget;
  if (!ctx.chat_template.empty()) ctx.caps = server::probe_template(ctx.chat_template, ctx.bos_token, ctx.eos_token);

  Engine engine(*model, tok.get(), ec);
  print_memory_budget("serve", *model, engine);
  // The context is the smallest of the model's, the KV pool's and the flag's.
  int64_t len = engine.kv_capacity_tokens();
  if (h.n_ctx_train > 0) len = std::min<int64_t>(len, h.n_ctx_train);
  if (max_model_len > 0) {
    if (max_model_len > len)
      fail("--max-model-len {} is larger than the model's context or the KV cache allows ({} tokens)", max_model_len, len);
    len = max_model_len;
  }
  ctx.max_model_len = int32_t(std::min<int64_t>(len, INT32_MAX));

  server::Server srv(engine, *tok, ctx, so);
  const uint16_t port = srv.listen();
  std::fprintf(stderr, "serve: %s as \"%s\" on http://%s:%u (max_model_len %d, KV %lld tokens, %d threads)\n",
               path.c_str(), ctx.model_name.c_str(), so.http.host.c_str(), unsigned(port), ctx.max_model_len,
               static_cast<long long>(engine.kv_capacity_tokens()), engine.pool().size());
  if (at.enabled)
    std::fprintf(stderr, "serve: auto-tune: token budget %d..%d, speculation depth %d..%d, every %g s, SLO ttft_p%g=%.3gms,tpot_p%g=%.3gms\n",
                 at.min_budget, at.max_budget > 0 ? at.max_budget : ec.max_num_batched_tokens, at.min_k,
                 at.max_k > 0 ? at.max_k : ec.speculative.num_speculative_tokens, at.interval_s, at.ttft_pct,
                 at.ttft_s * 1e3, at.tpot_pct, at.tpot_s * 1e3);
  std::fflush(stderr);
  srv.run();
  std::fprintf(stderr, "serve: shut down\n");
  return 0;
}

}  // namespace ridge::cli
