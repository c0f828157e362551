// `ridge serve --auto-tune`: the server adjusts its own token budget and speculation
// depth from what it measures, within the bounds the user set, and logs every change.
//
// Every interval it reads the window's finished requests (TTFT, TPOT at the SLO's
// percentile), its steps (the longest with prompt work) and its speculation counters:
//   - TPOT over its limit while steps with prompt chunks take over half of it: the
//     chunks stall the decodes riding with them, so the budget halves (not below min,
//     nor below the sequences running, which the scheduler serves first);
//   - TTFT over its limit while TPOT is well inside its own (under 70%): prompts wait
//     for budget, so it doubles (not above the configured max_num_batched_tokens, which
//     the activations are sized for); with both well inside (TPOT under half), it grows
//     back toward the configured budget, at most once every two intervals;
//   - with a speculative method on, the depth goes up by one while over 80% of drafted
//     tokens are accepted and down by one under 40%, within [min_k, max_k].
// A window with fewer than min_requests finished requests carries over to the next.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ridge {
class Engine;
}

namespace ridge::server {

struct AutoTuneOptions {
  bool enabled = false;
  double ttft_s = 2.0, tpot_s = 0.1;  // the SLO's limits ...
  double ttft_pct = 99, tpot_pct = 99;  // ... at these percentiles
  int32_t min_budget = 64, max_budget = 0;  // 0: the engine's max_num_batched_tokens
  int32_t min_k = 1, max_k = 0;             // 0: the engine's num_speculative_tokens
  double interval_s = 5;
  int32_t min_requests = 4;
};

class AutoTuner {
 public:
  AutoTuner(Engine& engine, const AutoTuneOptions& o);
  void on_step(double seconds, bool prompt_work);
  void on_request(double ttft_s, double tpot_s);
  // At most once per interval: decides, applies, and returns the log line of a change
  // ("" when nothing changed).
  std::string tick(double now_s);
  int32_t changes() const { return changes_; }

 private:
  Engine& engine_;
  AutoTuneOptions o_;
  double window_start_ = -1;
  std::vector<double> ttft_, tpot_;
  double max_prompt_step_ = 0;
  int64_t drafts0_ = 0, accepted0_ = 0;
  int32_t since_change_ = 0, changes_ = 0;
};

}  // namespace ridge::server
