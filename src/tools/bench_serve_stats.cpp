// The parts of `ridge bench serve` that touch no socket: URL and SSE parsing, synthetic
// prompts and arrival times, and the statistics and report, as vLLM computes them.
#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "tools/bench_serve.h"

namespace ridge {

namespace {

[[noreturn]] void bad_url(std::string_view url, std::string_view why) {
  fail("--url '{}': {} (expected http://HOST[:PORT], e.g. http://127.0.0.1:8080)", url, why);
}

}  // namespace

HttpUrl parse_http_url(std::string_view url) {
  const auto bad = [&](std::string_view why) { bad_url(url, why); };
  std::string scheme;
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) bad("no http:// scheme");
  for (char c : url.substr(0, sep)) scheme.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  if (scheme == "https") bad("https is not supported, only plain http");
  if (scheme != "http") bad(fmt::format("scheme '{}' is not http", scheme));
  std::string_view rest = url.substr(sep + 3);
  if (rest.find_first_of("?#@ \t") != std::string_view::npos) bad("a user, query, fragment or space has no place here");
  const size_t slash = rest.find('/');
  std::string_view auth = rest.substr(0, slash), path = slash == std::string_view::npos ? "" : rest.substr(slash);
  HttpUrl u;
  std::string_view port;
  if (!auth.empty() && auth[0] == '[') {  // IPv6 literal
    const size_t close = auth.find(']');
    if (close == std::string_view::npos) bad("unterminated [IPv6] host");
    u.host = std::string(auth.substr(1, close - 1));
    std::string_view after = auth.substr(close + 1);
    if (!after.empty() && after[0] != ':') bad("junk after the [IPv6] host");
    if (!after.empty()) port = after.substr(1);
    if (!after.empty() && port.empty()) bad("empty port");
  } else {
    const size_t colon = auth.find(':');
    if (colon != std::string_view::npos && auth.find(':', colon + 1) != std::string_view::npos)
      bad("an IPv6 host needs brackets, e.g. http://[::1]:8080");
    u.host = std::string(auth.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = auth.substr(colon + 1);
      if (port.empty()) bad("empty port");
    }
  }
  if (u.host.empty()) bad("no host");
  if (!port.empty()) {
    unsigned long v = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || v > 65535) bad(fmt::format("port '{}' is not a number in 1..65535", port));
      v = v * 10 + unsigned(c - '0');
    }
    if (v < 1 || v > 65535) bad(fmt::format("port '{}' is not a number in 1..65535", port));
    u.port = uint16_t(v);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  u.base_path = std::string(path);
  return u;
}

void check_serve_options(const ServeBenchOptions& o) {
  if (o.url.empty()) fail("--url is required: the server's http://HOST:PORT");
  parse_http_url(o.url);
  if (o.endpoint.empty() || o.endpoint[0] != '/') fail("--endpoint '{}' must start with '/'", o.endpoint);
  if (o.num_prompts < 1) fail("--num-prompts {} must be at least 1", o.num_prompts);
  if (o.input_len < 1) fail("--input-len {} must be at least 1", o.input_len);
  if (o.output_len < 1) fail("--output-len {} must be at least 1", o.output_len);
  if (o.prefix_len < 0 || o.prefix_len > o.input_len)
    fail("--prefix-len {} must be in 0..{} (the shared prefix is part of the --input-len tokens)", o.prefix_len, o.input_len);
  if (!(o.request_rate > 0)) fail("--request-rate {} must be > 0 req/s (or inf: all at once)", o.request_rate);
  if (o.max_concurrency < 0) fail("--max-concurrency {} must be >= 1 (absent: unlimited)", o.max_concurrency);
  if (o.vocab_max <= 10) fail("--vocab-max {} must be > 10 (prompt ids are drawn from [10, vocab-max))", o.vocab_max);
  if (!(o.timeout_s > 0)) fail("--timeout-s {} must be > 0", o.timeout_s);
  if (o.slo_ttft_ms && !(*o.slo_ttft_ms >= 0)) fail("--slo-ttft {} must be >= 0 ms", *o.slo_ttft_ms);
  if (o.slo_tpot_ms && !(*o.slo_tpot_ms >= 0)) fail("--slo-tpot {} must be >= 0 ms", *o.slo_tpot_ms);
}

std::vector<std::vector<int32_t>> make_serve_prompts(const ServeBenchOptions& o) {
  Rng rng(o.seed);
  const uint64_t span = uint64_t(o.vocab_max - 10);
  auto tok = [&] { return int32_t(10 + rng.next() % span); };
  std::vector<int32_t> shared(size_t(o.prefix_len));
  for (auto& t : shared) t = tok();
  std::vector<std::vector<int32_t>> out(size_t(o.num_prompts));
  for (auto& p : out) {
    p = shared;
    while (int64_t(p.size()) < o.input_len) p.push_back(tok());
  }
  return out;
}

std::vector<double> arrival_times(int64_t n, double rate, uint64_t seed) {
  std::vector<double> t(size_t(std::max<int64_t>(n, 0)), 0.0);
  if (std::isinf(rate)) return t;
  // Its own stream, so that the prompts of a seed do not depend on the rate.
  Rng rng(seed ^ 0x5eed0fa77a1e5ull);
  double at = 0;
  for (auto& x : t) {
    x = at;
    at += -std::log(1.0 - rng.uniform()) / rate;
  }
  return t;
}

void SseParser::feed(std::string_view b, std::vector<SseEvent>& out) {
  size_t i = 0;
  if (b.empty()) return;
  // A \r\n split between two reads is one line end, not two.
  if (after_cr_ && b[0] == '\n') i = 1;
  after_cr_ = false;
  while (i < b.size()) {
    size_t j = b.find_first_of("\r\n", i);
    if (j == std::string_view::npos) {
      line_.append(b.substr(i));
      break;
    }
    line_.append(b.substr(i, j - i));
    line(line_, out);
    line_.clear();
    if (b[j] == '\r') {
      if (j + 1 == b.size()) after_cr_ = true;
      else if (b[j + 1] == '\n') ++j;
    }
    i = j + 1;
  }
}

void SseParser::line(std::string_view l, std::vector<SseEvent>& out) {
  if (!started_) {
    started_ = true;
    if (l.starts_with("\xEF\xBB\xBF")) l.remove_prefix(3);
  }
  if (l.empty()) {
    if (!data_.empty()) {
      data_.pop_back();  // the '\n' after the last data line
      out.push_back({event_, data_});
    }
    data_.clear();
    event_.clear();
    return;
  }
  if (l[0] == ':') return;
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : l.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field == "data") {
    data_.append(value);
    data_.push_back('\n');
  } else if (field == "event") {
    event_ = std::string(value);
  }  // id and retry mean nothing to a benchmark
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double h = double(v.size() - 1) * std::clamp(q, 0.0, 100.0) / 100.0;
  const size_t lo = size_t(std::floor(h)), hi = std::min(lo + 1, v.size() - 1);
  const double t = h - double(lo), a = v[lo], b = v[hi];
  // numpy's lerp: exact at both ends.
  return t < 0.5 ? a + (b - a) * t : b - (b - a) * (1 - t);
}

namespace {

LatencyStats latency_stats(const std::vector<double>& ms) {
  LatencyStats s;
  if (ms.empty()) return s;
  double sum = 0;
  for (double x : ms) sum += x;
  s.mean = sum / double(ms.size());
  double var = 0;
  for (double x : ms) var += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(var / double(ms.size()));  // numpy.std: the population's
  s.median = percentile(ms, 50);
  s.p99 = percentile(ms, 99);
  return s;
}

std::string rate_str(double r) { return std::isinf(r) ? "inf" : fmt::format("{:g}", r); }

}  // namespace

SpecCounters parse_spec_counters(std::string_view text) {
  SpecCounters c;
  // "NAME{labels} value" or "NAME value"; the per-position series are left out.
  auto value = [](std::string_view line) {
    const size_t sp = line.rfind(' ');
    return sp == std::string_view::npos ? 0.0 : std::strtod(std::string(line.substr(sp + 1)).c_str(), nullptr);
  };
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view prefix = line.substr(0, colon);
    if (prefix != "ridge" && prefix != "vllm") continue;
    const std::string_view rest = line.substr(colon + 1);
    const std::string_view name = rest.substr(0, rest.find_first_of("{ "));
    double* into = name == "spec_decode_num_drafts_total"          ? &c.drafts
                   : name == "spec_decode_num_draft_tokens_total"    ? &c.draft_tokens
                   : name == "spec_decode_num_accepted_tokens_total" ? &c.accepted
                                                                     : nullptr;
    if (!into) continue;
    c.found = true;
    *into += value(line);
  }
  return c;
}

ServeMetrics compute_serve_metrics(const ServeBenchRun& run, const ServeBenchOptions& o) {
  ServeMetrics m;
  m.duration_s = run.duration_s;
  m.peak_in_flight = run.peak_in_flight;
  if (run.spec_before.found && run.spec_after.found) {
    m.spec_drafts = int64_t(run.spec_after.drafts - run.spec_before.drafts);
    m.spec_draft_tokens = int64_t(run.spec_after.draft_tokens - run.spec_before.draft_tokens);
    m.spec_accepted_tokens = int64_t(run.spec_after.accepted - run.spec_before.accepted);
    m.spec = m.spec_draft_tokens > 0;
    if (m.spec) {
      m.spec_acceptance_rate = double(m.spec_accepted_tokens) / double(m.spec_draft_tokens);
      m.spec_acceptance_length = 1.0 + double(m.spec_accepted_tokens) / double(std::max<int64_t>(m.spec_drafts, 1));
    }
  }
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t good = 0;
  for (size_t i = 0; i < run.results.size(); ++i) {
    const RequestResult& r = run.results[i];
    if (!r.ok) {
      ++m.failed;
      if (m.errors.size() < 10) m.errors.push_back(fmt::format("request {}: {}", i, r.error));
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.e2e_s * 1e3);
    for (double x : r.itl_s) itl.push_back(x * 1e3);
    // vLLM: TPOT excludes the first token and exists for requests of 2+ tokens; for
    // goodput a 1-token request has TPOT 0.
    double t = 0;
    if (r.output_tokens > 1) {
      t = (r.e2e_s - r.ttft_s) * 1e3 / double(r.output_tokens - 1);
      tpot.push_back(t);
    }
    if ((!o.slo_ttft_ms || r.ttft_s * 1e3 <= *o.slo_ttft_ms) && (!o.slo_tpot_ms || t <= *o.slo_tpot_ms)) ++good;
  }
  if (m.duration_s > 0) {
    m.request_throughput = double(m.completed) / m.duration_s;
    m.request_goodput = double(good) / m.duration_s;
    m.output_throughput = double(m.total_output_tokens) / m.duration_s;
    m.total_token_throughput = double(m.total_input_tokens + m.total_output_tokens) / m.duration_s;
    // Cost per million tokens: the hour's price over the tokens an hour at this rate.
    if (o.price_per_hour > 0 && m.output_throughput > 0) {
      m.cost_per_m_output = o.price_per_hour / 3600.0 / m.output_throughput * 1e6;
      m.cost_per_m_total = o.price_per_hour / 3600.0 / m.total_token_throughput * 1e6;
    }
  }
  m.ttft = latency_stats(ttft);
  m.tpot = latency_stats(tpot);
  m.itl = latency_stats(itl);
  m.e2el = latency_stats(e2el);
  return m;
}

std::string serve_report_table(const ServeMetrics& m, const ServeBenchRun& run, const ServeBenchOptions& o) {
  std::string s;
  auto row = [&](std::string_view k, const std::string& v) { s += fmt::format("{:<40} {}\n", k, v); };
  auto f2 = [](double x) { return fmt::format("{:.2f}", x); };
  // Centred in a line of '=' or '-', as vLLM's banners.
  auto head = [&](std::string_view t, char c) {
    s += c == '=' ? fmt::format("{:=^50}\n", t) : fmt::format("{:-^50}\n", t);
  };
  head(" Serving Benchmark Result ", '=');
  row("Successful requests:", std::to_string(m.completed));
  row("Failed requests:", std::to_string(m.failed));
  if (o.max_concurrency > 0) row("Maximum request concurrency:", std::to_string(o.max_concurrency));
  row("Request rate configured (RPS):", rate_str(o.request_rate));
  row("Benchmark duration (s):", f2(m.duration_s));
  row("Total input tokens:", std::to_string(m.total_input_tokens));
  row("Total generated tokens:", std::to_string(m.total_output_tokens));
  row("Request throughput (req/s):", f2(m.request_throughput));
  row(o.slo_ttft_ms || o.slo_tpot_ms ? "Request goodput (req/s):" : "Request goodput (req/s, no SLO):", f2(m.request_goodput));
  row("Output token throughput (tok/s):", f2(m.output_throughput));
  row("Peak concurrent requests:", std::to_string(m.peak_in_flight));
  row("Total Token throughput (tok/s):", f2(m.total_token_throughput));
  if (o.price_per_hour > 0) {
    row("Cost per 1M output tokens:", fmt::format("{:.4f}", m.cost_per_m_output));
    row("Cost per 1M total tokens:", fmt::format("{:.4f}", m.cost_per_m_total));
  }
  if (m.spec) {  // as vLLM's bench serve reports it
    head(" Speculative Decoding ", '-');
    row("Acceptance rate (%):", f2(100 * m.spec_acceptance_rate));
    row("Acceptance length:", f2(m.spec_acceptance_length));
    row("Drafts:", std::to_string(m.spec_drafts));
    row("Draft tokens:", std::to_string(m.spec_draft_tokens));
    row("Accepted tokens:", std::to_string(m.spec_accepted_tokens));
  }
  auto lat = [&](std::string_view title, std::string_view name, const LatencyStats& l) {
    head(title, '-');
    row(fmt::format("Mean {} (ms):", name), f2(l.mean));
    row(fmt::format("Median {} (ms):", name), f2(l.median));
    row(fmt::format("P99 {} (ms):", name), f2(l.p99));
  };
  lat("Time to First Token", "TTFT", m.ttft);
  lat("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  lat("Inter-token Latency", "ITL", m.itl);
  lat("End-to-end Latency", "E2EL", m.e2el);
  head("", '=');
  if (m.failed) {
    // The same cause usually fails every request: count them by message.
    std::map<std::string, int64_t> by_msg;
    std::vector<std::string> order;
    for (const auto& r : run.results)
      if (!r.ok && by_msg[r.error]++ == 0) order.push_back(r.error);
    s += fmt::format("{} failed requests; the errors:\n", m.failed);
    for (size_t i = 0; i < order.size() && i < 5; ++i) s += fmt::format("  {} x {}\n", by_msg[order[i]], order[i]);
    if (order.size() > 5) s += fmt::format("  ... and {} other messages\n", order.size() - 5);
  }
  return s;
}

std::string serve_report_json(const ServeMetrics& m, const ServeBenchRun& run, const ServeBenchOptions& o) {
  nlohmann::ordered_json j;
  j["backend"] = "openai";
  j["model_id"] = run.model;
  j["url"] = o.url;
  j["endpoint"] = o.endpoint;
  j["num_prompts"] = o.num_prompts;
  if (std::isinf(o.request_rate)) j["request_rate"] = "inf";  // JSON has no infinity
  else j["request_rate"] = o.request_rate;
  j["max_concurrency"] = o.max_concurrency > 0 ? nlohmann::ordered_json(o.max_concurrency) : nullptr;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["prefix_len"] = o.prefix_len;
  j["vocab_max"] = o.vocab_max;
  j["seed"] = o.seed;
  j["timeout_s"] = o.timeout_s;
  j["slo_ttft_ms"] = o.slo_ttft_ms ? nlohmann::ordered_json(*o.slo_ttft_ms) : nullptr;
  j["slo_tpot_ms"] = o.slo_tpot_ms ? nlohmann::ordered_json(*o.slo_tpot_ms) : nullptr;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = m.request_goodput;
  j["price_per_hour"] = o.price_per_hour;
  j["cost_per_m_output_tokens"] = m.cost_per_m_output;
  j["cost_per_m_total_tokens"] = m.cost_per_m_total;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  j["max_concurrent_requests"] = m.peak_in_flight;
  if (m.spec) {
    j["spec_decode_acceptance_rate"] = m.spec_acceptance_rate;
    j["spec_decode_acceptance_length"] = m.spec_acceptance_length;
    j["spec_decode_num_drafts"] = m.spec_drafts;
    j["spec_decode_draft_tokens"] = m.spec_draft_tokens;
    j["spec_decode_accepted_tokens"] = m.spec_accepted_tokens;
  }
  auto lat = [&](std::string_view name, const LatencyStats& l) {
    j[fmt::format("mean_{}_ms", name)] = l.mean;
    j[fmt::format("median_{}_ms", name)] = l.median;
    j[fmt::format("std_{}_ms", name)] = l.std;
    j[fmt::format("p99_{}_ms", name)] = l.p99;
  };
  lat("ttft", m.ttft);
  lat("tpot", m.tpot);
  lat("itl", m.itl);
  lat("e2el", m.e2el);
  j["errors"] = m.errors;
  return j.dump(2) + "\n";
}

}  // namespace ridge
