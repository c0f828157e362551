#include "tools/tune_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ridge::tools {
namespace {

using nlohmann::json;

std::string ms(double s) { return std::isfinite(s) ? fmt::format("{:.0f}", s * 1e3) : "inf"; }

std::string objective_unit(Objective o) {
  switch (o) {
    case Objective::Goodput: return "good req/s";
    case Objective::Throughput: return "output tok/s";
    case Objective::Cost: return "good tok/s per core";
  }
  return "";
}

json metrics_json(const TrialMetrics& m) {
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json("inf"); };
  return {{"requests", m.requests},
          {"completed", m.completed},
          {"good", m.good},
          {"truncated", m.truncated},
          {"duration_s", m.duration_s},
          {"goodput", m.goodput},
          {"request_throughput", m.request_throughput},
          {"output_throughput", m.output_throughput},
          {"attainment", m.attainment},
          {"ttft_p50_ms", num(m.ttft_p50 * 1e3)},
          {"ttft_slo_pct_ms", num(m.ttft_slo_pct * 1e3)},
          {"tpot_p50_ms", num(m.tpot_p50 * 1e3)},
          {"tpot_slo_pct_ms", num(m.tpot_slo_pct * 1e3)},
          {"queue_p99_ms", m.queue_p99 * 1e3},
          {"steps", m.steps},
          {"preemptions", m.preemptions},
          {"kv_peak", m.kv_peak},
          {"kv_read_share", m.kv_read_share},
          {"max_prompt_step_ms", m.max_prompt_step_s * 1e3},
          {"decode_step_ms", m.decode_step_s * 1e3},
          {"mean_decode_batch", m.mean_decode_batch},
          {"full_seqs_share", m.full_seqs_share},
          {"prefix_hit_tokens", m.prefix_hit_tokens},
          {"spec_draft_tokens", m.spec_draft_tokens},
          {"spec_accepted_tokens", m.spec_accepted_tokens}};
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

const char* phase_color(const TrialRecord& t) {
  if (t.phase == "search") return t.verdict.starts_with("kept") ? "#1a9850" : "#d73027";
  if (t.phase == "baseline") return "#4575b4";
  if (t.phase == "verify") return "#762a83";
  if (t.phase == "grid") return "#999999";
  return "#444444";
}

// The objective against trial.
std::string history_svg(const TuneResult& r, const TuneOptions& o) {
  const int W = 720, H = 300, L = 70, R = 20, T = 20, B = 40;
  double lo = 0, hi = 0;
  for (const auto& t : r.trials)
    if (t.phase != "calibrate") lo = std::min(lo, t.objective), hi = std::max(hi, t.objective);
  if (hi <= lo) hi = lo + 1;
  const size_t n = r.trials.size();
  auto x = [&](size_t i) { return L + (n > 1 ? double(i) * (W - L - R) / double(n - 1) : (W - L - R) / 2.0); };
  auto y = [&](double v) { return T + (hi - v) / (hi - lo) * (H - T - B); };
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
                              "font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n",
                              W, H);
  s += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#333'/>\n", L, H - B, W - R, H - B);
  s += fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#333'/>\n", L, T, L, H - B);
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4;
    s += fmt::format("<text x='{}' y='{:.1f}' text-anchor='end'>{:.3g}</text>\n", L - 4, y(v) + 4, v);
  }
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>trial</text>\n", (L + W - R) / 2, H - 8);
  s += fmt::format("<text x='14' y='{}' transform='rotate(-90 14 {})' text-anchor='middle'>{} ({})</text>\n",
                   (T + H - B) / 2, (T + H - B) / 2, objective_name(o.objective), esc(objective_unit(o.objective)));
  // The defaults' median and the noise band around it.
  const double d = r.default_objective, band = r.noise_band * std::fabs(d);
  s += fmt::format("<rect x='{}' y='{:.1f}' width='{}' height='{:.1f}' fill='#4575b4' opacity='0.12'/>\n", L,
                   y(d + band), W - L - R, std::max(1.0, y(d - band) - y(d + band)));
  for (size_t i = 0; i < n; ++i) {
    const auto& t = r.trials[i];
    if (t.phase == "calibrate") continue;
    s += fmt::format("<circle class='trial' cx='{:.1f}' cy='{:.1f}' r='5' fill='{}'><title>#{} {}: {} -> {:.4g}"
                     "</title></circle>\n",
                     x(i), y(t.objective), phase_color(t), t.index, esc(t.phase),
                     esc(t.config.empty() ? "defaults" : t.config), t.objective);
    if (t.predicted)
      s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='4' fill='none' stroke='{}' stroke-dasharray='2,2'/>\n",
                       x(i), y(std::clamp(t.predicted_objective, lo, hi)), phase_color(t));
  }
  s += "</svg>\n";
  return s;
}

// The chosen point's decode and prompt steps on the roofline of this CPU.
std::string roofline_svg(const TuneResult& r) {
  const TrialRecord* last = nullptr;
  for (const auto& t : r.trials)
    if (t.knobs == r.chosen && t.phase != "calibrate") last = &t;
  if (!last || r.weight_bytes <= 0) return "";
  struct P {
    const char* name;
    double rows, seconds;
  };
  const P pts[] = {{"decode step", last->m.decode_step_rows, last->m.decode_step_s},
                   {"step with prompt work", last->m.prompt_step_rows, last->m.prompt_step_mean_s}};
  const int W = 520, H = 340, L = 60, R = 20, T = 20, B = 44;
  const double x0 = std::log10(0.1), x1 = std::log10(10000.0);
  const double peak = r.ceilings.compute_gops, bw = r.ceilings.dram_gbs;
  const double y0 = std::log10(std::max(0.1, peak / 1e4)), y1 = std::log10(peak * 2);
  auto X = [&](double ai) { return L + (std::log10(ai) - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double g) { return T + (y1 - std::log10(std::max(g, 1e-9))) / (y1 - y0) * (H - T - B); };
  std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
                              "font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n",
                              W, H);
  // The ceilings: bandwidth x intensity up to the ridge, then the compute peak.
  std::string path;
  for (int k = 0; k <= 60; ++k) {
    const double ai = std::pow(10.0, x0 + (x1 - x0) * k / 60);
    path += fmt::format("{}{:.1f},{:.1f} ", k ? "L" : "M", X(ai), Y(std::min(peak, bw * ai)));
  }
  s += fmt::format("<path d='{}' fill='none' stroke='#333' stroke-width='2'/>\n", path);
  s += fmt::format("<text x='{}' y='{}'>{} peak {:.0f} GOP/s, DRAM {:.1f} GB/s</text>\n", L + 6, T + 12,
                   r.ceilings.compute_class, peak, bw);
  const char* colors[] = {"#d73027", "#4575b4"};
  for (int k = 0; k < 2; ++k) {
    const P& p = pts[k];
    if (p.rows <= 0 || p.seconds <= 0) continue;
    const double flops = r.flops_per_token * p.rows, ai = flops / r.weight_bytes, g = flops / p.seconds / 1e9;
    s += fmt::format("<circle class='point' cx='{:.1f}' cy='{:.1f}' r='6' fill='{}'/><text x='{:.1f}' y='{:.1f}'>{} "
                     "({:.0f} rows, {:.1f} ms, {:.0f}% of its roof)</text>\n",
                     X(ai), Y(g), colors[k], X(ai) + 9, Y(g) + 4, p.name, p.rows, p.seconds * 1e3,
                     100 * g / std::min(peak, bw * ai));
  }
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>operations per weight byte (log)</text>\n",
                   (L + W - R) / 2, H - 10);
  s += fmt::format("<text x='14' y='{}' transform='rotate(-90 14 {})' text-anchor='middle'>GOP/s (log)</text>\n",
                   (T + H - B) / 2, (T + H - B) / 2);
  s += "</svg>\n";
  return s;
}

}  // namespace

std::string trial_line(const TrialRecord& t, const TuneOptions& o) {
  // A negative goodput objective ranks points where nothing met the SLO: say so.
  const std::string value = o.objective == Objective::Goodput && t.objective < 0 ? std::string("0 (none within the SLO)")
                                                                                 : fmt::format("{:.4g}", t.objective);
  std::string s = fmt::format("tune: #{:<2} {:<9} {:<44} {} {}, good {}/{}, TTFT p{:g} {} ms, TPOT p{:g} {} ms",
                              t.index, t.phase, t.config.empty() ? "defaults" : t.config, objective_name(o.objective),
                              value, t.m.good, t.m.requests, o.slo.ttft_pct, ms(t.m.ttft_slo_pct),
                              o.slo.tpot_pct, ms(t.m.tpot_slo_pct));
  if (t.predicted) s += fmt::format(" (predicted {:.4g})", t.predicted_objective);
  if (!t.verdict.empty()) s += " - " + t.verdict;
  return s;
}

std::vector<std::pair<std::string, std::optional<std::string>>> tune_output_flags(const TuneResult& r,
                                                                                  const TuneReportContext& c) {
  auto out = c.base_flags;
  bool draft_model = false;
  for (const auto& [k, v] : out) draft_model |= k == "draft-model";
  for (const auto& [k, v] : r.chosen.flags(r.engine_defaults)) {
    // The knobs' only flags are the prefix cache's two.
    if (v.empty()) out.emplace_back(k, std::nullopt);
    else out.emplace_back(k, v);
  }
  // A draft model with no method is draft speculation (engine_config): say "none" when
  // tuning turned speculation off.
  if (draft_model && r.chosen.spec == SpecMethod::None) out.emplace_back("speculative-method", "none");
  return out;
}

namespace {
std::string shell_quoted(const std::string& v) {
  const bool plain = !v.empty() && std::all_of(v.begin(), v.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || std::strchr("_./:=,+-@%", ch) != nullptr;
  });
  if (plain) return v;
  std::string q = "'";
  for (char ch : v) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}
}  // namespace

std::string tune_command_line(const TuneResult& r, const TuneReportContext& c) {
  std::string s = "ridge serve -m " + shell_quoted(c.model);
  for (const auto& [k, v] : tune_output_flags(r, c)) s += " --" + k + (v ? " " + shell_quoted(*v) : "");
  return s;
}

std::string tune_report_text(const TuneResult& r, const TuneReportContext& c) {
  const TuneOptions& o = *c.options;
  std::string s;
  s += fmt::format("model {}, CPU {}, {} threads\n", c.model, c.cpu, r.threads);
  s += fmt::format("workload {} ({}), {} requests per trial at {} req/s; SLO {}; objective {}\n", o.workload.name,
                   o.workload.source, r.requests_per_trial, std::isfinite(r.rate) ? fmt::format("{:.3g}", r.rate) : "inf",
                   o.slo.str(), objective_name(o.objective));
  const StepModel& sm = r.step_model;
  s += fmt::format("{} trials in {:.0f} s (budget {:.0f} s{}); noise band {:.1f}%; step model: {:.2f} ms + {:.3f} ms/row "
                   "+ {:.3f} ms/seq + {:.3f} ms/1k attention pairs (prior {:.2f} ms + {:.3f} ms/row + {:.3f} ms/1k "
                   "pairs), predictions off by {:.0f}% on average\n",
                   r.trials.size(), r.elapsed_s, o.budget_s,
                   r.grid_s > 0 ? fmt::format(", and {:.0f} s for the grid outside it", r.grid_s) : std::string(),
                   r.noise_band * 100, sm.fixed_s * 1e3, sm.per_token_s * 1e3, sm.per_seq_s * 1e3, sm.per_pair_s * 1e6,
                   sm.prior_fixed_s * 1e3, sm.prior_per_token_s * 1e3, sm.prior_per_pair_s * 1e6,
                   r.mean_prediction_error * 100);
  s += "\nchanges tried:\n";
  for (const auto& t : r.trials)
    if (t.phase == "search")
      s += fmt::format("  #{:<2} {}\n      why: {}\n      {}\n", t.index, t.change, t.reason, t.verdict);
  for (const auto& k : r.skipped) s += "  skipped " + k + "\n";
  s += fmt::format("\n{:<12} {:>14} {:>10} {:>10} {:>8}\n", "", objective_name(o.objective), "goodput", "attained", "spread");
  // A negative goodput objective only ranks points with no request within the SLO.
  auto obj = [&](double v) {
    return o.objective == Objective::Goodput && v < 0 ? std::string("0 (none)") : fmt::format("{:.4g}", v);
  };
  s += fmt::format("{:<12} {:>14} {:>10.4g} {:>9.0f}% {:>7.1f}%\n", "defaults", obj(r.default_objective), r.default_goodput,
                   r.default_attainment * 100, r.default_spread * 100);
  s += fmt::format("{:<12} {:>14} {:>10.4g} {:>9.0f}% {:>7.1f}%\n", "chosen", obj(r.chosen_objective), r.chosen_goodput,
                   r.chosen_attainment * 100, r.chosen_spread * 100);
  if (!r.grid_best.empty())
    s += fmt::format("{:<12} {:>14}   ({})\n", "grid best", obj(r.grid_best_objective), r.grid_best);
  s += "\n" + r.summary + "\n";
  s += "chosen: " + tune_command_line(r, c) + "\n";
  return s;
}

std::string tune_report_json(const TuneResult& r, const TuneReportContext& c) {
  const TuneOptions& o = *c.options;
  json flags = json::object();
  for (const auto& [k, v] : tune_output_flags(r, c)) {
    // A number where it reads back the same ("007" stays a string).
    const bool integer = v && !v->empty() && v->size() <= 18 && (v->size() == 1 || (*v)[0] != '0') &&
                         std::all_of(v->begin(), v->end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!v) flags[k] = true;
    else if (integer) flags[k] = std::stoll(*v);
    else flags[k] = *v;
  }
  json trials = json::array();
  for (const auto& t : r.trials) {
    json j = {{"index", t.index},   {"phase", t.phase},         {"config", t.knobs.str()}, {"flags", t.config},
              {"change", t.change}, {"reason", t.reason},       {"objective", t.objective},
              {"verdict", t.verdict}, {"metrics", metrics_json(t.m)}, {"step_model_error_prior", t.step_s_prior},
              {"step_model_error_fit", t.step_s_fit}};
    if (t.predicted) j["predicted_objective"] = t.predicted_objective;
    trials.push_back(j);
  }
  json tune = {{"model", c.model},
               {"cpu", c.cpu},
               {"threads", r.threads},
               {"workload", json::parse(workload_json(o.workload))},
               {"rate", std::isfinite(r.rate) ? json(r.rate) : json("inf")},
               {"requests_per_trial", r.requests_per_trial},
               {"seed", o.seed},
               {"slo", o.slo.str()},
               {"objective", objective_name(o.objective)},
               {"budget_s", o.budget_s},
               {"elapsed_s", r.elapsed_s},
               {"grid_s", r.grid_s},
               {"noise_band", r.noise_band},
               {"defaults", r.defaults.str()},
               {"chosen", r.chosen.str()},
               {"command", tune_command_line(r, c)},
               {"summary", r.summary},
               {"slo_met", r.slo_met},
               {"binding", r.binding},
               {"default", {{"objective", r.default_objective}, {"goodput", r.default_goodput}, {"attainment", r.default_attainment}, {"spread", r.default_spread}}},
               {"tuned", {{"objective", r.chosen_objective}, {"goodput", r.chosen_goodput}, {"attainment", r.chosen_attainment}, {"spread", r.chosen_spread}}},
               {"step_model", {{"fixed_ms", r.step_model.fixed_s * 1e3}, {"per_row_ms", r.step_model.per_token_s * 1e3},
                               {"per_seq_ms", r.step_model.per_seq_s * 1e3}, {"per_1k_pairs_ms", r.step_model.per_pair_s * 1e6},
                               {"prior_fixed_ms", r.step_model.prior_fixed_s * 1e3},
                               {"prior_per_row_ms", r.step_model.prior_per_token_s * 1e3},
                               {"prior_per_1k_pairs_ms", r.step_model.prior_per_pair_s * 1e6},
                               {"fitted_steps", r.step_model.fitted_steps}}},
               {"mean_prediction_error", r.mean_prediction_error},
               {"skipped", r.skipped},
               {"trials", trials}};
  if (!r.grid_best.empty()) tune["grid_best"] = {{"config", r.grid_best}, {"objective", r.grid_best_objective}};
  return json({{"flags", flags}, {"tune", tune}}).dump(2) + "\n";
}

std::string tune_report_html(const TuneResult& r, const TuneReportContext& c) {
  const TuneOptions& o = *c.options;
  std::string s = "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>ridge tune</title>\n<style>body{font-family:"
                  "sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;font-size:13px}td,th{border:"
                  "1px solid #ccc;padding:3px 6px;text-align:left}td.n{text-align:right}.kept{color:#1a9850}.rejected"
                  "{color:#d73027}</style></head><body>\n";
  s += fmt::format("<h1>ridge tune</h1>\n<p>{} on {} ({} threads); workload <b>{}</b> ({}), {} requests per trial at {} "
                   "req/s; SLO {}; objective {}.</p>\n",
                   esc(c.model), esc(c.cpu), r.threads, esc(o.workload.name), esc(o.workload.source),
                   r.requests_per_trial, std::isfinite(r.rate) ? fmt::format("{:.3g}", r.rate) : "inf", esc(o.slo.str()),
                   objective_name(o.objective));
  s += fmt::format("<p><b>{}</b></p>\n<p>Chosen: <code>{}</code></p>\n", esc(r.summary), esc(tune_command_line(r, c)));
  s += "<h2>The chosen point against the defaults</h2>\n<table><tr><th></th><th>" +
       std::string(objective_name(o.objective)) + "</th><th>goodput (req/s)</th><th>SLO attainment</th><th>spread of runs</th></tr>\n";
  s += fmt::format("<tr><td>defaults</td><td class=n>{:.4g}</td><td class=n>{:.4g}</td><td class=n>{:.0f}%</td><td class=n>{:.1f}%</td></tr>\n",
                   r.default_objective, r.default_goodput, r.default_attainment * 100, r.default_spread * 100);
  s += fmt::format("<tr><td>chosen</td><td class=n>{:.4g}</td><td class=n>{:.4g}</td><td class=n>{:.0f}%</td><td class=n>{:.1f}%</td></tr>\n",
                   r.chosen_objective, r.chosen_goodput, r.chosen_attainment * 100, r.chosen_spread * 100);
  if (!r.grid_best.empty())
    s += fmt::format("<tr><td>best of the grid</td><td class=n>{:.4g}</td><td colspan=3>{}</td></tr>\n",
                     r.grid_best_objective, esc(r.grid_best));
  s += "</table>\n<h2>Trials</h2>\n<p>Blue: the defaults (the band: their noise); green: kept; red: rejected; purple: "
       "verification; grey: the grid; dashed rings: the step model's prediction.</p>\n";
  s += history_svg(r, o);
  s += "<table><tr><th>#</th><th>phase</th><th>configuration (flags off the defaults)</th><th>why</th><th>predicted</th><th>measured</th><th>verdict</th>"
       "<th>TTFT p" + fmt::format("{:g}", o.slo.ttft_pct) + " ms</th><th>TPOT p" + fmt::format("{:g}", o.slo.tpot_pct) +
       " ms</th><th>KV peak</th><th>preemptions</th></tr>\n";
  for (const auto& t : r.trials)
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{:.4g}</td><td "
                     "class='{}'>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.0f}%</td><td "
                     "class=n>{}</td></tr>\n",
                     t.index, esc(t.phase), esc(t.config.empty() ? "defaults" : t.config), esc(t.reason),
                     t.predicted ? fmt::format("{:.4g}", t.predicted_objective) : "", t.objective,
                     t.verdict.starts_with("kept") ? "kept" : t.verdict.starts_with("rejected") ? "rejected" : "",
                     esc(t.verdict), ms(t.m.ttft_slo_pct), ms(t.m.tpot_slo_pct), t.m.kv_peak * 100, t.m.preemptions);
  s += "</table>\n<h2>The chosen point on the roofline</h2>\n";
  s += roofline_svg(r);
  s += fmt::format("<p>Step model: {:.2f} ms + {:.3f} ms per row + {:.3f} ms per sequence + {:.3f} ms per thousand "
                   "attention pairs (the roofline's prior: {:.2f} ms of weight stream + {:.3f} ms per row + {:.3f} ms per "
                   "thousand pairs of f16 K/V read); the simulation's predictions were off by {:.0f}% on average.</p>\n",
                   r.step_model.fixed_s * 1e3, r.step_model.per_token_s * 1e3, r.step_model.per_seq_s * 1e3,
                   r.step_model.per_pair_s * 1e6, r.step_model.prior_fixed_s * 1e3, r.step_model.prior_per_token_s * 1e3,
                   r.step_model.prior_per_pair_s * 1e6, r.mean_prediction_error * 100);
  s += "</body></html>\n";
  return s;
}

}  // namespace ridge::tools
