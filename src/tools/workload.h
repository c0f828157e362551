// What `ridge tune` loads the engine with: a described workload (arrival process, length
// distributions, shared prefixes) expanded into timed requests, or a recorded trace
// (engine/request_trace.h) replayed as it was.
//
// A description is a JSON object (every field optional):
//   {"name": "chat", "num_requests": 48, "rate": "auto", "load": 0.9, "max_concurrency": 0,
//    "input_len": [32, 256], "output_len": [32, 128], "prefix_len": 0, "num_prefixes": 1,
//    "prefix_share": 0.0, "seed": 0}
// rate: requests per second of a Poisson process, "inf" (all at once) or "auto" (load x
// the default configuration's measured request capacity on this workload, found by a
// calibration trial); num_requests: a count or "auto" (what a trial of the tuner's length
// takes at that rate); lengths: N or [min, max] (uniform). prefix_share of the requests
// begin with one of num_prefixes shared prefixes of prefix_len tokens (RAG's documents,
// an agent's system prompt): their prompt is the prefix, then input_len tokens of its own.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request_trace.h"

namespace ridge::tools {

struct LengthRange {
  int32_t min = 1, max = 1;
};

struct WorkloadSpec {
  std::string name = "custom";
  int64_t num_requests = 0;  // 0: auto
  double rate = 0;           // req/s; inf: all at once; 0: auto
  double load = 0.9;         // auto rate: this fraction of the measured capacity
  int32_t max_concurrency = 0;  // 0: unlimited (an open system)
  LengthRange input{32, 256}, output{32, 128};
  int32_t prefix_len = 0, num_prefixes = 1;
  double prefix_share = 0;
  uint64_t seed = 0;
  // A recorded trace replaces all of the above but max_concurrency (trace non-empty).
  std::vector<TracedRequest> trace;
  std::string source;  // "builtin chat", a file path

  bool replay() const { return !trace.empty(); }
  bool auto_rate() const { return !replay() && rate == 0; }
};

// The built-in workloads, scaled to a context of ctx tokens (the model's, capped):
// chat (short prompts, moderate outputs, Poisson at auto rate), rag (long shared
// prefixes, short questions and answers), burst (long generations, all at once).
std::vector<std::string> builtin_workloads();
WorkloadSpec builtin_workload(std::string_view name, int32_t ctx);
// A description (*.json), a trace (*.jsonl, or any file whose first request line has
// "t"), or a built-in's name. Throws ridge::Error naming the file, the line or the field.
WorkloadSpec load_workload(const std::string& name_or_path, int32_t ctx, int32_t n_vocab);
WorkloadSpec parse_workload_json(std::string_view text, std::string_view where, int32_t ctx);

// The timed requests of one trial: the trace (prompt ids drawn where it gives only a
// length), or n requests drawn from the description at `rate` (inf: all at t = 0).
// Token ids are in [3, n_vocab) (below: the usual special tokens); deterministic in seed.
std::vector<TracedRequest> make_requests(const WorkloadSpec& w, int64_t n, double rate, int32_t n_vocab, uint64_t seed);

// The description as JSON (a trace: its source and size), for reports and --output.
std::string workload_json(const WorkloadSpec& w);

}  // namespace ridge::tools
