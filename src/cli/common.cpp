#include "cli/common.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "core/error.h"

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

GenOptions gen_options(Args& a) {
  GenOptions o;
  o.threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  const std::string kv = a.str({"--kv-type"}, "f16");
  auto t = dtype_from_name(kv);
  if (!t || !(*t == DType::F16 || *t == DType::BF16 || *t == DType::F32))
    fail("--kv-type {} is not one of f16, bf16, f32", kv);
  o.kv_dtype = *t;
  o.block_size = int32_t(a.integer({"--block-size"}, 16, 1, 1024));
  o.max_batch_tokens = int32_t(a.integer({"-b", "--batch-size"}, 512, 1, 1 << 20));
  return o;
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

}  // namespace ridge::cli
