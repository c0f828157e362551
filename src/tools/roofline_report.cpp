// The roofline report (see roofline_report.h): the analysis of a measurement against the
// machine's ceilings, the bottleneck diagnosis, and the text / JSON / HTML renderers.
#include "tools/roofline_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numbers>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ridge::tools {

using namespace ridge::perf;  // the instrumentation this tool reports on
namespace {

using ojson = nlohmann::ordered_json;

// Bottleneck thresholds. They are judgement calls, stated here so a verdict can be traced:
// - Idle time between steps above 20% of the step is more than timer jitter and the
//   engine's own bookkeeping explain: the scheduler leaves the model waiting.
constexpr double kSchedulerWallRatio = 1.2;
// - A step 3x slower than both ceilings allow cannot be a kernel a few tuning steps away
//   from its roof; something other than FLOPs or bytes costs the time.
constexpr double kOverheadStepRatio = 3.0;
// - An op whose roofline time is under 10% of its measured time is too small for its
//   FLOPs or bytes to matter: dispatch, thread wake-up and synchronization dominate it.
constexpr double kSmallOpPredictedFrac = 0.10;
// - Overhead is the verdict when such ops plus the untimed part of the step are most of it.
constexpr double kOverheadTimeShare = 0.5;
// A memory- or compute-bound group within this factor of its ridge point, running under
// this fraction of its roofline time, is bound by its kernels (both roofs are close there).
constexpr double kNearRidgeFactor = 2.0;
constexpr double kNearRidgeRoofFrac = 0.5;
// How many ops a verdict names.
constexpr size_t kVerdictOps = 3;

double ms(double s) { return s * 1e3; }

constexpr ComputeClass kClasses[] = {ComputeClass::Fp32Fma, ComputeClass::Fp16Fma, ComputeClass::Bf16Dot,
                                     ComputeClass::Int8Vnni};

std::string sig3(double x) {
  const double a = std::fabs(x);
  if (a == 0 || !std::isfinite(x)) return a == 0 ? "0" : "-";
  // Thresholds just below the decades, so that 99.97 prints as "100", not "100.0".
  if (a >= 99.95) return fmt::format("{:.0f}", x);
  if (a >= 9.995) return fmt::format("{:.1f}", x);
  if (a >= 0.9995) return fmt::format("{:.2f}", x);
  return fmt::format("{:.3g}", x);
}

double class_peak(const Peaks& p, ComputeClass c) {
  const std::optional<ComputePeak>* pk = nullptr;
  switch (c) {
    case ComputeClass::Fp32Fma: pk = &p.fp32_fma; break;
    case ComputeClass::Fp16Fma: pk = &p.fp16_fma; break;
    case ComputeClass::Bf16Dot: pk = &p.bf16_dot; break;
    case ComputeClass::Int8Vnni: pk = &p.int8_vnni; break;
    case ComputeClass::None: return 0;
  }
  return pk && *pk ? (*pk)->all : 0;
}

// The cells of the per-op table, row-major (text and HTML show the same numbers).
std::vector<std::string> table_rows(const PhaseAnalysis& p) {
  std::vector<std::string> rows;
  for (const auto& o : p.ops) {
    const bool timed = o.op->seconds > 0;
    auto cell = [&](double v) { return timed ? sig3(v) : std::string("-"); };
    rows.push_back(o.op->name);
    rows.push_back(std::string(compute_class_name(o.op->cls)));
    rows.push_back(timed ? fmt::format("{:.3f}", ms(o.op->seconds)) : "-");
    rows.push_back(timed ? fmt::format("{:.1f}%", 100 * o.share) : "-");
    rows.push_back(cell(o.gflops));
    rows.push_back(cell(o.gbs));
    rows.push_back(o.op->bytes > 0 ? sig3(o.intensity) : "-");
    rows.push_back(o.bound == Bound::Compute ? "compute" : o.from_cache ? "cache" : "memory");
    rows.push_back(!timed ? "-" : o.above_ceiling ? "above!" : fmt::format("{:.1f}%", o.bound_pct));
    rows.push_back(fmt::format("{:.3f}", ms(o.predicted_seconds)));
  }
  return rows;
}

const char* technique(const std::string& bottleneck) {
  if (bottleneck == "memory")
    return "Technique: fewer bytes per token - lower-bit weight quantization, KV cache quantization, "
           "fusion (one pass over the activations instead of several), paged/prefix KV reuse, and "
           "batching more sequences per weight read.";
  if (bottleneck == "compute")
    return "Technique: more useful work per cycle - better GEMM tiling (register and cache blocking "
           "that keeps the FMA units fed), int8/fp8 compute (VNNI dot products) instead of fp32.";
  if (bottleneck == "overhead")
    return "Technique: fewer, larger ops - fuse the small ops, cut per-op dispatch and thread "
           "synchronization (fewer launches, a captured step graph), and larger batches so each op "
           "has more work.";
  return "Technique: keep the model busy - continuous batching settings (more sequences and batched "
         "tokens per step, chunked prefill) so steps run back to back.";
}

// "ffn_down 41% of time (81% of DRAM bandwidth, 1.89 FLOP/B)"
std::string op_cite(const OpAnalysis& o) {
  const std::string roof = o.bound == Bound::Memory
                               ? std::string(o.from_cache ? "cache bandwidth" : "DRAM bandwidth")
                               : fmt::format("{} peak", compute_class_name(o.op->cls));
  if (o.above_ceiling)
    return fmt::format("{} {:.0f}% of time (above the measured {}: re-measure the ceiling, {} FLOP/B)", o.op->name,
                       100 * o.share, roof, sig3(o.intensity));
  return fmt::format("{} {:.0f}% of time ({:.0f}% of {}, {} FLOP/B)", o.op->name, 100 * o.share, o.bound_pct,
                     roof, sig3(o.intensity));
}

std::string top_ops(const std::vector<const OpAnalysis*>& ops) {
  if (ops.empty()) return "no timed op";
  std::string s;
  for (size_t i = 0; i < ops.size() && i < kVerdictOps; ++i) s += (i ? "; " : "") + op_cite(*ops[i]);
  return s;
}

std::vector<const OpAnalysis*> by_time(const PhaseAnalysis& p, auto&& keep) {
  std::vector<const OpAnalysis*> v;
  for (const auto& o : p.ops)
    if (o.op->seconds > 0 && keep(o)) v.push_back(&o);
  std::stable_sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->op->seconds > b->op->seconds; });
  return v;
}

// The in-step diagnosis of ops of one bound: its share, aggregate intensity, and how close
// the group runs to its roof (the group's roofline time over its measured time).
std::string bound_sentence(const PhaseAnalysis& p, Bound b, double bw) {
  double secs = 0, pred = 0, flops = 0, bytes = 0;
  double cls_secs[size_t(ComputeClass::None) + 1] = {};
  for (const auto& o : p.ops)
    if (o.bound == b && o.op->seconds > 0) {
      secs += o.op->seconds, pred += o.predicted_seconds, flops += o.op->flops, bytes += o.op->bytes;
      if (o.peak_gflops > 0) cls_secs[size_t(o.op->cls)] += o.op->seconds;
    }
  const double share = p.op_seconds > 0 ? 100 * secs / p.op_seconds : 0;
  const double pct = secs > 0 ? 100 * pred / secs : 0;
  const double intensity = bytes > 0 ? flops / bytes : 0;
  // The dominant class's ridge: the one the bulk of this group's time is measured against.
  size_t dom = 0;
  for (size_t c = 1; c < std::size(cls_secs); ++c)
    if (cls_secs[c] > cls_secs[dom]) dom = c;
  double ridge = 0;
  std::string_view dom_name;
  for (const auto& o : p.ops)
    if (cls_secs[dom] > 0 && size_t(o.op->cls) == dom && o.peak_gflops > 0) ridge = o.ridge, dom_name = compute_class_name(o.op->cls);
  const std::string ridge_s = ridge > 0 ? fmt::format("the {} ridge of {} FLOP/B", dom_name, sig3(ridge))
                                        : std::string("no compute roof");
  const auto top = by_time(p, [&](const OpAnalysis& o) { return o.bound == b; });
  if (b == Bound::Memory)
    return fmt::format("{:.0f}% of the op time is in memory-bound ops at {} FLOP/B ({}), moving {} GB/s = {:.0f}% "
                       "of DRAM bandwidth ({} GB/s); top: {}",
                       share, sig3(intensity), ridge_s, sig3(secs > 0 ? bytes / secs / 1e9 : 0), pct,
                       sig3(bw), top_ops(top));
  return fmt::format("{:.0f}% of the op time is in compute-bound ops at {} FLOP/B (above {}), running at {} "
                     "GFLOP/s = {:.0f}% of their compute roofs; top: {}",
                     share, sig3(intensity), ridge_s, sig3(secs > 0 ? flops / secs / 1e9 : 0), pct,
                     top_ops(top));
}

void diagnose(PhaseAnalysis& p, double bw) {
  const PhaseMeasure& m = *p.phase;
  const std::string who = fmt::format("{} b{}", m.phase, m.batch);
  const std::string timing = fmt::format("measured {} ms per step vs {} ms predicted", sig3(ms(m.step_seconds)),
                                         sig3(ms(p.predicted_seconds)));
  // Which bound's ops hold most of the time (the roofline time when nothing was timed).
  double mem = 0, comp = 0;
  for (const auto& o : p.ops) {
    const double t = p.op_seconds > 0 ? o.op->seconds : o.predicted_seconds;
    (o.bound == Bound::Memory ? mem : comp) += t;
  }
  const Bound in_step = comp > mem ? Bound::Compute : Bound::Memory;
  const std::string in_step_name = in_step == Bound::Memory ? "memory" : "compute";

  // Small ops: measured far above both ceilings; plus the step time no op accounts for.
  double small = 0;
  for (const auto& o : p.ops)
    if (o.op->seconds > 0 && o.predicted_seconds < kSmallOpPredictedFrac * o.op->seconds) small += o.op->seconds;
  const double untimed = std::max(0.0, m.step_seconds - p.op_seconds);
  const double overhead_share = m.step_seconds > 0 ? (small + untimed) / m.step_seconds : 0;

  if (p.op_seconds <= 0 && p.predicted_seconds <= 0 && m.step_seconds <= 0) {
    p.bottleneck = "unknown";
    p.verdict = fmt::format("{}: nothing was measured (no op time, no FLOPs or bytes, no step time).", who);
  } else if (m.wall_seconds > kSchedulerWallRatio * m.step_seconds && m.step_seconds > 0) {
    p.bottleneck = "scheduler";
    p.verdict = fmt::format(
        "{} is scheduler-bound: {} ms of wall time per step vs {} ms inside the step ({:.2f}x; {} ms idle between "
        "steps, {:.0f}% of the wall time). Inside the step it is {}-bound: {}; {}. {}",
        who, sig3(ms(m.wall_seconds)), sig3(ms(m.step_seconds)), m.wall_seconds / m.step_seconds,
        sig3(ms(m.wall_seconds - m.step_seconds)), 100 * (m.wall_seconds - m.step_seconds) / m.wall_seconds,
        in_step_name, bound_sentence(p, in_step, bw), timing, technique(p.bottleneck));
  } else if (p.predicted_seconds > 0 && m.step_seconds > kOverheadStepRatio * p.predicted_seconds &&
             overhead_share > kOverheadTimeShare) {
    p.bottleneck = "overhead";
    const auto top = by_time(p, [](const OpAnalysis& o) {
      return o.predicted_seconds < kSmallOpPredictedFrac * o.op->seconds;
    });
    p.verdict = fmt::format(
        "{} is overhead-bound: {} ({:.1f}x the roofline); {:.0f}% of the step is in ops running under {:.0f}% of "
        "both ceilings ({} ms) or outside the timed ops ({} ms); top: {}. {}",
        who, timing, m.step_seconds / p.predicted_seconds, 100 * overhead_share, 100 * kSmallOpPredictedFrac,
        sig3(ms(small)), sig3(ms(untimed)), top_ops(top), technique(p.bottleneck));
  } else {
    p.bottleneck = in_step_name;
    p.verdict = fmt::format("{} is {}-bound: {}; {}. {}", who, in_step_name, bound_sentence(p, in_step, bw), timing,
                            technique(p.bottleneck));
    // Near the ridge point both roofs are close, so an op group far under its roofline
    // time is bound by its kernels, not by the memory system or the peak: say so, since
    // "fewer bytes" would not help much there.
    double secs = 0, pred = 0, flops = 0, bytes = 0, ridge_t = 0, ridge_w = 0;
    for (const auto& o : p.ops)
      if (o.bound == in_step && o.op->seconds > 0) {
        secs += o.op->seconds, pred += o.predicted_seconds, flops += o.op->flops, bytes += o.op->bytes;
        if (o.ridge > 0) ridge_t += o.ridge * o.op->seconds, ridge_w += o.op->seconds;
      }
    const double intensity = bytes > 0 ? flops / bytes : 0, ridge = ridge_w > 0 ? ridge_t / ridge_w : 0;
    if (secs > 0 && pred < kNearRidgeRoofFrac * secs && ridge > 0 && intensity > ridge / kNearRidgeFactor &&
        intensity < ridge * kNearRidgeFactor)
      p.verdict += fmt::format(
          " But these ops sit near the ridge point ({} FLOP/B against {}) and reach only {:.0f}% of their roofline "
          "time, under both roofs: the kernels bind, not DRAM. Technique first: better GEMM tiling for this batch "
          "size (more rows per weight load, tiles that keep the VNNI/FMA units fed).",
          sig3(intensity), sig3(ridge), 100 * pred / secs);
  }
}

ojson op_json(const OpAnalysis& o) {
  return ojson{{"name", o.op->name},
               {"class", compute_class_name(o.op->cls)},
               {"flops", o.op->flops},
               {"bytes", o.op->bytes},
               {"seconds", o.op->seconds},
               {"ms", ms(o.op->seconds)},
               {"share", o.share},
               {"gflops", o.gflops},
               {"gbs", o.gbs},
               {"intensity", o.intensity},
               {"peak_gflops", o.peak_gflops},
               {"ridge", o.ridge},
               {"bound", o.bound == Bound::Compute ? "compute" : o.from_cache ? "cache" : "memory"},
               {"roof_gbs", o.roof_gbs},
               {"bound_pct", o.bound_pct},
               {"above_ceiling", o.above_ceiling},
               {"predicted_seconds", o.predicted_seconds}};
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail("{}: missing key '{}'", where, key);
  return j.at(key);
}
double num(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_number()) fail("{}: key '{}' must be a number", where, key);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) fail("{}: key '{}' must be a finite number >= 0, got {}", where, key, d);
  return d;
}
std::string text(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_string()) fail("{}: key '{}' must be a string", where, key);
  return v.get<std::string>();
}
int64_t integer(const nlohmann::json& j, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  const auto& v = field(j, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    fail("{}: key '{}' must be an integer in [{}, {}]", where, key, lo, hi);
  return v.get<int64_t>();
}

}  // namespace


RooflineAnalysis analyze(const RooflineRun& run) {
  RooflineAnalysis a;
  const auto it = run.peaks.dram_read_gbs.find(run.threads);
  a.dram_gbs = it != run.peaks.dram_read_gbs.end() ? it->second : run.peaks.dram_read_gbs_max;
  RIDGE_CHECK(a.dram_gbs > 0 && std::isfinite(a.dram_gbs),
              "the peaks have no DRAM bandwidth for {} threads (measure them with ridge peaks)", run.threads);
  a.cache_gbs = run.peaks.cache_read_gbs;
  for (const auto& ph : run.phases) {
    PhaseAnalysis p;
    p.phase = &ph;
    for (const auto& op : ph.ops) {
      RIDGE_CHECK(op.flops >= 0 && op.bytes >= 0 && op.seconds >= 0 && std::isfinite(op.flops + op.bytes + op.seconds),
                  "{} b{}: op {} has a negative or non-finite count", ph.phase, ph.batch, op.name);
      OpAnalysis o;
      o.op = &op;
      if (op.seconds > 0) o.gflops = op.flops / op.seconds / 1e9, o.gbs = op.bytes / op.seconds / 1e9;
      o.intensity = op.bytes > 0 ? op.flops / op.bytes : 0;
      o.peak_gflops = class_peak(run.peaks, op.cls);
      o.from_cache = a.cache_gbs > 0 && op_reads_cache(op.name);
      o.roof_gbs = o.from_cache ? a.cache_gbs : a.dram_gbs;
      o.ridge = o.peak_gflops / o.roof_gbs;
      // No compute roof, or no bytes at all: only one ceiling can apply.
      if (o.peak_gflops <= 0) o.bound = Bound::Memory;
      else if (op.bytes <= 0) o.bound = op.flops > 0 ? Bound::Compute : Bound::Memory;
      else o.bound = o.intensity < o.ridge ? Bound::Memory : Bound::Compute;
      if (op.seconds > 0)
        o.bound_pct = 100 * (o.bound == Bound::Memory ? o.gbs / o.roof_gbs : o.gflops / o.peak_gflops);
      o.above_ceiling = o.bound_pct > 100;
      o.predicted_seconds =
          std::max(o.peak_gflops > 0 ? op.flops / (o.peak_gflops * 1e9) : 0.0, op.bytes / (o.roof_gbs * 1e9));
      p.flops += op.flops, p.bytes += op.bytes;
      p.predicted_seconds += o.predicted_seconds;
      p.op_seconds += op.seconds;
      p.ops.push_back(o);
    }
    for (auto& o : p.ops) o.share = p.op_seconds > 0 ? o.op->seconds / p.op_seconds : 0;
    diagnose(p, a.dram_gbs);
    a.phases.push_back(std::move(p));
  }
  return a;
}

std::string render_text(const RooflineRun& run, const RooflineAnalysis& a) {
  std::string s = fmt::format("roofline: {} ({}), {} threads, prompt {}", run.model, run.weight_type, run.threads,
                              run.prompt);
  if (!run.kv_dtype.empty())
    s += fmt::format(", KV {} in blocks of {}, {} tokens per step at most", run.kv_dtype, run.block_size,
                     run.max_num_batched_tokens);
  s += "\n";
  s += fmt::format("ceilings ({}): DRAM read {} GB/s", run.peaks.cpu, sig3(a.dram_gbs));
  if (a.cache_gbs > 0) s += fmt::format("; cache read {} GB/s", sig3(a.cache_gbs));
  for (auto c : kClasses)
    if (const double pk = class_peak(run.peaks, c); pk > 0)
      s += fmt::format("; {} {} GFLOP/s (ridge {} FLOP/B)", compute_class_name(c), sig3(pk),
                       sig3(pk / a.dram_gbs));
  if (!run.peaks_origin.empty()) s += " [" + run.peaks_origin + "]";
  s += "\n";
  static const char* kHead[] = {"op", "class", "time ms", "share", "GFLOP/s", "GB/s", "FLOP/B", "bound", "% of bound", "pred ms"};
  constexpr size_t kCols = std::size(kHead);
  for (const auto& p : a.phases) {
    const PhaseMeasure& m = *p.phase;
    s += fmt::format("\n{} b{}: {} tokens/step, {} steps; step {} ms, wall {} ms\n", m.phase, m.batch, m.tokens,
                     m.steps, sig3(ms(m.step_seconds)), sig3(ms(m.wall_seconds)));
    const auto rows = table_rows(p);
    size_t w[kCols];
    for (size_t c = 0; c < kCols; ++c) w[c] = std::string_view(kHead[c]).size();
    for (size_t i = 0; i < rows.size(); ++i) w[i % kCols] = std::max(w[i % kCols], rows[i].size());
    auto line = [&](auto&& cell) {
      std::string l;
      for (size_t c = 0; c < kCols; ++c)
        l += c == 0 ? fmt::format("{:<{}}", cell(c), w[c]) : fmt::format("  {:>{}}", cell(c), w[c]);
      return l + "\n";
    };
    s += line([&](size_t c) { return std::string(kHead[c]); });
    for (size_t r = 0; r < rows.size() / kCols; ++r) s += line([&](size_t c) { return rows[r * kCols + c]; });
    s += fmt::format("predicted {:.3f} ms vs measured {:.3f} ms (ops timed: {:.3f} ms)\n", ms(p.predicted_seconds),
                     ms(m.step_seconds), ms(p.op_seconds));
    s += p.verdict + "\n";
  }
  std::string above;
  int n_above = 0;
  for (const auto& p : a.phases)
    for (const auto& o : p.ops)
      if (o.above_ceiling && n_above++ < 4)
        above += fmt::format("{}{} b{} {} at {:.0f}%", above.empty() ? "" : ", ", p.phase->phase, p.phase->batch,
                             o.op->name, o.bound_pct);
  if (n_above > 0)
    s += fmt::format(
        "\nwarning: {} op{} measured above {} ceiling ({}{}): a ceiling below what the kernels reach is a "
        "ceiling to re-measure (ridge peaks; without --peaks roofline measures them in the same run), or the op's "
        "bytes came from cache rather than DRAM.\n",
        n_above, n_above == 1 ? "" : "s", n_above == 1 ? "its" : "their", above, n_above > 4 ? ", ..." : "");
  return s;
}

std::string render_json(const RooflineRun& run, const RooflineAnalysis& a) {
  ojson j;
  j["model"] = run.model;
  j["weight_type"] = run.weight_type;
  j["peaks_origin"] = run.peaks_origin;
  j["threads"] = run.threads;
  j["prompt"] = run.prompt;
  j["kv_dtype"] = run.kv_dtype;
  j["block_size"] = run.block_size;
  j["max_num_batched_tokens"] = run.max_num_batched_tokens;
  j["peaks"] = ojson::parse(peaks_to_json(run.peaks));
  j["dram_gbs"] = a.dram_gbs;
  j["cache_gbs"] = a.cache_gbs;
  ojson roofs = ojson::object();
  for (auto c : kClasses)
    if (const double pk = class_peak(run.peaks, c); pk > 0)
      roofs[std::string(compute_class_name(c))] = ojson{{"gflops", pk}, {"ridge", pk / a.dram_gbs}};
  j["roofs"] = roofs;
  ojson phases = ojson::array();
  for (const auto& p : a.phases) {
    const PhaseMeasure& m = *p.phase;
    ojson ops = ojson::array();
    for (const auto& o : p.ops) ops.push_back(op_json(o));
    phases.push_back(ojson{{"phase", m.phase},
                           {"batch", m.batch},
                           {"tokens", m.tokens},
                           {"steps", m.steps},
                           {"step_seconds", m.step_seconds},
                           {"wall_seconds", m.wall_seconds},
                           {"step_ms", ms(m.step_seconds)},
                           {"wall_ms", ms(m.wall_seconds)},
                           {"tok_per_s", m.step_seconds > 0 ? double(m.tokens) / m.step_seconds : 0.0},
                           {"flops", p.flops},
                           {"bytes", p.bytes},
                           {"op_seconds", p.op_seconds},
                           {"predicted_seconds", p.predicted_seconds},
                           {"bottleneck", p.bottleneck},
                           {"verdict", p.verdict},
                           {"ops", ops}});
  }
  j["phases"] = phases;
  return j.dump(2) + "\n";
}

RooflineRun run_from_json(const std::string& s, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", where, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object (ridge roofline --json)", where);
  RooflineRun r;
  r.model = text(j, "model", where);
  r.weight_type = text(j, "weight_type", where);
  if (j.contains("peaks_origin")) r.peaks_origin = text(j, "peaks_origin", where);
  r.threads = int(integer(j, "threads", where, 0, 1 << 20));
  r.prompt = int32_t(integer(j, "prompt", where, 0, INT32_MAX));
  if (j.contains("kv_dtype")) {  // added later: older runs have none of the three
    r.kv_dtype = text(j, "kv_dtype", where);
    r.block_size = int32_t(integer(j, "block_size", where, 0, INT32_MAX));
    r.max_num_batched_tokens = int32_t(integer(j, "max_num_batched_tokens", where, 0, INT32_MAX));
  }
  r.peaks = peaks_from_json(field(j, "peaks", where).dump(), where + ": peaks");
  const auto& phases = field(j, "phases", where);
  if (!phases.is_array()) fail("{}: 'phases' must be an array", where);
  for (size_t i = 0; i < phases.size(); ++i) {
    const auto& pj = phases[i];
    const std::string pw = fmt::format("{}: phases[{}]", where, i);
    PhaseMeasure ph;
    ph.phase = text(pj, "phase", pw);
    ph.batch = int32_t(integer(pj, "batch", pw, 1, INT32_MAX));
    ph.tokens = integer(pj, "tokens", pw, 0, INT64_MAX);
    ph.steps = integer(pj, "steps", pw, 0, INT64_MAX);
    ph.step_seconds = num(pj, "step_seconds", pw);
    ph.wall_seconds = num(pj, "wall_seconds", pw);
    const auto& ops = field(pj, "ops", pw);
    if (!ops.is_array()) fail("{}: 'ops' must be an array", pw);
    for (size_t k = 0; k < ops.size(); ++k) {
      const std::string ow = fmt::format("{}.ops[{}]", pw, k);
      OpMeasure op;
      op.name = text(ops[k], "name", ow);
      const std::string cls = text(ops[k], "class", ow);
      bool known = false;
      for (auto c : {ComputeClass::Fp32Fma, ComputeClass::Fp16Fma, ComputeClass::Bf16Dot, ComputeClass::Int8Vnni,
                     ComputeClass::None})
        if (compute_class_name(c) == cls) op.cls = c, known = true;
      if (!known) fail("{}: unknown compute class '{}'", ow, cls);
      op.flops = num(ops[k], "flops", ow);
      op.bytes = num(ops[k], "bytes", ow);
      op.seconds = num(ops[k], "seconds", ow);
      ph.ops.push_back(std::move(op));
    }
    r.phases.push_back(std::move(ph));
  }
  return r;
}

namespace {

std::string esc(std::string_view in) {
  std::string s;
  for (char c : in) {
    switch (c) {
      case '&': s += "&amp;"; break;
      case '<': s += "&lt;"; break;
      case '>': s += "&gt;"; break;
      case '"': s += "&quot;"; break;
      case '\'': s += "&#39;"; break;
      default: s += c;
    }
  }
  return s;
}

const char* class_color(ComputeClass c) {
  switch (c) {
    case ComputeClass::Fp32Fma: return "#1f77b4";
    case ComputeClass::Fp16Fma: return "#9467bd";
    case ComputeClass::Bf16Dot: return "#2ca02c";
    case ComputeClass::Int8Vnni: return "#d62728";
    case ComputeClass::None: break;
  }
  return "#7f7f7f";
}

// Decade labels a reader (and the render test) parses as plain numbers.
std::string decade_label(int d) {
  if (d >= 0 && d <= 5) return fmt::format("{:.0f}", std::pow(10.0, d));
  if (d < 0 && d >= -4) return fmt::format("{:.{}f}", std::pow(10.0, d), -d);
  return fmt::format("1e{}", d);
}

// A log-log frame: whole decades [lo, hi] on each axis, mapped onto the plot rectangle.
struct Frame {
  static constexpr double kW = 960, kH = 600, kLeft = 80, kRight = 190, kTop = 30, kBottom = 60;
  int xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  double px(double x) const { return kLeft + (std::log10(x) - xlo) / (xhi - xlo) * (kW - kLeft - kRight); }
  double py(double y) const { return kH - kBottom - (std::log10(y) - ylo) / (yhi - ylo) * (kH - kTop - kBottom); }
};

// One decade of room beyond the extremes, so no point or roof sits on the frame.
void fit(double lo, double hi, int& dlo, int& dhi) {
  dlo = int(std::ceil(std::log10(lo))) - 1;
  dhi = int(std::floor(std::log10(hi))) + 1;
}

bool plotted(const OpAnalysis& o) { return o.op->flops > 0 && o.op->bytes > 0 && o.op->seconds > 0; }

std::string svg(const RooflineRun& run, const RooflineAnalysis& a) {
  const double bw = a.dram_gbs;
  double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
  auto see_x = [&](double x) { xmin = std::min(xmin, x), xmax = std::max(xmax, x); };
  auto see_y = [&](double y) { ymin = std::min(ymin, y), ymax = std::max(ymax, y); };
  double max_ridge = 0;
  for (auto c : kClasses)
    if (const double pk = class_peak(run.peaks, c); pk > 0) see_x(pk / bw), see_y(pk), max_ridge = std::max(max_ridge, pk / bw);
  for (const auto& p : a.phases)
    for (const auto& o : p.ops)
      if (plotted(o)) see_x(o.intensity), see_y(o.gflops);
  if (xmax == 0) see_x(1);
  Frame f;
  fit(xmin, xmax, f.xlo, f.xhi);
  // The DRAM roof starts at the left edge: its lowest point must be in the frame too.
  see_y(bw * std::pow(10.0, f.xlo));
  if (max_ridge == 0) see_y(bw * std::pow(10.0, f.xhi));
  fit(ymin, ymax, f.ylo, f.yhi);
  const double x0 = Frame::kLeft, x1 = Frame::kW - Frame::kRight, y0 = Frame::kTop, y1 = Frame::kH - Frame::kBottom;

  std::string s = fmt::format(
      "<svg id=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "role=\"img\" aria-label=\"roofline plot\">\n"
      "<rect class=\"frame\" x=\"{2}\" y=\"{3}\" width=\"{4}\" height=\"{5}\" fill=\"none\" stroke=\"#333\"/>\n",
      Frame::kW, Frame::kH, x0, y0, x1 - x0, y1 - y0);
  for (int d = f.xlo; d <= f.xhi; ++d) {
    const double x = f.px(std::pow(10.0, d));
    s += fmt::format(
        "<g class=\"tick x\"><line class=\"grid\" x1=\"{0:.3f}\" y1=\"{1}\" x2=\"{0:.3f}\" y2=\"{2}\"/>"
        "<text x=\"{0:.3f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text></g>\n",
        x, y0, y1, y1 + 18, decade_label(d));
  }
  for (int d = f.ylo; d <= f.yhi; ++d) {
    const double y = f.py(std::pow(10.0, d));
    s += fmt::format(
        "<g class=\"tick y\"><line class=\"grid\" x1=\"{0}\" y1=\"{2:.3f}\" x2=\"{1}\" y2=\"{2:.3f}\"/>"
        "<text x=\"{3}\" y=\"{2:.3f}\" dy=\"0.35em\" text-anchor=\"end\">{4}</text></g>\n",
        x0, x1, y, x0 - 6, decade_label(d));
  }
  s += fmt::format(
      "<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">arithmetic intensity (FLOP/byte)</text>\n"
      "<text class=\"axis-label\" transform=\"translate(22 {}) rotate(-90)\" text-anchor=\"middle\">GFLOP/s</text>\n",
      (x0 + x1) / 2, Frame::kH - 16, (y0 + y1) / 2);
  // The DRAM roof y = bw * x, up to the highest compute roof (the right edge without one).
  const double dram_end = max_ridge > 0 ? max_ridge : std::pow(10.0, f.xhi);
  const double xs = std::pow(10.0, f.xlo);
  s += fmt::format(
      "<line class=\"roof dram\" data-gbs=\"{}\" x1=\"{:.3f}\" y1=\"{:.3f}\" x2=\"{:.3f}\" y2=\"{:.3f}\" "
      "stroke=\"#000\" stroke-width=\"2\"/>\n<text class=\"roof-label\" x=\"{:.3f}\" y=\"{:.3f}\" "
      "transform=\"rotate({:.3f} {:.3f} {:.3f})\">DRAM {} GB/s</text>\n",
      bw, f.px(xs), f.py(bw * xs), f.px(dram_end), f.py(bw * dram_end), f.px(xs) + 8, f.py(bw * xs) - 6,
      std::atan2(f.py(bw * dram_end) - f.py(bw * xs), f.px(dram_end) - f.px(xs)) * 180 / std::numbers::pi, f.px(xs) + 8,
      f.py(bw * xs) - 6, sig3(bw));
  for (auto c : kClasses) {
    const double pk = class_peak(run.peaks, c);
    if (pk <= 0) continue;
    const std::string name(compute_class_name(c));
    s += fmt::format(
        "<line class=\"roof compute\" data-class=\"{0}\" data-gflops=\"{1}\" x1=\"{2:.3f}\" y1=\"{3:.3f}\" "
        "x2=\"{4:.3f}\" y2=\"{3:.3f}\" stroke=\"{5}\" stroke-width=\"2\"/>\n"
        "<text class=\"roof-label\" x=\"{6:.3f}\" y=\"{3:.3f}\" dy=\"0.35em\" fill=\"{5}\">{0} {7} GFLOP/s</text>\n"
        "<circle class=\"ridge\" data-class=\"{0}\" data-ridge=\"{8}\" cx=\"{2:.3f}\" cy=\"{3:.3f}\" r=\"5\" "
        "fill=\"#fff\" stroke=\"{5}\" stroke-width=\"2\"><title>{0} ridge point: {9} FLOP/byte</title></circle>\n",
        name, pk, f.px(pk / bw), f.py(pk), x1, class_color(c), x1 + 6, sig3(pk), pk / bw, sig3(pk / bw));
  }
  s += "<g class=\"points\">\n";
  for (const auto& p : a.phases) {
    const PhaseMeasure& m = *p.phase;
    const bool prefill = m.phase == "prefill";
    for (const auto& o : p.ops) {
      if (!plotted(o)) continue;
      const char* col = class_color(o.op->cls);
      // Prefill filled, decode as rings; larger batches slightly larger.
      const double r = 4 + std::min(4.0, std::log2(double(std::max(1, m.batch))) * 0.5);
      s += fmt::format(
          "<circle class=\"op\" data-op=\"{}\" data-phase=\"{}\" data-batch=\"{}\" data-class=\"{}\" "
          "data-intensity=\"{}\" data-gflops=\"{}\" cx=\"{:.3f}\" cy=\"{:.3f}\" r=\"{:.1f}\" fill=\"{}\" "
          "fill-opacity=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"><title>{} b{} {} ({}): {} FLOP/B, {} GFLOP/s, {} GB/s; "
          "{}-bound at {:.1f}% of {}; {:.3f} ms ({:.1f}% of the phase)</title></circle>\n",
          esc(o.op->name), esc(m.phase), m.batch, compute_class_name(o.op->cls), o.intensity, o.gflops,
          f.px(o.intensity), f.py(o.gflops), r, col, prefill ? "0.85" : "0.15", prefill ? "#222" : col, esc(m.phase),
          m.batch, esc(o.op->name), compute_class_name(o.op->cls), sig3(o.intensity), sig3(o.gflops), sig3(o.gbs),
          o.above_ceiling ? "above-ceiling" : o.bound == Bound::Memory ? "memory" : "compute", o.bound_pct,
          o.bound == Bound::Memory ? (o.from_cache ? "cache bandwidth" : "DRAM bandwidth") : "its compute roof",
          ms(o.op->seconds), 100 * o.share);
    }
  }
  s += "</g>\n";
  // Legend: the classes on the page by color, phases by marker.
  bool shown[5] = {};
  for (auto c : kClasses) shown[size_t(c)] = class_peak(run.peaks, c) > 0;
  for (const auto& p : a.phases)
    for (const auto& o : p.ops) shown[size_t(o.op->cls)] |= plotted(o);
  double ly = y0 + 150;
  const double lx = x1 + 10;
  for (auto c : {ComputeClass::Fp32Fma, ComputeClass::Fp16Fma, ComputeClass::Bf16Dot, ComputeClass::Int8Vnni,
                 ComputeClass::None}) {
    if (!shown[size_t(c)]) continue;
    s += fmt::format("<g class=\"legend\"><rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>"
                     "<text x=\"{}\" y=\"{}\">{}</text></g>\n",
                     lx, ly, class_color(c), lx + 16, ly + 9, compute_class_name(c));
    ly += 18;
  }
  s += fmt::format(
      "<g class=\"legend\"><circle cx=\"{0}\" cy=\"{1}\" r=\"5\" fill=\"#777\" stroke=\"#222\"/>"
      "<text x=\"{2}\" y=\"{3}\">prefill</text><circle cx=\"{0}\" cy=\"{4}\" r=\"5\" fill=\"#777\" "
      "fill-opacity=\"0.15\" stroke=\"#777\"/><text x=\"{2}\" y=\"{5}\">decode</text>"
      "<text x=\"{6}\" y=\"{7}\">size grows with batch</text></g>\n</svg>\n",
      lx + 5, ly + 8, lx + 16, ly + 12, ly + 26, ly + 30, lx, ly + 50);
  return s;
}

}  // namespace

std::string render_html(const RooflineRun& run, const RooflineAnalysis& a) {
  std::string s = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>ridge roofline: {}</title>\n"
      "<style>\nbody{{font-family:sans-serif;margin:1.5em;color:#222}} svg text{{font-size:12px}}\n"
      "svg .grid{{stroke:#ddd;stroke-width:1}} svg .axis-label{{font-size:13px}}\n"
      "table{{border-collapse:collapse;margin:0.5em 0}} td,th{{padding:2px 8px;border-bottom:1px solid #ddd}}\n"
      "td{{text-align:right}} td:first-child,th:first-child{{text-align:left}} .verdict{{max-width:70em}}\n"
      "</style>\n</head>\n<body>\n<h1>Roofline: {} ({}), {} threads, prompt {}</h1>\n",
      esc(run.model), esc(run.model), esc(run.weight_type), run.threads, run.prompt);
  s += fmt::format("<p class=\"ceilings\">Ceilings ({}, {}): DRAM read {} GB/s", esc(run.peaks.cpu), esc(run.peaks.isa),
                   sig3(a.dram_gbs));
  for (auto c : kClasses)
    if (const double pk = class_peak(run.peaks, c); pk > 0)
      s += fmt::format("; {} {} GFLOP/s (ridge {} FLOP/B)", compute_class_name(c), sig3(pk), sig3(pk / a.dram_gbs));
  s += ".</p>\n" + svg(run, a);
  std::string skipped;
  for (const auto& p : a.phases)
    for (const auto& o : p.ops)
      if (!plotted(o))
        skipped += fmt::format("{}{} b{} {} ({})", skipped.empty() ? "" : ", ", esc(p.phase->phase), p.phase->batch,
                               esc(o.op->name),
                               o.op->flops <= 0 ? "0 FLOP" : o.op->bytes <= 0 ? "0 bytes" : "not timed");
  if (!skipped.empty())
    s += "<p class=\"note\">Not plotted (no place on a log axis; listed in the tables): " + skipped + ".</p>\n";
  static const char* kHead[] = {"op", "class", "time ms", "share", "GFLOP/s", "GB/s", "FLOP/B", "bound", "% of bound", "pred ms"};
  for (const auto& p : a.phases) {
    const PhaseMeasure& m = *p.phase;
    s += fmt::format("<h2>{} b{}</h2>\n<p>{} tokens/step, {} steps; step {} ms, wall {} ms; predicted {:.3f} ms vs "
                     "measured {:.3f} ms (ops timed: {:.3f} ms).</p>\n<table class=\"ops\"><tr>",
                     esc(m.phase), m.batch, m.tokens, m.steps, sig3(ms(m.step_seconds)), sig3(ms(m.wall_seconds)),
                     ms(p.predicted_seconds), ms(m.step_seconds), ms(p.op_seconds));
    for (const char* h : kHead) s += fmt::format("<th>{}</th>", h);
    s += "</tr>\n";
    const auto rows = table_rows(p);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i % std::size(kHead) == 0) s += "<tr>";
      s += "<td>" + esc(rows[i]) + "</td>";
      if (i % std::size(kHead) == std::size(kHead) - 1) s += "</tr>\n";
    }
    s += fmt::format("</table>\n<p class=\"verdict\" data-bottleneck=\"{}\">{}</p>\n", p.bottleneck, esc(p.verdict));
  }
  return s + "</body>\n</html>\n";
}

}  // namespace ridge::tools
