// The kernel tuning cache: what `ridge tune-kernels` chose, per CPU, in one JSON file
// (DIR/kernels.json; DIR is --kernel-cache, else $RIDGE_KERNEL_CACHE, else
// $XDG_CACHE_HOME/ridge, else ~/.cache/ridge; "off" disables it). A process applies its
// CPU's entry at start, before any weights are packed (the FP8 path decides their layout).
//
//   {"version": 1, "cpus": {"<cpu id>": {"tuner": 2, "threads": 2, "measured_at": 1796..., "seconds": 21.4,
//     "fp8_path": "bf16", "attn_tile_keys": 128, "types": {"q4_0": {"decode_ahead": 1024, ...}, ...}}}}
//
// A value that is not one of its parameter's candidates, a type ridge has no packed kernel
// for, or a file that is not this shape is an error naming the file and the key; the
// process then runs on the defaults and says so. Entries of other CPUs are kept.
// An entry records the tuner generation that measured it ("tuner"; absent: 1). One of an
// older generation (fewer candidates, another way of timing them) is applied but stale:
// the first command that runs a model re-times it, as it times a missing one. One of a
// later generation (a newer ridge sharing the directory) is applied as far as this ridge
// knows its values: an integer that is none of this ridge's candidates keeps the default
// there instead of making the entry unusable, and it is not re-timed (the two versions
// would take turns rewriting it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/cpu.h"
#include "kernels/cpu/tuning.h"

namespace ridge {

// What identifies a CPU for tuning: the model name, CPUID family/model/stepping, the
// SIMD features the kernels choose by, and the L2 size (a VM may report a generic name).
std::string kernel_cpu_id();

// The cache directory from --kernel-cache (empty: not given) and the environment; ""
// when the cache is off.
std::string kernel_cache_dir(const std::string& flag);
std::string kernel_cache_file(const std::string& dir);  // DIR/kernels.json

// The tuner's generation: 2 added decode tasks of 32 and 64 panels, decode batches' own
// task size, and matrices timed in turns; 3 the float weights' conversion once per pass.
inline constexpr int kTunerGeneration = 3;

struct TunedEntry {
  int tuner = kTunerGeneration;  // the generation that measured it
  kernels::KernelTuning tuning = kernels::default_tuning();
  std::optional<Fp8Path> fp8_path;  // where the tuner compared the paths
  std::optional<int32_t> attn_tile_keys;  // kernels::attention_tile_keys, where it was timed
  int threads = 0;
  int64_t measured_at = 0;  // Unix seconds
  double seconds = 0;       // the tuning run's length
};

// The entry for cpu in the file, nullopt if the file or the entry is absent. Throws
// ridge::Error for a file that cannot be read or parsed or holds an invalid value.
std::optional<TunedEntry> load_tuned(const std::string& file, const std::string& cpu);
// Writes cpu's entry, keeping the others (a corrupt file is replaced); creates the
// directory; atomic (a temporary file renamed over the old one). Throws on failure.
void save_tuned(const std::string& file, const std::string& cpu, const TunedEntry& e);

// Creates dir if needed and checks a file can be written there (before a tuning run
// whose result would otherwise be lost); throws ridge::Error naming the problem.
void check_cache_dir(const std::string& dir);

// At start: this CPU's entry from the cache in dir, applied (set_kernel_tuning,
// set_attention_tile_keys, and set_fp8_path unless RIDGE_FP8_PATH forces one), with one
// line for the log: which file was applied, or why the defaults run (no entry, the cache
// off, a bad file).
struct KernelCacheUse {
  enum Status { Applied, Stale, NoEntry, Off, Unusable } status;  // Stale: applied, an older tuner's
  std::string line;
};
KernelCacheUse apply_kernel_cache(const std::string& dir);

}  // namespace ridge
