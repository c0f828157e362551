// ridge generate: stream a continuation of one prompt (or of every line of a file, all
// in one batch) to stdout; timings and memory on stderr.
#include <cmath>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/text_file.h"
#include "engine/generator.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "model/model.h"
#include "perf/tracer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

void write_ids(FILE* f, const std::vector<int32_t>& v) {
  std::fputc('[', f);
  for (size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%d", i ? "," : "", v[i]);
  std::fputc(']', f);
}

void dump_json(const std::string& path, const std::vector<GenRequest>& reqs, const std::vector<GenResult>& res) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) fail("cannot write {}", path);
  const bool many = reqs.size() > 1;
  if (many) std::fputc('[', f.get());
  for (size_t r = 0; r < reqs.size(); ++r) {
    std::fprintf(f.get(), "%s{\"prompt_ids\":", r ? "," : "");
    write_ids(f.get(), reqs[r].prompt);
    std::fputs(",\"ids\":", f.get());
    write_ids(f.get(), res[r].tokens);
    std::fputs(",\"margins\":[", f.get());
    for (size_t i = 0; i < res[r].margins.size(); ++i) {
      const float m = res[r].margins[i];
      if (std::isfinite(m)) std::fprintf(f.get(), "%s%.9g", i ? "," : "", double(m));
      else std::fprintf(f.get(), "%snull", i ? "," : "");
    }
    std::fprintf(f.get(), "],\"finish_reason\":\"%s\"}", res[r].finish_reason.c_str());
  }
  if (many) std::fputc(']', f.get());
  std::fputc('\n', f.get());
}

}  // namespace

int cmd_generate(Args& a) {
  apply_config_file(a);
  const std::string path = resolve_model(a);
  auto prompt = a.str({"-p", "--prompt"});
  auto file = a.str({"-f", "--file"});
  const int32_t n_predict = int32_t(a.integer({"-n", "--n-predict"}, 128, 0, 1 << 24));
  const bool ignore_eos = a.flag({"--ignore-eos"});
  const bool no_bos = a.flag({"--no-bos"});
  const auto dump = a.str({"--dump-json"});
  const auto trace = a.str({"--trace"});
  // Structured output (llama.cpp's --grammar-file and --json-schema; a regex as vLLM's).
  const auto grammar_file = a.str({"--grammar-file"});
  const auto grammar_text = a.str({"--grammar"});
  const auto schema = a.str({"--json-schema"});
  const auto schema_file = a.str({"--json-schema-file"});
  const auto regex = a.str({"--regex"});
  GenOptions opt;
  opt.pool_for_requests = !a.given({"--mem-fraction"});  // asked for: the server's sizing
  engine_config(a, opt);
  bool seed_given = false;
  SamplingParams sp = sampling_params(a, &seed_given);
  a.finish();
  if (prompt && file) fail("give either -p PROMPT or -f FILE, not both");
  std::shared_ptr<const grammar::Grammar> grammar;
  if (int(bool(grammar_file)) + int(bool(grammar_text)) + int(bool(schema)) + int(bool(schema_file)) + int(bool(regex)) > 1)
    fail("give at most one of --grammar, --grammar-file, --json-schema, --json-schema-file and --regex");
  if (grammar_file || grammar_text) {
    grammar = grammar::compile_gbnf(grammar_file ? read_text_file(*grammar_file) : *grammar_text);
  } else if (schema || schema_file) {
    const std::string text = schema ? *schema : read_text_file(*schema_file);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("the JSON schema is not JSON: {}", e.what());
    }
    grammar = grammar::compile_gbnf(grammar::json_schema_to_gbnf(j));
  } else if (regex) {
    grammar = grammar::compile_gbnf("root ::= " + grammar::regex_to_gbnf(*regex, false).expr + "\n");
  }
  perf::TraceSession trace_session(trace, "generate");  // closed (valid JSON) on every exit

  std::vector<std::string> prompts;
  if (file) {
    prompts = read_prompt_lines(*file, "prompts file");
  } else {
    prompts.push_back(prompt.value_or("Once upon a time"));
  }

  auto model = load_model_for(path, opt);
  auto tok = load_tokenizer(path, *model);
  const HParams& h = model->hparams();

  std::vector<GenRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenRequest r;
    r.prompt = tok->encode(prompts[i], !no_bos);
    if (r.prompt.empty()) fail("prompt {} encodes to no tokens (and --no-bos was given)", i);
    r.max_tokens = n_predict;
    r.sampling = sp;
    r.sampling.seed = sp.seed + i;  // each sequence its own stream
    r.ignore_eos = ignore_eos;
    r.margins = dump.has_value();  // only the oracle's --dump-json reads them
    r.grammar = grammar;
    reqs.push_back(std::move(r));
    // Rotary positions run past the training context (worse, but defined); learned ones end.
    // The last token sampled is never fed back: positions up to prompt + n_predict - 2.
    if (int64_t(reqs.back().prompt.size()) + n_predict - 1 > h.n_ctx_train && model->arch().learned_pos)
      fail("prompt {} ({} tokens) + {} new tokens is past the {} positions {} learned", i, reqs.back().prompt.size(),
           n_predict, h.n_ctx_train, h.arch);
    if (int64_t(reqs.back().prompt.size()) + n_predict > h.n_ctx_train)
      std::fprintf(stderr, "warning: prompt %zu (%zu tokens) + %d new tokens exceeds the model's training context (%d)\n",
                   i, reqs.back().prompt.size(), n_predict, h.n_ctx_train);
  }
  if (!seed_given && sp.temperature > 0) std::fprintf(stderr, "seed: %llu\n", (unsigned long long)sp.seed);

  const bool stream = reqs.size() == 1;
  // The budget line first, then the prompt the continuation streams after.
  opt.on_engine = [&](const Engine& e) {
    print_memory_budget("generate", *model, e);
    if (grammar) {  // the token tables before the first step, as a server builds them with the request
      const auto t0 = std::chrono::steady_clock::now();
      const auto tables = e.token_trie()->tables(grammar);
      const int64_t n = tables->prepare();
      std::fprintf(stderr, "grammar: %lld token tables (%.1f MiB) in %.0f ms\n", (long long)n,
                   double(tables->bytes()) / double(1 << 20),
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::fflush(stderr);
    if (stream) {
      std::fputs(prompts[0].c_str(), stdout);
      std::fflush(stdout);
    }
  };
  Generator gen(*model, tok.get(), opt);
  StreamDecoder sd(*tok, /*strip_leading_space=*/false);  // continues the prompt's text
  auto results = gen.run(reqs, [&](size_t, int32_t id) {
    if (!stream) return;
    const std::string s = sd.push(id);
    if (!s.empty()) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
  });
  if (stream) {
    const std::string rest = sd.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
  } else {
    for (size_t i = 0; i < results.size(); ++i) {
      StreamDecoder d(*tok, /*strip_leading_space=*/false);
      std::string text;
      for (int32_t id : results[i].tokens) text += d.push(id);
      text += d.flush();
      std::printf("=== %zu: %s\n%s%s\n", i, results[i].finish_reason.c_str(), prompts[i].c_str(), text.c_str());
    }
  }
  std::fflush(stdout);
  if (dump) dump_json(*dump, reqs, results);

  const GenStats& st = gen.stats();
  double ttft = 0;
  for (const auto& r : results) ttft += r.ttft_s;
  ttft /= double(results.size());
  std::fprintf(stderr,
               "\nmodel: %s (%s, %.1f MiB of weights), threads %d, kv %s\n"
               "prompt tokens: %lld, generated tokens: %lld\n"
               "prefill: %.2f tok/s (%.3f s)\n"
               "decode: %.2f tok/s (%lld tokens in %.3f s)\n"
               "time to first token: %.3f s\n"
               "peak RSS: %.1f MiB\n",
               path.c_str(), h.arch.c_str(), double(model->weight_bytes()) / 1048576.0, gen.threads(),
               std::string(dtype_name(opt.kv_dtype)).c_str(), (long long)st.prompt_tokens,
               (long long)st.generated_tokens, st.prefill_s > 0 ? double(st.prompt_tokens) / st.prefill_s : 0.0,
               st.prefill_s, st.decode_s > 0 ? double(st.decode_tokens) / st.decode_s : 0.0,
               (long long)st.decode_tokens, st.decode_s, ttft, peak_rss_mib());
  if (st.grammar_tokens > 0)
    std::fprintf(stderr, "grammar: %lld tokens constrained, %.1f us each in masks and accepts (%.2f%% of the decode time)\n",
                 (long long)st.grammar_tokens, 1e6 * st.grammar_s / double(st.grammar_tokens),
                 st.decode_s > 0 ? 100.0 * st.grammar_s / gen.threads() / (st.decode_s + st.prefill_s) : 0.0);
  if (st.jump_drafts > 0)
    std::fprintf(stderr, "jump-forward: %lld forced spans run as drafts, %lld of %lld tokens taken\n",
                 (long long)st.jump_drafts, (long long)st.jump_accepted, (long long)st.jump_tokens);
  if (st.spec_drafts > 0)
    std::fprintf(stderr, "speculative: %lld proposals, %lld of %lld drafted tokens accepted (%.1f%%), %.2f tokens per verification\n",
                 (long long)st.spec_drafts, (long long)st.spec_accepted_tokens, (long long)st.spec_draft_tokens,
                 100.0 * double(st.spec_accepted_tokens) / double(std::max<int64_t>(st.spec_draft_tokens, 1)),
                 1.0 + double(st.spec_accepted_tokens) / double(st.spec_drafts));
  return 0;
}

}  // namespace ridge::cli
