#include "tools/tune_trial.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/engine.h"
#include "tools/bench_serve.h"

namespace ridge::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

// "2s", "100ms", "1.5" (seconds) -> seconds.
double parse_duration(const std::string& v, std::string_view item) {
  double scale = 1;
  std::string num = v;
  if (num.ends_with("ms")) scale = 1e-3, num.resize(num.size() - 2);
  else if (num.ends_with("us")) scale = 1e-6, num.resize(num.size() - 2);
  else if (num.ends_with("s")) num.resize(num.size() - 1);
  char* end = nullptr;
  const double x = std::strtod(num.c_str(), &end);
  if (num.empty() || *end || !std::isfinite(x) || x <= 0)
    fail("--slo {}: '{}' is not a duration (like 2s, 100ms or 500us)", item, v);
  return x * scale;
}

}  // namespace

std::string Slo::str() const {
  std::vector<std::string> parts;
  if (std::isfinite(ttft_s)) parts.push_back(fmt::format("ttft_p{:g}={:g}ms", ttft_pct, ttft_s * 1e3));
  if (std::isfinite(tpot_s)) parts.push_back(fmt::format("tpot_p{:g}={:g}ms", tpot_pct, tpot_s * 1e3));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ","));
}

Slo parse_slo(std::string_view s) {
  Slo slo;
  size_t pos = 0;
  bool any = false;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    const std::string item = trim(s.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("--slo {}: expected METRIC=LIMIT (ttft_p99=2s,tpot_p99=100ms)", item);
    const std::string key = trim(std::string_view(item).substr(0, eq));
    const double limit = parse_duration(trim(std::string_view(item).substr(eq + 1)), item);
    std::string metric = key;
    double pct = 99;
    if (const size_t u = key.find("_p"); u != std::string::npos) {
      metric = key.substr(0, u);
      const std::string p = key.substr(u + 2);
      char* e = nullptr;
      pct = std::strtod(p.c_str(), &e);
      if (p.empty() || *e || !(pct > 0 && pct <= 100)) fail("--slo {}: '{}' is not a percentile (p50, p90, p99, p99.9)", item, p);
    }
    if (metric == "ttft") slo.ttft_s = limit, slo.ttft_pct = pct;
    else if (metric == "tpot") slo.tpot_s = limit, slo.tpot_pct = pct;
    else fail("--slo {}: '{}' is not ttft or tpot", item, metric);
    any = true;
  }
  if (!any) fail("--slo '{}': no limit given (ttft_p99=2s,tpot_p99=100ms)", s);
  return slo;
}

void summarize(TrialMetrics& m, const std::vector<double>& arrival, const std::vector<double>& ttft,
               const std::vector<double>& tpot, const std::vector<double>& end, const std::vector<int32_t>& out_tokens,
               const Slo& slo, double min_duration_s) {
  const size_t n = ttft.size();
  m.requests = int64_t(n);
  m.completed = m.good = 0;
  int64_t ttft_ok = 0, tpot_ok = 0, good_tokens = 0, tokens = 0;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (size_t i = 0; i < n; ++i) {
    first = std::min(first, arrival[i]);
    const bool done = std::isfinite(end[i]);
    if (done) ++m.completed, last = std::max(last, end[i]);
    tokens += out_tokens[i];
    const bool a = done && ttft[i] <= slo.ttft_s, b = done && tpot[i] <= slo.tpot_s;
    ttft_ok += a, tpot_ok += b;
    if (a && b) ++m.good, good_tokens += out_tokens[i];
  }
  if (n == 0) return;
  // A trial cut off (or that finished nothing) lasted at least until it was cut off.
  m.duration_s = std::max({1e-9, last - first, min_duration_s});
  m.goodput = double(m.good) / m.duration_s;
  m.request_throughput = double(m.completed) / m.duration_s;
  m.output_throughput = double(tokens) / m.duration_s;
  m.good_output_throughput = double(good_tokens) / m.duration_s;
  m.attainment = double(m.good) / double(n);
  m.ttft_ok = double(ttft_ok) / double(n);
  m.tpot_ok = double(tpot_ok) / double(n);
  // Unfinished requests are infinitely late: they sit at the top of the percentiles.
  // (bench_serve's percentile() interpolates, which turns an infinite neighbor into NaN.)
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0.0;
    const double r = q / 100 * double(v.size() - 1);
    const size_t lo = size_t(std::floor(r)), hi = size_t(std::ceil(r));
    if (!std::isfinite(v[hi])) return v[hi];
    return v[lo] + (v[hi] - v[lo]) * (r - double(lo));
  };
  m.ttft_p50 = pct(ttft, 50);
  m.tpot_p50 = pct(tpot, 50);
  m.ttft_slo_pct = pct(ttft, std::isfinite(slo.ttft_s) ? slo.ttft_pct : 99);
  m.tpot_slo_pct = pct(tpot, std::isfinite(slo.tpot_s) ? slo.tpot_pct : 99);
}

double kv_pair_scale(DType kv) { return kv == DType::F32 ? 2.0 : is_scaled_kv_dtype(kv) ? 0.5 : 1.0; }

TrialResult run_trial(const Model& model, const Tokenizer* tok, const EngineConfig& cfg,
                      const std::vector<TracedRequest>& requests, int32_t max_concurrency, const Slo& slo,
                      double deadline_s) {
  Engine e(model, tok, cfg);
  const double kv_scale = kv_pair_scale(cfg.kv_dtype);
  const size_t n = requests.size();
  std::vector<double> arrival(n, 0), ttft(n, std::numeric_limits<double>::infinity()),
      tpot(n, std::numeric_limits<double>::infinity()), end(n, std::numeric_limits<double>::infinity()),
      first(n, 0), queue(n, 0);
  std::vector<int32_t> produced(n, 0);
  std::vector<bool> scheduled(n, false);
  std::unordered_map<int64_t, size_t> by_id;  // engine id -> request
  TrialResult r;
  const EngineStats s0 = e.stats();
  const Clock::time_point t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t next = 0;
  int64_t in_flight = 0;
  double waiting_sum = 0, kv_tokens_read = 0;
  int64_t full_steps = 0, decode_steps = 0, decode_seqs = 0;
  while (true) {
    const double t = now();
    if (t > deadline_s) {
      r.m.truncated = true;
      break;
    }
    while (next < n && requests[next].t <= t && (max_concurrency <= 0 || in_flight < max_concurrency)) {
      const TracedRequest& q = requests[next];
      RequestParams p;
      p.max_tokens = q.output_tokens;
      p.ignore_eos = true;
      p.sampling.temperature = 0;
      // A request held back by the concurrency limit arrives when it is sent.
      arrival[next] = std::max(q.t, max_concurrency > 0 ? t : q.t);
      if (q.output_tokens == 0) {
        ttft[next] = tpot[next] = 0, end[next] = t;
        ++next;
        continue;
      }
      by_id[e.add_request(q.prompt, p)] = next;
      ++next, ++in_flight;
    }
    if (!e.has_work()) {
      if (next >= n) break;
      const double wait = requests[next].t - now();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, deadline_s - now() + 1e-3)));
      continue;
    }
    const EngineStats before = e.stats();
    const double start = now();
    const std::vector<TokenEvent> ev = e.step();
    const double stop = now();
    const EngineStats& after = e.stats();
    StepRecord st;
    st.start_s = start;
    st.seconds = stop - start;
    st.seqs = int32_t(after.batched_seqs - before.batched_seqs);
    st.prompt_work = after.prefill_s > before.prefill_s;
    // Rows the forward ran: a decode-only step's drafts too (computed_tokens counts only
    // the accepted ones).
    st.tokens = int32_t(st.prompt_work ? after.computed_tokens - before.computed_tokens
                                       : after.decode_rows - before.decode_rows);
    st.pairs = (after.attn_pairs - before.attn_pairs) * kv_scale;
    st.waiting = e.n_waiting();
    const KvUsage kv = e.kv_usage(false);
    st.kv_use = kv.blocks_total > 0 ? float(kv.blocks_in_use) / float(kv.blocks_total) : 0.f;
    r.steps.push_back(st);
    waiting_sum += st.waiting;
    if (st.seqs >= cfg.max_num_seqs && st.waiting > 0) ++full_steps;
    if (!st.prompt_work && st.seqs > 0) {
      ++decode_steps, decode_seqs += st.seqs;
      int64_t ctx = 0;  // tokens in the KV of the sequences still running
      for (const auto& [id, i] : by_id) ctx += requests[i].prompt_len + produced[i];
      kv_tokens_read += double(ctx);
    }
    for (const TokenEvent& x : ev) {
      auto it = by_id.find(x.id);
      if (it == by_id.end()) continue;
      const size_t i = it->second;
      if (x.token >= 0) {
        if (produced[i]++ == 0) first[i] = stop, ttft[i] = stop - arrival[i];
      }
      if (x.finished) {
        end[i] = stop;
        tpot[i] = produced[i] > 1 ? (stop - first[i]) / double(produced[i] - 1) : 0;
        --in_flight;
      }
    }
    for (auto& [id, i] : by_id)
      if (!scheduled[i] && e.request_stats(id).scheduled) scheduled[i] = true, queue[i] = start - arrival[i];
    for (const TokenEvent& x : ev)
      if (x.finished) {
        by_id.erase(x.id);
        e.release(x.id);
      }
  }
  // A truncated trial: whatever is in flight or never sent is not good.
  for (auto& [id, i] : by_id) e.abort(id);
  TrialMetrics& m = r.m;
  const double first_arrival = n > 0 ? *std::min_element(arrival.begin(), arrival.end()) : 0;
  summarize(m, arrival, ttft, tpot, end, produced, slo, m.truncated ? deadline_s - first_arrival : 0);
  r.ttft_s = ttft;
  r.tpot_s = tpot;
  std::vector<double> qs;
  for (size_t i = 0; i < n; ++i)
    if (scheduled[i]) qs.push_back(queue[i]);
  m.queue_p50 = percentile(qs, 50);
  m.queue_p99 = percentile(qs, 99);
  m.steps = int64_t(r.steps.size());
  m.preemptions = e.n_preemptions();
  m.swaps = e.n_swaps();
  int64_t prompt_steps = 0, prompt_rows = 0, decode_rows = 0;
  for (const StepRecord& st : r.steps) {
    m.busy_s += st.seconds;
    if (st.prompt_work) ++prompt_steps, prompt_rows += st.tokens;
    else decode_rows += st.tokens;
    m.kv_peak = std::max(m.kv_peak, double(st.kv_use));
    if (st.prompt_work) m.prompt_step_s += st.seconds, m.max_prompt_step_s = std::max(m.max_prompt_step_s, st.seconds);
  }
  m.decode_step_s = decode_steps > 0 ? (m.busy_s - m.prompt_step_s) / double(decode_steps) : 0;
  m.decode_step_rows = decode_steps > 0 ? double(decode_rows) / double(decode_steps) : 0;
  m.prompt_step_mean_s = prompt_steps > 0 ? m.prompt_step_s / double(prompt_steps) : 0;
  m.prompt_step_rows = prompt_steps > 0 ? double(prompt_rows) / double(prompt_steps) : 0;
  m.mean_decode_batch = decode_steps > 0 ? double(decode_seqs) / double(decode_steps) : 0;
  m.full_seqs_share = m.steps > 0 ? double(full_steps) / double(m.steps) : 0;
  m.mean_waiting = m.steps > 0 ? waiting_sum / double(m.steps) : 0;
  const EngineStats& s1 = e.stats();
  m.spec_draft_tokens = s1.spec_draft_tokens - s0.spec_draft_tokens;
  m.spec_accepted_tokens = s1.spec_accepted_tokens - s0.spec_accepted_tokens;
  m.prefix_hit_tokens = s1.prefix_hit_tokens - s0.prefix_hit_tokens;
  m.prompt_tokens = s1.prompt_tokens - s0.prompt_tokens;
  m.kv_tokens = int64_t(e.kv_usage(false).blocks_total) * cfg.block_size;
  m.kv_pool_bytes = e.kv_pool_bytes();
  if (decode_steps > 0 && m.kv_tokens > 0) {
    const double kv_bytes = kv_tokens_read / double(decode_steps) * double(e.kv_pool_bytes()) / double(m.kv_tokens);
    m.kv_read_share = kv_bytes / (kv_bytes + double(model.streamed_weight_bytes()));
  }
  return r;
}

}  // namespace ridge::tools
