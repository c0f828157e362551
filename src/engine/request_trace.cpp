#include "engine/request_trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"

namespace ridge {
namespace {

using nlohmann::json;

// An integer field in [lo, hi], or -1 when absent.
int64_t int_field(const json& j, const char* key, int64_t lo, int64_t hi, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end()) return -1;
  if (!it->is_number_integer() && !it->is_number_unsigned())
    fail("{}: \"{}\" must be an integer, got {}", where, key, it->dump());
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) fail("{}: \"{}\" = {} is out of range [{}, {}]", where, key, v, lo, hi);
  return v;
}

}  // namespace

std::vector<TracedRequest> parse_request_trace(std::string_view text, std::string_view name, int32_t n_vocab) {
  std::vector<TracedRequest> out;
  size_t pos = 0;
  for (int64_t line_no = 1; pos < text.size(); ++line_no) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = fmt::format("{}:{}", name, line_no);
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object()) fail("{}: not a JSON object (one request per line: {{\"t\": ..., \"prompt\": [...], ...}})", where);
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "t" && it.key() != "prompt" && it.key() != "prompt_len" && it.key() != "max_tokens" &&
          it.key() != "output_tokens")
        fail("{}: unknown field \"{}\" (t, prompt, prompt_len, max_tokens, output_tokens)", where, it.key());
    TracedRequest r;
    auto t = j.find("t");
    if (t == j.end() || !t->is_number()) fail("{}: \"t\" (seconds since the start, a number) is missing", where);
    r.t = t->get<double>();
    if (!std::isfinite(r.t) || r.t < 0) fail("{}: \"t\" = {} must be a finite number >= 0", where, t->dump());
    if (auto p = j.find("prompt"); p != j.end()) {
      if (!p->is_array() || p->empty()) fail("{}: \"prompt\" must be a non-empty array of token ids", where);
      r.prompt.reserve(p->size());
      for (const json& id : *p) {
        if (!id.is_number_integer() && !id.is_number_unsigned())
          fail("{}: \"prompt\" holds {}, not a token id", where, id.dump());
        const int64_t v = id.get<int64_t>();
        if (v < 0 || v > INT32_MAX || (n_vocab > 0 && v >= n_vocab))
          fail("{}: token id {} is outside the vocabulary [0, {})", where, v, n_vocab > 0 ? n_vocab : INT32_MAX);
        r.prompt.push_back(int32_t(v));
      }
      r.prompt_len = int32_t(r.prompt.size());
      const int64_t len = int_field(j, "prompt_len", 1, INT32_MAX, where);
      if (len >= 0 && len != r.prompt_len)
        fail("{}: \"prompt_len\" {} disagrees with the prompt's {} ids", where, len, r.prompt_len);
    } else {
      const int64_t len = int_field(j, "prompt_len", 1, INT32_MAX, where);
      if (len < 0) fail("{}: needs \"prompt\" (token ids) or \"prompt_len\"", where);
      r.prompt_len = int32_t(len);
    }
    const int64_t mt = int_field(j, "max_tokens", 0, INT32_MAX, where);
    const int64_t ot = int_field(j, "output_tokens", 0, INT32_MAX, where);
    if (mt < 0 && ot < 0) fail("{}: needs \"max_tokens\" or \"output_tokens\"", where);
    r.max_tokens = int32_t(mt >= 0 ? mt : ot);
    r.output_tokens = int32_t(ot >= 0 ? ot : mt);
    if (r.output_tokens > r.max_tokens)
      fail("{}: \"output_tokens\" {} is above \"max_tokens\" {}", where, r.output_tokens, r.max_tokens);
    out.push_back(std::move(r));
  }
  if (out.empty()) fail("{}: no requests (JSON lines: {{\"t\": 0.0, \"prompt\": [1, 2], \"max_tokens\": 16}})", name);
  std::stable_sort(out.begin(), out.end(), [](const TracedRequest& a, const TracedRequest& b) { return a.t < b.t; });
  return out;
}

std::vector<TracedRequest> read_request_trace(const std::string& path, int32_t n_vocab) {
  return parse_request_trace(read_text_file(path), path, n_vocab);
}

std::string request_trace_line(const TracedRequest& r) {
  std::string s = fmt::format("{{\"t\": {:.6f}, ", r.t);
  if (!r.prompt.empty()) s += fmt::format("\"prompt\": [{}], ", fmt::join(r.prompt, ", "));
  else s += fmt::format("\"prompt_len\": {}, ", r.prompt_len);
  s += fmt::format("\"max_tokens\": {}, \"output_tokens\": {}}}", r.max_tokens, r.output_tokens);
  return s;
}

TraceRecorder::TraceRecorder(const std::string& path, double start_s) : path_(path), start_s_(start_s) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) fail("cannot create the request trace {}: {}", path, std::strerror(errno));
  std::fprintf(f_, "# ridge request trace (JSON lines: t, prompt, max_tokens, output_tokens)\n");
  std::fflush(f_);
}

TraceRecorder::~TraceRecorder() {
  if (f_) std::fclose(f_);
}

void TraceRecorder::record(double arrival_s, const std::vector<int32_t>& prompt, int32_t max_tokens,
                           int32_t output_tokens) {
  TracedRequest r;
  r.t = std::max(0.0, arrival_s - start_s_);
  r.prompt = prompt;
  r.prompt_len = int32_t(prompt.size());
  r.max_tokens = std::max(max_tokens, output_tokens);
  r.output_tokens = output_tokens;
  const std::string line = request_trace_line(r) + "\n";
  std::lock_guard lk(mu_);
  if (!f_) return;
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    std::fprintf(stderr, "serve: writing the request trace %s failed (%s): recording stopped after %lld requests\n",
                 path_.c_str(), std::strerror(errno), static_cast<long long>(written_));
    std::fclose(f_);
    f_ = nullptr;
    return;
  }
  ++written_;
}

int64_t TraceRecorder::written() const {
  std::lock_guard lk(mu_);
  return written_;
}

}  // namespace ridge
