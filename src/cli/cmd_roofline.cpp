// ridge roofline: prefill and decode at several batch sizes, per op against this
// machine's ceilings, with the bottleneck of each phase named (perf/roofline_report.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "model/model.h"
#include "perf/peaks.h"
#include "perf/roofline_report.h"
#include "perf/roofline_run.h"
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

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("cannot write {}", path);
  f << text;
  if (!f) fail("cannot write {}", path);
}

}  // namespace

int cmd_roofline(Args& a) {
  // --from-json re-renders a saved measurement: no model, no run.
  const auto from = a.str({"--from-json"});
  const std::string path = from ? a.str({"-m", "--model"}, "") : resolve_model(a);
  perf::RooflineOptions o;
  o.batches = int_list(a.str({"--batch"}, "1,4,16,64"), "--batch");
  o.prompt = int32_t(a.integer({"--prompt"}, 512, 1, 1 << 20));
  o.decode_steps = int32_t(a.integer({"--decode-steps"}, 16, 1, 1 << 16));
  o.threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  o.max_batched_tokens = int32_t(a.integer({"--max-num-batched-tokens"}, 2048, 1, 1 << 24));
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

  perf::RooflineRun run;
  if (from) {
    std::ifstream in(*from);
    if (!in) fail("cannot read --from-json {}", *from);
    std::stringstream ss;
    ss << in.rdbuf();
    run = perf::run_from_json(ss.str(), *from);
  } else {
    Peaks peaks;
    if (peaks_file) {
      peaks = load_peaks(*peaks_file);
    } else {
      std::fprintf(stderr, "roofline: measuring this machine's ceilings (ridge peaks; --peaks FILE reuses a run)\n");
      PeaksOptions po;
      po.threads = o.threads;
      peaks = measure_peaks(po);
    }
    auto model = Model::load(path);
    auto tok = Tokenizer::from_gguf(model->file());
    o.model_name = std::filesystem::path(path).filename().string();
    run = perf::measure_roofline(*model, tok.get(), peaks, o);
  }
  const perf::RooflineAnalysis an = perf::analyze(run);
  std::fputs(perf::render_text(run, an).c_str(), stdout);
  if (json) {
    if (*json == "-") std::fputs(perf::render_json(run, an).c_str(), stdout);
    else write_file(*json, perf::render_json(run, an));
  }
  if (html) write_file(*html, perf::render_html(run, an));
  return 0;
}

}  // namespace ridge::cli
