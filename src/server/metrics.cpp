#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <iterator>
#include <map>
#include <span>
#include <vector>

namespace ridge {

namespace {

// vLLM's bucket boundaries, so quantiles compare one to one with a vLLM deployment.
constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                   0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                   20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
constexpr double kTokenLatencyBuckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                           0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                           7.5,  10.0,  20.0, 40.0,  80.0};
constexpr double kRequestLatencyBuckets[] = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                             5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
constexpr double kTokenCountBuckets[] = {1,    2,    5,     10,    20,    50,    100,   200,
                                         500,  1000, 2000,  5000,  10000, 20000, 50000, 100000};

constexpr size_t kMaxBounds = 22;

constexpr double kCountBuckets[] = {0, 1, 2, 5, 10, 20, 50, 100};

enum Hist {
  kTtft, kTpot, kItl, kE2e, kQueue, kPromptTokens, kGenTokens,
  kPrefillTime, kDecodeTime, kRecomputeTime, kCachedTokens, kPreemptions, kNumHist
};

struct HistDef {
  const char* name;
  const char* help;
  std::span<const double> bounds;
};

const HistDef kHistDefs[kNumHist] = {
    {"ridge:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
     kTtftBuckets},
    {"ridge:time_per_output_token_seconds",
     "Histogram of time per output token in seconds (mean over a request's decode).",
     kTokenLatencyBuckets},
    {"ridge:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
     kTokenLatencyBuckets},
    {"ridge:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
     kRequestLatencyBuckets},
    {"ridge:request_queue_time_seconds",
     "Histogram of time spent waiting in the queue in seconds.", kRequestLatencyBuckets},
    {"ridge:request_prompt_tokens", "Number of prefill tokens processed per request.",
     kTokenCountBuckets},
    {"ridge:request_generation_tokens", "Number of generation tokens processed per request.",
     kTokenCountBuckets},
    // Attribution: a request's share of each batched step it rode in (step time x its
    // tokens / the step's tokens), split by phase.
    {"ridge:request_prefill_time_seconds",
     "Histogram of a request's share of the prefill steps it rode in, in seconds.", kRequestLatencyBuckets},
    {"ridge:request_decode_time_seconds",
     "Histogram of a request's share of the decode steps it rode in, in seconds.", kRequestLatencyBuckets},
    {"ridge:request_recompute_time_seconds",
     "Histogram of a request's share of steps spent recomputing KV lost to preemption, in seconds.",
     kRequestLatencyBuckets},
    {"ridge:request_cached_tokens", "Number of prompt tokens served by the prefix cache per request.",
     kTokenCountBuckets},
    {"ridge:request_preemptions", "Number of preemptions per request.", kCountBuckets},
};

struct Histogram {
  std::array<uint64_t, kMaxBounds + 1> counts{};  // per bucket, not cumulative; last: +Inf
  double sum = 0;
  uint64_t count = 0;
};

// Integral values print without a fraction or exponent (what a reader expects of counts
// and of "le" bounds like 10); others print in shortest round-trip form, which
// Prometheus's float parser accepts, exponent included.
std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v + 0.0);
  return fmt::format("{}", v);
}

void header(std::string& o, std::string_view name, std::string_view help,
            std::string_view type) {
  fmt::format_to(std::back_inserter(o), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// One label-value pair as it appears between braces; the value stays escaped.
using Label = std::pair<std::string_view, std::string_view>;

// Parses k="v" pairs from s[i..] up to the closing '}' (consumed); false if malformed.
bool parse_labels(std::string_view s, size_t& i, std::vector<Label>& out) {
  auto skip_ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  for (;;) {
    skip_ws();
    if (i >= s.size()) return false;
    if (s[i] == '}') {
      ++i;
      return true;
    }
    const size_t k = i;
    while (i < s.size() && s[i] != '=' && s[i] != ' ' && s[i] != '\t') ++i;
    const std::string_view key = s.substr(k, i - k);
    skip_ws();
    if (key.empty() || i + 1 >= s.size() || s[i] != '=') return false;
    ++i;
    skip_ws();
    if (i >= s.size() || s[i] != '"') return false;
    const size_t v = ++i;
    while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
    if (i >= s.size()) return false;
    out.emplace_back(key, s.substr(v, i - v));
    ++i;
    skip_ws();
    if (i < s.size() && s[i] == ',') ++i;
  }
}

std::optional<double> parse_value(std::string_view t) {
  if (t == "+Inf" || t == "Inf") return HUGE_VAL;
  if (t == "-Inf") return -HUGE_VAL;
  if (t == "NaN") return std::nan("");
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size()) return std::nullopt;
  return v;
}

}  // namespace

struct Metrics::State {
  std::array<Histogram, kNumHist> hist;
  Gauges gauges;
  int64_t peak = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t prefix_queries = 0;
  int64_t prefix_hits = 0;
  int64_t preemptions = 0;
  int64_t swaps = 0;
  int64_t swap_fallbacks = 0;
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  int64_t grammars_compiled = 0, grammar_cache_hits = 0;
  double grammar_compile_s = 0;
  int64_t grammar_tokens = 0, jump_tokens = 0, jump_accepted = 0;
  double grammar_mask_s = 0;
  std::map<std::string, uint64_t, std::less<>> finished{{"abort", 0}, {"length", 0}, {"stop", 0}};
  uint64_t invariant_checks = 0;
  uint64_t invariant_failures = 0;
  std::map<std::string, uint64_t, std::less<>> http{{"2xx", 0}, {"4xx", 0}, {"5xx", 0}};

  void observe(Hist h, double v) {
    if (std::isnan(v)) return;
    const auto b = kHistDefs[h].bounds;
    // "le" is inclusive: v lands in the first bucket whose bound is >= v.
    const size_t i = size_t(std::lower_bound(b.begin(), b.end(), v) - b.begin());
    Histogram& x = hist[h];
    ++x.counts[i];
    x.sum += v;
    ++x.count;
  }
};

std::string escape_label_value(std::string_view v) {
  std::string o;
  o.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '"')
      o += "\\\"";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

Metrics::Metrics(std::string model_name)
    : model_label_("model_name=\"" + escape_label_value(model_name) + "\""),
      s_(std::make_unique<State>()) {}

Metrics::~Metrics() = default;

void Metrics::observe_ttft(double s) {
  std::lock_guard lk(mu_);
  s_->observe(kTtft, s);
}
void Metrics::observe_tpot(double s) {
  std::lock_guard lk(mu_);
  s_->observe(kTpot, s);
}
void Metrics::observe_itl(double s) {
  std::lock_guard lk(mu_);
  s_->observe(kItl, s);
}
void Metrics::observe_e2e(double s) {
  std::lock_guard lk(mu_);
  s_->observe(kE2e, s);
}
void Metrics::observe_queue(double s) {
  std::lock_guard lk(mu_);
  s_->observe(kQueue, s);
}
void Metrics::observe_request_tokens(int prompt, int gen) {
  std::lock_guard lk(mu_);
  s_->observe(kPromptTokens, prompt);
  s_->observe(kGenTokens, gen);
}

void Metrics::observe_attribution(double prefill_s, double decode_s, double recompute_s, int cached_tokens,
                                  int preemptions) {
  std::lock_guard lk(mu_);
  s_->observe(kPrefillTime, prefill_s);
  s_->observe(kDecodeTime, decode_s);
  s_->observe(kRecomputeTime, recompute_s);
  s_->observe(kCachedTokens, cached_tokens);
  s_->observe(kPreemptions, preemptions);
}

void Metrics::add_prompt_tokens(int64_t n) {
  if (n <= 0) return;
  std::lock_guard lk(mu_);
  s_->prompt_tokens += n;
}
void Metrics::add_generation_tokens(int64_t n) {
  if (n <= 0) return;
  std::lock_guard lk(mu_);
  s_->generation_tokens += n;
}
void Metrics::set_prefix_cache_totals(int64_t queries, int64_t hits) {
  std::lock_guard lk(mu_);
  s_->prefix_queries = queries;
  s_->prefix_hits = hits;
}
void Metrics::set_preemptions_total(int64_t n, int64_t swaps, int64_t swap_fallbacks) {
  std::lock_guard lk(mu_);
  s_->preemptions = n;
  s_->swaps = swaps;
  s_->swap_fallbacks = swap_fallbacks;
}
void Metrics::set_spec_decode_totals(int64_t drafts, int64_t draft_tokens, int64_t accepted,
                                     const std::vector<int64_t>& accepted_per_pos) {
  std::lock_guard lk(mu_);
  s_->spec_drafts = drafts;
  s_->spec_draft_tokens = draft_tokens;
  s_->spec_accepted = accepted;
  s_->spec_accepted_per_pos = accepted_per_pos;
}
void Metrics::set_grammar_totals(int64_t compiled, int64_t cache_hits, double compile_s) {
  std::lock_guard lk(mu_);
  s_->grammars_compiled = compiled;
  s_->grammar_cache_hits = cache_hits;
  s_->grammar_compile_s = compile_s;
}
void Metrics::set_grammar_engine_totals(int64_t tokens, double mask_s, int64_t jump_tokens, int64_t jump_accepted) {
  std::lock_guard lk(mu_);
  s_->grammar_tokens = tokens;
  s_->grammar_mask_s = mask_s;
  s_->jump_tokens = jump_tokens;
  s_->jump_accepted = jump_accepted;
}
void Metrics::request_finished(std::string_view reason) {
  std::lock_guard lk(mu_);
  auto it = s_->finished.find(reason);
  if (it == s_->finished.end()) it = s_->finished.emplace(std::string(reason), 0).first;
  ++it->second;
}
void Metrics::invariant_check(bool ok) {
  std::lock_guard lk(mu_);
  ++s_->invariant_checks;
  if (!ok) ++s_->invariant_failures;
}
void Metrics::http_status(int code) {
  if (code < 100 || code > 599) code = 500;
  const std::string cls = fmt::format("{}xx", code / 100);
  std::lock_guard lk(mu_);
  ++s_->http[cls];
}

void Metrics::set_gauges(const Gauges& g) {
  std::lock_guard lk(mu_);
  s_->gauges = g;
  s_->peak = std::max(s_->peak, g.running + g.waiting);
}

std::string Metrics::render() const {
  State st;
  {
    std::lock_guard lk(mu_);
    st = *s_;
  }
  const std::string& ml = model_label_;
  std::string o;
  o.reserve(16384);
  auto out = std::back_inserter(o);

  auto gauge = [&](std::string_view name, std::string_view help, double v) {
    header(o, name, help, "gauge");
    fmt::format_to(out, "{}{{{}}} {}\n", name, ml, num(v));
  };
  auto counter = [&](std::string_view name, std::string_view help, double v) {
    header(o, name, help, "counter");
    fmt::format_to(out, "{}{{{}}} {}\n", name, ml, num(v));
  };
  auto labelled = [&](std::string_view name, std::string_view help, std::string_view label,
                      const std::map<std::string, uint64_t, std::less<>>& m) {
    header(o, name, help, "counter");
    for (const auto& [k, v] : m)
      fmt::format_to(out, "{}{{{},{}=\"{}\"}} {}\n", name, ml, label, escape_label_value(k), v);
  };

  const Gauges& g = st.gauges;
  gauge("ridge:num_requests_running", "Number of requests in model execution batches.",
        double(g.running));
  gauge("ridge:num_requests_waiting", "Number of requests waiting to be processed.",
        double(g.waiting));
  gauge("ridge:num_requests_peak", "Highest running + waiting requests seen since start.",
        double(st.peak));
  gauge("ridge:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        g.kv_cache_usage);
  gauge("ridge:kv_blocks_total", "Number of KV-cache pages (a block of tokens is one page, or several for a model with sliding-window layers).", double(g.kv_blocks_total));
  gauge("ridge:kv_blocks_free", "Number of free KV-cache pages.", double(g.kv_blocks_free));
  gauge("ridge:kv_blocks_evictable", "KV-cache pages held only by the prefix cache.",
        double(g.kv_blocks_evictable));
  gauge("ridge:kv_blocks_in_use", "KV-cache pages held by requests.",
        double(g.kv_blocks_in_use));

  counter("ridge:prompt_tokens_total", "Number of prefill tokens processed.",
          double(st.prompt_tokens));
  counter("ridge:generation_tokens_total", "Number of generation tokens processed.",
          double(st.generation_tokens));
  counter("ridge:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          double(st.prefix_queries));
  counter("ridge:prefix_cache_hits_total",
          "Prefix cache hits, in terms of number of cached tokens.", double(st.prefix_hits));
  // What the routers that steer vLLM replicas read (llm-d's inference scheduler, NVIDIA
  // Dynamo, SGLang's router), under vLLM's own names and labels (engine="0").
  const std::string vl = "engine=\"0\"," + ml;
  auto vllm = [&](std::string_view name, std::string_view help, std::string_view type, double v) {
    header(o, name, help, type);
    fmt::format_to(out, "{}{{{}}} {}\n", name, vl, num(v));
  };
  vllm("vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", double(g.running));
  vllm("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", double(g.waiting));
  vllm("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", g.kv_cache_usage);
  vllm("vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (vLLM's name before 0.10).", "gauge",
       g.kv_cache_usage);
  vllm("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", "counter",
       double(st.prefix_queries));
  vllm("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "counter",
       double(st.prefix_hits));
  counter("ridge:num_preemptions_total", "Cumulative number of preemptions from the engine.",
          double(st.preemptions));
  counter("ridge:num_swaps_total", "Preemptions that moved a request's KV to the swap space.",
          double(st.swaps));
  counter("ridge:swap_fallbacks_total",
          "Swapped-out requests recomputed instead because a swap write or read failed.",
          double(st.swap_fallbacks));
  counter("ridge:spec_decode_num_drafts_total", "Speculative proposals verified.", double(st.spec_drafts));
  counter("ridge:spec_decode_num_draft_tokens_total", "Speculative tokens proposed.",
          double(st.spec_draft_tokens));
  counter("ridge:spec_decode_num_accepted_tokens_total", "Speculative tokens accepted.",
          double(st.spec_accepted));
  header(o, "ridge:spec_decode_num_accepted_tokens_per_pos_total",
         "Speculative tokens accepted, by their position in the proposal.", "counter");
  for (size_t i = 0; i < st.spec_accepted_per_pos.size(); ++i)
    fmt::format_to(out, "ridge:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", ml, i,
                   st.spec_accepted_per_pos[i]);
  counter("ridge:grammar_compiled_total", "Structured-output grammars compiled (a JSON schema, regex or GBNF).",
          double(st.grammars_compiled));
  counter("ridge:grammar_cache_hits_total", "Structured-output requests whose grammar was already compiled.",
          double(st.grammar_cache_hits));
  counter("ridge:grammar_compile_seconds_total", "Time spent compiling structured-output grammars (token tables included).",
          st.grammar_compile_s);
  counter("ridge:grammar_tokens_total", "Tokens drawn under a structured-output grammar.", double(st.grammar_tokens));
  counter("ridge:grammar_mask_seconds_total", "Time in those tokens' masks and accepts, summed over threads.",
          st.grammar_mask_s);
  counter("ridge:grammar_jump_forward_tokens_total", "Tokens a grammar forced, run as drafts (jump-forward).",
          double(st.jump_tokens));
  counter("ridge:grammar_jump_forward_accepted_tokens_total", "Of those, the tokens the model took.",
          double(st.jump_accepted));
  labelled("ridge:request_success_total", "Count of successfully processed requests.",
           "finished_reason", st.finished);
  counter("ridge:engine_invariant_checks_total", "Engine invariant checks run.",
          double(st.invariant_checks));
  counter("ridge:engine_invariant_failures_total", "Engine invariant checks that failed.",
          double(st.invariant_failures));
  labelled("ridge:http_requests_total", "HTTP responses by status class.", "status", st.http);

  for (size_t h = 0; h < kNumHist; ++h) {
    const HistDef& d = kHistDefs[h];
    const Histogram& x = st.hist[h];
    header(o, d.name, d.help, "histogram");
    uint64_t cum = 0;
    for (size_t i = 0; i < d.bounds.size(); ++i) {
      cum += x.counts[i];
      fmt::format_to(out, "{}_bucket{{{},le=\"{}\"}} {}\n", d.name, ml, num(d.bounds[i]), cum);
    }
    cum += x.counts[d.bounds.size()];
    fmt::format_to(out, "{}_bucket{{{},le=\"+Inf\"}} {}\n", d.name, ml, cum);
    fmt::format_to(out, "{}_sum{{{}}} {}\n", d.name, ml, num(x.sum));
    fmt::format_to(out, "{}_count{{{}}} {}\n", d.name, ml, x.count);
  }
  return o;
}

std::optional<double> scrape_value(std::string_view text, std::string_view name,
                                   std::string_view label_filter) {
  std::vector<Label> want;
  const std::string filter = std::string(label_filter) + "}";
  size_t fi = 0;
  if (!parse_labels(filter, fi, want) || fi != filter.size()) return std::nullopt;

  std::vector<Label> have;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line[0] == '#') continue;

    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ' && line[i] != '\t') ++i;
    if (line.substr(0, i) != name) continue;
    have.clear();
    if (i < line.size() && line[i] == '{' && !parse_labels(line, ++i, have)) continue;
    const bool all = std::all_of(want.begin(), want.end(), [&](const Label& w) {
      return std::find(have.begin(), have.end(), w) != have.end();
    });
    if (!all) continue;

    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t e = i;
    while (e < line.size() && line[e] != ' ' && line[e] != '\t') ++e;  // then a timestamp
    return parse_value(line.substr(i, e - i));
  }
  return std::nullopt;
}

}  // namespace ridge
