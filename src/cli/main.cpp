// ridge: an LLM inference engine. Dispatches to the subcommands; every user error ends
// in a one-line message and exit code 1, never a crash.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/progress.h"
#include "dist/comm.h"
#include "engine/tp_worker.h"
#include "model/mkmodel.h"

namespace {

const char* kUsage = R"(usage: ridge COMMAND [options]

commands:
  generate    -m MODEL -p PROMPT [-n N] [-t THREADS] [--temp T] [--seed S] [--ignore-eos]
              [-f PROMPTS_FILE] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
              [--repeat-last-n N] [--presence-penalty P] [--frequency-penalty P]
              [--no-bos] [--dump-json FILE] [--grammar GBNF | --grammar-file FILE |
              --json-schema JSON | --json-schema-file FILE | --regex REGEX (structured
              output: the text is held to it)] + engine options (the token budget
              defaults to 512 and the KV pool to what the prompts need, unless
              --kv-cache-memory or --mem-fraction says otherwise)
  serve       -m MODEL [--host 127.0.0.1] [--port 8080] [--served-model-name NAME]
              [--max-model-len N] [--api-key KEY] [--chat-template FILE] [--max-waiting N]
              [--max-logprobs N] [--max-body-size 8M] [--shutdown-timeout S]
              [--tool-call-parser auto|hermes|llama3_json|mistral|deepseek_v3|openai|json]
              [--reasoning-parser auto|none|qwen3|deepseek_r1] [--reasoning-budget N]
              [--config FILE.json (flags from a file, e.g. ridge tune --output; the command
              line wins)] [--record TRACE.jsonl (every request's arrival, prompt ids and
              output length, for ridge tune --workload)] [--auto-tune [--auto-tune-slo
              ttft_p99=2s,tpot_p99=100ms] [--auto-tune-batched-tokens MIN:MAX (64:the budget)]
              [--auto-tune-speculative-tokens MIN:MAX] [--auto-tune-interval S (5)]] (the
              token budget and speculation depth follow the SLO online, each change logged)
              [--kv-events-endpoint tcp://*:5557 [--kv-events-replay-endpoint tcp://*:5558]
              [--kv-events-topic T] [--kv-events-buffer-steps N (10000)]
              [--kv-events-format map|array] [--kv-events-medium GPU]] (the prefix cache's
              blocks stored and removed, as vLLM's KV events over ZeroMQ, for a cache-aware
              router; array: vLLM's layout before 2026) + engine options
              OpenAI-compatible server: /v1/completions, /v1/chat/completions, /v1/models,
              /health, /metrics, /tokenize, /detokenize; tools and reasoning_content in the
              format the chat template shows (auto) or the one named
  router      --replica http://HOST:PORT[,EVENTS[,REPLAY]] [--replica ...] [--host 127.0.0.1]
              [--port 8000] [--policy prefix|round_robin] [--health-interval S (1)]
              [--connect-timeout S (2)] [--request-timeout S (600)] [--max-attempts N (3)]
              [--balance-threshold N (8)] [--shutdown-timeout S]   an OpenAI-compatible front end over replicas: each
              request to the replica whose prefix cache (from its KV events: EVENTS and
              REPLAY are its --kv-events-endpoint and --kv-events-replay-endpoint as seen
              from here) holds the longest prefix of the prompt, balanced by load; a
              request a replica refuses or loses before its first token goes to another;
              a replica that stops answering leaves the rotation until /health answers
  mkmodel     --arch llama|qwen2|qwen3|qwen3moe|phi3|gpt2|gemma3|gpt-oss --preset NAME --dtype f32|f16|bf16|q8_0|q4_0|mxfp4
              [--seed S] [--vocab VOCAB.gguf|tokenizer.json] [--layers N] [--ctx N] [--window N] -o OUT.gguf
              presets: tiny, tinyllama-1.1b, llama3.2-1b, llama3-8b, qwen2.5-0.5b, qwen3-0.6b, phi-3-mini,
              phi3-longrope-tiny, gpt2-124m, gemma-3-1b, gemma-3-4b, gemma3-tiny; qwen3moe-tiny, qwen3-30b-a3b, mixtral-tiny, mixtral-8x7b, gpt-oss-tiny, gpt-oss-20b (mixtures of experts)
  quantize    IN.gguf OUT.gguf --type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|mxfp4
              |q4_k_s|q4_k_m|q5_k_s|q5_k_m (llama-quantize's mixes) [-t THREADS]
              [--layers N (keep the first N blocks: a layer-truncated draft model)]
  convert     CHECKPOINT_DIR OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|...] [--no-tokenizer]
              a Hugging Face checkpoint (config.json, model.safetensors or shards with their
              index; f32, f16, bf16, block-scaled fp8) as GGUF with llama.cpp's names and
              keys; the matrices keep their type unless --type (fp8: q8_0); a byte-level BPE
              tokenizer.json becomes the GGUF's tokenizer (--no-tokenizer: weights only).
              -m DIR loads such a directory directly (its tokenizer.json as the tokenizer)
  perplexity  -m MODEL -f TEXT_FILE [-c CTX] [-t N] [--kv-cache-dtype T] [--block-size N]
              [--max-num-batched-tokens N] [--kl-divergence-base FILE [--kl-divergence]]
              llama-perplexity's measure; --kl-divergence-base FILE alone saves the scored
              tokens' log-probabilities (the reference run), with --kl-divergence it reports
              this run's KL divergence from them, top-1 agreement and both perplexities
  info        -m MODEL        print metadata and tensors
  chat-template -m MODEL --messages FILE.json [--no-generation-prompt] [--tools FILE.json]
              [--vars JSON] [--template FILE] [--config tokenizer_config.json]
              print the prompt the model's chat template makes; --batch CASES.json: JSON lines
  tokenize    -m MODEL [--ids|--pieces] [--no-bos] [--parse-special] TEXT | -p TEXT | -f FILE
              one line per token: id<TAB>piece (--ids: the ids on one line); the model may
              be a vocabulary-only GGUF. --jsonl -f FILE: one JSON string per line in, one
              line of ids per string out; --tokenizer-json FILE [--tokenizer-config FILE]
              instead of -m (HF tokenizer.json); --decode: JSON lines of ids in, text out
  bench throughput -m MODEL [--num-prompts N] [--input-len I] [--output-len O]
              [--prefix-len P] [--seed S] [--json] [--peaks peaks.json] [--price-per-hour P] [--op-timing]
              + engine options; also KV pool peak use, peak RSS, compute utilization (%
              of the peaks of the kernels' classes) and cost per 1M tokens
  bench kernels [--preset NAME] [--types f16,q8_0,...] [--m 1,16,512] [--shapes attn_q,...]
              [-t THREADS] [--peaks peaks.json] [--ring BYTES] [--seconds S] [--json FILE]
              [--attn-seqs N] [--attn-ctx TOKENS] [--attn-block N]
              [--attn-order shuffled|ordered|reversed|turns] [--kernel-cache DIR|off]
              [--no-kernel-autotune] [--device cuda]   every matrix kernel and decode
              attention: time, GB/s, GOP/s and % of the ceiling that bounds it (a deepseek
              preset's attention is latent: one KV head of [rope key | latent]; cuda: the
              GPU backend's matmuls against its HBM and bf16 GEMM ceilings)
  bench serve --url http://HOST:PORT [--endpoint /v1/completions] [--model NAME]
              [--num-prompts N] [--request-rate R|inf] [--max-concurrency C]
              [--input-len I] [--output-len O] [--prefix-len P] [--vocab-max V] [--seed S]
              [--slo-ttft MS] [--slo-tpot MS] [--timeout-s T] [--json FILE|-] [--price-per-hour P]
              [--api-key KEY (default $OPENAI_API_KEY)]
              load an OpenAI-compatible server as vllm bench serve does (Poisson
              arrivals, streamed answers): TTFT, TPOT, ITL, end-to-end latency,
              throughputs, goodput; exit status 1 if any request failed
  bench compare A.json B.json [--metric a,b] [--json FILE]   the speedup of B over A per
              metric (bench throughput / serve / roofline JSON; a JSON array = repeated
              runs, giving the noise band)
  bench spec  -m MODEL [-p TEXT | --prompt-file F | --input-len N] [--num-prompts N]
              [--output-len N] [--methods ngram,suffix,draft,replay (ngram,replay)]
              [--draft-model FILE] [--acceptance 0.3,0.6,0.9] [--runs R]
              [--json] + engine options (--num-speculative-tokens K, --no-speculative-adaptive)
              decode with and without speculative decoding, interleaved: speedup,
              acceptance, the speedup they predict; exit status 1 if any output differs
              from the plain run's
  bench grammar -m MODEL | --tokenizer-json FILE [--schema FILE ...] [--docs N] [--max-tokens N]
              [--seed S] [--json] [--lazy-tables]   structured output's token-mask cost per
              token on the vocabulary, over a built-in schema set or the given JSON schemas
              (the grammar's token tables built first and timed apart, unless lazy)
  grammar gbnf --json-schema FILE | --regex REGEX | --json-object
              the GBNF grammar structured output compiles the constraint to
  grammar masks -m MODEL | --tokenizer-json FILE --grammar FILE.gbnf --tokens FILE.jsonl
              [--ignore IDS.json] [--root NAME]   the token masks along token sequences
              (a count and hash per position), to compare with another implementation
  grammar accepts --json-schema FILE --texts FILE.jsonl [--no-strict]   1 or 0 per text
              (a JSON string per line): whether the schema's grammar accepts it
  roofline    -m MODEL [--batch 1,4,16,64] [--prompt 512] [--decode-steps 16] [-t N]
              [--kv-cache-dtype T] [--block-size N] [--max-num-batched-tokens N]
              [--peaks peaks.json] [--html report.html] [--json FILE|-] [--from-json FILE]
              [--device cuda]   prefill and decode per op against the machine's ceilings:
              time, GFLOP/s, GB/s, intensity, the bound, % of it, predicted vs measured, the
              bottleneck (cuda: ops timed by CUDA events against the GPU's HBM and GEMM peaks)
  peaks       [-t THREADS] [--quick] [--json FILE|-] [--dram-mib N]
              measure DRAM read bandwidth and compute peaks (the roofline's ceilings);
              --device cuda: the GPU's HBM copy bandwidth and cuBLAS bf16/fp32 GEMM rates
  tune        -m MODEL [--workload chat|rag|burst|FILE.json|TRACE.jsonl] [--slo ttft_p99=2s,tpot_p99=100ms]
              [--budget 90s|10m|1h (10m)] [--objective goodput|throughput|cost] [--output tuned.json]
              [--html report.html] [--json FILE|-] [--peaks peaks.json] [--trial-seconds S]
              [--repeats N (3)] [--grid] [--seed S] [--check tuned.json] + engine options (the
              starting point)
              search the engine's configuration (max-num-seqs, max-num-batched-tokens, KV
              dtype, prefix cache, speculation, KV pool size, swap or recompute) for the
              workload and SLO: each round diagnoses the last measured trial, predicts the
              candidate changes with a step model, measures the best, keeps it only beyond
              the noise band; the chosen point and the defaults then run in turn. --output:
              flags `ridge serve --config FILE` reads (the chosen ones and the engine options
              given here); a trace recorded by `ridge serve --record FILE` replays as it came;
              --check: run a tuned configuration again on its requests, exit 1 unless its
              objective is within the recorded noise band
  tune-kernels [-t THREADS] [--types q4_0,...] [--quick] [--rounds N] [--ring BYTES]
              [--margin F (0.03)] [--kernel-cache DIR|off] [--no-save] [--json FILE]
              time the matrix kernels' CPU-dependent parameters (prefetch distances, streams,
              task sizes, batch tiles, the FP8 arithmetic; with f16 in --types, the attention's
              tile of 64 or 128 keys) here; keep the best for this CPU in
              DIR/kernels.json (default $RIDGE_KERNEL_CACHE, else ~/.cache/ridge), which every
              command that runs a model applies at start (and makes, quickly, on first use)
engine options (generate, serve, bench throughput; perplexity and roofline take -t,
--kv-cache-dtype, --block-size, --max-num-batched-tokens, --mla-prefill and the kernel
flags only):
  --device cpu|cuda (cpu; cuda: weights, KV pool and activations on the GPU, where this
  ridge was built with nvcc and a device is there, else an error saying which is missing),
  --tensor-parallel-size N, --pipeline-parallel-size N (alias -tp, -pp; 1: under `mpirun
  -np N` the model's heads and FFN, or its layers, split over N ranks; both: TP x PP
  ranks, stages of TP ranks; RIDGE_TP_TIMEOUT seconds (600) end a job whose ranks stop
  answering; README: one model over several processes), --enable-expert-parallel (alias
  -ep; under TP a mixture of experts' experts go whole to the ranks instead of each
  expert cut over all),
  -t THREADS, --kv-cache-dtype auto|f16|bf16|f32|int8|fp8|fp8_e4m3|fp8_e5m2 (alias --kv-type;
  the 8-bit ones with a scale per position and head), --block-size N (16),
  --max-num-seqs N (256), --max-num-batched-tokens N (2048; alias -b, --batch-size),
  --kv-cache-memory BYTES (e.g. 2G) or
  --mem-fraction F (0.5 of the RAM left after the weights), --no-prefix-cache (--prefix-cache:
  the default, for a config file to restore),
  --swa-full (sliding-window layers keep every position's K/V as global layers do; by
  default a window layer's KV is dropped once no query sees it, bounded by the window),
  --no-jump-forward (structured output: generate a grammar's forced text a token per step
  instead of verifying it as a draft; the output is the same),
  --preemption-mode recompute|swap|auto, --swap-space GB, --swap-dir DIR (/tmp),
  --priority-aging STEPS (256), --mlock (pin the weights in RAM),
  --mla-prefill auto|absorbed|expanded (latent attention, DeepSeek: the form a prompt's
  positions attend in; decode is absorbed; auto: expanded where the roofline says a
  prompt's chunks do less work so; a sequence's choice never depends on its batch),
  --kernel-cache DIR|off (the tuned kernel parameters: see tune-kernels),
  --no-kernel-autotune (no timing run when this CPU has no entry; RIDGE_KERNEL_AUTOTUNE=0),
  --speculative-method ngram|suffix|draft|none (propose tokens, verify them in one pass;
  the output is unchanged: ngram looks the last tokens up in the sequence's own text,
  suffix in all recent requests' text too, draft runs a draft model),
  --num-speculative-tokens K (4), --prompt-lookup-min N (2), --prompt-lookup-max N (4),
  --draft-model FILE (alias -md; a smaller GGUF with the same vocabulary; implies
  --speculative-method draft), --suffix-cache-tokens N (1048576 tokens of finished
  requests kept), --suffix-min-token-prob P (0.1), --no-speculative-adaptive (verify
  every proposed token however little it pays: to measure a proposer, and in tests)
  --trace FILE.json (generate, serve, bench throughput): Chrome trace for Perfetto

Long work (loading, quantize, mkmodel, perplexity, roofline, bench) shows its progress on
stderr: one updating line on a terminal, a line every few seconds otherwise; --quiet
(any command) silences it.
The model defaults to $RIDGE_MODEL, else the first *.gguf in ./models.
RIDGE_ISA=scalar|avx2|avx512 forces a SIMD path; RIDGE_AMX=off keeps the int8 GEMM off
the AMX tiles (Sapphire Rapids and later), on makes their absence an error;
RIDGE_ATTN_F16=1 puts an f16 KV cache's attention on AVX512-FP16 halves, and an fp8_e4m3
one's where the AMX tiles are not active (faster, less exact).
)";

// `ridge CMD --help`: CMD's lines of the usage (its line and the indented ones under it).
bool command_help(const std::string& cmd) {
  const std::string_view u(kUsage);
  const std::string head = "  " + cmd + " ";
  size_t at = u.find("\n" + head);
  if (at == std::string_view::npos) return false;
  std::string out;
  for (size_t i = at + 1; i < u.size();) {
    const size_t e = u.find('\n', i);
    const std::string_view line = u.substr(i, (e == std::string_view::npos ? u.size() : e) - i);
    if (i != at + 1 && !line.starts_with("              ")) break;
    out += std::string(line) + "\n";
    if (e == std::string_view::npos) break;
    i = e + 1;
  }
  std::fputs(("usage: ridge " + out.substr(2)).c_str(), stdout);
  if (cmd == "mkmodel") {
    std::fputs("presets (vocabulary, width, layers, heads q/kv, FFN width, experts):\n", stdout);
    for (const std::string& p : ridge::mkmodel_presets()) {
      const ridge::PresetDims d = ridge::preset_dims(p);
      std::printf("  %-16s %7lld %5lld %3d %3d/%-3d %6lld %s\n", p.c_str(), static_cast<long long>(d.n_vocab),
                  static_cast<long long>(d.n_embd), d.n_layer, int(d.n_head), int(d.n_head_kv),
                  static_cast<long long>(d.n_ff), d.n_expert ? (std::to_string(d.n_expert_used) + " of " +
                  std::to_string(d.n_expert) + " x " + std::to_string(d.n_ff_exp)).c_str() : "-");
    }
  }
  return true;
}

int run(int argc, char** argv);

}  // namespace

// Under mpirun every process runs main: rank 0 the command, the others the worker side
// of a tensor-parallel model (engine/tp_worker.h) until rank 0 stops them.
int main(int argc, char** argv) {
  try {
    ridge::dist::init(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ridge: error: %s\n", e.what());
    return 1;
  }
  ridge::dist::Comm* w = ridge::dist::world();
  if (w && w->rank() != 0) {
    // mpirun passes a SIGTERM or SIGINT on to every rank: rank 0 shuts down (its server
    // drains) and then stops the workers, which must outlive it until then.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
    int code = 1;
    try {
      code = ridge::run_tp_worker(*w, [](const std::string& dir) { ridge::cli::prepare_kernels_worker(dir); });
    } catch (const std::exception& e) {
      w->abort(1, e.what());
    }
    ridge::dist::finalize();
    return code;
  }
  const int code = run(argc, argv);
  if (w) {
    ridge::tp_send_stop(*w, code);
    ridge::dist::finalize();
  }
  return code;
}

namespace {

int run(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  const std::string cmd = argv[1];
  // `ridge CMD --help` (right after the command: elsewhere it may be a flag's value).
  if (argc > 2 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
    if (command_help(cmd)) return 0;
    std::fprintf(stderr, "ridge: error: unknown command '%s' (see ridge --help)\n", cmd.c_str());
    return 1;
  }
  // --quiet (any command): no progress lines. Taken here so every command accepts it.
  std::vector<std::string> rest;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quiet")) ridge::Progress::set_quiet(true);
    else rest.emplace_back(argv[i]);
  }
  const bool bench_throughput = cmd == "bench" && !rest.empty() && rest[0] == "throughput";
  ridge::cli::Args args(std::move(rest));
  try {
    if (const ridge::dist::Comm* w = ridge::dist::world();
        w && w->size() > 1 && cmd != "generate" && cmd != "serve" &&
        !bench_throughput)
      ridge::fail("mpirun started {} processes, but {} runs in one: generate, serve and bench throughput take "
                  "--tensor-parallel-size and --pipeline-parallel-size",
                  w->size(), cmd);
    // The SIMD path's environment, read here so that a bad value is this error and not
    // one thrown on a worker thread.
    ridge::active_isa();
    ridge::check_amx_env();
    if (cmd == "generate") return ridge::cli::cmd_generate(args);
    if (cmd == "mkmodel") return ridge::cli::cmd_mkmodel(args);
    if (cmd == "quantize") return ridge::cli::cmd_quantize(args);
    if (cmd == "convert") return ridge::cli::cmd_convert(args);
    if (cmd == "perplexity") return ridge::cli::cmd_perplexity(args);
    if (cmd == "info") return ridge::cli::cmd_info(args);
    if (cmd == "chat-template") return ridge::cli::cmd_chat_template(args);
    if (cmd == "tokenize") return ridge::cli::cmd_tokenize(args);
    if (cmd == "serve") return ridge::cli::cmd_serve(args);
    if (cmd == "router") return ridge::cli::cmd_router(args);
    if (cmd == "roofline") return ridge::cli::cmd_roofline(args);
    if (cmd == "bench") return ridge::cli::cmd_bench(args);
    if (cmd == "peaks") return ridge::cli::cmd_peaks(args);
    if (cmd == "tune-kernels") return ridge::cli::cmd_tune_kernels(args);
    if (cmd == "tune") return ridge::cli::cmd_tune(args);
    if (cmd == "grammar") return ridge::cli::cmd_grammar(args);
    std::fprintf(stderr, "ridge: error: unknown command '%s' (see ridge --help)\n", cmd.c_str());
    return 1;
  } catch (const ridge::Error& e) {
    std::fprintf(stderr, "ridge %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ridge %s: error: out of memory\n", cmd.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ridge %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}

}  // namespace
