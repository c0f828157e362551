// ridge tune: search the engine's configuration for a workload and an SLO, measuring
// (tools/tuner.h), and write what it chose as flags `ridge serve --config FILE` reads.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/text_file.h"
#include "model/model.h"
#include "perf/peaks.h"
#include "tools/tune_report.h"
#include "tools/tuner.h"
#include "tools/workload.h"

namespace ridge::cli {
namespace {

// "90s", "10m", "1h", "600" (seconds).
double parse_budget(const std::string& s) {
  double scale = 1;
  std::string num = s;
  if (num.ends_with("ms")) fail("--budget {}: use s, m or h (90s, 10m, 1h)", s);
  if (num.ends_with("s")) num.pop_back();
  else if (num.ends_with("m")) scale = 60, num.pop_back();
  else if (num.ends_with("h")) scale = 3600, num.pop_back();
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  if (num.empty() || *end || !std::isfinite(v) || v <= 0) fail("--budget {}: not a duration (90s, 10m, 1h)", s);
  if (v * scale < 5) fail("--budget {}: at least 5 s (a trial needs a few)", s);
  return v * scale;
}

void write_file(const std::string& path, const std::string& text, const char* what) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) fail("cannot write the {} {}", what, path);
  std::fprintf(stderr, "tune: wrote %s %s\n", what, path.c_str());
}

}  // namespace

int cmd_tune(Args& a) {
  const std::string path = resolve_model(a);
  tools::TuneOptions o;
  const auto workload_flag = a.str({"--workload"});
  const auto slo_flag = a.str({"--slo"});
  const auto objective_flag = a.str({"--objective"});
  o.budget_s = parse_budget(a.str({"--budget"}, "10m"));
  o.trial_s = a.number({"--trial-seconds"}, 0, 0, 3600);
  o.final_repeats = int32_t(a.integer({"--repeats"}, 3, 1, 20));
  o.grid = a.flag({"--grid"});
  const bool seed_given = a.given({"--seed"});
  o.seed = uint64_t(a.integer({"--seed"}, 0, 0, INT64_MAX));
  const auto output = a.str({"--output", "-o"});
  const auto html = a.str({"--html"});
  const auto json_out = a.str({"--json"});
  const auto peaks_file = a.str({"--peaks"});
  const auto check = a.str({"--check"});
  // --check FILE: the file's chosen flags under the command line's, and its workload,
  // rate, request count, seed, SLO and objective, unless given here.
  nlohmann::json rec;
  if (check) {
    rec = nlohmann::json::parse(read_text_file(*check), nullptr, false);
    if (!rec.is_object() || !rec.contains("tune") || !rec["tune"].is_object())
      fail("--check {}: not the JSON that ridge tune --output writes (no \"tune\" object)", *check);
    apply_config_file(a, *check, "--check");
  }
  const size_t reads_before = a.reads().size();
  engine_config(a, o.base);
  a.finish();
  std::vector<std::pair<std::string, std::optional<std::string>>> base_flags;  // carried into --output
  for (size_t i = reads_before; i < a.reads().size(); ++i) {
    const Args::Read& rd = a.reads()[i];
    if (tools::is_knob_flag(rd.name)) continue;
    std::erase_if(base_flags, [&](const auto& f) { return f.first == rd.name; });
    if (rd.flag) base_flags.emplace_back(rd.name, std::nullopt);
    else base_flags.emplace_back(rd.name, rd.value);
  }
  std::string workload = workload_flag.value_or("chat");
  std::string slo = slo_flag.value_or("ttft_p99=2s,tpot_p99=100ms"), objective = objective_flag.value_or("goodput");
  double rate = 0, recorded = 0, band = 0;
  int64_t n = 0;
  if (check) {
    const nlohmann::json& t = rec["tune"];
    auto get = [&](const char* k) -> const nlohmann::json& {
      if (!t.contains(k)) fail("--check {}: \"tune\" has no \"{}\"", *check, k);
      return t[k];
    };
    try {
      const std::string src = get("workload").at("source").get<std::string>();
      if (!workload_flag) workload = src.starts_with("builtin ") ? src.substr(8) : src;
      if (!slo_flag) slo = get("slo").get<std::string>();
      if (!objective_flag) objective = get("objective").get<std::string>();
      const nlohmann::json& r = get("rate");
      rate = r.is_string() ? std::numeric_limits<double>::infinity() : r.get<double>();
      n = get("requests_per_trial").get<int64_t>();
      if (!seed_given) o.seed = get("seed").get<uint64_t>();
      recorded = get("tuned").at("objective").get<double>();
      band = get("noise_band").get<double>();
    } catch (const nlohmann::json::exception& e) {
      fail("--check {}: {}", *check, e.what());
    }
  }
  o.slo = tools::parse_slo(slo);
  o.objective = tools::objective_from_name(objective);
  if (o.base.device != Device::Cpu) fail("tune: --device cuda is not supported yet (the trials run the CPU engine)");
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (o.base.threads == 0) o.base.threads = cores;
  o.cores = cores;

  prepare_kernels();
  auto model = load_model_for(path, o.base);
  auto tok = load_tokenizer(path, *model);
  const HParams& h = model->hparams();
  o.workload = tools::load_workload(workload, h.n_ctx_train, h.n_vocab);
  if (check) {
    std::fprintf(stderr, "tune: checking %s: %s on %s, %lld requests at %g req/s, SLO %s, %d runs\n", check->c_str(),
                 path.c_str(), o.workload.source.c_str(), static_cast<long long>(n), rate, o.slo.str().c_str(),
                 o.final_repeats);
    const tools::CheckResult c = tools::check_config(*model, tok.get(), o, rate, n, recorded, band,
                                                     [&](const tools::TrialRecord& t) {
                                                       std::fprintf(stderr, "%s\n", tools::trial_line(t, o).c_str());
                                                       std::fflush(stderr);
                                                     });
    std::printf("%s: median %.4g over %zu runs against the recorded %.4g (%+.1f%%, noise band %.1f%%): %s\n",
                tools::objective_name(o.objective), c.median, c.trials.size(), c.recorded,
                c.recorded != 0 ? 100 * (c.median - c.recorded) / std::fabs(c.recorded) : 0.0, c.band * 100,
                c.reproduced ? "reproduced" : "NOT reproduced");
    return c.reproduced ? 0 : 1;
  }
  Peaks peaks;
  if (peaks_file) {
    peaks = load_peaks(*peaks_file);
  } else {
    PeaksOptions po;
    po.threads = o.base.threads;
    po.quick = true;
    std::fprintf(stderr, "tune: measuring this machine's ceilings (ridge peaks --quick; --peaks FILE to reuse some)\n");
    peaks = measure_peaks(po);
  }
  std::fprintf(stderr, "tune: %s, workload %s, SLO %s, objective %s, budget %.0f s\n", path.c_str(),
               o.workload.source.c_str(), o.slo.str().c_str(), tools::objective_name(o.objective), o.budget_s);
  std::fflush(stderr);
  const tools::TuneResult r = tools::tune(*model, tok.get(), peaks, o, [&](const tools::TrialRecord& t) {
    std::fprintf(stderr, "%s\n", tools::trial_line(t, o).c_str());
    std::fflush(stderr);
  });
  tools::TuneReportContext ctx{path, peaks.cpu.empty() ? cpu_model_name() : peaks.cpu, &o, base_flags};
  std::fputs(("\n" + tools::tune_report_text(r, ctx)).c_str(), stdout);
  std::fflush(stdout);
  const std::string json = tools::tune_report_json(r, ctx);
  if (output) write_file(*output, json, "configuration (ridge serve --config FILE)");
  if (json_out) write_file(*json_out, json, "report");
  if (html) write_file(*html, tools::tune_report_html(r, ctx), "HTML report");
  return 0;
}

}  // namespace ridge::cli
