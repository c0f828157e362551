// The roofline report on hand-made measurements with round numbers: per-op bounds,
// percentages, predictions and ridge points exactly; each bottleneck verdict from a case
// built to trigger it, citing its numbers; the JSON round trip; the HTML page rendered in
// headless Chromium with its points read back through the axes (tests/roofline/check_svg.mjs).
// `ridge bench compare`'s statistics are here too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/bench_compare.h"
#include "tools/roofline_report.h"
#include "test_util.h"

namespace ridge::tools {
namespace {

using CC = perf::ComputeClass;
using perf::ComputeClass;

// DRAM 20 GB/s at 2 threads (10 at 1, 25 at most); fp32 FMA 200 GFLOP/s (ridge 10 FLOP/B),
// int8 VNNI 800 GOP/s (ridge 40); no bf16 or fp16.
Peaks round_peaks() {
  Peaks p;
  p.cpu = "Test CPU";
  p.cores = 2;
  p.threads = 2;
  p.isa = "avx512";
  p.l1d = 49152, p.l2 = 2 << 20, p.l3 = 32 << 20;
  p.dram_read_gbs = {{1, 10.0}, {2, 20.0}};
  p.dram_read_gbs_max = 25.0;
  p.dram_bytes = int64_t(1) << 30;
  p.fp32_fma = ComputePeak{100.0, 200.0};
  p.int8_vnni = ComputePeak{400.0, 800.0};
  p.seconds = 1.5;
  return p;
}

RooflineRun base_run() {
  RooflineRun r;
  r.model = "test.gguf";
  r.weight_type = "q8_0";
  r.threads = 2;
  r.prompt = 64;
  r.peaks = round_peaks();
  return r;
}

PhaseMeasure phase(std::string name, int32_t batch, double step, double wall, std::vector<OpMeasure> ops) {
  PhaseMeasure p;
  p.phase = std::move(name);
  p.batch = batch;
  p.tokens = p.phase == "prefill" ? int64_t(batch) * 64 : batch;
  p.steps = 10;
  p.step_seconds = step;
  p.wall_seconds = wall;
  p.ops = std::move(ops);
  return p;
}

// decode b1, memory-bound: a weight-streaming matmul dominates.
PhaseMeasure memory_phase() {
  return phase("decode", 1, 0.2, 0.2,
               {{"ffn_down", CC::Int8Vnni, 2e9, 1e9, 0.1},       // 2 FLOP/B < 40: memory, 10 of 20 GB/s
                {"attention", CC::Fp32Fma, 4e9, 1e8, 0.05},      // 40 FLOP/B > 10: compute, 80 of 200
                {"token_embd", CC::None, 0, 2e8, 0.01},          // no compute roof: memory, 20 of 20 GB/s
                {"sampling", CC::None, 0, 2e6, 0}});             // not timed
}

TEST(RooflineReport, AnalyzeRoundNumbers) {
  RooflineRun run = base_run();
  run.phases.push_back(memory_phase());
  const RooflineAnalysis a = analyze(run);
  EXPECT_DOUBLE_EQ(a.dram_gbs, 20.0);
  ASSERT_EQ(a.phases.size(), 1u);
  const PhaseAnalysis& p = a.phases[0];
  ASSERT_EQ(p.ops.size(), 4u);

  const OpAnalysis& mm = p.ops[0];
  EXPECT_DOUBLE_EQ(mm.gflops, 20.0);
  EXPECT_DOUBLE_EQ(mm.gbs, 10.0);
  EXPECT_DOUBLE_EQ(mm.intensity, 2.0);
  EXPECT_DOUBLE_EQ(mm.peak_gflops, 800.0);
  EXPECT_DOUBLE_EQ(mm.ridge, 40.0);
  EXPECT_EQ(mm.bound, Bound::Memory);
  EXPECT_DOUBLE_EQ(mm.bound_pct, 50.0);
  EXPECT_DOUBLE_EQ(mm.predicted_seconds, 0.05);  // max(2e9 / 800e9, 1e9 / 20e9)
  EXPECT_DOUBLE_EQ(mm.share, 0.1 / 0.16);

  const OpAnalysis& at = p.ops[1];
  EXPECT_DOUBLE_EQ(at.gflops, 80.0);
  EXPECT_DOUBLE_EQ(at.gbs, 2.0);
  EXPECT_DOUBLE_EQ(at.intensity, 40.0);
  EXPECT_DOUBLE_EQ(at.ridge, 10.0);
  EXPECT_EQ(at.bound, Bound::Compute);
  EXPECT_DOUBLE_EQ(at.bound_pct, 40.0);
  EXPECT_DOUBLE_EQ(at.predicted_seconds, 0.02);  // max(4e9 / 200e9, 1e8 / 20e9)

  const OpAnalysis& emb = p.ops[2];
  EXPECT_DOUBLE_EQ(emb.gflops, 0.0);
  EXPECT_DOUBLE_EQ(emb.gbs, 20.0);
  EXPECT_DOUBLE_EQ(emb.peak_gflops, 0.0);
  EXPECT_DOUBLE_EQ(emb.ridge, 0.0);
  EXPECT_EQ(emb.bound, Bound::Memory);
  EXPECT_DOUBLE_EQ(emb.bound_pct, 100.0);
  EXPECT_DOUBLE_EQ(emb.predicted_seconds, 0.01);

  const OpAnalysis& smp = p.ops[3];  // untimed: no rates, no percentage, still a prediction
  EXPECT_DOUBLE_EQ(smp.gbs, 0.0);
  EXPECT_DOUBLE_EQ(smp.bound_pct, 0.0);
  EXPECT_DOUBLE_EQ(smp.share, 0.0);
  EXPECT_DOUBLE_EQ(smp.predicted_seconds, 1e-4);

  EXPECT_DOUBLE_EQ(p.flops, 6e9);
  EXPECT_DOUBLE_EQ(p.bytes, 1.302e9);
  EXPECT_DOUBLE_EQ(p.op_seconds, 0.16);
  EXPECT_NEAR(p.predicted_seconds, 0.0801, 1e-15);
}

// An op measured above its ceiling is a ceiling to re-measure: flagged, never printed as
// a percentage over 100, and named in a warning with where the ceilings came from.
TEST(RooflineReport, AboveTheCeilingIsFlaggedNotOver100) {
  RooflineRun run = base_run();
  run.peaks_origin = "peaks.json, measured 3 h 0 min ago";
  run.phases.push_back(phase("decode", 1, 0.2, 0.2,
                             {{"ffn_down", CC::Int8Vnni, 2e9, 2.6e9, 0.1},   // 26 GB/s of a 20 GB/s roof
                              {"ffn_up", CC::Int8Vnni, 2e9, 1e9, 0.1}}));   // 10 of 20: 50%
  const RooflineAnalysis a = analyze(run);
  EXPECT_TRUE(a.phases[0].ops[0].above_ceiling);
  EXPECT_FALSE(a.phases[0].ops[1].above_ceiling);
  const std::string t = render_text(run, a);
  EXPECT_EQ(t.find("130.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("above!"), std::string::npos) << t;
  EXPECT_NE(t.find("50.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("warning: 1 op measured above its ceiling (decode b1 ffn_down at 130%)"), std::string::npos) << t;
  EXPECT_NE(t.find("[peaks.json, measured 3 h 0 min ago]"), std::string::npos) << t;
  EXPECT_NE(t.find("above the measured DRAM bandwidth: re-measure the ceiling"), std::string::npos) << t;
  const RooflineRun back = run_from_json(render_json(run, a), "r.json");
  EXPECT_EQ(back.peaks_origin, run.peaks_origin);
}

// Ops on the step's own activations (a residual add here) are held to the cache read
// roof when the peaks have one: 30 GB/s is 150% of DRAM but 15% of a 200 GB/s cache.
TEST(RooflineReport, ActivationOpsUseTheCacheRoof) {
  RooflineRun run = base_run();
  run.phases.push_back(phase("prefill", 1, 0.2, 0.2,
                             {{"ffn_residual", CC::Fp32Fma, 1e8, 3e9, 0.1},
                              {"ffn_down", CC::Int8Vnni, 2e9, 1e9, 0.1}}));
  RooflineAnalysis a = analyze(run);
  EXPECT_TRUE(a.phases[0].ops[0].above_ceiling);  // no cache roof measured: DRAM applies
  run.peaks.cache_read_gbs = 200;
  a = analyze(run);
  const OpAnalysis& res = a.phases[0].ops[0];
  EXPECT_TRUE(res.from_cache);
  EXPECT_FALSE(res.above_ceiling);
  EXPECT_DOUBLE_EQ(res.bound_pct, 15.0);
  EXPECT_DOUBLE_EQ(res.predicted_seconds, 3e9 / 200e9);
  EXPECT_FALSE(a.phases[0].ops[1].from_cache);  // weights stream from DRAM
  EXPECT_DOUBLE_EQ(a.phases[0].ops[1].bound_pct, 50.0);
  const std::string t = render_text(run, a);
  EXPECT_NE(t.find("cache read 200 GB/s"), std::string::npos) << t;
  EXPECT_NE(t.find("cache"), std::string::npos) << t;
  EXPECT_EQ(t.find("warning"), std::string::npos) << t;
}

TEST(RooflineReport, DramRoofFallsBackToMax) {
  RooflineRun run = base_run();
  run.threads = 3;  // not measured at 3 threads
  run.phases.push_back(memory_phase());
  const RooflineAnalysis a = analyze(run);
  EXPECT_DOUBLE_EQ(a.dram_gbs, 25.0);
  EXPECT_DOUBLE_EQ(a.phases[0].ops[0].ridge, 32.0);
  EXPECT_DOUBLE_EQ(a.phases[0].ops[0].bound_pct, 40.0);
  run.peaks.dram_read_gbs.clear();
  run.peaks.dram_read_gbs_max = 0;
  EXPECT_THROW(analyze(run), Error);
}

TEST(RooflineReport, MemoryVerdict) {
  RooflineRun run = base_run();
  run.phases.push_back(memory_phase());
  const PhaseAnalysis p = analyze(run).phases[0];
  EXPECT_EQ(p.bottleneck, "memory");
  // 0.11 of 0.16 s in memory-bound ops; ffn_down 62.5% of the time at 50% of DRAM.
  EXPECT_NE(p.verdict.find("decode b1 is memory-bound"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("69% of the op time is in memory-bound ops"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("the int8_vnni ridge of 40.0 FLOP/B"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("ffn_down 62% of time (50% of DRAM bandwidth, 2.00 FLOP/B)"), std::string::npos)
      << p.verdict;
  EXPECT_NE(p.verdict.find("token_embd 6% of time (100% of DRAM bandwidth"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("measured 200 ms per step vs 80.1 ms predicted"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("Technique: fewer bytes per token"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("KV cache quantization"), std::string::npos) << p.verdict;
}

TEST(RooflineReport, ComputeVerdict) {
  RooflineRun run = base_run();
  // 400 FLOP/B > 40: compute-bound at 400 of 800 GOP/s; predicted max(0.5, 0.05) s.
  run.phases.push_back(phase("prefill", 4, 1.0, 1.0, {{"attn_qkv", CC::Int8Vnni, 400e9, 1e9, 0.9},
                                                       {"attn_norm", CC::None, 0, 1e8, 0.1}}));
  const PhaseAnalysis p = analyze(run).phases[0];
  EXPECT_EQ(p.ops[0].bound, Bound::Compute);
  EXPECT_NEAR(p.ops[0].bound_pct, 100 * (400 / 0.9) / 800, 1e-12);
  EXPECT_DOUBLE_EQ(p.ops[0].predicted_seconds, 0.5);
  EXPECT_EQ(p.bottleneck, "compute");
  EXPECT_NE(p.verdict.find("prefill b4 is compute-bound"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("90% of the op time is in compute-bound ops at 400 FLOP/B"), std::string::npos)
      << p.verdict;
  EXPECT_NE(p.verdict.find("above the int8_vnni ridge of 40.0 FLOP/B"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("running at 444 GFLOP/s = 56% of their compute roofs"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("attn_qkv 90% of time (56% of int8_vnni peak, 400 FLOP/B)"), std::string::npos)
      << p.verdict;
  EXPECT_NE(p.verdict.find("measured 1000 ms per step vs 505 ms predicted"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("Technique: more useful work per cycle - better GEMM tiling"), std::string::npos);
  EXPECT_NE(p.verdict.find("int8/fp8 compute"), std::string::npos);
}

TEST(RooflineReport, OverheadVerdict) {
  RooflineRun run = base_run();
  // Predicted 5.05 ms (a 100 MB matmul at 20 GB/s, plus 1 MB); measured 20 ms: 4x. The
  // norm runs at 5% of its roof (small), and 13 ms of the step is in no timed op.
  run.phases.push_back(phase("decode", 1, 0.020, 0.020, {{"attn_norm", CC::None, 1e6, 1e6, 0.001},
                                                          {"ffn_up", CC::Int8Vnni, 2e8, 1e8, 0.006}}));
  const PhaseAnalysis p = analyze(run).phases[0];
  EXPECT_DOUBLE_EQ(p.predicted_seconds, 0.00505);
  EXPECT_EQ(p.bottleneck, "overhead");
  EXPECT_NE(p.verdict.find("decode b1 is overhead-bound"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("measured 20.0 ms per step vs 5.05 ms predicted (4.0x the roofline)"), std::string::npos)
      << p.verdict;
  EXPECT_NE(p.verdict.find("70% of the step is in ops running under 10% of both ceilings (1.00 ms) or outside the "
                           "timed ops (13.0 ms)"),
            std::string::npos)
      << p.verdict;
  EXPECT_NE(p.verdict.find("attn_norm 14% of time (5% of DRAM bandwidth"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("Technique: fewer, larger ops"), std::string::npos) << p.verdict;

  // The same step, but with the time inside the ops near their roofs: not overhead.
  run.phases[0].step_seconds = run.phases[0].wall_seconds = 0.0072;
  EXPECT_EQ(analyze(run).phases[0].bottleneck, "memory");
}

TEST(RooflineReport, SchedulerVerdict) {
  RooflineRun run = base_run();
  PhaseMeasure ph = memory_phase();
  ph.batch = 8;
  ph.wall_seconds = 0.3;  // 100 ms idle per 200 ms step
  run.phases.push_back(ph);
  const PhaseAnalysis p = analyze(run).phases[0];
  EXPECT_EQ(p.bottleneck, "scheduler");
  EXPECT_NE(p.verdict.find("decode b8 is scheduler-bound: 300 ms of wall time per step vs 200 ms inside the step "
                           "(1.50x; 100 ms idle between steps, 33% of the wall time)"),
            std::string::npos)
      << p.verdict;
  EXPECT_NE(p.verdict.find("Inside the step it is memory-bound"), std::string::npos) << p.verdict;
  EXPECT_NE(p.verdict.find("continuous batching"), std::string::npos) << p.verdict;
  // Just under the threshold (1.2x): not the scheduler.
  run.phases[0].wall_seconds = 0.239;
  EXPECT_EQ(analyze(run).phases[0].bottleneck, "memory");
}

TEST(RooflineReport, TextTable) {
  RooflineRun run = base_run();
  run.phases.push_back(memory_phase());
  const std::string t = render_text(run, analyze(run));
  EXPECT_NE(t.find("DRAM read 20.0 GB/s; fp32_fma 200 GFLOP/s (ridge 10.0 FLOP/B)"), std::string::npos) << t;
  EXPECT_NE(t.find("int8_vnni 800 GFLOP/s (ridge 40.0 FLOP/B)"), std::string::npos) << t;
  EXPECT_NE(t.find("decode b1: 1 tokens/step, 10 steps; step 200 ms, wall 200 ms"), std::string::npos) << t;
  for (const char* h : {"op", "class", "time ms", "share", "GFLOP/s", "GB/s", "FLOP/B", "bound", "% of bound",
                        "pred ms"})
    EXPECT_NE(t.find(h), std::string::npos) << h;
  // ffn_down: 100 ms, 62.5%, 20 GFLOP/s, 10 GB/s, 2 FLOP/B, memory, 50%, 50 ms predicted.
  EXPECT_NE(t.find("ffn_down    int8_vnni  100.000  62.5%     20.0  10.0    2.00   memory       50.0%   50.000"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("attention    fp32_fma   50.000  31.2%     80.0  2.00    40.0  compute       40.0%   20.000"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("sampling         none        -      -        -     -       0   memory           -    0.100"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("predicted 80.100 ms vs measured 200.000 ms (ops timed: 160.000 ms)"), std::string::npos) << t;
  EXPECT_NE(t.find("decode b1 is memory-bound"), std::string::npos) << t;
}

RooflineRun mixed_run() {
  RooflineRun run = base_run();
  run.peaks.bf16_dot = ComputePeak{150.0, 300.0};
  run.phases.push_back(phase("prefill", 1, 0.5, 0.5,
                             {{"token_embd", CC::None, 0, 1e6, 0.001},
                              {"attn_qkv", CC::Int8Vnni, 200e9, 0.5e9, 0.3},
                              {"attention", CC::Fp32Fma, 20e9, 0.4e9, 0.15},
                              {"ffn_act", CC::None, 1e7, 1e8, 0.02},
                              {"output", CC::Bf16Dot, 30e9, 0.2e9, 0.04}}));
  run.phases.push_back(memory_phase());
  PhaseMeasure d8 = memory_phase();
  d8.batch = 8;
  d8.ops[0].flops *= 8;
  d8.ops[0].seconds *= 1.3;
  run.phases.push_back(d8);
  return run;
}

// What shaped the run beside the model and threads: shown in the header, kept in the
// JSON, absent (empty) in a run written before it was recorded.
TEST(RooflineReport, RunConfigIsShownAndKept) {
  RooflineRun run = mixed_run();
  run.kv_dtype = "bf16";
  run.block_size = 32;
  run.max_num_batched_tokens = 1024;
  const RooflineAnalysis a = analyze(run);
  const std::string t = render_text(run, a);
  EXPECT_NE(t.find("KV bf16 in blocks of 32, 1024 tokens per step at most"), std::string::npos) << t;
  const RooflineRun back = run_from_json(render_json(run, a), "r.json");
  EXPECT_EQ(back.kv_dtype, "bf16");
  EXPECT_EQ(back.block_size, 32);
  EXPECT_EQ(back.max_num_batched_tokens, 1024);
  auto old = nlohmann::json::parse(render_json(run, a));
  old.erase("kv_dtype");
  old.erase("block_size");
  old.erase("max_num_batched_tokens");
  const RooflineRun older = run_from_json(old.dump(), "old.json");
  EXPECT_TRUE(older.kv_dtype.empty());
  EXPECT_EQ(older.block_size, 0);
}

TEST(RooflineReport, JsonRoundTrip) {
  const RooflineRun run = mixed_run();
  const RooflineAnalysis a = analyze(run);
  const std::string j = render_json(run, a);
  const RooflineRun back = run_from_json(j, "report.json");
  EXPECT_EQ(back.model, run.model);
  EXPECT_EQ(back.weight_type, run.weight_type);
  EXPECT_EQ(back.threads, run.threads);
  EXPECT_EQ(back.prompt, run.prompt);
  EXPECT_EQ(peaks_to_json(back.peaks), peaks_to_json(run.peaks));
  ASSERT_EQ(back.phases.size(), run.phases.size());
  for (size_t i = 0; i < run.phases.size(); ++i) {
    const auto &x = run.phases[i], &y = back.phases[i];
    EXPECT_EQ(y.phase, x.phase);
    EXPECT_EQ(y.batch, x.batch);
    EXPECT_EQ(y.tokens, x.tokens);
    EXPECT_EQ(y.steps, x.steps);
    EXPECT_EQ(y.step_seconds, x.step_seconds);
    EXPECT_EQ(y.wall_seconds, x.wall_seconds);
    ASSERT_EQ(y.ops.size(), x.ops.size());
    for (size_t k = 0; k < x.ops.size(); ++k) {
      EXPECT_EQ(y.ops[k].name, x.ops[k].name);
      EXPECT_EQ(y.ops[k].cls, x.ops[k].cls);
      EXPECT_EQ(y.ops[k].flops, x.ops[k].flops);
      EXPECT_EQ(y.ops[k].bytes, x.ops[k].bytes);
      EXPECT_EQ(y.ops[k].seconds, x.ops[k].seconds);
    }
  }
  // The analysis of the read-back run is the same report, byte for byte.
  EXPECT_EQ(render_json(back, analyze(back)), j);
  EXPECT_NE(j.find("\"bottleneck\": \"memory\""), std::string::npos);
  EXPECT_NE(j.find("\"bf16_dot\": {\n      \"gflops\": 300.0,\n      \"ridge\": 15.0"), std::string::npos) << j;
}

TEST(RooflineReport, JsonErrorsNameTheKey) {
  const RooflineRun run = mixed_run();
  const std::string j = render_json(run, analyze(run));
  auto msg = [](const std::string& text) {
    try {
      run_from_json(text, "r.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("{").find("r.json: not valid JSON"), std::string::npos);
  EXPECT_NE(msg("[]").find("expected a JSON object"), std::string::npos);
  std::string bad = j;
  bad.replace(bad.find("\"class\": \"int8_vnni\""), 20, "\"class\": \"int4_magic\"");
  EXPECT_NE(msg(bad).find("phases[0].ops[1]: unknown compute class 'int4_magic'"), std::string::npos) << msg(bad);
  bad = j;
  bad.replace(bad.find("\"step_seconds\""), 14, "\"step_secs\"");
  EXPECT_NE(msg(bad).find("phases[0]: missing key 'step_seconds'"), std::string::npos) << msg(bad);
  bad = j;
  bad.replace(bad.find("\"seconds\": 0.3"), 14, "\"seconds\": -1");
  EXPECT_NE(msg(bad).find("key 'seconds' must be a finite number >= 0"), std::string::npos) << msg(bad);
}

TEST(RooflineReport, HtmlIsSelfContained) {
  const RooflineRun run = mixed_run();
  const std::string h = render_html(run, analyze(run));
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org/2000/svg"));  // the SVG namespace only
  EXPECT_EQ(h.find("https://"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  for (const char* bad : {"\"nan", "nan\"", "\"inf", "inf\"", "\"-"})  // no NaN, infinity, negative coordinate
    EXPECT_EQ(h.find(bad), std::string::npos) << bad;
  EXPECT_NE(h.find("data-op=\"attn_qkv\" data-phase=\"prefill\" data-batch=\"1\""), std::string::npos);
  EXPECT_NE(h.find("Not plotted (no place on a log axis; listed in the tables): prefill b1 token_embd (0 FLOP)"),
            std::string::npos);
  EXPECT_NE(h.find("decode b1 sampling (0 FLOP)"), std::string::npos);

  // Nothing to plot, no compute roof: still a frame, the DRAM roof, no NaN.
  RooflineRun empty = base_run();
  empty.peaks.fp32_fma.reset();
  empty.peaks.int8_vnni.reset();
  empty.phases.push_back(phase("decode", 1, 0, 0, {}));
  const RooflineAnalysis ea = analyze(empty);
  EXPECT_EQ(ea.phases[0].bottleneck, "unknown");
  const std::string eh = render_html(empty, ea);
  EXPECT_NE(eh.find("class=\"roof dram\""), std::string::npos);
  EXPECT_EQ(eh.find("class=\"roof compute\""), std::string::npos);
  for (const char* bad : {"\"nan", "nan\"", "\"inf", "inf\"", "\"-"}) EXPECT_EQ(eh.find(bad), std::string::npos) << bad;
}

std::string temp_dir() {
  const auto d = std::filesystem::path(::testing::TempDir()) / ("ridge_roofline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

// Rendered by a real browser; the points read back through the rendered axes.
TEST(RooflineHtml, RendersInChromium) {
  const char* env = std::getenv("CHROMIUM");
  const std::string chromium = env ? env : "/usr/bin/chromium";
  std::string missing;
  if (!std::filesystem::exists(chromium)) missing = chromium;
  else if (std::system("command -v node >/dev/null 2>&1") != 0) missing = "node";
  if (!missing.empty()) {
    if (test::under_ci()) FAIL() << "missing " << missing << " (required under CI=true)";
    GTEST_SKIP() << "SKIP: " << missing << " not found; the roofline page was not rendered";
  }
  const RooflineRun run = mixed_run();
  const RooflineAnalysis a = analyze(run);
  const std::string dir = temp_dir();
  const std::string html = dir + "/report.html", json = dir + "/report.json";
  std::ofstream(html) << render_html(run, a);
  std::ofstream(json) << render_json(run, a);
  const std::string cmd = "node '" RIDGE_SOURCE_DIR "/tests/roofline/check_svg.mjs' '" + html + "' '" + json +
                          "' --chromium '" + chromium + "' 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

// ---- ridge bench compare: the statistics.

TEST(BenchCompare, Direction) {
  EXPECT_EQ(metric_direction("output_tok_per_s"), Better::Higher);
  EXPECT_EQ(metric_direction("request_throughput"), Better::Higher);
  EXPECT_EQ(metric_direction("request_goodput"), Better::Higher);
  EXPECT_EQ(metric_direction("decode_b1.tok_per_s"), Better::Higher);
  EXPECT_EQ(metric_direction("median_ttft_ms"), Better::Lower);
  EXPECT_EQ(metric_direction("elapsed_s"), Better::Lower);
  EXPECT_EQ(metric_direction("duration"), Better::Lower);
  EXPECT_EQ(metric_direction("decode_b1.ffn_down_ms"), Better::Lower);
  EXPECT_EQ(metric_direction("std_ttft_ms"), Better::Unknown);  // a spread, not a speed
  EXPECT_EQ(metric_direction("timeout_s"), Better::Unknown);    // a setting
  EXPECT_EQ(metric_direction("num_prompts"), Better::Unknown);
}

TEST(BenchCompare, Median) {
  EXPECT_EQ(median({3}), 3);
  EXPECT_EQ(median({5, 1, 3}), 3);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_THROW(median({}), Error);
}

TEST(BenchCompare, BandAndVerdict) {
  // Throughput 100 +- 2 -> 120 +- 3: band [117/102, 123/98], all above 1.
  auto m = compare_metric("output_tok_per_s", Better::Higher, {98, 100, 102}, {117, 120, 123});
  EXPECT_DOUBLE_EQ(m.median_a, 100);
  EXPECT_DOUBLE_EQ(m.median_b, 120);
  EXPECT_DOUBLE_EQ(m.ratio, 1.2);
  EXPECT_DOUBLE_EQ(m.speedup, 1.2);
  EXPECT_TRUE(m.has_band);
  EXPECT_DOUBLE_EQ(m.band_lo, 117.0 / 102);
  EXPECT_DOUBLE_EQ(m.band_hi, 123.0 / 98);
  EXPECT_EQ(m.verdict, "faster");
  // A latency that went down 20%: faster, speedup 1.25.
  m = compare_metric("median_tpot_ms", Better::Lower, {10, 10.5, 9.5}, {8, 8.2, 7.8});
  EXPECT_DOUBLE_EQ(m.ratio, 0.8);
  EXPECT_DOUBLE_EQ(m.speedup, 1.25);
  EXPECT_EQ(m.verdict, "faster");
  m = compare_metric("median_tpot_ms", Better::Lower, {8, 8.2, 7.8}, {10, 10.5, 9.5});
  EXPECT_EQ(m.verdict, "slower");
  // Overlapping runs: the medians differ by 3%, the band holds 1.
  m = compare_metric("output_tok_per_s", Better::Higher, {95, 100, 105}, {99, 103, 108});
  EXPECT_DOUBLE_EQ(m.ratio, 1.03);
  EXPECT_DOUBLE_EQ(m.band_lo, 99.0 / 105);
  EXPECT_EQ(m.verdict, "within noise");
  // One run each: the ratio, no band.
  m = compare_metric("elapsed_s", Better::Lower, {2.0}, {1.0});
  EXPECT_FALSE(m.has_band);
  EXPECT_DOUBLE_EQ(m.ratio, 0.5);
  EXPECT_DOUBLE_EQ(m.speedup, 2.0);
  EXPECT_EQ(m.verdict, "single run: no noise band");
  // One side repeated is enough for a band.
  m = compare_metric("elapsed_s", Better::Lower, {2.0}, {1.0, 1.1});
  EXPECT_TRUE(m.has_band);
  EXPECT_DOUBLE_EQ(m.band_hi, 0.55);
  EXPECT_EQ(m.verdict, "faster");
  m = compare_metric("mean_batch", Better::Unknown, {2, 2.1}, {3, 3.1});
  EXPECT_EQ(m.verdict, "higher");
  EXPECT_THROW(compare_metric("x", Better::Higher, {0}, {1}), Error);
  EXPECT_THROW(compare_metric("x", Better::Higher, {}, {1}), Error);
}

TEST(BenchCompare, ParsesEveryResultKind) {
  // bench throughput: one object per line, as `--json >> file` appends them.
  const auto t = parse_bench_runs(
      "{\"model\":\"m.gguf\",\"num_prompts\":8,\"elapsed_s\":2.0,\"output_tok_per_s\":100.0,\"prefix_cache\":true}\n"
      "{\"model\":\"m.gguf\",\"num_prompts\":8,\"elapsed_s\":2.2,\"output_tok_per_s\":90.0,\"prefix_cache\":true}\n",
      "t.json");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], (BenchRun{{"num_prompts", 8}, {"elapsed_s", 2.0}, {"output_tok_per_s", 100.0}}));
  // An array of serve results.
  const auto s = parse_bench_runs("[{\"median_ttft_ms\": 12.5, \"request_rate\": \"inf\"}, {\"median_ttft_ms\": 13}]",
                                  "s.json");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1], (BenchRun{{"median_ttft_ms", 13}}));
  // A roofline report: the measured figures per phase and op.
  const RooflineRun run = mixed_run();
  const auto r = parse_bench_runs(render_json(run, analyze(run)), "r.json");
  ASSERT_EQ(r.size(), 1u);
  auto has = [&](const std::string& k, double v) {
    for (const auto& [name, x] : r[0])
      if (name == k) return std::abs(x - v) < 1e-9 * std::max(1.0, std::abs(v));
    return false;
  };
  EXPECT_TRUE(has("decode_b1.step_ms", 200));
  EXPECT_TRUE(has("decode_b1.tok_per_s", 5));
  EXPECT_TRUE(has("decode_b8.ffn_down_ms", 130));
  EXPECT_TRUE(has("prefill_b1.attn_qkv_ms", 300));
  EXPECT_THROW(parse_bench_runs("not json", "x.json"), Error);
  EXPECT_THROW(parse_bench_runs("[]", "x.json"), Error);
  EXPECT_THROW(parse_bench_runs("{\"model\": \"m\"}", "x.json"), Error);
}

TEST(BenchCompare, CompareRuns) {
  const auto a = parse_bench_runs(
      "[{\"num_prompts\":8,\"elapsed_s\":2.0,\"output_tok_per_s\":100,\"prefill_tok_per_s\":0},"
      " {\"num_prompts\":8,\"elapsed_s\":2.1,\"output_tok_per_s\":98,\"prefill_tok_per_s\":0}]",
      "a.json");
  const auto b = parse_bench_runs("{\"num_prompts\":8,\"elapsed_s\":1.0,\"output_tok_per_s\":200,\"prefill_tok_per_s\":0}",
                                  "b.json");
  // Defaults: timings and throughputs with values > 0 (num_prompts has no better side).
  const auto ms = compare_runs(a, b, {});
  ASSERT_EQ(ms.size(), 2u);
  EXPECT_EQ(ms[0].name, "elapsed_s");
  EXPECT_DOUBLE_EQ(ms[0].median_a, 2.05);
  EXPECT_DOUBLE_EQ(ms[0].band_lo, 1.0 / 2.1);
  EXPECT_EQ(ms[0].verdict, "faster");
  EXPECT_EQ(ms[1].name, "output_tok_per_s");
  EXPECT_DOUBLE_EQ(ms[1].ratio, 200 / 99.0);
  const std::string table = compare_table(ms, "a.json", 2, "b.json", 1);
  EXPECT_NE(table.find("A: a.json (2 runs)\nB: b.json (1 run)"), std::string::npos) << table;
  EXPECT_NE(table.find("elapsed_s"), std::string::npos) << table;
  EXPECT_NE(table.find("0.488    2.050x     [0.476, 0.500]  faster"), std::string::npos) << table;
  const std::string j = compare_json(ms, "a.json", 2, "b.json", 1);
  EXPECT_NE(j.find("\"verdict\": \"faster\""), std::string::npos) << j;
  // Named metrics, any direction; one missing is an error naming it.
  EXPECT_EQ(compare_runs(a, b, {"num_prompts"})[0].verdict, "within noise");
  try {
    compare_runs(a, b, {"median_ttft_ms"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--metric median_ttft_ms: not in A"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare_runs(a, parse_bench_runs("{\"median_ttft_ms\": 3}", "s.json"), {}), Error);
}

}  // namespace
}  // namespace ridge::tools
