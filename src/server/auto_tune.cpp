#include "server/auto_tune.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/engine.h"

namespace ridge::server {
namespace {

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double r = q / 100 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(r)), hi = size_t(std::ceil(r));
  return v[lo] + (v[hi] - v[lo]) * (r - double(lo));
}

}  // namespace

AutoTuner::AutoTuner(Engine& engine, const AutoTuneOptions& o) : engine_(engine), o_(o) {
  const EngineConfig& c = engine.config();
  if (o_.max_budget <= 0) o_.max_budget = c.max_num_batched_tokens;
  RIDGE_CHECK(o_.min_budget >= 1 && o_.min_budget <= o_.max_budget && o_.max_budget <= c.max_num_batched_tokens,
              "--auto-tune: the token budget's bounds {}..{} must lie within 1..{} (--max-num-batched-tokens)",
              o_.min_budget, o_.max_budget, c.max_num_batched_tokens);
  if (o_.max_k <= 0) o_.max_k = c.speculative.num_speculative_tokens;
  // The cap only lowers the configured depth: it cannot go above it.
  RIDGE_CHECK(o_.min_k >= 1 && o_.min_k <= o_.max_k && o_.max_k <= c.speculative.num_speculative_tokens,
              "--auto-tune: the speculation depth's bounds {}..{} must lie within 1..{} (--num-speculative-tokens)",
              o_.min_k, o_.max_k, c.speculative.num_speculative_tokens);
  RIDGE_CHECK(o_.interval_s > 0, "--auto-tune: the interval must be positive");
  if (o_.max_k < c.speculative.num_speculative_tokens) engine.set_spec_depth_cap(o_.max_k);
  if (o_.max_budget < c.max_num_batched_tokens) engine.set_token_budget(o_.max_budget);
  drafts0_ = engine.stats().spec_draft_tokens;
  accepted0_ = engine.stats().spec_accepted_tokens;
}

void AutoTuner::on_step(double seconds, bool prompt_work) {
  if (prompt_work) max_prompt_step_ = std::max(max_prompt_step_, seconds);
}

void AutoTuner::on_request(double ttft_s, double tpot_s) {
  ttft_.push_back(ttft_s);
  tpot_.push_back(tpot_s);
}

std::string AutoTuner::tick(double now_s) {
  if (window_start_ < 0) window_start_ = now_s;
  if (now_s - window_start_ < o_.interval_s || int32_t(ttft_.size()) < o_.min_requests) return "";
  const double ttft = pct(ttft_, o_.ttft_pct), tpot = pct(tpot_, o_.tpot_pct);
  const EngineStats& st = engine_.stats();
  const int64_t drafts = st.spec_draft_tokens - drafts0_, accepted = st.spec_accepted_tokens - accepted0_;
  const int32_t budget = engine_.token_budget();
  std::vector<std::string> log;
  const std::string why = fmt::format("TTFT p{:g} {:.0f} ms, TPOT p{:g} {:.0f} ms over {} requests", o_.ttft_pct,
                                      ttft * 1e3, o_.tpot_pct, tpot * 1e3, ttft_.size());
  int32_t next = budget;
  std::string reason;
  // Never below the running decodes: the scheduler gives them the budget first, and a
  // budget smaller than their count starves some of them for whole steps.
  const int32_t floor = std::min(o_.max_budget, std::max(o_.min_budget, engine_.n_running()));
  if (tpot > o_.tpot_s && max_prompt_step_ > 0.5 * o_.tpot_s && budget > floor) {
    next = std::max(floor, budget / 2);
    reason = fmt::format("steps with prompt work took up to {:.0f} ms against a TPOT limit of {:.3g} ms",
                         max_prompt_step_ * 1e3, o_.tpot_s * 1e3);
  } else if (ttft > o_.ttft_s && tpot < 0.7 * o_.tpot_s && budget < o_.max_budget) {
    next = std::min(o_.max_budget, budget * 2);
    reason = fmt::format("TTFT over its limit of {:.3g} ms with TPOT inside its own", o_.ttft_s * 1e3);
  } else if (ttft <= o_.ttft_s && tpot < 0.5 * o_.tpot_s && budget < o_.max_budget && since_change_ >= 2) {
    next = std::min(o_.max_budget, budget * 2);
    reason = "both limits met with room: back toward the configured budget";
  }
  if (next != budget) {
    engine_.set_token_budget(next);
    log.push_back(fmt::format("max-num-batched-tokens {} -> {} ({}; {})", budget, next, why, reason));
  }
  // Acceptance is judged over at least 32 drafted tokens, however many windows that takes.
  if (engine_.config().speculative.method != SpecMethod::None && drafts >= 32) {
    drafts0_ = st.spec_draft_tokens, accepted0_ = st.spec_accepted_tokens;
    const int32_t k = engine_.spec_depth_cap() > 0 ? engine_.spec_depth_cap() : o_.max_k;
    const double rate = double(accepted) / double(drafts);
    int32_t nk = k;
    if (rate > 0.8 && k < o_.max_k) nk = k + 1;
    else if (rate < 0.4 && k > o_.min_k) nk = k - 1;
    if (nk != k) {
      engine_.set_spec_depth_cap(nk);
      log.push_back(fmt::format("num-speculative-tokens {} -> {} ({:.0f}% of {} drafted tokens accepted)", k, nk,
                                rate * 100, drafts));
    }
  }
  since_change_ = log.empty() ? since_change_ + 1 : 0;
  changes_ += int32_t(log.size());
  window_start_ = now_s;
  ttft_.clear(), tpot_.clear();
  max_prompt_step_ = 0;
  std::string out;
  for (const auto& l : log) out += (out.empty() ? "" : "; ") + l;
  return out;
}

}  // namespace ridge::server
