// `ridge tune`: the loop a performance engineer runs by hand, automated. Measure the
// defaults (twice: the noise band), diagnose what binds (the SLO that fails, and why:
// prompt chunks stalling decodes, requests waiting for a seat, a full KV pool, decode
// steps that only stream weights), turn the diagnosis into candidate changes, predict
// each with the step model's simulation (tools/tune_model.h), measure the most promising,
// keep it only if it beats the best so far by more than the noise band, repeat while the
// budget lasts; then the chosen point and the defaults run in turn (A B A B) so the
// reported gain has its own noise band.
//
// Policy at the top, decisions as data: every rule is a row of kRules (tuner.cpp) with
// the symptom it reads and the change it makes; every trial is a TrialRecord saying what
// changed, why, what was predicted and what was measured.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config.h"
#include "perf/peaks.h"
#include "tools/tune_model.h"
#include "tools/tune_trial.h"
#include "tools/workload.h"

namespace ridge {
class Model;
class Tokenizer;
}

namespace ridge::tools {

enum class Objective { Goodput, Throughput, Cost };
const char* objective_name(Objective o);
Objective objective_from_name(const std::string& s);  // throws ridge::Error

// The knobs the tuner turns; everything else stays as the base configuration has it.
struct Knobs {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  DType kv_dtype = DType::F16;
  bool prefix_cache = true;
  SpecMethod spec = SpecMethod::None;
  int32_t spec_tokens = 4;
  int threads = 0;
  int64_t kv_cache_bytes = 0;  // the pool; 0: as the base configuration sizes it
  PreemptionMode preemption = PreemptionMode::Recompute;
  int64_t swap_bytes = 0;

  static Knobs of(const EngineConfig& c);
  void apply(EngineConfig& c) const;
  bool operator==(const Knobs&) const = default;
  std::string str() const;  // "max-num-seqs=64 max-num-batched-tokens=512 ..."
  // The flags that move these knobs from `base`, by their long names.
  std::vector<std::pair<std::string, std::string>> flags(const Knobs& base) const;
};

// Whether a flag (its long name, no dashes) is one the knobs write; the others that tune
// was given are carried into its output unchanged.
bool is_knob_flag(std::string_view name);

struct TuneOptions {
  WorkloadSpec workload;
  Slo slo;
  double budget_s = 600;
  Objective objective = Objective::Goodput;
  EngineConfig base;         // the defaults plus any engine flag given to tune
  int32_t cores = 0;         // the machine's, for the cost objective (0: base.threads)
  double trial_s = 0;        // 0: budget / 16
  int32_t final_repeats = 3; // runs of the defaults and of the chosen point at the end
  bool grid = false;         // also run the fixed grid (max_num_seqs x budget x KV dtype) once each
  uint64_t seed = 0;
  // How far the pool and the swap space may grow (0: tune() reads them off the machine:
  // 80% of the memory available when it starts, half the free space of the swap dir).
  int64_t mem_limit_bytes = 0, swap_limit_bytes = 0;
};

struct TrialRecord {
  int32_t index = 0;
  std::string phase;    // calibrate, baseline, search, verify, grid
  Knobs knobs;
  std::string config;   // its flags that differ from the defaults ("" for the defaults)
  std::string change;   // what moved from the point it was tried against ("" for the defaults)
  std::string reason;   // the diagnosis that chose it
  bool predicted = false;
  double predicted_objective = 0;
  TrialMetrics m;
  double objective = 0;
  std::string verdict;  // kept / rejected and why
  double step_s_prior = 0, step_s_fit = 0;  // the step model's error on this trial's steps (mean |rel|)
  double wall_s = 0;    // the trial's time, the engine's construction included
  bool failed = false;  // the engine refused the configuration (verdict says why)
};

struct TuneResult {
  std::vector<TrialRecord> trials;
  Knobs defaults, chosen;
  Knobs engine_defaults;        // EngineConfig's own: the output's flags are relative to these
  double rate = 0;              // requests/s of the trials (inf: all at once)
  int64_t requests_per_trial = 0;
  double noise_band = 0;        // relative, from the defaults' repeated runs
  // The final A B A B runs: medians of the objective, goodput and SLO attainment.
  double default_objective = 0, chosen_objective = 0;
  double default_goodput = 0, chosen_goodput = 0;
  double default_attainment = 0, chosen_attainment = 0;
  double default_spread = 0, chosen_spread = 0;  // (max - min) / median of the runs
  bool slo_met = false;         // the chosen point meets the SLO's percentiles
  std::string binding;          // which constraint binds at the chosen point, when not met
  std::string grid_best;        // the best grid point (with --grid), and its objective
  double grid_best_objective = 0;
  StepModel step_model;
  Ceilings ceilings;            // the roofline the report draws
  double flops_per_token = 0, weight_bytes = 0;
  int32_t threads = 0;          // the trials' thread count
  double mean_prediction_error = 0;  // |predicted - measured| / measured over predicted trials
  double elapsed_s = 0;
  double grid_s = 0;            // of which the grid's runs (outside the budget)
  std::string summary;          // why it won, or why it did not
  std::vector<std::string> skipped;  // candidates not run, and why
};

// The candidate changes for the point `cur` whose trial measured m (pure: tested alone).
struct Candidate {
  Knobs knobs;
  std::string change, reason;
};
// sm: the step model so far (its prior_fixed_s is the weight stream's floor; its line
// sizes the token budget a rule proposes).
std::vector<Candidate> diagnose(const TrialMetrics& m, const Knobs& cur, const TuneOptions& o, const StepModel& sm);
// The objective's value of a trial (higher is better); the limits rank trials where no
// request met the SLO (an infinite limit is always met).
double objective_value(const TrialMetrics& m, Objective o, int threads, int32_t cores,
                       double ttft_limit = std::numeric_limits<double>::infinity(),
                       double tpot_limit = std::numeric_limits<double>::infinity());

// `ridge tune --check FILE`: a configuration that tuning chose, run again o.final_repeats
// times on the requests it was tuned on (the same workload, rate, count and seed); the
// median objective against the one recorded, within the recorded noise band.
struct CheckResult {
  std::vector<TrialRecord> trials;
  double recorded = 0, median = 0, band = 0;
  bool reproduced = false;
};
CheckResult check_config(const Model& model, const Tokenizer* tok, const TuneOptions& o, double rate, int64_t n,
                         double recorded, double band, const std::function<void(const TrialRecord&)>& on_trial);

TuneResult tune(const Model& model, const Tokenizer* tok, const Peaks& peaks, const TuneOptions& o,
                const std::function<void(const TrialRecord&)>& on_trial);

}  // namespace ridge::tools
