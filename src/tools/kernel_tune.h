// `ridge tune-kernels`: times the candidates of every tunable kernel parameter
// (kernels/cpu/tuning.h) on this machine and keeps the best, per weight type.
//
// Method. Each type's matrices are a mkmodel preset's ffn_up and ffn_down, as packed
// panels, in a ring of copies larger than the last-level cache so every call streams its
// weights from DRAM as a decode step does. One parameter at a time (the others at the
// values chosen so far), at the row counts it acts on (decode: 1; decode batches: 16 and
// 9, a speculative verification's), the candidates take turns in rounds, the order
// rotating per round, each sample one pass over the ring. A candidate replaces the
// default only if its median is `margin` faster and it beat the default in at least two
// thirds of the rounds: this machine's bandwidth drifts by tens of percent in minutes, and
// a choice made on noise would be kept for good. Types not timed take the parameters of
// their nearest timed sibling (Q4_1, the Q5 types and MXFP4: Q4_0's; Q5_K: Q4_K's; F32 and BF16:
// F16's).
//
// Where the CPU has both FP8 arithmetics (core/cpu.h Fp8Path) they are timed the same way
// (weights packed for each); the faster is recorded, and applies from the next start.
// The attention's online-softmax tile (kernels::attention_tile_keys) is raced first when
// F16 is among the types, on decode steps of the preset's heads over an f16 cache past
// the last-level cache (its trial's type is the cache's dtype).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/tuning.h"
#include "tools/bench_kernels.h"
#include "tools/kernel_cache.h"

namespace ridge {

struct TuneOptions {
  int threads = 0;
  std::vector<DType> types{DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F8_E4M3_B128};
  int rounds = 8;  // even: with the order rotating, each of two candidates goes first equally often
  int64_t ring_bytes = int64_t(512) << 20;  // per matrix
  std::string preset = "tinyllama-1.1b";
  double margin = 0.03;
};

// The quick profile of a first use: fewer rounds, a smaller ring (still far past any
// per-core-complex L3), about 10-20 s on 2 cores.
TuneOptions quick_tune_options(int threads);

// One parameter of one type: the candidates' median time (us per pass over both
// matrices' ring, summed over the row counts) and what was chosen.
struct TuneTrial {
  DType type = DType::F32;
  std::string param;  // a TunableParam's name, "fp8_path" (candidates 0 = f16c, 1 = bf16) or "attn_tile_keys"
  std::vector<int64_t> ms;
  std::vector<int32_t> candidates;
  std::vector<double> median_us;
  std::vector<int> wins;  // rounds each candidate beat the default's sample of the same round
  int32_t default_value = 0, chosen = 0;
};

struct TuneResult {
  TunedEntry entry;
  std::vector<TuneTrial> trials;
  std::vector<DType> types;  // the types whose values the run set (timed, or a timed sibling's)
};

// The candidates of p that a run on `threads` threads times for matrices `shapes`: all
// of them, but for the task sizes (task_panels, batch_task_panels), where Matmul's floor
// of 4 tasks per thread makes several sizes give every matrix the same tasks on many
// threads: timing those against each other would time noise, and could let noise pick a
// size that no matrix was measured at. One of each such set is timed: the default where
// it is one of them, else the largest.
std::vector<int32_t> raced_candidates(const kernels::TunableParam& p, int32_t default_value,
                                      const std::vector<KernelShape>& shapes, int threads);

// entry's values for r's types (and its FP8 path if r raced it) over `old`, the CPU's
// earlier entry: a run on some types keeps what an earlier run chose for the others.
TunedEntry merge_tuned(const TunedEntry& old, const TuneResult& r);

// Runs the tuning; the process's kernel tuning (and FP8 path) are the result's after.
TuneResult tune_kernels(const TuneOptions& opt);
std::string tune_report_text(const TuneResult& r);
std::string tune_report_json(const TuneResult& r);

}  // namespace ridge
