#include "tools/workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"

namespace ridge::tools {
namespace {

using nlohmann::json;

LengthRange length_field(const json& v, std::string_view where, const char* key, int32_t lo) {
  auto is_int = [](const json& x) { return x.is_number_integer() || x.is_number_unsigned(); };
  LengthRange r;
  if (is_int(v)) {
    r.min = r.max = int32_t(std::clamp<int64_t>(v.get<int64_t>(), INT32_MIN, INT32_MAX));
  } else if (v.is_array() && v.size() == 2 && is_int(v[0]) && is_int(v[1])) {
    r.min = int32_t(std::clamp<int64_t>(v[0].get<int64_t>(), INT32_MIN, INT32_MAX));
    r.max = int32_t(std::clamp<int64_t>(v[1].get<int64_t>(), INT32_MIN, INT32_MAX));
  } else {
    fail("{}: \"{}\" must be an integer or [min, max], got {}", where, key, v.dump());
  }
  if (r.min < lo || r.max < r.min)
    fail("{}: \"{}\" = {} needs {} <= min <= max", where, key, v.dump(), lo);
  return r;
}

double number_field(const json& v, std::string_view where, const char* key, double lo, double hi) {
  if (!v.is_number()) fail("{}: \"{}\" must be a number, got {}", where, key, v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) fail("{}: \"{}\" = {} is out of range [{}, {}]", where, key, x, lo, hi);
  return x;
}

int64_t int_field(const json& v, std::string_view where, const char* key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() && !v.is_number_unsigned())
    fail("{}: \"{}\" must be an integer, got {}", where, key, v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail("{}: \"{}\" = {} is out of range [{}, {}]", where, key, x, lo, hi);
  return x;
}

// The longest prompt + output a workload may ask of a context of ctx tokens.
void check_fits(const WorkloadSpec& w, int32_t ctx, std::string_view where) {
  if (ctx <= 0) return;
  const int64_t longest = int64_t(w.prefix_share > 0 ? w.prefix_len : 0) + w.input.max + w.output.max;
  if (longest > ctx)
    fail("{}: prefix_len + input_len + output_len reach {} tokens, beyond the model's context of {}", where, longest,
         ctx);
}

}  // namespace

std::vector<std::string> builtin_workloads() { return {"chat", "rag", "burst"}; }

WorkloadSpec builtin_workload(std::string_view name, int32_t ctx) {
  // Sized for a context of at least 1k; a smaller model context scales every length down.
  const int32_t c = ctx > 0 ? std::min(ctx, 8192) : 2048;
  auto scaled = [c](int32_t n) { return std::max(1, int32_t(int64_t(n) * std::min(c, 2048) / 2048)); };
  WorkloadSpec w;
  w.name = std::string(name);
  w.source = "builtin " + w.name;
  if (name == "chat") {
    w.input = {scaled(32), scaled(256)};
    w.output = {scaled(32), scaled(128)};
  } else if (name == "rag") {
    w.prefix_len = scaled(1024);
    w.num_prefixes = 4;
    w.prefix_share = 1.0;
    w.input = {scaled(16), scaled(64)};
    w.output = {scaled(16), scaled(64)};
  } else if (name == "burst") {
    w.rate = std::numeric_limits<double>::infinity();
    w.input = {scaled(16), scaled(64)};
    w.output = {scaled(256), scaled(512)};
    w.num_requests = 16;
  } else {
    fail("unknown workload '{}' (built-in: chat, rag, burst; or a .json description or a .jsonl trace)", name);
  }
  return w;
}

WorkloadSpec parse_workload_json(std::string_view text, std::string_view where, int32_t ctx) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) fail("{}: not a JSON object (a workload description)", where);
  WorkloadSpec w;
  w.source = std::string(where);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "name") {
      if (!v.is_string()) fail("{}: \"name\" must be a string", where);
      w.name = v.get<std::string>();
    } else if (k == "num_requests") {
      w.num_requests = v.is_string() && v.get<std::string>() == "auto" ? 0 : int_field(v, where, "num_requests", 1, 1 << 20);
    } else if (k == "rate") {
      if (v.is_string() && v.get<std::string>() == "auto") w.rate = 0;
      else if (v.is_string() && v.get<std::string>() == "inf") w.rate = std::numeric_limits<double>::infinity();
      else w.rate = number_field(v, where, "rate", 1e-6, 1e9);
    } else if (k == "load") {
      w.load = number_field(v, where, "load", 0.01, 10);
    } else if (k == "max_concurrency") {
      w.max_concurrency = int32_t(int_field(v, where, "max_concurrency", 0, 1 << 20));
    } else if (k == "input_len") {
      w.input = length_field(v, where, "input_len", 1);
    } else if (k == "output_len") {
      w.output = length_field(v, where, "output_len", 1);
    } else if (k == "prefix_len") {
      w.prefix_len = int32_t(int_field(v, where, "prefix_len", 0, 1 << 24));
    } else if (k == "num_prefixes") {
      w.num_prefixes = int32_t(int_field(v, where, "num_prefixes", 1, 1 << 16));
    } else if (k == "prefix_share") {
      w.prefix_share = number_field(v, where, "prefix_share", 0, 1);
    } else if (k == "seed") {
      w.seed = uint64_t(int_field(v, where, "seed", 0, INT64_MAX));
    } else {
      fail("{}: unknown field \"{}\" (name, num_requests, rate, load, max_concurrency, input_len, output_len, "
           "prefix_len, num_prefixes, prefix_share, seed)",
           where, k);
    }
  }
  if (w.prefix_share > 0 && w.prefix_len == 0) fail("{}: \"prefix_share\" > 0 needs \"prefix_len\" > 0", where);
  if (int64_t(w.prefix_len) * w.num_prefixes > (int64_t(1) << 26))
    fail("{}: {} prefixes of {} tokens are more than a workload needs (at most 64M tokens in all)", where,
         w.num_prefixes, w.prefix_len);
  check_fits(w, ctx, where);
  return w;
}

WorkloadSpec load_workload(const std::string& name_or_path, int32_t ctx, int32_t n_vocab) {
  for (const auto& b : builtin_workloads())
    if (name_or_path == b) return builtin_workload(b, ctx);
  const std::string text = read_text_file(name_or_path);
  // A trace is JSON lines; a description one object (perhaps over many lines).
  size_t first = text.find_first_not_of(" \t\r\n");
  while (first != std::string::npos && text[first] == '#') {
    first = text.find('\n', first);
    if (first != std::string::npos) first = text.find_first_not_of(" \t\r\n", first);
  }
  const bool jsonl = name_or_path.size() > 6 && name_or_path.ends_with(".jsonl");
  bool trace = jsonl;
  if (!trace && first != std::string::npos) {
    const size_t eol = text.find('\n', first);
    const json j = json::parse(text.substr(first, eol == std::string::npos ? std::string::npos : eol - first),
                               nullptr, false);
    trace = j.is_object() && j.contains("t");
  }
  if (!trace) return parse_workload_json(text, name_or_path, ctx);
  WorkloadSpec w;
  w.name = "replay";
  w.source = name_or_path;
  w.trace = parse_request_trace(text, name_or_path, n_vocab);
  for (size_t i = 0; i < w.trace.size(); ++i) {
    const TracedRequest& r = w.trace[i];
    if (ctx > 0 && int64_t(r.prompt_len) + r.output_tokens > ctx)
      fail("{}: request {} (t = {:.3f} s) needs {} tokens, beyond the model's context of {}", name_or_path, i + 1, r.t,
           int64_t(r.prompt_len) + r.output_tokens, ctx);
  }
  return w;
}

std::vector<TracedRequest> make_requests(const WorkloadSpec& w, int64_t n, double rate, int32_t n_vocab,
                                         uint64_t seed) {
  RIDGE_CHECK(n_vocab > 4, "the vocabulary of {} tokens is too small for a workload", n_vocab);
  std::mt19937_64 rng(w.seed * 0x9E3779B97F4A7C15ull + seed);
  std::uniform_int_distribution<int32_t> id(3, n_vocab - 1);
  std::vector<TracedRequest> out;
  if (w.replay()) {
    out = w.trace;
    for (TracedRequest& r : out)
      if (r.prompt.empty())
        for (int32_t i = 0; i < r.prompt_len; ++i) r.prompt.push_back(id(rng));
    return out;
  }
  std::vector<std::vector<int32_t>> prefixes(w.prefix_share > 0 ? size_t(w.num_prefixes) : 0);
  for (auto& p : prefixes)
    for (int32_t i = 0; i < w.prefix_len; ++i) p.push_back(id(rng));
  std::exponential_distribution<double> gap(std::isfinite(rate) && rate > 0 ? rate : 1.0);
  std::uniform_real_distribution<double> u01(0, 1);
  double t = 0;
  for (int64_t k = 0; k < n; ++k) {
    TracedRequest r;
    if (k > 0 && std::isfinite(rate)) t += gap(rng);
    r.t = std::isfinite(rate) ? t : 0;
    if (w.prefix_share > 0 && u01(rng) < w.prefix_share) {
      const auto& p = prefixes[std::uniform_int_distribution<size_t>(0, prefixes.size() - 1)(rng)];
      r.prompt = p;
    }
    const int32_t in = std::uniform_int_distribution<int32_t>(w.input.min, w.input.max)(rng);
    for (int32_t i = 0; i < in; ++i) r.prompt.push_back(id(rng));
    r.prompt_len = int32_t(r.prompt.size());
    r.output_tokens = r.max_tokens = std::uniform_int_distribution<int32_t>(w.output.min, w.output.max)(rng);
    out.push_back(std::move(r));
  }
  return out;
}

std::string workload_json(const WorkloadSpec& w) {
  json j;
  j["name"] = w.name;
  j["source"] = w.source;
  if (w.replay()) {
    j["requests"] = w.trace.size();
    j["duration_s"] = w.trace.back().t;
  } else {
    if (w.num_requests > 0) j["num_requests"] = w.num_requests;
    else j["num_requests"] = "auto";
    if (w.rate == 0) j["rate"] = "auto", j["load"] = w.load;
    else if (!std::isfinite(w.rate)) j["rate"] = "inf";
    else j["rate"] = w.rate;
    j["input_len"] = {w.input.min, w.input.max};
    j["output_len"] = {w.output.min, w.output.max};
    j["prefix_len"] = w.prefix_len;
    j["num_prefixes"] = w.num_prefixes;
    j["prefix_share"] = w.prefix_share;
    j["seed"] = w.seed;
  }
  j["max_concurrency"] = w.max_concurrency;
  return j.dump();
}

}  // namespace ridge::tools
