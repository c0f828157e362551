#include "tools/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/meminfo.h"
#include "model/model.h"

namespace ridge::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

const char* kv_name(DType t) {
  switch (t) {
    case DType::I8: return "int8";
    case DType::F8_E4M3: return "fp8";
    case DType::F8_E5M2: return "fp8_e5m2";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    default: return "f16";
  }
}


constexpr int64_t kMiB = int64_t(1) << 20;
int64_t whole_mib(double bytes) { return std::max<int64_t>(1, int64_t(bytes) / kMiB) * kMiB; }
// A size as the flags read it: in MiB where it is whole ones, else in bytes.
std::string size_flag(int64_t bytes) {
  return bytes % kMiB == 0 ? fmt::format("{}M", bytes / kMiB) : fmt::format("{}b", bytes);
}

const char* preemption_name(PreemptionMode p) {
  switch (p) {
    case PreemptionMode::Swap: return "swap";
    case PreemptionMode::Auto: return "auto";
    default: return "recompute";
  }
}

// What the rules read of a trial, against the SLO.
struct Symptoms {
  const TrialMetrics& m;
  const Knobs& k;
  const TuneOptions& o;
  double floor_s;       // a decode step's weight stream at the DRAM ceiling
  const StepModel& sm;  // the step times fitted so far
  double ttft_excess;   // the SLO percentile over its limit (0 without a limit)
  double tpot_excess;
  bool ttft_fails() const { return ttft_excess > 1; }
  bool tpot_fails() const { return tpot_excess > 1; }
  double acceptance() const {
    return m.spec_draft_tokens > 0 ? double(m.spec_accepted_tokens) / double(m.spec_draft_tokens) : 0;
  }
};

int32_t pow2_down(int32_t x, int32_t lo) { return std::max(lo, x / 2); }

// The token budget whose step (prompt rows beside the decodes the trial ran) the step
// model puts within `seconds`: a power of two, at least 32, at most half the current
// one. Without a per-row cost yet, half the current one.
int32_t budget_for(const Symptoms& s, double seconds) {
  const int32_t half = pow2_down(s.k.max_num_batched_tokens, 32);
  if (!(s.sm.per_token_s > 0)) return half;
  const double rows = (seconds - s.sm.fixed_s - s.sm.per_seq_s * s.m.mean_decode_batch) / s.sm.per_token_s;
  int32_t p = 32;
  while (p * 2 <= rows && p * 2 <= half) p *= 2;
  return std::min(half, p);
}

// One row per diagnosis: when it applies, what it changes, and why (the numbers that
// made it fire). Tried in order; the simulation then ranks what they propose.
struct Rule {
  const char* name;
  bool (*when)(const Symptoms&);
  void (*change)(Knobs&, const Symptoms&);
  std::string (*why)(const Symptoms&);
};

const Rule kRules[] = {
    {"stalled decodes",
     [](const Symptoms& s) {
       return s.tpot_fails() && s.m.max_prompt_step_s > 0.5 * s.o.slo.tpot_s && s.k.max_num_batched_tokens > 64;
     },
     [](Knobs& k, const Symptoms& s) { k.max_num_batched_tokens = budget_for(s, 0.5 * s.o.slo.tpot_s); },
     [](const Symptoms& s) {
       return fmt::format("TPOT p{:g} {:.0f} ms misses {:.0f} ms: steps with prompt chunks take up to {:.0f} ms, "
                          "stalling the decodes in them; chunks the step model puts under half the limit",
                          s.o.slo.tpot_pct, s.m.tpot_slo_pct * 1e3, s.o.slo.tpot_s * 1e3, s.m.max_prompt_step_s * 1e3);
     }},
    {"KV pool full",
     [](const Symptoms& s) {
       return (s.m.preemptions > 0 || s.m.kv_peak > 0.9) && !is_scaled_kv_dtype(s.k.kv_dtype);
     },
     [](Knobs& k, const Symptoms&) { k.kv_dtype = DType::I8; },
     [](const Symptoms& s) {
       return fmt::format("the KV pool peaked at {:.0f}% with {} preemptions: int8 KV holds twice the tokens",
                          s.m.kv_peak * 100, s.m.preemptions);
     }},
    {"KV stream",
     [](const Symptoms& s) {
       return (s.tpot_fails() || s.ttft_fails()) && s.m.kv_read_share > 0.2 && !is_scaled_kv_dtype(s.k.kv_dtype);
     },
     [](Knobs& k, const Symptoms&) { k.kv_dtype = DType::I8; },
     [](const Symptoms& s) {
       return fmt::format("the KV cache is {:.0f}% of what a decode step reads: int8 KV halves it",
                          s.m.kv_read_share * 100);
     }},
    {"KV pool too small",
     [](const Symptoms& s) {
       // (A draft model shares the pool's bytes with the target: not sized here.)
       return (s.m.preemptions > 0 || s.m.kv_peak > 0.95) && s.m.kv_pool_bytes > 0 && s.k.spec != SpecMethod::Draft &&
              2 * s.m.kv_pool_bytes <= s.o.mem_limit_bytes;
     },
     [](Knobs& k, const Symptoms& s) { k.kv_cache_bytes = whole_mib(2.0 * double(s.m.kv_pool_bytes)); },
     [](const Symptoms& s) {
       return fmt::format("the KV pool ({} MiB) peaked at {:.0f}% with {} preemptions and the machine has room "
                          "for twice it: a larger pool",
                          s.m.kv_pool_bytes / kMiB, s.m.kv_peak * 100, s.m.preemptions);
     }},
    {"preemptions recompute",
     [](const Symptoms& s) {
       return s.m.preemptions > 0 && s.k.preemption == PreemptionMode::Recompute && s.m.kv_pool_bytes > 0 &&
              s.o.swap_limit_bytes >= kMiB;
     },
     [](Knobs& k, const Symptoms& s) {
       k.preemption = PreemptionMode::Auto;
       k.swap_bytes = whole_mib(double(std::min(s.m.kv_pool_bytes, s.o.swap_limit_bytes)));
     },
     [](const Symptoms& s) {
       return fmt::format("{} preemptions, each recomputing its sequence's prompt and output: swap space, so that "
                          "the engine swaps the KV out where that costs less than recomputing it",
                          s.m.preemptions);
     }},
    {"preemption storm",
     [](const Symptoms& s) { return s.m.preemptions > 0 && is_scaled_kv_dtype(s.k.kv_dtype) && s.k.max_num_seqs > 4; },
     [](Knobs& k, const Symptoms&) { k.max_num_seqs = pow2_down(k.max_num_seqs, 4); },
     [](const Symptoms& s) {
       return fmt::format("{} preemptions with an 8-bit pool: fewer sequences at once", s.m.preemptions);
     }},
    {"seats full",
     [](const Symptoms& s) {
       return s.m.full_seqs_share > 0.05 && s.m.kv_peak < 0.8 && s.k.max_num_seqs < 1024 &&
              (s.ttft_fails() || s.o.objective != Objective::Goodput);
     },
     [](Knobs& k, const Symptoms&) { k.max_num_seqs = std::min(1024, k.max_num_seqs * 2); },
     [](const Symptoms& s) {
       return fmt::format("{:.0f}% of steps ran max_num_seqs={} with requests waiting (KV at {:.0f}%): more seats",
                          s.m.full_seqs_share * 100, s.k.max_num_seqs, s.m.kv_peak * 100);
     }},
    {"prompts queue",
     [](const Symptoms& s) {
       return s.ttft_fails() && s.m.queue_p99 > 0.3 * s.o.slo.ttft_s && s.tpot_excess < 0.7 &&
              s.k.max_num_batched_tokens < 8192;
     },
     [](Knobs& k, const Symptoms&) { k.max_num_batched_tokens = std::min(8192, k.max_num_batched_tokens * 2); },
     [](const Symptoms& s) {
       return fmt::format("TTFT p{:g} {:.0f} ms misses {:.0f} ms with requests queued up to {:.0f} ms and TPOT at "
                          "{:.0f}% of its limit: larger prompt chunks",
                          s.o.slo.ttft_pct, s.m.ttft_slo_pct * 1e3, s.o.slo.ttft_s * 1e3, s.m.queue_p99 * 1e3,
                          s.tpot_excess * 100);
     }},
    {"compute-bound decode",
     [](const Symptoms& s) {
       return s.tpot_fails() && s.m.decode_step_s > 2 * s.floor_s && s.m.mean_decode_batch > 2 && s.k.max_num_seqs > 2;
     },
     [](Knobs& k, const Symptoms& s) {
       int32_t p = 2;  // the largest power of two below the measured batch
       while (p * 2 < s.m.mean_decode_batch) p *= 2;
       k.max_num_seqs = std::min(pow2_down(k.max_num_seqs, 2), p);
     },
     [](const Symptoms& s) {
       return fmt::format("decode steps of {:.1f} sequences take {:.1f} ms, {:.1f}x the weight stream: past the "
                          "roofline's ridge each sequence adds time, so fewer at once",
                          s.m.mean_decode_batch, s.m.decode_step_s * 1e3, s.m.decode_step_s / s.floor_s);
     }},
    {"first tokens wait for long prompt steps",
     [](const Symptoms& s) {
       return s.ttft_fails() && s.m.max_prompt_step_s > 0.5 * s.o.slo.ttft_s && s.k.max_num_batched_tokens > 64;
     },
     [](Knobs& k, const Symptoms& s) { k.max_num_batched_tokens = budget_for(s, 0.5 * s.o.slo.ttft_s); },
     [](const Symptoms& s) {
       return fmt::format("TTFT p{:g} {:.0f} ms misses {:.0f} ms and steps with prompt work take up to {:.0f} ms: "
                          "chunks the step model puts under half the limit let the first prompts finish sooner",
                          s.o.slo.ttft_pct, s.m.ttft_slo_pct * 1e3, s.o.slo.ttft_s * 1e3, s.m.max_prompt_step_s * 1e3);
     }},
    {"speculation rarely accepted",
     [](const Symptoms& s) { return s.k.spec != SpecMethod::None && s.m.spec_draft_tokens > 0 && s.acceptance() < 0.3; },
     [](Knobs& k, const Symptoms&) { k.spec = SpecMethod::None; },
     [](const Symptoms& s) {
       return fmt::format("{:.0f}% of {} drafted tokens accepted: speculation off", s.acceptance() * 100,
                          s.m.spec_draft_tokens);
     }},
    {"memory-bound decode",
     [](const Symptoms& s) {
       return s.k.spec == SpecMethod::None && s.m.mean_decode_batch > 0 && s.m.mean_decode_batch <= 4 &&
              s.m.decode_step_s < 2 * s.floor_s;
     },
     [](Knobs& k, const Symptoms& s) {
       k.spec = s.o.workload.replay() || s.o.workload.prefix_share > 0 ? SpecMethod::Suffix : SpecMethod::Ngram;
       k.spec_tokens = 4;
     },
     [](const Symptoms& s) {
       return fmt::format("decode steps of {:.1f} sequences take {:.1f} ms, {:.1f}x the weight stream alone: "
                          "memory-bound, so verifying drafts costs little",
                          s.m.mean_decode_batch, s.m.decode_step_s * 1e3, s.m.decode_step_s / s.floor_s);
     }},
    {"prefixes recomputed",
     [](const Symptoms& s) { return !s.k.prefix_cache && (s.o.workload.prefix_share > 0 || s.o.workload.replay()); },
     [](Knobs& k, const Symptoms&) { k.prefix_cache = true; },
     [](const Symptoms&) { return std::string("the workload shares prefixes and the prefix cache is off"); }},
    {"throughput: larger chunks",
     [](const Symptoms& s) { return s.o.objective != Objective::Goodput && s.k.max_num_batched_tokens < 8192; },
     [](Knobs& k, const Symptoms&) { k.max_num_batched_tokens = std::min(8192, k.max_num_batched_tokens * 2); },
     [](const Symptoms& s) {
       return fmt::format("no latency limit binds the {} objective: larger steps amortize the weight stream",
                          objective_name(s.o.objective));
     }},
    {"cost: fewer cores",
     [](const Symptoms& s) { return s.o.objective == Objective::Cost && s.k.threads > 1; },
     [](Knobs& k, const Symptoms&) { k.threads = std::max(1, k.threads / 2); },
     [](const Symptoms& s) {
       return fmt::format("cost counts cores: {} threads, is the rate per core better on fewer?", s.k.threads);
     }},
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// How far a trial's steps are from a step model: mean |predicted - measured| / measured.
double step_error(const StepModel& sm, const std::vector<StepRecord>& steps) {
  double s = 0;
  int64_t n = 0;
  for (const StepRecord& st : steps)
    if (st.tokens > 0 && st.seconds > 0) s += std::fabs(sm.at(st.tokens, st.seqs, st.pairs) - st.seconds) / st.seconds, ++n;
  return n ? s / double(n) : 0;
}

// Which knobs differ, a bit each (seats, budget, KV dtype, prefix cache, speculation,
// threads, pool, preemption).
uint32_t knob_dims(const Knobs& a, const Knobs& b) {
  return uint32_t(a.max_num_seqs != b.max_num_seqs) | uint32_t(a.max_num_batched_tokens != b.max_num_batched_tokens) << 1 |
         uint32_t(a.kv_dtype != b.kv_dtype) << 2 | uint32_t(a.prefix_cache != b.prefix_cache) << 3 |
         uint32_t(a.spec != b.spec || a.spec_tokens != b.spec_tokens) << 4 | uint32_t(a.threads != b.threads) << 5 |
         uint32_t(a.kv_cache_bytes != b.kv_cache_bytes) << 6 |
         uint32_t(a.preemption != b.preemption || a.swap_bytes != b.swap_bytes) << 7;
}

std::string change_between(const Knobs& from, const Knobs& to) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : to.flags(from)) parts.push_back(v.empty() ? k : k + "=" + v);
  return parts.empty() ? "(none)" : fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace

const char* objective_name(Objective o) {
  switch (o) {
    case Objective::Goodput: return "goodput";
    case Objective::Throughput: return "throughput";
    case Objective::Cost: return "cost";
  }
  return "?";
}

Objective objective_from_name(const std::string& s) {
  if (s == "goodput") return Objective::Goodput;
  if (s == "throughput") return Objective::Throughput;
  if (s == "cost") return Objective::Cost;
  fail("--objective {} is not one of goodput, throughput, cost", s);
}

Knobs Knobs::of(const EngineConfig& c) {
  Knobs k;
  k.max_num_seqs = c.max_num_seqs;
  k.max_num_batched_tokens = c.max_num_batched_tokens;
  k.kv_dtype = c.kv_dtype;
  k.prefix_cache = c.prefix_cache;
  k.spec = c.speculative.method;
  k.spec_tokens = c.speculative.num_speculative_tokens;
  k.threads = c.threads;
  k.kv_cache_bytes = c.kv_cache_tokens > 0 ? 0 : c.kv_cache_bytes;
  k.preemption = c.preemption;
  k.swap_bytes = c.swap_bytes;
  return k;
}

void Knobs::apply(EngineConfig& c) const {
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.kv_dtype = kv_dtype;
  c.prefix_cache = prefix_cache;
  c.speculative.method = spec;
  c.speculative.num_speculative_tokens = spec_tokens;
  c.threads = threads;
  if (kv_cache_bytes > 0) c.kv_cache_bytes = kv_cache_bytes, c.kv_cache_tokens = 0;
  c.preemption = preemption;
  c.swap_bytes = swap_bytes;
}

std::vector<std::pair<std::string, std::string>> Knobs::flags(const Knobs& base) const {
  std::vector<std::pair<std::string, std::string>> f;
  if (max_num_seqs != base.max_num_seqs) f.emplace_back("max-num-seqs", std::to_string(max_num_seqs));
  if (max_num_batched_tokens != base.max_num_batched_tokens)
    f.emplace_back("max-num-batched-tokens", std::to_string(max_num_batched_tokens));
  if (kv_dtype != base.kv_dtype) f.emplace_back("kv-cache-dtype", kv_name(kv_dtype));
  if (prefix_cache != base.prefix_cache) f.emplace_back(prefix_cache ? "prefix-cache" : "no-prefix-cache", "");
  if (spec != base.spec) f.emplace_back("speculative-method", spec == SpecMethod::None ? "none" : spec_method_name(spec));
  if (spec != SpecMethod::None && spec_tokens != base.spec_tokens)
    f.emplace_back("num-speculative-tokens", std::to_string(spec_tokens));
  if (threads != base.threads) f.emplace_back("threads", std::to_string(threads));
  if (kv_cache_bytes != base.kv_cache_bytes && kv_cache_bytes > 0)
    f.emplace_back("kv-cache-memory", size_flag(kv_cache_bytes));
  if (preemption != base.preemption) f.emplace_back("preemption-mode", preemption_name(preemption));
  if (swap_bytes != base.swap_bytes) f.emplace_back("swap-space", size_flag(swap_bytes));
  return f;
}

bool is_knob_flag(std::string_view name) {
  for (std::string_view k : {"max-num-seqs", "max-num-batched-tokens", "kv-cache-dtype", "prefix-cache", "no-prefix-cache",
                             "speculative-method", "num-speculative-tokens", "threads", "kv-cache-memory",
                             "preemption-mode", "swap-space"})
    if (name == k) return true;
  return false;
}

std::string Knobs::str() const {
  std::string s = fmt::format("max-num-seqs={} max-num-batched-tokens={} kv-cache-dtype={}", max_num_seqs,
                              max_num_batched_tokens, kv_name(kv_dtype));
  if (!prefix_cache) s += " no-prefix-cache";
  if (spec != SpecMethod::None) s += fmt::format(" speculative-method={} k={}", spec_method_name(spec), spec_tokens);
  if (threads > 0) s += fmt::format(" threads={}", threads);
  if (kv_cache_bytes > 0) s += " kv-cache-memory=" + size_flag(kv_cache_bytes);
  if (preemption != PreemptionMode::Recompute) s += fmt::format(" preemption-mode={}", preemption_name(preemption));
  if (swap_bytes > 0) s += " swap-space=" + size_flag(swap_bytes);
  return s;
}

double objective_value(const TrialMetrics& m, Objective o, int threads, int32_t cores, double ttft_limit,
                       double tpot_limit) {
  switch (o) {
    case Objective::Throughput: return m.output_throughput;
    case Objective::Cost: return m.good_output_throughput / double(std::max(1, threads > 0 ? threads : cores));
    case Objective::Goodput: break;
  }
  if (m.good > 0) return m.goodput;
  // Nothing met the SLO: rank by how close the worse percentile came to its limit (always
  // below any positive goodput, finite even for a trial cut off), so that an unreachable
  // SLO still yields the closest point. No limit at all: nothing finished.
  return -std::min(1e6, std::max(m.ttft_slo_pct / ttft_limit, m.tpot_slo_pct / tpot_limit)) - 1e-9;
}

std::vector<Candidate> diagnose(const TrialMetrics& m, const Knobs& cur, const TuneOptions& o, const StepModel& sm) {
  auto excess = [](double v, double limit) { return std::isfinite(limit) ? v / limit : 0.0; };
  const Symptoms s{m, cur, o, std::max(sm.prior_fixed_s, 1e-9), sm, excess(m.ttft_slo_pct, o.slo.ttft_s),
                   excess(m.tpot_slo_pct, o.slo.tpot_s)};
  std::vector<Candidate> out;
  for (const Rule& r : kRules) {
    if (!r.when(s)) continue;
    Candidate c{cur, "", fmt::format("{}: {}", r.name, r.why(s))};
    r.change(c.knobs, s);
    if (c.knobs == cur) continue;
    c.change = change_between(cur, c.knobs);
    out.push_back(std::move(c));
  }
  return out;
}

CheckResult check_config(const Model& model, const Tokenizer* tok, const TuneOptions& o, double rate, int64_t n,
                         double recorded, double band, const std::function<void(const TrialRecord&)>& on_trial) {
  CheckResult res;
  res.recorded = recorded;
  res.band = band;
  RIDGE_CHECK(o.workload.replay() || n >= 1, "check: no requests to run ({} per trial)", n);
  const auto reqs = o.workload.replay() ? make_requests(o.workload, 0, 0, model.hparams().n_vocab, o.seed)
                                        : make_requests(o.workload, n, rate, model.hparams().n_vocab, o.seed);
  const double deadline = std::max(30.0, 4 * reqs.back().t + 30);
  const int32_t cores = o.cores > 0 ? o.cores : std::max(1, o.base.threads);
  std::vector<double> v;
  for (int32_t r = 0; r < std::max(1, o.final_repeats); ++r) {
    TrialRecord rec;
    rec.index = r + 1;
    rec.phase = "check";
    rec.knobs = Knobs::of(o.base);
    rec.config = change_between(Knobs::of(EngineConfig{}), rec.knobs);
    rec.m = run_trial(model, tok, o.base, reqs, o.workload.max_concurrency, o.slo, deadline).m;
    rec.objective = objective_value(rec.m, o.objective, o.base.threads, cores, o.slo.ttft_s, o.slo.tpot_s);
    v.push_back(rec.objective);
    res.trials.push_back(rec);
    if (on_trial) on_trial(res.trials.back());
  }
  res.median = median(v);
  res.reproduced = std::fabs(res.median - recorded) <= band * std::fabs(recorded) + 1e-12;
  return res;
}

TuneResult tune(const Model& model, const Tokenizer* tok, const Peaks& peaks, const TuneOptions& opts,
                const std::function<void(const TrialRecord&)>& on_trial) {
  const Clock::time_point t0 = Clock::now();
  TuneOptions o = opts;
  // MemAvailable counts the mapped weights' pages as reclaimable: they are not the pool's.
  if (o.mem_limit_bytes <= 0)
    o.mem_limit_bytes = int64_t(0.8 * double(std::max<int64_t>(0, mem_available_bytes() - model.mapped_bytes())));
  // Swap space on a tmpfs is memory too: a larger pool is the better use of it.
  if (o.swap_limit_bytes <= 0 && !on_tmpfs(o.base.swap_dir))
    o.swap_limit_bytes = disk_available_bytes(o.base.swap_dir) / 2;
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const int32_t n_vocab = model.hparams().n_vocab;
  const int32_t cores = o.cores > 0 ? o.cores : std::max(1, o.base.threads);
  TuneResult res;
  res.defaults = Knobs::of(o.base);
  res.engine_defaults = Knobs::of(EngineConfig{});
  StepModel sm = step_model_prior(model, peaks, o.base.threads);
  std::vector<StepRecord> all_steps;
  std::map<DType, int64_t> kv_tokens;  // the pool's capacity at the base's sizing, as measured per KV dtype
  std::map<DType, double> kv_token_bytes;  // a token's bytes in the pool, per KV dtype
  const double trial_s = o.trial_s > 0 ? o.trial_s : std::max(2.0, o.budget_s / 16);
  double deadline = std::max(10.0, o.budget_s / 3);

  auto run = [&](const Knobs& k, const std::vector<TracedRequest>& reqs, const char* phase, std::string change,
                 std::string reason, const TrialMetrics* predicted) {
    EngineConfig cfg = o.base;
    k.apply(cfg);
    TrialRecord rec;
    rec.index = int32_t(res.trials.size()) + 1;
    rec.phase = phase;
    rec.knobs = k;
    rec.config = k == res.defaults ? "" : change_between(res.defaults, k);
    rec.change = std::move(change);
    rec.reason = std::move(reason);
    if (predicted) {
      rec.predicted = true;
      rec.predicted_objective = objective_value(*predicted, o.objective, k.threads, cores, o.slo.ttft_s, o.slo.tpot_s);
    }
    const Clock::time_point w0 = Clock::now();
    TrialResult tr;
    try {
      tr = run_trial(model, tok, cfg, reqs, o.workload.max_concurrency, o.slo, deadline);
    } catch (const Error& e) {
      // The defaults must run; a change that cannot (a pool too small for a request, an
      // option the engine refuses) is a failed trial, not the end of the search.
      if (std::string_view(phase) == "baseline" || std::string_view(phase) == "calibrate") throw;
      rec.failed = true;
      rec.objective = -1e12;
      rec.verdict = std::string("failed: ") + e.what();
      rec.wall_s = std::chrono::duration<double>(Clock::now() - w0).count();
      res.trials.push_back(rec);
      return res.trials.size() - 1;
    }
    rec.wall_s = std::chrono::duration<double>(Clock::now() - w0).count();
    rec.m = tr.m;
    if (k.kv_cache_bytes == 0) kv_tokens[k.kv_dtype] = tr.m.kv_tokens;
    if (tr.m.kv_tokens > 0) kv_token_bytes[k.kv_dtype] = double(tr.m.kv_pool_bytes) / double(tr.m.kv_tokens);
    rec.objective = objective_value(tr.m, o.objective, k.threads, cores, o.slo.ttft_s, o.slo.tpot_s);
    // The step model's error on these steps before they join its fit, then after.
    if (k.threads == o.base.threads) {
      rec.step_s_prior = step_error(sm, tr.steps);
      all_steps.insert(all_steps.end(), tr.steps.begin(), tr.steps.end());
      if (all_steps.size() > 50000) all_steps.erase(all_steps.begin(), all_steps.begin() + std::ptrdiff_t(all_steps.size() - 50000));
      fit_step_model(sm, all_steps);
      rec.step_s_fit = step_error(sm, tr.steps);
    }
    res.trials.push_back(rec);
    return res.trials.size() - 1;
  };
  auto report = [&](size_t i) {
    if (on_trial) on_trial(res.trials[i]);
  };
  auto kv_capacity = [&](const Knobs& k) -> int64_t {
    const DType t = k.kv_dtype;
    if (k.kv_cache_bytes > 0) {  // a pool of its own size: bytes over a token's bytes
      if (auto it = kv_token_bytes.find(t); it != kv_token_bytes.end() && it->second > 0)
        return int64_t(double(k.kv_cache_bytes) / it->second);
      for (const auto& [d, b] : kv_token_bytes)
        if (b > 0) return int64_t(double(k.kv_cache_bytes) / (b * kv_pair_scale(t) / kv_pair_scale(d)));
    }
    if (auto it = kv_tokens.find(t); it != kv_tokens.end() && it->second > 0) return it->second;
    for (const auto& [d, n] : kv_tokens)
      if (n > 0) return int64_t(double(n) * kv_pair_scale(d) / kv_pair_scale(t));
    return int64_t(1) << 40;
  };

  // The requests every trial runs (the same ones, so trials differ by configuration only).
  const WorkloadSpec& w = o.workload;
  std::vector<TracedRequest> reqs;
  if (w.replay()) {
    reqs = make_requests(w, 0, 0, n_vocab, o.seed);
    res.rate = w.trace.back().t > 0 ? double(w.trace.size()) / w.trace.back().t : kInf;
  } else {
    double rate = w.rate;
    if (w.auto_rate()) {
      // Capacity: a batch of requests all at once on the defaults, requests per second.
      const auto cal = make_requests(w, 16, kInf, n_vocab, o.seed + 1);
      const size_t i = run(res.defaults, cal, "calibrate", "", "the defaults' capacity on this workload (16 at once)", nullptr);
      res.trials[i].verdict = "sets the arrival rate";
      const TrialMetrics& m = res.trials[i].m;
      RIDGE_CHECK(m.completed > 0, "tune: the calibration trial finished no request within {:.0f} s", deadline);
      rate = w.load * m.request_throughput;
      report(i);
    }
    res.rate = rate;
    const int64_t n = w.num_requests > 0 ? w.num_requests
                      : std::isfinite(rate) ? std::clamp<int64_t>(int64_t(std::lround(rate * trial_s)), 8, 512)
                                            : 16;
    reqs = make_requests(w, n, rate, n_vocab, o.seed);
  }
  res.requests_per_trial = int64_t(reqs.size());

  // The defaults, twice (three times when the two disagree beyond a goodput's sampling
  // error): the noise band.
  auto binomial = [&](const TrialMetrics& m) {
    // Goodput counts requests near their limits, which flip from run to run: its relative
    // standard error as a binomial count.
    if (o.objective == Objective::Throughput || m.requests == 0 || m.attainment <= 0) return 0.0;
    return std::sqrt(m.attainment * (1 - m.attainment) / double(m.requests)) / m.attainment;
  };
  auto spread = [](const std::vector<double>& v) {
    const double md = median(v);
    if (v.empty() || md == 0) return 0.0;
    return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / std::fabs(md);
  };
  std::vector<size_t> def_runs;
  for (int r = 0; r < 3; ++r) {
    if (r == 2) {
      const double floor = std::max(0.03, binomial(res.trials[def_runs.back()].m));
      if (spread({res.trials[def_runs[0]].objective, res.trials[def_runs[1]].objective}) <= 2 * floor) break;
    }
    const size_t i = run(res.defaults, reqs, "baseline", "",
                         r == 0 ? "the defaults" : r == 1 ? "the defaults again (noise band)"
                                                          : "the defaults a third time (the first two disagree)",
                         nullptr);
    def_runs.push_back(i);
    res.trials[i].verdict = "baseline";
    report(i);
    // Later trials may take up to 3x the defaults' time before they are cut off.
    if (r == 0) deadline = std::max(3 * res.trials[i].m.duration_s, reqs.back().t + 2.0);
  }
  {
    // Two runs: their spread. Three: twice the median absolute deviation (scaled to a
    // standard deviation), so that one run caught in a slow spell does not set the band.
    std::vector<double> v;
    for (size_t i : def_runs) v.push_back(res.trials[i].objective);
    double band = spread(v);
    if (v.size() == 3) {
      const double md = median(v);
      std::vector<double> dev;
      for (double x : v) dev.push_back(std::fabs(x - md));
      band = md != 0 ? 2 * 1.4826 * median(dev) / std::fabs(md) : 0;
    }
    res.noise_band = std::max({0.03, band, binomial(res.trials[def_runs.back()].m)});
  }
  auto mean_trial_s = [&] {
    double s = 0;
    for (const auto& t : res.trials) s += t.wall_s;
    return res.trials.empty() ? trial_s : s / double(res.trials.size());
  };
  auto better = [&](double a, double b) { return a > b + res.noise_band * std::fabs(b); };

  Knobs best = res.defaults;
  TrialMetrics best_m = res.trials[def_runs.back()].m;
  std::vector<Knobs> tried{best};
  std::vector<size_t> best_runs = def_runs, grid_runs;
  std::vector<std::pair<Knobs, TrialMetrics>> promising;
  const int32_t reserve_runs = 2 * std::max(1, o.final_repeats);
  uint32_t moved_dims = 0;  // the knobs (knob_dims bits) some search trial has moved
  while (elapsed() + mean_trial_s() * (1 + reserve_runs) < o.budget_s) {
    // The diagnoses of the best point, and of points that came within the band without
    // losing (a pattern search: a direction that did not hurt may pay a step further).
    std::vector<Candidate> cands = diagnose(best_m, best, o, sm);
    for (const auto& [k, m] : promising)
      for (Candidate c : diagnose(m, k, o, sm)) {
        c.change = change_between(best, c.knobs);
        c.reason = "from " + change_between(best, k) + ", " + c.reason;
        cands.push_back(std::move(c));
      }
    std::erase_if(cands, [&](const Candidate& c) { return std::find(tried.begin(), tried.end(), c.knobs) != tried.end(); });
    for (size_t a = 0; a < cands.size(); ++a)  // the same point proposed twice: the first reason
      for (size_t b = cands.size(); b-- > a + 1;)
        if (cands[b].knobs == cands[a].knobs) cands.erase(cands.begin() + std::ptrdiff_t(b));
    // No diagnosis left: the best point's neighbors, one knob moved each, in the order
    // the simulation ranks them; the budget is the user's to spend.
    const bool explore = cands.empty();
    if (explore) {
      auto add = [&](Knobs k, const char* why) {
        if (k == best || std::find(tried.begin(), tried.end(), k) != tried.end()) return;
        cands.push_back({k, change_between(best, k), why});
      };
      Knobs k = best;
      k.max_num_seqs = std::min(1024, best.max_num_seqs * 2), add(k, "neighbor: more seats");
      k = best, k.max_num_seqs = pow2_down(best.max_num_seqs, 1), add(k, "neighbor: fewer seats");
      k = best, k.max_num_batched_tokens = std::min(8192, best.max_num_batched_tokens * 2), add(k, "neighbor: larger chunks");
      k = best, k.max_num_batched_tokens = pow2_down(best.max_num_batched_tokens, 32), add(k, "neighbor: smaller chunks");
      k = best, k.kv_dtype = is_scaled_kv_dtype(best.kv_dtype) ? DType::F16 : DType::I8;
      add(k, "neighbor: the other KV dtype (int8 attention reads half the bytes)");
      k = best, k.spec = best.spec == SpecMethod::None ? SpecMethod::Ngram : SpecMethod::None;
      add(k, "neighbor: speculation on or off");
    }
    if (cands.empty()) break;
    // Rank by the simulation.
    EngineConfig cur_cfg = o.base;
    best.apply(cur_cfg);
    const TrialMetrics cur_pred = simulate(sm, cur_cfg, kv_capacity(best), reqs, w.max_concurrency, o.slo);
    std::vector<TrialMetrics> pred(cands.size());
    std::vector<double> pobj(cands.size());
    for (size_t c = 0; c < cands.size(); ++c) {
      EngineConfig cfg = o.base;
      cands[c].knobs.apply(cfg);
      // Speculation and swapping are outside the simulation: predicted as no change.
      pred[c] = cands[c].knobs.spec != best.spec || cands[c].knobs.threads != best.threads ||
                        cands[c].knobs.preemption != best.preemption
                    ? cur_pred
                    : simulate(sm, cfg, kv_capacity(cands[c].knobs), reqs, w.max_concurrency, o.slo);
      pobj[c] = objective_value(pred[c], o.objective, cands[c].knobs.threads, cores, o.slo.ttft_s, o.slo.tpot_s);
    }
    // A change of seats or budget that the simulation schedules exactly as the best point
    // (more seats than the workload ever fills, a budget no step reaches) has no effect
    // to measure: it is noted and skipped, not run.
    auto same = [](const TrialMetrics& x, const TrialMetrics& y) {
      return x.ttft_p50 == y.ttft_p50 && x.ttft_slo_pct == y.ttft_slo_pct && x.tpot_p50 == y.tpot_p50 &&
             x.tpot_slo_pct == y.tpot_slo_pct && x.duration_s == y.duration_s;
    };
    std::vector<bool> skip(cands.size(), false);
    bool any = false;
    for (size_t c = 0; c < cands.size(); ++c) {
      const Knobs& k = cands[c].knobs;
      const bool modelled = k.kv_dtype == best.kv_dtype && k.spec == best.spec && k.spec_tokens == best.spec_tokens &&
                            k.threads == best.threads && k.prefix_cache == best.prefix_cache &&
                            k.kv_cache_bytes == best.kv_cache_bytes && k.preemption == best.preemption &&
                            k.swap_bytes == best.swap_bytes;
      skip[c] = modelled && same(pred[c], cur_pred);
      if (skip[c]) {
        tried.push_back(k);
        res.skipped.push_back(cands[c].change + ": the simulation schedules it as the best point");
      }
      any |= !skip[c];
    }
    if (!any) continue;
    size_t pick = cands.size();
    for (size_t c = 0; c < cands.size(); ++c)
      if (!skip[c] && (pick == cands.size() || pobj[c] > pobj[pick])) pick = c;
    // Where the simulation sees no gain beyond the noise band, its ranking is noise: the
    // first diagnosis (in the rules' order) that moves a knob no trial has moved yet
    // goes first, so a short budget measures different directions before refining one.
    const double cur_obj = objective_value(cur_pred, o.objective, best.threads, cores, o.slo.ttft_s, o.slo.tpot_s);
    if (!(pobj[pick] > cur_obj + res.noise_band * std::fabs(cur_obj)))
      for (size_t c = 0; c < cands.size(); ++c)
        if (!skip[c] && (knob_dims(best, cands[c].knobs) & ~moved_dims) != 0) {
          if (c != pick) cands[c].reason += "; first of the knobs not yet measured (the simulation sees no clear gain)";
          pick = c;
          break;
        }
    const Candidate& c = cands[pick];
    tried.push_back(c.knobs);
    moved_dims |= knob_dims(best, c.knobs);
    // Paired runs: the machine's speed drifts by tens of percent within an hour, so a
    // candidate is compared with a run of the best point right before it (the previous
    // trial, when that was one). A gain is then confirmed in A B B A order (best,
    // candidate, candidate, best), whose means a linear drift cannot tilt.
    auto ref_run = [&](const char* why) {
      if (!res.trials.empty() && res.trials.back().knobs == best && !res.trials.back().failed &&
          res.trials.back().phase != "calibrate")
        return res.trials.size() - 1;
      const size_t r = run(best, reqs, "reference", "", why, nullptr);
      res.trials[r].verdict = "reference";
      report(r);
      return r;
    };
    const size_t b1 = ref_run("the best point, paired with the next candidate");
    size_t i = run(c.knobs, reqs, "search", c.change, c.reason, &pred[pick]);
    if (res.trials[i].failed) {
      report(i);
      continue;
    }
    const double ref = res.trials[b1].objective;
    auto gain_of = [](double v, double base) { return base != 0 ? (v - base) / std::fabs(base) : (v > base ? 1.0 : 0.0); };
    double gain = gain_of(res.trials[i].objective, ref);
    bool keep = false;
    std::string how;
    size_t b2_run = 0;  // the closing reference run of a confirmation (0: none)
    // A first gain inside half the band is not worth two more runs: on a few requests a
    // single reference run that happens to lose one or two of them would then carry the
    // A B B A means past the band (a neutral change kept as +18%: docs/BENCHMARKS.md,
    // issue 27 session 31).
    const bool worth_confirming = gain > 0.5 * res.noise_band;
    if (worth_confirming && elapsed() + mean_trial_s() * (2 + reserve_runs) < o.budget_s) {
      res.trials[i].verdict = fmt::format("{:+.1f}% against #{}: confirm", gain * 100, res.trials[b1].index);
      report(i);
      const size_t c2 = run(c.knobs, reqs, "search", c.change, "confirming #" + std::to_string(res.trials[i].index), &pred[pick]);
      b2_run = run(best, reqs, "reference", "", "the best point, closing the A B B A", nullptr);
      const size_t b2 = b2_run;
      res.trials[b2].verdict = "reference";
      const double mc = 0.5 * (res.trials[i].objective + res.trials[c2].objective);
      const double mb = 0.5 * (ref + res.trials[b2].objective);
      gain = gain_of(mc, mb);
      const double band = res.noise_band / std::sqrt(2.0);
      keep = !res.trials[c2].failed && mc > mb + band * std::fabs(mb);
      how = fmt::format("{:+.1f}% (A B B A means, noise band {:.1f}%)", gain * 100, band * 100);
      i = c2;
    } else {
      how = fmt::format("{:+.1f}% against #{}{}", gain * 100, res.trials[b1].index,
                        !worth_confirming && gain > 0 ? ", inside half the noise band"
                        : gain > 0                    ? ", no budget left to confirm it"
                                                      : "");
    }
    TrialRecord& last = res.trials[i];
    if (keep) {
      last.verdict = "kept: " + how;
      best = c.knobs, best_m = last.m;
      promising.clear();
    } else {
      if (gain >= 0) promising.emplace_back(c.knobs, last.m);
      last.verdict = "rejected: " + how;
    }
    report(i);
    if (b2_run) report(b2_run);
  }

  res.chosen = best;
  // The fixed grid, once each (the issue's comparison), outside the budget: its best
  // point joins the final rounds.
  Knobs grid_best;
  bool have_grid = false;
  if (o.grid) {
    const double g0 = elapsed();
    double best_grid = -kInf;
    for (int32_t seqs : {16, 64, 256})
      for (int32_t budget : {512, 2048})
        for (DType kv : {DType::F16, DType::I8}) {
          Knobs k = res.defaults;
          k.max_num_seqs = seqs, k.max_num_batched_tokens = budget, k.kv_dtype = kv;
          const size_t i = run(k, reqs, "grid", change_between(res.defaults, k), "the fixed grid", nullptr);
          res.trials[i].verdict = "grid";
          report(i);
          if (!res.trials[i].failed && res.trials[i].objective > best_grid) {
            best_grid = res.trials[i].objective;
            grid_best = k;
            have_grid = true;
          }
        }
    if (have_grid) res.grid_best = grid_best.str();
    res.grid_s = elapsed() - g0;
  }
  // The final rounds, all fresh runs (the chosen point's search runs were selected for
  // being high), interleaved A B C in each round so that drift falls on all alike: the
  // defaults, the chosen point, the grid's best.
  {
    std::vector<size_t> a, b, g;
    const bool run_b = !(best == res.defaults);
    const bool run_g = have_grid && !(grid_best == res.defaults) && !(grid_best == best);
    for (int32_t r = 0; r < std::max(1, o.final_repeats); ++r) {
      a.push_back(run(res.defaults, reqs, "verify", "", "the defaults, in turn with the others", nullptr));
      res.trials[a.back()].verdict = "final round " + std::to_string(r + 1);
      report(a.back());
      if (run_b) {
        b.push_back(run(best, reqs, "verify", change_between(res.defaults, best), "the chosen point, in turn", nullptr));
        res.trials[b.back()].verdict = "final round " + std::to_string(r + 1);
        report(b.back());
      }
      if (run_g) {
        const double g0 = elapsed();
        g.push_back(run(grid_best, reqs, "verify", change_between(res.defaults, grid_best), "the grid's best, in turn", nullptr));
        res.grid_s += elapsed() - g0;
        res.trials[g.back()].verdict = "final round " + std::to_string(r + 1);
        report(g.back());
      }
    }
    def_runs = a;
    best_runs = run_b ? b : a;
    grid_runs = run_g ? g : (have_grid && grid_best == best ? best_runs : a);
  }
  auto med = [&](const std::vector<size_t>& runs, auto f) {
    std::vector<double> v;
    for (size_t i : runs) v.push_back(f(res.trials[i]));
    return median(v);
  };
  auto obj_of = [](const TrialRecord& t) { return t.objective; };
  res.default_objective = med(def_runs, obj_of);
  res.chosen_objective = med(best_runs, obj_of);
  res.default_goodput = med(def_runs, [](const TrialRecord& t) { return t.m.goodput; });
  res.chosen_goodput = med(best_runs, [](const TrialRecord& t) { return t.m.goodput; });
  res.default_attainment = med(def_runs, [](const TrialRecord& t) { return t.m.attainment; });
  res.chosen_attainment = med(best_runs, [](const TrialRecord& t) { return t.m.attainment; });
  {
    std::vector<double> va, vb;
    for (size_t i : def_runs) va.push_back(res.trials[i].objective);
    for (size_t i : best_runs) vb.push_back(res.trials[i].objective);
    res.default_spread = spread(va);
    res.chosen_spread = spread(vb);
  }
  if (!(best == res.defaults) && !better(res.chosen_objective, res.default_objective)) {
    res.summary = fmt::format("the gain of {} did not hold in the verification runs (median {:.4g} against the "
                              "defaults' {:.4g}, noise band {:.1f}%): the defaults stay",
                              change_between(res.defaults, best), res.chosen_objective, res.default_objective,
                              res.noise_band * 100);
    res.chosen = res.defaults;
    res.chosen_objective = res.default_objective, res.chosen_goodput = res.default_goodput;
    res.chosen_attainment = res.default_attainment, res.chosen_spread = res.default_spread;
    best_runs = def_runs;
  } else if (best == res.defaults) {
    res.summary = "no change beat the defaults by more than the noise band: the defaults stay";
    if (o.objective == Objective::Goodput && res.default_attainment >= 1)
      res.summary += std::isfinite(res.rate)
                         ? " (every request met the SLO at the defaults, so goodput is the arrival rate: a heavier load "
                           "or a tighter SLO leaves room to tune)"
                         : " (every request met the SLO at the defaults, so goodput is their throughput, which no change "
                           "predicted or measured improved beyond the band)";
  } else if (o.objective == Objective::Goodput && res.default_goodput == 0) {
    res.summary = fmt::format("{} gives a goodput of {:.4g} req/s where the defaults had no request within the SLO "
                              "(medians of {} runs each)",
                              change_between(res.defaults, best), res.chosen_goodput, best_runs.size());
  } else {
    res.summary = fmt::format("{} gives {:+.1f}% {} over the defaults (medians of {} runs each, noise band {:.1f}%)",
                              change_between(res.defaults, best),
                              100 * (res.chosen_objective - res.default_objective) / std::max(1e-12, std::fabs(res.default_objective)),
                              objective_name(o.objective), best_runs.size(), res.noise_band * 100);
  }
  if (have_grid) {
    res.grid_best_objective = med(grid_runs, obj_of);
    const double grid_goodput = med(grid_runs, [](const TrialRecord& t) { return t.m.goodput; });
    if (o.objective == Objective::Goodput && grid_goodput == 0)
      res.summary += fmt::format("; no point of the grid had a request within the SLO (its closest: {})",
                                 change_between(res.defaults, grid_best));
    else
      res.summary += fmt::format("; against the grid's best ({}): {:+.1f}%", change_between(res.defaults, grid_best),
                                 100 * (res.chosen_objective - res.grid_best_objective) /
                                     std::max(1e-12, std::fabs(res.grid_best_objective)));
  }
  // Does the chosen point meet the SLO, and if not, which limit binds?
  {
    const double ttft = med(best_runs, [](const TrialRecord& t) { return t.m.ttft_slo_pct; });
    const double tpot = med(best_runs, [](const TrialRecord& t) { return t.m.tpot_slo_pct; });
    const double et = std::isfinite(o.slo.ttft_s) ? ttft / o.slo.ttft_s : 0;
    const double ep = std::isfinite(o.slo.tpot_s) ? tpot / o.slo.tpot_s : 0;
    res.slo_met = et <= 1 && ep <= 1;
    if (!res.slo_met) {
      res.binding = et >= ep ? fmt::format("TTFT p{:g} {:.0f} ms against {:.0f} ms binds (TPOT p{:g} {:.0f} ms, limit {})",
                                           o.slo.ttft_pct, ttft * 1e3, o.slo.ttft_s * 1e3, o.slo.tpot_pct, tpot * 1e3,
                                           std::isfinite(o.slo.tpot_s) ? fmt::format("{:.0f} ms", o.slo.tpot_s * 1e3) : "none")
                             : fmt::format("TPOT p{:g} {:.0f} ms against {:.0f} ms binds (TTFT p{:g} {:.0f} ms, limit {})",
                                           o.slo.tpot_pct, tpot * 1e3, o.slo.tpot_s * 1e3, o.slo.ttft_pct, ttft * 1e3,
                                           std::isfinite(o.slo.ttft_s) ? fmt::format("{:.0f} ms", o.slo.ttft_s * 1e3) : "none");
      res.summary += "; the SLO is not met at the closest point found: " + res.binding;
    }
  }
  double err = 0;
  int n_err = 0;
  for (const auto& t : res.trials)
    if (t.predicted && t.objective != 0) err += std::fabs(t.predicted_objective - t.objective) / std::fabs(t.objective), ++n_err;
  res.mean_prediction_error = n_err ? err / n_err : 0;
  res.step_model = sm;
  res.threads = o.base.threads;
  res.ceilings = model_ceilings(model, peaks, o.base.threads);
  res.flops_per_token = model_flops_per_token(model);
  res.weight_bytes = double(model.streamed_weight_bytes());
  res.elapsed_s = elapsed();
  return res;
}

}  // namespace ridge::tools
