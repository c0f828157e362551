// ridge peaks: measure this machine's ceilings (DRAM read bandwidth, compute peaks of the
// active SIMD path) and print them as a table, or as JSON for the roofline tools.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "kernels/cuda/cuda_backend.h"
#include "perf/peaks.h"

namespace ridge::cli {
namespace {

std::string bytes_str(int64_t b) {
  if (b <= 0) return "?";
  if (b >= (int64_t(1) << 30) && b % (int64_t(1) << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (int64_t(1) << 20)) return fmt::format("{:.0f} MiB", double(b) / double(1 << 20));
  return fmt::format("{:.0f} KiB", double(b) / 1024.0);
}

void print_table(const Peaks& p) {
  std::printf("cpu:     %s, %d cores, %d threads used, ridge ISA path %s\n", p.cpu.c_str(), p.cores, p.threads,
              p.isa.c_str());
  std::printf("caches:  L1d %s, L2 %s, L3 %s (per instance)\n", bytes_str(p.l1d).c_str(), bytes_str(p.l2).c_str(),
              bytes_str(p.l3).c_str());
  std::printf("\nDRAM read, %s working set, median of %d, best access pattern (at %d threads: %d stream%s per "
              "thread, %s)%s\n",
              bytes_str(p.dram_bytes).c_str(), p.quick ? 3 : 5, p.threads, p.dram_read_streams,
              p.dram_read_streams == 1 ? "" : "s",
              p.dram_read_prefetch > 0 ? fmt::format("prefetch {} B ahead", p.dram_read_prefetch).c_str()
                                       : "no software prefetch",
              p.quick ? " (--quick: may sit in cache, not a ceiling)" : "");
  std::printf("  %-8s %10s\n", "threads", "GB/s");
  for (const auto& [t, g] : p.dram_read_gbs) std::printf("  %-8d %10.1f\n", t, g);
  std::printf("  %-8s %10.1f\n", "max", p.dram_read_gbs_max);
  std::printf("  %-8s %10.1f   (%d threads, %lld-byte pieces in shuffled order)\n", "scattered", p.dram_scattered_gbs,
              p.threads, static_cast<long long>(kScatterPiece));
  if (p.cache_read_gbs > 0)
    std::printf("\ncache read %.1f GB/s (%d threads, each re-reading %s: the roof of ops on the step's own "
                "activations)\n",
                p.cache_read_gbs, p.threads, bytes_str(p.cache_bytes).c_str());
  std::printf("\n%-12s %18s %18s\n", "compute", "per core", fmt::format("{} threads", p.threads).c_str());
  auto row = [](const char* name, const std::optional<ComputePeak>& c, const char* unit) {
    if (!c) {
      std::printf("  %-10s %18s %18s\n", name, "absent", "absent");
      return;
    }
    std::printf("  %-10s %18s %18s\n", name, fmt::format("{:.1f} {}", c->per_core, unit).c_str(),
                fmt::format("{:.1f} {}", c->all, unit).c_str());
  };
  row("fp32 FMA", p.fp32_fma, "GFLOP/s");
  row("bf16 dot", p.bf16_dot, "GFLOP/s");
  // The int8 roof: vpdpbusd where the measured path has VNNI, else AVX2's vpmaddubsw
  // (peaks.cpp measures on the active path).
  const bool vnni = active_isa() == Isa::Avx512 ? cpu_features().avx512vnni
                                                : active_isa() == Isa::Avx2 && cpu_features().avxvnni;
  row(vnni ? "int8 VNNI" : "int8 dot", p.int8_vnni, "GOP/s");
  row("fp16 FMA", p.fp16_fma, "GFLOP/s");
  // The ridge point: the arithmetic intensity where a kernel stops being bandwidth-bound.
  if (p.fp32_fma && p.dram_read_gbs_max > 0)
    std::printf("\nridge point (fp32, all threads / DRAM max): %.1f FLOP/byte\n", p.fp32_fma->all / p.dram_read_gbs_max);
  std::printf("measured in %.1f s\n", p.seconds);
}

}  // namespace

int cmd_peaks(Args& a) {
  const std::string dev = a.str({"--device"}, "cpu");
  if (dev == "cuda") {
    a.finish();
    const kernels::CudaPeaks p = kernels::cuda_peaks();
    std::printf("device:  %s\n", p.device.c_str());
    std::printf("HBM copy        %10.1f GB/s   (4 GiB device-to-device, read + written, median of 10)\n", p.hbm_gbs);
    std::printf("bf16 GEMM       %10.1f TFLOP/s (cuBLAS, 8192^3, f32 accumulation, median of 10)\n", p.bf16_tflops);
    std::printf("fp32 GEMM       %10.1f TFLOP/s (cuBLAS SGEMM, 8192^3, median of 5)\n", p.fp32_tflops);
    std::printf("ridge point (bf16 / HBM): %.0f FLOP/byte\n", p.bf16_tflops * 1e12 / (p.hbm_gbs * 1e9));
    return 0;
  }
  if (dev != "cpu") fail("--device {} is not one of cpu, cuda", dev);
  const int hw = default_thread_count();
  PeaksOptions opt;
  opt.threads = int(a.integer({"-t", "--threads"}, hw, 1, hw));
  opt.quick = a.flag({"--quick"});
  opt.dram_bytes = a.integer({"--dram-mib"}, 0, 2, int64_t(1) << 30) << 20;
  const auto json = a.str({"--json"});
  a.finish();
  if (json && json->empty()) fail("option --json needs a file name, or - for stdout");
  if (json && *json != "-") {  // fail before the measurement, not after ten seconds of it
    std::error_code ec;
    const auto dir = std::filesystem::absolute(*json, ec).parent_path();
    if (ec || !std::filesystem::is_directory(dir, ec))
      fail("--json {}: directory {} does not exist", *json, dir.string());
  }
  const Peaks p = measure_peaks(opt);
  if (json && *json == "-") {
    std::fputs(peaks_to_json(p).c_str(), stdout);
    return 0;
  }
  print_table(p);
  if (json) {
    save_peaks(p, *json);
    std::printf("wrote %s\n", json->c_str());
  }
  return 0;
}

}  // namespace ridge::cli
