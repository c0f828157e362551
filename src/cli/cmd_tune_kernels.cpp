// ridge tune-kernels: time the kernels' tunable parameters on this machine and keep the
// best per CPU in the kernel cache (tools/kernel_tune.h, tools/kernel_cache.h).
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "tools/kernel_cache.h"
#include "tools/kernel_tune.h"

namespace ridge::cli {

int cmd_tune_kernels(Args& a) {
  const int threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  const bool quick = a.flag({"--quick"});
  TuneOptions o = quick ? quick_tune_options(threads) : TuneOptions{};
  o.threads = threads;
  if (auto t = a.str({"--types"})) {
    o.types.clear();
    for (const auto& name : split_list(*t)) {
      const auto d = dtype_from_name(name);
      if (!d) fail("--types: unknown type '{}'", name);
      bool tuned = false;
      for (DType k : kernels::kTunedTypes) tuned |= k == *d;
      if (!tuned) fail("--types: {} has no packed kernels to tune", name);
      o.types.push_back(*d);
    }
  }
  o.rounds = int(a.integer({"--rounds"}, o.rounds, 3, 1000));
  if (auto r = a.str({"--ring"})) o.ring_bytes = parse_bytes(*r, "--ring");
  o.margin = a.number({"--margin"}, o.margin, 0.0, 0.5);
  const std::string dir = kernel_cache_dir(a.str({"--kernel-cache"}, ""));
  const bool save = !a.flag({"--no-save"});
  const std::string json_path = a.str({"--json"}, "");
  a.finish();
  if (save && dir.empty()) fail("the kernel cache is off (--kernel-cache off or RIDGE_KERNEL_CACHE=off): pass --no-save");
  if (save) check_cache_dir(dir);
  if (!kernels::gemm_available(DType::Q8_0))
    std::fprintf(stderr, "tune-kernels: this CPU path has no packed kernels (needs AVX2, FMA and F16C); nothing to tune\n");
  const std::string cpu = kernel_cpu_id();
  std::fprintf(stderr, "tune-kernels: %s\n", cpu.c_str());
  const TuneResult r = tune_kernels(o);
  std::fputs(tune_report_text(r).c_str(), stdout);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << tune_report_json(r) << "\n";
    if (!f) fail("cannot write {}", json_path);
  }
  if (save && r.trials.empty()) {
    std::printf("nothing was timed on this CPU path; the kernel cache is unchanged\n");
  } else if (save) {
    const std::string file = kernel_cache_file(dir);
    std::optional<TunedEntry> old;
    try {
      old = load_tuned(file, cpu);
    } catch (const Error& e) {
      std::fprintf(stderr, "tune-kernels: replacing an unusable cache (%s)\n", e.what());
    }
    save_tuned(file, cpu, old ? merge_tuned(*old, r) : r.entry);
    std::printf("wrote %s\n", file.c_str());
  }
  return 0;
}

}  // namespace ridge::cli
