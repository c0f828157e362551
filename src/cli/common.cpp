#include "cli/common.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/text_file.h"
#include "core/threadpool.h"
#include "dist/comm.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "tokenizer/hf_tokenizer.h"
#include "tools/kernel_cache.h"
#include "tools/kernel_tune.h"

namespace ridge::cli {

std::string resolve_model(Args& a) {
  if (auto m = a.str({"-m", "--model"})) return *m;
  if (const char* e = std::getenv("RIDGE_MODEL"); e && *e) return e;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("models", ec))
    if (entry.path().extension() == ".gguf") found.push_back(entry.path().string());
  if (found.empty())
    fail("no model given: pass -m MODEL.gguf, set RIDGE_MODEL, or put a .gguf in ./models (scripts/get-model.sh fetches one)");
  std::sort(found.begin(), found.end());
  return found.front();
}

Vocabulary load_vocabulary(Args& a) {
  Vocabulary v;
  if (const auto hf_json = a.str({"--tokenizer-json"})) {
    v.tok = load_hf_tokenizer_files(*hf_json, "");
  } else {
    v.file = gguf::File::open(resolve_model(a));
    v.tok = Tokenizer::from_gguf(*v.file);
  }
  return v;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_path, const Model& m) {
  std::unique_ptr<Tokenizer> tok;
  const std::filesystem::path dir(model_path);
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) {
    if (!std::filesystem::exists(dir / "tokenizer.json", ec)) fail("{}: no tokenizer.json", model_path);
    const auto cfg = dir / "tokenizer_config.json";
    tok = load_hf_tokenizer_files((dir / "tokenizer.json").string(), std::filesystem::exists(cfg, ec) ? cfg.string() : "");
    // Hugging Face pads the embedding past the tokenizer's ids (to a multiple of 64 or
    // 128): those rows are never a token.
    if (tok->n_vocab() > m.hparams().n_vocab)
      fail("{}: tokenizer.json has {} tokens but the embedding has {} rows", model_path, tok->n_vocab(), m.hparams().n_vocab);
    return tok;
  }
  tok = Tokenizer::from_gguf(m.file());
  if (tok->n_vocab() != m.hparams().n_vocab)
    fail("{}: tokenizer has {} tokens but token_embd.weight has {} rows", model_path, tok->n_vocab(), m.hparams().n_vocab);
  return tok;
}

namespace {

int threads_flag(Args& a) { return int(a.integer({"-t", "--threads"}, 0, 0, 1024)); }
int32_t block_size_flag(Args& a) { return int32_t(a.integer({"--block-size"}, 16, 1, 1024)); }

}  // namespace

// vLLM's names: fp8 is fp8_e4m3; int8 (llama.cpp's q8_0 cache, per position and head
// here) and i8 are one.
DType kv_type_flag(Args& a) {
  const std::string kv = a.str({"--kv-cache-dtype", "--kv-type"}, "auto");
  if (kv == "auto") return DType::F16;
  if (kv == "int8" || kv == "i8") return DType::I8;
  if (kv == "fp8" || kv == "fp8_e4m3") return DType::F8_E4M3;
  if (kv == "fp8_e5m2") return DType::F8_E5M2;
  auto t = dtype_from_name(kv);
  if (!t || !(*t == DType::F16 || *t == DType::BF16 || *t == DType::F32))
    fail("--kv-cache-dtype {} is not one of auto, f16, bf16, f32, int8, fp8 (fp8_e4m3), fp8_e5m2", kv);
  return *t;
}



int64_t parse_bytes(const std::string& s, const char* flag) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || errno || !(v >= 0)) fail("{} expects a size such as 512M or 2G, got '{}'", flag, s);
  std::string unit(end);
  for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  double mul = 1;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else fail("{}: unknown size unit '{}' in '{}' (use K, M or G)", flag, unit, s);
  if (v * mul > 9e18) fail("{} = {} is too large", flag, s);
  return int64_t(v * mul);
}

std::vector<std::string> read_prompt_lines(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) fail("cannot read {} {}", flag, path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  if (lines.empty()) fail("{} {} has no non-empty line", flag, path);
  return lines;
}

namespace {
struct KernelFlags {
  std::string dir;
  bool autotune = true;
  int threads = 0;
  bool done = false;
};
KernelFlags& kernel_flags_state() {
  static KernelFlags f;
  return f;
}
}  // namespace

void kernel_flags(Args& a, int threads) {
  KernelFlags& f = kernel_flags_state();
  f.dir = kernel_cache_dir(a.str({"--kernel-cache"}, ""));
  const char* env = std::getenv("RIDGE_KERNEL_AUTOTUNE");
  const std::string_view e = env ? env : "";
  f.autotune = !a.flag({"--no-kernel-autotune"}) && e != "0" && e != "off" && e != "false" && e != "no";
  f.threads = threads;
}

std::unique_ptr<Model> load_model_for(const std::string& path, const EngineConfig& c) {
  TpShard shard;
  PpStage pp;
  if (c.tensor_parallel_size > 1 || c.pipeline_parallel_size > 1) {
    const dist::Grid g = dist::Grid::of(dist::world()->rank(), c.tensor_parallel_size, c.pipeline_parallel_size);
    if (g.tp > 1) shard = {g.tp_rank, g.tp, c.expert_parallel};
    if (g.pp > 1) pp.stage = g.stage, pp.size = g.pp;
  }
  if (c.device != Device::Cpu) return Model::load(path, false, shard, pp);
  prepare_kernels();
  return Model::load(path, true, shard, pp);
}

void prepare_kernels() {
  KernelFlags& f = kernel_flags_state();
  if (f.done) return;  // once per process: a draft model's load comes here too
  f.done = true;
  const KernelCacheUse use = apply_kernel_cache(f.dir);
  const bool can_tune = f.autotune && kernels::gemm_available(DType::Q8_0);
  // An older tuner's entry runs until a new one replaces it (applied already).
  const bool stale = use.status == KernelCacheUse::Stale;
  if (use.status != KernelCacheUse::NoEntry && !(stale && can_tune)) {
    if (use.status != KernelCacheUse::Off) std::fprintf(stderr, "%s\n", use.line.c_str());
    return;
  }
  if (!can_tune) return;
  std::fprintf(stderr,
               "kernels: %s: timing the kernels' parameters once (about 20 s; `ridge tune-kernels` redoes it, "
               "--no-kernel-autotune or RIDGE_KERNEL_AUTOTUNE=0 skips it)\n",
               stale ? "this CPU's entry is an older ridge's" : "first use of this CPU");
  const std::string file = kernel_cache_file(f.dir);
  try {
    check_cache_dir(f.dir);
    const TuneResult r = tune_kernels(quick_tune_options(f.threads));
    try {
      save_tuned(file, kernel_cpu_id(), r.entry);
      std::fprintf(stderr, "kernels: tuned in %.1f s, wrote %s\n", r.entry.seconds, file.c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "kernels: tuned in %.1f s for this run only (not saved: %s)\n", r.entry.seconds, e.what());
    }
  } catch (const std::exception& e) {  // no directory, no memory for the rings: run untuned
    kernels::set_kernel_tuning(kernels::default_tuning());
    kernels::set_attention_tile_keys(kernels::kDefaultAttnTileKeys);
    const KernelCacheUse again = stale ? apply_kernel_cache(f.dir) : KernelCacheUse{KernelCacheUse::NoEntry, ""};
    if (again.status == KernelCacheUse::Stale || again.status == KernelCacheUse::Applied) {  // as before the attempt
      std::fprintf(stderr, "kernels: the older tuner's parameters (not tuned again: %s)\n", e.what());
    } else {
      std::fprintf(stderr, "kernels: default parameters (not tuned: %s)\n", e.what());
    }
  }
}

void prepare_kernels_worker(const std::string& dir) {
  KernelFlags& f = kernel_flags_state();
  f.dir = dir;
  f.autotune = false;
  prepare_kernels();
}

void forward_config(Args& a, EngineConfig& c) {
  c.threads = threads_flag(a);
  kernel_flags(a, c.threads);
  c.kernel_cache = kernel_flags_state().dir;
  c.kv_dtype = kv_type_flag(a);
  c.block_size = block_size_flag(a);
  c.max_num_batched_tokens =
      int32_t(a.integer({"--max-num-batched-tokens", "-b", "--batch-size"}, c.max_num_batched_tokens, 1, 1 << 24));
  const std::string form = a.str({"--mla-prefill"}, "auto");
  if (form == "auto") c.mla_prefill = MlaPrefill::Auto;
  else if (form == "absorbed") c.mla_prefill = MlaPrefill::Absorbed;
  else if (form == "expanded") c.mla_prefill = MlaPrefill::Expanded;
  else fail("--mla-prefill {} is not one of auto, absorbed, expanded", form);
}

void engine_config(Args& a, EngineConfig& c) {
  const std::string dev = a.str({"--device"}, "cpu");
  if (dev == "cpu") c.device = Device::Cpu;
  else if (dev == "cuda") c.device = Device::Cuda;
  else fail("--device {} is not one of cpu, cuda", dev);
  forward_config(a, c);
  // Under mpirun every process is a rank of one split model: the world is the grid of
  // pipeline stages by tensor-parallel ranks (dist::Grid).
  c.tensor_parallel_size = int32_t(a.integer({"--tensor-parallel-size", "-tp"}, 1, 1, 4096));
  c.pipeline_parallel_size = int32_t(a.integer({"--pipeline-parallel-size", "-pp"}, 1, 1, 4096));
  // vLLM's flag; with one tensor-parallel rank (or a dense model) it changes nothing.
  c.expert_parallel = a.flag({"--enable-expert-parallel", "-ep"});
  const int split = c.tensor_parallel_size * c.pipeline_parallel_size;
  const dist::Comm* w = dist::world();
  const int world = w ? w->size() : 1;
  if (split != world) {
    if (world == 1)
      fail("--tensor-parallel-size {} x --pipeline-parallel-size {} needs {} processes: start ridge under mpirun -np {}",
           c.tensor_parallel_size, c.pipeline_parallel_size, split, split);
    fail("mpirun started {} processes but --tensor-parallel-size is {} and --pipeline-parallel-size {}: the world "
         "size must be their product",
         world, c.tensor_parallel_size, c.pipeline_parallel_size);
  }
  // Without -t a split model's ranks each take dist::default_threads() (the engine and
  // the workers: the cores each may use, shared on one machine).
  c.max_num_seqs = int32_t(a.integer({"--max-num-seqs"}, c.max_num_seqs, 1, 1 << 20));
  if (auto m = a.str({"--kv-cache-memory"})) c.kv_cache_bytes = parse_bytes(*m, "--kv-cache-memory");
  c.mem_fraction = a.number({"--mem-fraction"}, c.mem_fraction, 0.001, 1.0);
  const bool cache_on = a.flag({"--prefix-cache"}), cache_off = a.flag({"--no-prefix-cache"});
  if (cache_on && cache_off) fail("--prefix-cache and --no-prefix-cache contradict each other");
  c.prefix_cache = !cache_off;
  c.swa_full = a.flag({"--swa-full"});
  c.jump_forward = !a.flag({"--no-jump-forward"});
  const std::string mode = a.str({"--preemption-mode"}, "recompute");
  if (mode == "recompute") c.preemption = PreemptionMode::Recompute;
  else if (mode == "swap") c.preemption = PreemptionMode::Swap;
  else if (mode == "auto") c.preemption = PreemptionMode::Auto;
  else fail("--preemption-mode {} is not one of recompute, swap, auto", mode);
  if (auto sw = a.str({"--swap-space"})) {
    // In GB, as vLLM's flag; a unit suffix is accepted too.
    const bool bare = !sw->empty() && std::isdigit(static_cast<unsigned char>(sw->back()));
    c.swap_bytes = parse_bytes(bare ? *sw + "G" : *sw, "--swap-space");
  }
  c.swap_dir = a.str({"--swap-dir"}, c.swap_dir);
  // Fault injection for the swap tests (engine/swap_space.h); never set in normal use.
  if (const char* f = std::getenv("RIDGE_SWAP_FAULTS")) c.swap_faults = f;
  c.aging_steps = int32_t(a.integer({"--priority-aging"}, c.aging_steps, 1, 1 << 30));
  c.mlock = a.flag({"--mlock"});
  SpeculativeConfig& sp = c.speculative;
  const auto method = a.str({"--speculative-method"});
  if (const auto& m = method) {
    if (*m == "ngram") sp.method = SpecMethod::Ngram;
    else if (*m == "suffix") sp.method = SpecMethod::Suffix;
    else if (*m == "draft") sp.method = SpecMethod::Draft;
    else if (*m == "none") sp.method = SpecMethod::None;
    else fail("--speculative-method {} is not one of ngram, suffix, draft, none", *m);
  }
  if (auto d = a.str({"--draft-model", "-md", "--model-draft"})) {
    sp.draft_model = *d;
    // A draft model and no method: the draft model is the method (as llama.cpp's -md).
    if (sp.method == SpecMethod::None && !method) sp.method = SpecMethod::Draft;
  }
  if (sp.method == SpecMethod::Draft && sp.draft_model.empty())
    fail("--speculative-method draft needs --draft-model FILE (a smaller GGUF with the same vocabulary)");
  sp.suffix_cache_tokens = a.integer({"--suffix-cache-tokens"}, sp.suffix_cache_tokens, 0, int64_t(1) << 40);
  sp.suffix_min_token_prob = a.number({"--suffix-min-token-prob"}, sp.suffix_min_token_prob, 0, 1);
  sp.num_speculative_tokens = int32_t(a.integer({"--num-speculative-tokens"}, sp.num_speculative_tokens, 1, 32));
  sp.prompt_lookup_max = int32_t(a.integer({"--prompt-lookup-max"}, sp.prompt_lookup_max, 1, 64));
  sp.prompt_lookup_min = int32_t(a.integer({"--prompt-lookup-min"}, std::min(sp.prompt_lookup_min, sp.prompt_lookup_max), 1, 64));
  sp.adaptive = !a.flag({"--no-speculative-adaptive"});
  if (sp.prompt_lookup_min > sp.prompt_lookup_max)
    fail("--prompt-lookup-min {} is above --prompt-lookup-max {}", sp.prompt_lookup_min, sp.prompt_lookup_max);
}

void apply_config_file(Args& a) {
  if (const auto path = a.str({"--config"})) apply_config_file(a, *path, "--config");
}

void apply_config_file(Args& a, const std::string& path, const char* flag) {
  const nlohmann::json j = nlohmann::json::parse(read_text_file(path), nullptr, false);
  if (!j.is_object()) fail("{} {}: not a JSON object of flags", flag, path);
  const nlohmann::json& flags = j.contains("flags") ? j["flags"] : j;
  if (!flags.is_object()) fail("{} {}: \"flags\" is not an object", flag, path);
  const std::string origin = std::string(flag) + " " + path;
  for (auto it = flags.begin(); it != flags.end(); ++it) {
    std::string name = it.key();
    while (!name.empty() && name[0] == '-') name.erase(0, 1);
    for (char& ch : name)
      if (ch == '_') ch = '-';
    if (name.empty() || name == "config") fail("{}: \"{}\" is not a flag", origin, it.key());
    const std::string flag = "--" + name;
    if (a.given({flag})) continue;  // the command line's
    const nlohmann::json& v = it.value();
    if (v.is_boolean()) {
      if (v.get<bool>()) a.append(flag, origin);
    } else if (v.is_string()) {
      a.append(flag + "=" + v.get<std::string>(), origin);
    } else if (v.is_number_integer() || v.is_number_unsigned()) {
      a.append(fmt::format("{}={}", flag, v.get<int64_t>()), origin);
    } else if (v.is_number()) {
      a.append(fmt::format("{}={}", flag, v.get<double>()), origin);
    } else {
      fail("{}: \"{}\" must be a string, a number or a boolean, got {}", origin, it.key(), v.dump());
    }
  }
}

EngineConfig engine_config(Args& a) {
  EngineConfig c;
  engine_config(a, c);
  return c;
}

SamplingParams sampling_params(Args& a, bool* seed_given) {
  SamplingParams p;
  p.temperature = float(a.number({"--temp", "--temperature"}, p.temperature, 0, 100));
  p.top_k = int32_t(a.integer({"--top-k"}, p.top_k, 0, std::numeric_limits<int32_t>::max()));
  p.top_p = float(a.number({"--top-p"}, p.top_p, 0, 1));
  p.min_p = float(a.number({"--min-p"}, p.min_p, 0, 1));
  p.repetition_penalty = float(a.number({"--repeat-penalty"}, p.repetition_penalty, 0.01, 100));
  p.penalty_last_n = int32_t(a.integer({"--repeat-last-n"}, p.penalty_last_n, -1, 1 << 24));
  p.presence_penalty = float(a.number({"--presence-penalty"}, 0, -2, 2));
  p.frequency_penalty = float(a.number({"--frequency-penalty"}, 0, -2, 2));
  auto seed = a.str({"-s", "--seed"});
  if (seed) {
    char* end = nullptr;
    errno = 0;
    p.seed = std::strtoull(seed->c_str(), &end, 10);
    if (seed->empty() || *end || errno || (*seed)[0] == '-') fail("--seed expects a non-negative integer, got '{}'", *seed);
  } else {
    p.seed = uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  }
  if (seed_given) *seed_given = seed.has_value();
  return p;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void print_memory_budget(const char* cmd, const Model& m, const Engine& e) {
  const double mib = 1 << 20;
  const int64_t total = m.resident_weight_bytes() + e.kv_pool_bytes() + e.activation_bytes();
  std::fprintf(stderr,
               "%s: memory: weights %.1f MiB (repacked %.1f, read from the file %.1f, vectors %.1f), KV pool %.1f MiB "
               "(%lld tokens, %s, touched as used), activations up to %.1f MiB; total %.1f MiB\n",
               cmd, double(m.resident_weight_bytes()) / mib, double(m.packed_bytes()) / mib,
               double(m.mapped_bytes()) / mib,
               double(m.resident_weight_bytes() - m.packed_bytes() - m.mapped_bytes()) / mib,
               double(e.kv_pool_bytes()) / mib, (long long)e.kv_capacity_tokens(),
               std::string(dtype_name(e.config().kv_dtype)).c_str(), double(e.activation_bytes()) / mib,
               double(total) / mib);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace ridge::cli
