// The roofline report: per phase (prefill, decode) and batch size, per op, how far each
// op is from the ceiling that bounds it (`ridge peaks`), which ceiling that is, the step
// time the roofline predicts next to the measured one, and a diagnosis that names the
// bottleneck and the technique that addresses it, citing its numbers.
//
// RooflineRun is the measurement (from `ridge roofline`, or read back from its JSON);
// analyze() derives everything else; the renderers print a text table, JSON, or an HTML
// page with the roofline drawn as an inline SVG (log-log; the DRAM roof and one compute
// roof per instruction class; one point per op and batch, plotted against the roof of the
// kernel that ran it; ridge points marked).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "perf/op_profile.h"
#include "perf/peaks.h"

namespace ridge::tools {

using perf::ComputeClass;

struct OpMeasure {
  std::string name;          // op_name()
  ComputeClass cls = ComputeClass::None;
  double flops = 0;          // per step
  double bytes = 0;          // per step
  double seconds = 0;        // per step (measured)
};

struct PhaseMeasure {
  std::string phase;         // "prefill" | "decode"
  int32_t batch = 1;         // sequences in the step
  int64_t tokens = 0;        // tokens per step (prefill: batch x prompt; decode: batch)
  int64_t steps = 0;         // steps measured
  double step_seconds = 0;   // mean measured step time (forward + sampling)
  double wall_seconds = 0;   // mean wall time per step including the gaps between steps
  std::vector<OpMeasure> ops;
};

struct RooflineRun {
  std::string model;         // file name
  std::string weight_type;   // e.g. "q4_0" (most of the weight bytes)
  int threads = 0;
  int32_t prompt = 0;        // prompt length of the prefill phases
  // What else shaped the run (a run read from an older JSON: empty / 0).
  std::string kv_dtype;      // e.g. "f16"
  int32_t block_size = 0;    // KV block, tokens
  int32_t max_num_batched_tokens = 0;
  Peaks peaks;
  // Where the ceilings came from: "measured in this run", or the --peaks file and its age.
  std::string peaks_origin;
  std::vector<PhaseMeasure> phases;
};

enum class Bound { Memory, Compute };

struct OpAnalysis {
  const OpMeasure* op = nullptr;
  double gflops = 0, gbs = 0;       // achieved
  double intensity = 0;             // flops / bytes
  double peak_gflops = 0;           // the compute roof of its class (0: none)
  double ridge = 0;                 // peak_gflops / DRAM GB/s, FLOP per byte
  Bound bound = Bound::Memory;
  // Its operands were made earlier in the same step (op_reads_cache): the memory roof is
  // the cache read ceiling, where the peaks have one, not DRAM.
  bool from_cache = false;
  double roof_gbs = 0;              // the memory roof that applies to it
  double bound_pct = 0;             // achieved as % of the bound that applies
  // Measured above its ceiling: the ceiling is too low (re-measure it) or the op's bytes
  // came from cache; never shown as a percentage over 100.
  bool above_ceiling = false;
  double predicted_seconds = 0;     // max(flops / peak, bytes / bandwidth)
  double share = 0;                 // of the phase's measured op time
};

struct PhaseAnalysis {
  const PhaseMeasure* phase = nullptr;
  std::vector<OpAnalysis> ops;
  double flops = 0, bytes = 0;
  double predicted_seconds = 0;     // sum of the ops' predictions
  double op_seconds = 0;            // sum of measured op times
  std::string bottleneck;           // "memory" | "compute" | "overhead" | "scheduler"
                                    // ("unknown": nothing measured)
  std::string verdict;              // one paragraph: the bottleneck, the numbers, the technique
};

struct RooflineAnalysis {
  double dram_gbs = 0;              // the bandwidth roof (peaks at run.threads)
  double cache_gbs = 0;             // the cache read roof (0: not measured; DRAM applies)
  std::vector<PhaseAnalysis> phases;
};

RooflineAnalysis analyze(const RooflineRun& run);

std::string render_text(const RooflineRun& run, const RooflineAnalysis& a);
std::string render_json(const RooflineRun& run, const RooflineAnalysis& a);
// Reads render_json's output back (the measurement part); throws ridge::Error.
RooflineRun run_from_json(const std::string& text, const std::string& where);
std::string render_html(const RooflineRun& run, const RooflineAnalysis& a);

}  // namespace ridge::tools
