// One measured trial of `ridge tune`: a fresh engine with one configuration, loaded with
// timed requests in real time (arrivals at their times, a new request waits for the step
// in flight as it would in a server), every request's TTFT and TPOT against the SLO, and
// what the diagnosis reads: each step's composition and time, KV use, queueing,
// preemptions. The engine is driven in this process, not over HTTP: the trial measures
// the engine's scheduling and kernels, and no load generator competes for the cores.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config.h"
#include "engine/request_trace.h"

namespace ridge {
class Model;
class Tokenizer;
}

namespace ridge::tools {

// A service-level objective: the percentile of TTFT and of TPOT (a request's mean time
// per output token after the first, as vLLM's benchmark defines it) that must be within
// its limit. A request is good when it is within both limits; goodput is good requests
// per second (vLLM's --goodput).
struct Slo {
  double ttft_s = std::numeric_limits<double>::infinity();
  double tpot_s = std::numeric_limits<double>::infinity();
  double ttft_pct = 99, tpot_pct = 99;
  std::string str() const;  // "ttft_p99=2s,tpot_p99=100ms"
};
// "ttft_p99=2s,tpot_p99=100ms" (also ttft=..., p50/p90/p95/p99/p99.9, units s and ms;
// a bare number is seconds). Throws ridge::Error naming the item at fault.
Slo parse_slo(std::string_view s);

struct StepRecord {
  double start_s = 0, seconds = 0;  // from the trial's start
  int32_t tokens = 0;               // rows the forward ran (prompt chunks, decodes, drafts)
  int32_t seqs = 0;                 // sequences in the batch
  bool prompt_work = false;         // a chunk carried prompt (or recompute) tokens
  int32_t waiting = 0;              // requests waiting after it
  float kv_use = 0;                 // the pool's pages in use after it, a fraction
  double pairs = 0;                 // attention's query-key pairs, x kv_pair_scale of the KV dtype
};

// A KV dtype's bytes per position relative to f16's: what the pairs of a step cost
// against an f16 cache's (attention streams the cache).
double kv_pair_scale(DType kv);

struct TrialMetrics {
  int64_t requests = 0, completed = 0, good = 0;
  bool truncated = false;  // the deadline ended it: unfinished requests count as not good
  double duration_s = 0;   // first arrival to last token
  double goodput = 0;      // good requests / s
  double request_throughput = 0, output_throughput = 0, good_output_throughput = 0;  // per s
  double ttft_p50 = 0, ttft_slo_pct = 0, tpot_p50 = 0, tpot_slo_pct = 0;  // s; *_slo_pct: at the SLO's percentile
  double attainment = 0, ttft_ok = 0, tpot_ok = 0;  // fractions of the requests
  double queue_p50 = 0, queue_p99 = 0;              // arrival to first scheduled, s
  // What the diagnosis reads.
  int64_t steps = 0, preemptions = 0;
  double busy_s = 0;                  // time inside steps
  double prompt_step_s = 0;           // ... in steps with prompt work
  double max_prompt_step_s = 0;       // the longest step with prompt work (a decode's stall)
  double decode_step_s = 0;           // mean decode-only step
  double decode_step_rows = 0;        // ... and its rows (decodes and drafts)
  double prompt_step_mean_s = 0, prompt_step_rows = 0;  // mean step with prompt work, and its rows
  double mean_decode_batch = 0;       // sequences per decode-only step
  double full_seqs_share = 0;         // steps that ran max_num_seqs sequences with requests waiting
  double mean_waiting = 0;            // requests waiting, over steps
  double kv_peak = 0;                 // the pool's peak use, a fraction
  // The KV cache's share of what a decode-only step reads (its sequences' contexts x the
  // bytes per token, beside the streamed weights): what a quantized KV would halve.
  double kv_read_share = 0;
  int64_t spec_draft_tokens = 0, spec_accepted_tokens = 0;
  int64_t prefix_hit_tokens = 0, prompt_tokens = 0;
  int64_t kv_tokens = 0;              // the pool's capacity in tokens
  int64_t kv_pool_bytes = 0;          // ... and in bytes
  int64_t swaps = 0;                  // of the preemptions, those that swapped KV out
};

struct TrialResult {
  TrialMetrics m;
  std::vector<StepRecord> steps;
  std::vector<double> ttft_s, tpot_s;  // [requests] (unfinished: infinity)
};

// Runs the requests (sorted by t) through a fresh engine on cfg: greedy, EOS ignored,
// each generating its output_tokens. At most max_concurrency in flight (0: no limit;
// a request held back arrives when a slot frees). Requests still unfinished at
// deadline_s after the start are aborted (metrics.truncated). Throws ridge::Error when a
// request can never fit the configuration's KV pool.
TrialResult run_trial(const Model& model, const Tokenizer* tok, const EngineConfig& cfg,
                      const std::vector<TracedRequest>& requests, int32_t max_concurrency, const Slo& slo,
                      double deadline_s);

// The metrics of per-request times (the part of run_trial with no engine; tested alone).
void summarize(TrialMetrics& m, const std::vector<double>& arrival, const std::vector<double>& ttft,
               const std::vector<double>& tpot, const std::vector<double>& end, const std::vector<int32_t>& out_tokens,
               const Slo& slo, double min_duration_s = 0);

}  // namespace ridge::tools
