// ridge roofline: prefill and decode at several batch sizes, per op against this
// machine's ceilings, with the bottleneck of each phase named (perf/roofline_report.h).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/model.h"
#include "perf/peaks.h"
#include "tools/roofline_report.h"
#include "tools/roofline_run.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {
namespace {

std::vector<int32_t> int_list(const std::string& s, const char* flag) {
  std::vector<int32_t> out;
  for (const std::string& item : split_list(s)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 1 || v > 4096) fail("{} '{}': expected a comma-separated list of 1..4096", flag, s);
    out.push_back(int32_t(v));
  }
  if (out.empty()) fail("{} is empty", flag);
  return out;
}

// "peaks.json, measured 3 h 12 min ago": the file's own timestamp, else its mtime.
std::string peaks_origin(const Peaks& p, const std::string& path) {
  namespace fs = std::filesystem;
  int64_t when = p.measured_at;
  std::string how = "measured";
  if (when <= 0) {
    std::error_code ec;
    const auto t = fs::last_write_time(path, ec);
    if (ec) return path + ", age unknown";
    when = std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::file_clock::to_sys(t).time_since_epoch())
               .count();
    how = "written";
  }
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int64_t age = std::max<int64_t>(0, now - when);
  const std::string ago = age < 120     ? fmt::format("{} s", age)
                          : age < 7200  ? fmt::format("{} min", age / 60)
                          : age < 172800 ? fmt::format("{} h {} min", age / 3600, age % 3600 / 60)
                                         : fmt::format("{} days", age / 86400);
  return fmt::format("{}, {} {} ago", path, how, ago);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot write {}", path);
  f << text;
  if (!f) fail("cannot write {}", path);
}

// A GPU's ceilings in the roofline's terms: HBM as the memory roof (no cache roof), the
// cuBLAS fp32 rate as fp32's (CUDA cores), the bf16 GEMM's as bf16's (tensor cores).
Peaks gpu_peaks(const kernels::CudaPeaks& c) {
  Peaks p;
  p.cpu = c.device;
  p.isa = "cuda";
  p.threads = 1;
  p.dram_read_gbs_max = c.hbm_gbs;
  p.dram_scattered_gbs = c.hbm_gbs;
  p.fp32_fma = ComputePeak{c.fp32_tflops * 1e3, c.fp32_tflops * 1e3};
  p.bf16_dot = ComputePeak{c.bf16_tflops * 1e3, c.bf16_tflops * 1e3};
  p.measured_at = int64_t(std::time(nullptr));
  return p;
}

}  // namespace

int cmd_roofline(Args& a) {
  // --from-json re-renders a saved measurement: no model, no run.
  const auto from = a.str({"--from-json"});
  const std::string path = from ? a.str({"-m", "--model"}, "") : resolve_model(a);
  tools::RooflineOptions o;
  o.batches = int_list(a.str({"--batch"}, "1,4,16,64"), "--batch");
  o.prompt = int32_t(a.integer({"--prompt"}, 512, 1, 1 << 20));
  o.decode_steps = int32_t(a.integer({"--decode-steps"}, 16, 1, 1 << 16));
  forward_config(a, o.engine);
  const std::string device = a.str({"--device"}, "cpu");
  if (device == "cuda") o.engine.device = Device::Cuda;
  else if (device != "cpu") fail("--device {} is not one of cpu, cuda", device);
  const auto peaks_file = a.str({"--peaks"});
  const auto html = a.str({"--html"});
  const auto json = a.str({"--json"});
  a.finish();
  // Fail on unwritable outputs before minutes of measurement.
  for (const auto* out : {&html, &json})
    if (*out && **out != "-") {
      std::ofstream probe(**out, std::ios::app);
      if (!probe) fail("cannot write {}", **out);
    }

  tools::RooflineRun run;
  if (from) {
    std::ifstream in(*from);
    if (!in) fail("cannot read --from-json {}", *from);
    std::stringstream ss;
    ss << in.rdbuf();
    run = tools::run_from_json(ss.str(), *from);
  } else {
    Peaks peaks;
    std::string origin;
    if (peaks_file) {
      peaks = load_peaks(*peaks_file);
      origin = peaks_origin(peaks, *peaks_file);
      std::fprintf(stderr,
                   "roofline: ceilings from %s (memory bandwidth on shared machines drifts by tens of percent within "
                   "an hour; without --peaks they are measured in this run)\n",
                   origin.c_str());
    } else if (o.engine.device == Device::Cuda) {
      std::fprintf(stderr, "roofline: measuring the GPU's ceilings (ridge peaks --device cuda)\n");
      peaks = gpu_peaks(kernels::cuda_peaks());
      origin = "measured in this run";
    } else {
      std::fprintf(stderr, "roofline: measuring this machine's ceilings (ridge peaks; --peaks FILE reuses a run)\n");
      PeaksOptions po;
      po.threads = o.engine.threads;
      peaks = measure_peaks(po);
      origin = "measured in this run";
    }
    auto model = load_model_for(path, o.engine);
    auto tok = load_tokenizer(path, *model);
    o.model_name = std::filesystem::path(path).filename().string();
    run = tools::measure_roofline(*model, tok.get(), peaks, o);
    run.peaks_origin = origin;
  }
  const tools::RooflineAnalysis an = tools::analyze(run);
  std::fputs(tools::render_text(run, an).c_str(), stdout);
  if (json) {
    if (*json == "-") std::fputs(tools::render_json(run, an).c_str(), stdout);
    else write_file(*json, tools::render_json(run, an));
  }
  if (html) write_file(*html, tools::render_html(run, an));
  return 0;
}

}  // namespace ridge::cli
