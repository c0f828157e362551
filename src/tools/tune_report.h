// What `ridge tune` prints and writes: a line per trial as it ends, the final report
// (terminal), the JSON that `ridge serve --config FILE` reads ("flags") with the whole
// record beside it ("tune"), and an HTML page (the objective against trial, kept and
// rejected changes with their measured effect and reason, the chosen point against the
// defaults, the roofline of its steps).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/tuner.h"

namespace ridge::tools {

struct TuneReportContext {
  std::string model;  // the -m path
  std::string cpu;
  const TuneOptions* options = nullptr;
  // The engine options tune was given that no knob writes (--block-size 32, --mlock, ...),
  // by long name, the value absent for a flag: the output carries them beside the knobs.
  std::vector<std::pair<std::string, std::optional<std::string>>> base_flags;
};

// What the output sets: the options tune was given, then the chosen knobs (relative to
// the engine's defaults); a value absent for a flag.
std::vector<std::pair<std::string, std::optional<std::string>>> tune_output_flags(const TuneResult& r,
                                                                                  const TuneReportContext& c);

std::string trial_line(const TrialRecord& t, const TuneOptions& o);
// The chosen flags as a `ridge serve` command line.
std::string tune_command_line(const TuneResult& r, const TuneReportContext& c);
std::string tune_report_text(const TuneResult& r, const TuneReportContext& c);
std::string tune_report_json(const TuneResult& r, const TuneReportContext& c);
std::string tune_report_html(const TuneResult& r, const TuneReportContext& c);

}  // namespace ridge::tools
