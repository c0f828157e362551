// Machine ceilings for the roofline: DRAM read bandwidth and the compute peaks of the SIMD
// path ridge runs on this CPU. Every efficiency figure (bench kernels, roofline report)
// divides by these numbers, so they are measured, not taken from a datasheet.
//
// `ridge peaks --json FILE` writes them; load_peaks() reads them back. The JSON schema is
// stable (add keys, never rename them):
//
//   {
//     "cpu": "Intel(R) Xeon(R) ...",      // /proc/cpuinfo "model name"
//     "cores": 2,                         // physical cores (sysfs topology)
//     "threads": 2,                       // threads used for the "all" figures
//     "isa": "avx512",                    // ridge's active SIMD path: avx512|avx2|scalar
//     "caches": {"l1d": 49152, "l2": 2097152, "l3": 503316480},  // bytes per instance, 0 = unknown
//     "dram_read_gbs": {"1": 12.3, "2": 20.1},  // thread count -> GB/s (1e9 bytes/s), median
//     "dram_read_gbs_max": 20.1,
//     "dram_read_streams": 4,             // the access pattern that gave the most: streams
//     "dram_read_prefetch": 1024,         // per thread, software prefetch distance (bytes)
//     "dram_bytes": 1073741824,           // working set of the bandwidth test
//     "dram_scattered_gbs": 15.2,         // every thread, the same set read in 16 KiB pieces in
//                                         // shuffled order (a paged KV cache's access
//                                         // pattern), median; 0 or absent: not measured
//     "dram_scattered_piece": 16384,      // its piece size (a file with another is ignored)
//     "cache_read_gbs": 310.5,            // every thread re-reading its own half-L2 buffer:
//     "cache_bytes": 524288,              // the roof of ops whose operands the step just
//                                         // made (norms, residual adds); 0/absent: none
//     "compute": {                        // per_core: one thread; all: every thread at once;
//                                         // best of 3 runs of ~0.1 s each
//       "fp32_fma":  {"per_core_gflops": 150.0, "all_gflops": 300.0},   // 2 FLOP per FMA lane
//       "bf16_dot":  {...} | null,        // vdpbf16ps: 2 FLOP per bf16 product
//       "int8_vnni": {...} | null,        // the int8 dot: 2 OP per u8*s8 product (GOP/s),
//                                         // vpdpbusd, or AVX2's vpmaddubsw + vpaddw
//                                         // on a CPU without VNNI (the key keeps its name)
//       "fp16_fma":  {...} | null         // AVX512-FP16 vfmadd*ph; null when absent
//     },
//     "quick": false,                     // true: the short test mode, not a ceiling
//     "seconds": 7.5,                     // wall time of the whole measurement
//     "measured_at": 1796000000           // Unix time of the measurement (0: unknown)
//   }
//
// DRAM read is the best of several access patterns (one stream per thread as a plain
// copy reads, or several side by side as the decode kernels read their panels, with and
// without software prefetch): a ceiling must be the most the machine gives, or the
// kernels measure above it.
//
// A null compute entry means the active path has no such instruction on this CPU.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ridge {

struct ComputePeak {
  double per_core = 0;  // GFLOP/s (GOP/s for int8) with one thread
  double all = 0;       // summed over `threads` threads running at once
};

struct Peaks {
  std::string cpu;
  int cores = 0;
  int threads = 0;
  std::string isa;
  int64_t l1d = 0, l2 = 0, l3 = 0;
  std::map<int, double> dram_read_gbs;  // thread count -> GB/s
  double dram_read_gbs_max = 0;
  int dram_read_streams = 1;       // the best pattern at the most threads
  int64_t dram_read_prefetch = 0;
  int64_t dram_bytes = 0;
  double dram_scattered_gbs = 0;  // all threads, kScatterPiece pieces in shuffled order
  double cache_read_gbs = 0;      // all threads, each re-reading cache_bytes from its L2
  int64_t cache_bytes = 0;
  std::optional<ComputePeak> fp32_fma, bf16_dot, int8_vnni, fp16_fma;
  bool quick = false;
  double seconds = 0;
  int64_t measured_at = 0;         // Unix seconds; 0: unknown (an older file)
};

// The piece size of the scattered read: one KV block of one layer, K and V of every KV
// head (16 tokens x 4 heads x (64 + 64) dims x f16 for TinyLlama), the run a decode
// attention task reads at a time from a fragmented cache (model/kv_cache.h).
inline constexpr int64_t kScatterPiece = 16384;

struct PeaksOptions {
  int threads = 0;         // 0: every hardware thread
  bool quick = false;      // 256 MiB working set, fewer and shorter repetitions (tests)
  // 0: 4 x L3, at least 1 GiB, at most half the available RAM; past 1 GiB the first
  // touch of fresh pages stops after ~4 s (page faults are slow on some VMs).
  int64_t dram_bytes = 0;
};

Peaks measure_peaks(const PeaksOptions& opt);
// What measure_peaks records of the machine without measuring: the CPU's model name
// (/proc/cpuinfo) and its cache sizes (sysfs, else CPUID) into p.l1d, p.l2, p.l3.
std::string cpu_model_name();
void read_cache_sizes(Peaks& p);

std::string peaks_to_json(const Peaks& p);
// Throws ridge::Error naming `where` and the key at fault.
Peaks peaks_from_json(const std::string& text, const std::string& where);
void save_peaks(const Peaks& p, const std::string& path);
Peaks load_peaks(const std::string& path);

namespace peaks_detail {
// SIMD kernels (peaks_avx512.cpp, peaks_avx2.cpp), called only after a CPUID check.
// read_*: sums `bytes` (a multiple of 512, 64-byte aligned) so every line is loaded.
// The compute kernels run `iters` iterations of independent multiply-add chains and
// return a value derived from all chains so none can be dropped; seed is a run-time
// value so nothing folds at compile time. *_ops_per_iter: FLOP (or OP) per iteration.
uint64_t read_avx512(const void* p, int64_t bytes);
uint64_t read_avx2(const void* p, int64_t bytes);
// read_streams_*: `n` streams of `bytes` each (a multiple of 256, 64-byte aligned), read a
// few lines of each in turn, each line prefetched `ahead` bytes early (0: none).
uint64_t read_streams_avx512(const char* const* p, int n, int64_t bytes, int64_t ahead);
uint64_t read_streams_avx2(const char* const* p, int n, int64_t bytes, int64_t ahead);
double fp32_fma_avx512(int64_t iters, float seed);
double bf16_dot_avx512(int64_t iters, float seed);
double int8_vnni_avx512(int64_t iters, float seed);
double fp16_fma_avx512(int64_t iters, float seed);
double fp32_fma_avx2(int64_t iters, float seed);
double int8_vnni_avxvnni(int64_t iters, float seed);
double int8_maddubs_avx2(int64_t iters, float seed);
inline constexpr double kFp32Avx512Ops = 16 * 16 * 2;   // 16 chains x 16 lanes x 2
inline constexpr double kBf16Avx512Ops = 16 * 32 * 2;   // 16 chains x 32 products x 2
inline constexpr double kInt8Avx512Ops = 16 * 64 * 2;   // 16 chains x 64 products x 2
inline constexpr double kFp16Avx512Ops = 16 * 32 * 2;   // 16 chains x 32 lanes x 2
inline constexpr double kFp32Avx2Ops = 12 * 8 * 2;      // 12 chains x 8 lanes x 2
inline constexpr double kInt8AvxVnniOps = 12 * 32 * 2;  // 12 chains x 32 products x 2
inline constexpr double kInt8Avx2Ops = 12 * 32 * 2;     // 12 chains x 32 products x 2
}  // namespace peaks_detail

}  // namespace ridge
