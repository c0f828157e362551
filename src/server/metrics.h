// Prometheus metrics for the server, in text exposition format 0.0.4. Names and histogram
// buckets follow vLLM's (with the ridge: prefix) so existing vLLM dashboards and
// benchmark scrapers work by swapping the prefix. The engine thread updates, the HTTP
// thread renders; render() is a consistent snapshot (one lock, copied, then formatted so
// the engine never waits on string formatting).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ridge {

class Metrics {
 public:
  struct Gauges {
    int64_t running = 0;
    int64_t waiting = 0;
    double kv_cache_usage = 0;        // 0..1
    int64_t kv_blocks_total = 0;
    int64_t kv_blocks_free = 0;
    int64_t kv_blocks_evictable = 0;  // held only by the prefix cache
    int64_t kv_blocks_in_use = 0;     // referenced by requests
  };

  // Every series carries model_name="<model_name>".
  explicit Metrics(std::string model_name);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Histograms, in seconds. NaN is dropped (it would poison _sum for good).
  void observe_ttft(double s);
  void observe_tpot(double s);
  void observe_itl(double s);
  void observe_e2e(double s);
  void observe_queue(double s);
  // Per finished request; does not touch the *_tokens_total counters.
  void observe_request_tokens(int prompt, int gen);
  // Per finished request: its shares of the prefill, decode and recompute steps it rode
  // in (seconds), prompt tokens served by the prefix cache, times preempted.
  void observe_attribution(double prefill_s, double decode_s, double recompute_s, int cached_tokens, int preemptions);

  // Counters. Negative increments are ignored: a counter only goes up.
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  // Absolute values: the engine keeps these counts itself.
  void set_prefix_cache_totals(int64_t queries, int64_t hits);
  // Preemptions, those by swap, and swapped sequences recomputed because swap I/O failed.
  void set_preemptions_total(int64_t n, int64_t swaps = 0, int64_t swap_fallbacks = 0);
  // Speculative decoding, vLLM's counters: proposals verified, tokens proposed, tokens
  // accepted, and accepted per draft position.
  void set_spec_decode_totals(int64_t drafts, int64_t draft_tokens, int64_t accepted,
                              const std::vector<int64_t>& accepted_per_pos);
  // Structured output's grammar cache (server/structured_output.h).
  void set_grammar_totals(int64_t compiled, int64_t cache_hits, double compile_s);
  // Structured output in the engine: constrained tokens, their masks' and accepts' time,
  // and jump-forward's forced tokens run as drafts and taken.
  void set_grammar_engine_totals(int64_t tokens, double mask_s, int64_t jump_tokens, int64_t jump_accepted);
  // "stop", "length", "abort" (always rendered); any other reason gets its own series.
  void request_finished(std::string_view reason);
  void invariant_check(bool ok);
  // Counted by class: "2xx", "4xx", "5xx" (always rendered), others as they appear;
  // a code outside 100..599 counts as "5xx" (the server produced a broken status).
  void http_status(int code);

  // Also raises num_requests_peak to running + waiting when that is a new high.
  void set_gauges(const Gauges& g);

  std::string render() const;

 private:
  struct State;
  std::string model_label_;  // model_name="...", escaped once
  mutable std::mutex mu_;
  std::unique_ptr<State> s_;
};

// Escapes a Prometheus label value: backslash, double quote and newline.
std::string escape_label_value(std::string_view v);

// The value of the first sample in exposition `text` named exactly `name` whose labels
// include every pair of `label_filter` (comma-separated k="v", escaped as in the text;
// any order; "" matches any sample). nullopt if there is none or it does not parse.
// Example: scrape_value(t, "ridge:request_success_total", R"(finished_reason="stop")").
std::optional<double> scrape_value(std::string_view text, std::string_view name,
                                   std::string_view label_filter = "");

}  // namespace ridge
