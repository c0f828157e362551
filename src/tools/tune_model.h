// What `ridge tune` predicts before it measures: a step-time model (a line in the step's
// rows and sequences, starting from the op cost model's roofline and refitted to every
// measured step) and a simulation of continuous batching on it (arrivals, the seat and
// token budgets, chunked prefill, the KV pool, prefix-cache hits) that turns a
// configuration and a workload into predicted TTFTs and TPOTs.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/request_trace.h"
#include "tools/tune_trial.h"

namespace ridge {
class Model;
struct Peaks;
}

namespace ridge::tools {

// t(step) = fixed + per_token x rows + per_seq x sequences + per_pair x attention's
// query-key pairs (counted at f16 KV: StepRecord::pairs), in seconds. The pairs term is
// what makes long contexts slow and an 8-bit KV cache faster.
struct StepModel {
  double fixed_s = 0, per_token_s = 0, per_seq_s = 0, per_pair_s = 0;
  double prior_fixed_s = 0, prior_per_token_s = 0, prior_per_pair_s = 0;  // the roofline's, before any fit
  int64_t fitted_steps = 0;
  double at(double tokens, double seqs, double pairs = 0) const {
    return fixed_s + per_token_s * tokens + per_seq_s * seqs + per_pair_s * pairs;
  }
};

// The matrices' operations per token (2 per multiply-add; attention's own left out).
double model_flops_per_token(const Model& m);
// The ceilings the prior uses: DRAM GB/s at `threads`, and the compute GOP/s of the
// layers' kernel class (int8 VNNI for block-quantized weights, else fp32 FMA).
struct Ceilings {
  double dram_gbs = 0, compute_gops = 0;
  const char* compute_class = "fp32";
};
Ceilings model_ceilings(const Model& m, const Peaks& peaks, int threads);
// The roofline prior: the streamed weight bytes over the DRAM ceiling (every step reads
// them once), a token's operations over the compute ceiling of the weights' kernel
// class (a decode of a quantized model runs int8 VNNI, f16/f32 runs fp32 FMA), and a
// pair's K/V bytes over the DRAM ceiling.
StepModel step_model_prior(const Model& m, const Peaks& peaks, int threads);
// Least squares over the steps, anchored by the prior (a few pseudo-steps at its shape,
// so steps that hardly vary in rows do not leave a coefficient free); none negative.
void fit_step_model(StepModel& sm, const std::vector<StepRecord>& steps);

// Predicted metrics of the requests on cfg (its max_num_seqs, max_num_batched_tokens,
// block_size and prefix cache; kv_tokens: the pool's capacity in tokens), scored against
// the SLO as a measured trial is.
TrialMetrics simulate(const StepModel& sm, const EngineConfig& cfg, int64_t kv_tokens,
                      const std::vector<TracedRequest>& requests, int32_t max_concurrency, const Slo& slo);

}  // namespace ridge::tools
