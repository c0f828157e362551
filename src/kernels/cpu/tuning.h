// The matrix kernels' tunable parameters: what the best value of depends on the CPU
// (its prefetchers, fill buffers, cache sizes, and which conversion units it has), with
// the few candidates worth timing for each. `ridge tune-kernels` (tools/kernel_tune.h)
// times them on the machine it runs on and keeps the best per CPU in a cache file
// (tools/kernel_cache.h); the process applies it at start (set_kernel_tuning), and
// Matmul reads the current values on every call. Without a cache the defaults are the
// values measured best on the machines these kernels were written on.
//
// No parameter changes a bit of any result: each only moves prefetches, changes how the
// output panels are split into tasks or how many weight streams a task reads at once,
// picks the row tiles of a decode batch or prefill, or where prefill converts float
// weights (exactly), and every lane's sequence of operations is the same under all of
// them (gemm.h). The tests run every candidate against the defaults.
// The FP8 weights' arithmetic (core/cpu.h Fp8Path) is the one choice that does change
// bits (within the kernel's stated tolerance); the tuner times it too, and the cache
// records it, but it lives with the CPU path because the weights are packed for it. So
// does the attention's online-softmax tile (kernels/cpu/attention.h attention_tile_keys),
// which moves the order of a row's softmax steps.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace ridge::kernels {

// The parameters of one weight type.
struct TypeTuning {
  // Bytes each decode (one activation row) weight stream's software prefetch runs ahead.
  int32_t decode_ahead = 1024;
  // Weight streams (16-row panels) a decode task reads at once: 2 or 4.
  int32_t decode_streams = 4;
  // Most panels of one matmul task in decode (one row): a thread that walks several
  // groups in a row keeps a stream warm from group to group; fewer per task balance the
  // threads better at the end (Matmul keeps 4 tasks per thread or more whatever this is).
  // Longer walks streamed faster on every CPU measured (docs/BENCHMARKS.md, issue 6
  // sessions 4 and 7; issues 22 and 25 session 39).
  int32_t task_panels = 64;
  // The same for decode batches (2 to 48 rows), whose kernels are nearer their compute
  // roof, so the end's balance weighs more than the streams' warmth.
  int32_t batch_task_panels = 16;
  // Bytes a decode batch's (2 to 48 rows) weight prefetch runs ahead.
  int32_t batch_ahead = 1024;
  // Panels (weight streams) a decode batch's block-by-block kernel reads at once: 2 or 4.
  int32_t batch_streams = 4;
  // The 32-block formats' decode batches: row tiles as even as the rows allow (1), or
  // tiles of 4 and the rest (0).
  int32_t batch_even = 1;
  // Activation rows of a register tile where the weights are reused across rows (prefill,
  // and the float types' decode batches): 4, 6 or 8 (MR x 2 panels of accumulators;
  // the types that carry per-panel scale vectors spill at 8).
  int32_t tile_rows = 4;
  // F16, BF16 and FP8 (f16c path) prefill: each kGemmKc columns (FP8: 128-block) of a
  // panel pair converted to f32 once
  // into L1 for all the row tiles (1), or by every tile as it loads them (0). The
  // conversion takes the FMAs' ports on some cores (Intel's vcvtph2ps is two uops
  // there), so once leaves the tiles only loads and FMAs. Decode batches always convert
  // in the tiles (gemm.h GemmArgs::convert_once).
  int32_t convert_once = 0;

  bool operator==(const TypeTuning&) const = default;
};

// The weight types with packed kernels, the order of KernelTuning's entries.
inline constexpr std::array<DType, 13> kTunedTypes = {
    DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,         DType::Q4_1, DType::Q5_0,
    DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::F8_E4M3_B128, DType::MXFP4};

struct KernelTuning {
  std::array<TypeTuning, kTunedTypes.size()> types;

  const TypeTuning& of(DType t) const;  // a type without packed kernels: the defaults
  TypeTuning& of(DType t);               // throws for a type without packed kernels
  bool operator==(const KernelTuning&) const = default;
};

// One tunable parameter: its name (the cache file's key), the TypeTuning field, and the
// candidates the tuner times (the default among them).
struct TunableParam {
  std::string_view name;
  int32_t TypeTuning::*field;
  std::vector<int32_t> candidates;
  std::string_view what;  // one line for the tuner's report
};
const std::vector<TunableParam>& tunable_params();
const TunableParam* find_tunable(std::string_view name);
// Whether p changes anything for weight type t on the active CPU path (batch_ahead: the
// types with decode-batch kernels; batch_even: the 32-block ones; on the AVX2 kernels only
// decode's streams and the task size).
bool tunable_for(const TunableParam& p, DType t);

// Whether v is one of p's candidates (the cache is checked against these).
bool valid_value(const TunableParam& p, int32_t v);

// The defaults (measured on the development machines: docs/BENCHMARKS.md).
KernelTuning default_tuning();

// The values Matmul uses now; set at start from the cache, by tests and by the tuner.
const KernelTuning& kernel_tuning();
void set_kernel_tuning(const KernelTuning& t);

}  // namespace ridge::kernels
