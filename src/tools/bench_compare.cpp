// `ridge bench compare` (see bench_compare.h): result files to metrics, medians, the ratio
// and its noise band, and the report.
#include "tools/bench_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ridge::tools {

namespace {

// Ordered: metrics are listed in the order of the files.
using json = nlohmann::ordered_json;

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

// A roofline report's measured figures per phase and op; its analysis (predictions,
// percentages) follows from them and the peaks, so it is not compared.
void flatten_roofline(const json& phases, BenchRun& run) {
  for (const auto& p : phases) {
    if (!p.is_object() || !p.contains("phase") || !p["phase"].is_string() || !p.contains("batch") ||
        !p["batch"].is_number_integer())
      continue;
    const std::string pre = fmt::format("{}_b{}.", p["phase"].get<std::string>(), p["batch"].get<int64_t>());
    for (const char* k : {"step_ms", "wall_ms", "tok_per_s"})
      if (p.contains(k) && p[k].is_number()) run.emplace_back(pre + k, p[k].get<double>());
    if (p.contains("ops") && p["ops"].is_array())
      for (const auto& o : p["ops"])
        if (o.is_object() && o.contains("name") && o["name"].is_string() && o.contains("ms") && o["ms"].is_number())
          run.emplace_back(pre + o["name"].get<std::string>() + "_ms", o["ms"].get<double>());
  }
}

BenchRun flatten(const json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected a JSON object of benchmark results (or an array of them)", where);
  BenchRun run;
  for (const auto& [k, v] : j.items())
    if (v.is_number() && std::isfinite(v.get<double>())) run.emplace_back(k, v.get<double>());
  if (j.contains("phases") && j["phases"].is_array()) flatten_roofline(j["phases"], run);
  if (run.empty()) fail("{}: no numeric metrics (expected the --json of ridge bench or ridge roofline)", where);
  return run;
}

const char* better_name(Better b) { return b == Better::Lower ? "lower" : b == Better::Higher ? "higher" : "?"; }

bool ratio_ok(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return x > 0 && std::isfinite(x); });
}

}  // namespace

Better metric_direction(std::string_view name) {
  const size_t dot = name.rfind('.');
  const std::string_view base = dot == std::string_view::npos ? name : name.substr(dot + 1);
  // Settings of the run that happen to carry a unit, and spreads (std_*: smaller is not faster).
  static const std::set<std::string_view> kSettings = {"timeout_s", "slo_ttft_ms", "slo_tpot_ms", "request_rate"};
  if (kSettings.count(base) || base.substr(0, 4) == "std_") return Better::Unknown;
  if (ends_with(base, "_per_s") || base.find("throughput") != std::string_view::npos ||
      base.find("goodput") != std::string_view::npos)
    return Better::Higher;
  if (ends_with(base, "_ms") || ends_with(base, "_s") || ends_with(base, "_seconds") || base == "duration" ||
      base == "seconds")
    return Better::Lower;
  return Better::Unknown;
}

std::vector<BenchRun> parse_bench_runs(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& whole) {
    // One result per line: what `ridge bench throughput --json >> runs.json` leaves.
    std::vector<BenchRun> runs;
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        runs.push_back(flatten(json::parse(line), fmt::format("{} line {}", where, n)));
      } catch (const json::exception&) {
        fail("{}: not valid JSON ({})", where, whole.what());
      }
    }
    if (runs.empty()) fail("{}: not valid JSON ({})", where, whole.what());
    return runs;
  }
  std::vector<BenchRun> runs;
  if (j.is_array()) {
    if (j.empty()) fail("{}: an empty array holds no runs", where);
    for (size_t i = 0; i < j.size(); ++i) runs.push_back(flatten(j[i], fmt::format("{}[{}]", where, i)));
  } else {
    runs.push_back(flatten(j, where));
  }
  return runs;
}

std::vector<BenchRun> load_bench_runs(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("cannot read {}: {}", path, std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_bench_runs(ss.str(), path);
}

double median(std::vector<double> v) {
  RIDGE_CHECK(!v.empty(), "median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

MetricComparison compare_metric(std::string name, Better better, const std::vector<double>& a,
                                const std::vector<double>& b) {
  RIDGE_CHECK(!a.empty() && !b.empty(), "metric {}: needs at least one run on each side", name);
  RIDGE_CHECK(ratio_ok(a) && ratio_ok(b), "metric {}: a ratio needs values > 0 on both sides", name);
  MetricComparison m;
  m.name = std::move(name);
  m.better = better;
  m.n_a = a.size(), m.n_b = b.size();
  m.median_a = median(a), m.median_b = median(b);
  m.ratio = m.median_b / m.median_a;
  m.speedup = better == Better::Lower ? 1 / m.ratio : m.ratio;
  m.has_band = m.n_a > 1 || m.n_b > 1;
  if (!m.has_band) {
    m.band_lo = m.band_hi = m.ratio;
    m.verdict = "single run: no noise band";
    return m;
  }
  m.band_lo = *std::min_element(b.begin(), b.end()) / *std::max_element(a.begin(), a.end());
  m.band_hi = *std::max_element(b.begin(), b.end()) / *std::min_element(a.begin(), a.end());
  if (m.band_lo <= 1 && 1 <= m.band_hi) {
    m.verdict = "within noise";
  } else {
    const bool up = m.band_lo > 1;
    if (better == Better::Unknown) m.verdict = up ? "higher" : "lower";
    else m.verdict = up == (better == Better::Higher) ? "faster" : "slower";
  }
  return m;
}

std::vector<MetricComparison> compare_runs(const std::vector<BenchRun>& a, const std::vector<BenchRun>& b,
                                           const std::vector<std::string>& only) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> va, vb;
  for (const auto& r : a)
    for (const auto& [k, v] : r) {
      if (!va.count(k)) order.push_back(k);
      va[k].push_back(v);
    }
  for (const auto& r : b)
    for (const auto& [k, v] : r) vb[k].push_back(v);
  std::vector<std::string> common;
  for (const auto& k : order)
    if (vb.count(k)) common.push_back(k);
  std::vector<MetricComparison> out;
  if (!only.empty()) {
    for (const auto& k : only) {
      if (!va.count(k) || !vb.count(k)) {
        std::string have;
        for (size_t i = 0; i < common.size() && i < 40; ++i) have += (i ? ", " : "") + common[i];
        fail("--metric {}: not in {} (metrics in both: {})", k, va.count(k) ? "B" : "A", have.empty() ? "none" : have);
      }
      out.push_back(compare_metric(k, metric_direction(k), va[k], vb[k]));
    }
    return out;
  }
  for (const auto& k : common) {
    const Better d = metric_direction(k);
    // Settings and counts have no better side; zeros (an absent phase) give no ratio.
    if (d == Better::Unknown || !ratio_ok(va[k]) || !ratio_ok(vb[k])) continue;
    out.push_back(compare_metric(k, d, va[k], vb[k]));
  }
  if (out.empty())
    fail("no timing or throughput metric with values > 0 in both files ({} in common); name one with --metric",
         common.size());
  return out;
}

std::string compare_table(const std::vector<MetricComparison>& ms, const std::string& a_name, size_t a_runs,
                          const std::string& b_name, size_t b_runs) {
  std::string s = fmt::format("A: {} ({} run{})\nB: {} ({} run{})\n", a_name, a_runs, a_runs == 1 ? "" : "s", b_name,
                              b_runs, b_runs == 1 ? "" : "s");
  size_t w = 6;
  for (const auto& m : ms) w = std::max(w, m.name.size());
  s += fmt::format("{:<{}}  {:>6}  {:>12}  {:>12}  {:>7}  {:>8}  {:>17}  {}\n", "metric", w, "better", "A median",
                   "B median", "B/A", "speedup", "noise band (B/A)", "verdict");
  for (const auto& m : ms) {
    const std::string band = m.has_band ? fmt::format("[{:.3f}, {:.3f}]", m.band_lo, m.band_hi) : "-";
    s += fmt::format("{:<{}}  {:>6}  {:>12.6g}  {:>12.6g}  {:>7.3f}  {:>7.3f}x  {:>17}  {}\n", m.name, w,
                     better_name(m.better), m.median_a, m.median_b, m.ratio, m.speedup, band, m.verdict);
  }
  s += "speedup > 1: B is better (B/A for higher-is-better metrics, A/B for lower-is-better ones).\n";
  return s;
}

std::string compare_json(const std::vector<MetricComparison>& ms, const std::string& a_name, size_t a_runs,
                         const std::string& b_name, size_t b_runs) {
  nlohmann::ordered_json j;
  j["a"] = {{"file", a_name}, {"runs", a_runs}};
  j["b"] = {{"file", b_name}, {"runs", b_runs}};
  auto arr = nlohmann::ordered_json::array();
  for (const auto& m : ms)
    arr.push_back({{"name", m.name},
                   {"better", m.better == Better::Unknown ? "unknown" : better_name(m.better)},
                   {"runs_a", m.n_a},
                   {"runs_b", m.n_b},
                   {"median_a", m.median_a},
                   {"median_b", m.median_b},
                   {"ratio", m.ratio},
                   {"speedup", m.speedup},
                   {"band", m.has_band ? nlohmann::ordered_json::array({m.band_lo, m.band_hi}) : nullptr},
                   {"verdict", m.verdict}});
  j["metrics"] = arr;
  return j.dump(2) + "\n";
}

}  // namespace ridge::tools
