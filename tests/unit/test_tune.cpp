// ridge tune's parts: the request trace and workload formats (and their errors), the
// SLO, the metrics of a trial, the step model and its simulation, the diagnosis rules,
// a measured trial and a whole (short) tuning run on a random model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "engine/request_trace.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "perf/peaks.h"
#include "tools/tune_model.h"
#include "tools/tune_report.h"
#include "tools/tune_trial.h"
#include "tools/tuner.h"
#include "tools/workload.h"

namespace ridge::tools {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RequestTrace, ParsesSortsAndRoundTrips) {
  const std::string text =
      "# a comment\n"
      "{\"t\": 1.5, \"prompt\": [5, 6, 7], \"max_tokens\": 8, \"output_tokens\": 3}\n"
      "\n"
      "{\"t\": 0.25, \"prompt_len\": 40, \"max_tokens\": 16}\r\n";
  const auto r = parse_request_trace(text, "t.jsonl", 100);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].t, 0.25);
  EXPECT_EQ(r[0].prompt_len, 40);
  EXPECT_TRUE(r[0].prompt.empty());
  EXPECT_EQ(r[0].output_tokens, 16);  // absent: max_tokens
  EXPECT_EQ(r[1].prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r[1].output_tokens, 3);
  const auto back = parse_request_trace(request_trace_line(r[1]) + "\n" + request_trace_line(r[0]), "x", 100);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].prompt, r[1].prompt);
  EXPECT_EQ(back[0].prompt_len, 40);
  EXPECT_DOUBLE_EQ(back[1].t, 1.5);
}

TEST(RequestTrace, ErrorsNameTheFileAndLine) {
  auto err = [](const std::string& text) { return error_of([&] { parse_request_trace(text, "rec.jsonl", 100); }); };
  const std::string ok = "{\"t\": 0, \"prompt\": [1], \"max_tokens\": 2}\n";
  EXPECT_NE(err(ok + ok + "{\"t\": 1, \"prompt\": [1], \"max_tokens\": 2\n").find("rec.jsonl:3: not a JSON object"),
            std::string::npos);
  EXPECT_NE(err(ok + "{\"t\": 1, \"prompt\": [1], \"max_tokens\": 2, \"x\": 1}").find("rec.jsonl:2: unknown field \"x\""),
            std::string::npos);
  EXPECT_NE(err("{\"prompt\": [1], \"max_tokens\": 2}").find("rec.jsonl:1: \"t\""), std::string::npos);
  EXPECT_NE(err("{\"t\": -1, \"prompt\": [1], \"max_tokens\": 2}").find(">= 0"), std::string::npos);
  EXPECT_NE(err("{\"t\": 0, \"prompt\": [100], \"max_tokens\": 2}").find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(err("{\"t\": 0, \"prompt\": [1], \"max_tokens\": 2, \"output_tokens\": 3}").find("above"), std::string::npos);
  EXPECT_NE(err("{\"t\": 0, \"max_tokens\": 2}").find("\"prompt\" (token ids) or \"prompt_len\""), std::string::npos);
  EXPECT_NE(err("{\"t\": 0, \"prompt\": [1]}").find("\"max_tokens\" or \"output_tokens\""), std::string::npos);
  EXPECT_NE(err("{\"t\": 0, \"prompt\": [1, 2], \"prompt_len\": 3, \"max_tokens\": 1}").find("disagrees"), std::string::npos);
  EXPECT_NE(err("# nothing\n\n").find("no requests"), std::string::npos);
}

TEST(RequestTrace, RecorderWritesLinesAndSurvivesAFullDisk) {
  const std::string path = testing::TempDir() + "/rec.jsonl";
  {
    TraceRecorder rec(path, 100.0);
    rec.record(100.5, {1, 2, 3}, 10, 7);
    rec.record(100.25, {4}, 5, 5);
    EXPECT_EQ(rec.written(), 2);
  }
  const auto r = read_request_trace(path);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0].t, 0.25);
  EXPECT_EQ(r[1].output_tokens, 7);
  EXPECT_EQ(r[1].max_tokens, 10);
  EXPECT_THROW(TraceRecorder("/nonexistent-dir/x.jsonl", 0), Error);
  if (std::FILE* f = std::fopen("/dev/full", "w")) {
    std::fclose(f);
    TraceRecorder full("/dev/full", 0);
    full.record(1, std::vector<int32_t>(5000, 7), 10, 3);  // fails: a warning, no throw
    full.record(2, {1}, 10, 3);
    EXPECT_EQ(full.written(), 0);
  }
}

TEST(Workload, DescriptionsBuiltinsAndErrors) {
  const WorkloadSpec w = parse_workload_json(
      R"({"name": "x", "num_requests": 10, "rate": 2.5, "input_len": [4, 8], "output_len": 6, "prefix_len": 16,
          "num_prefixes": 2, "prefix_share": 0.5, "seed": 3, "max_concurrency": 4})",
      "w.json", 2048);
  EXPECT_EQ(w.num_requests, 10);
  EXPECT_EQ(w.rate, 2.5);
  EXPECT_EQ(w.input.min, 4);
  EXPECT_EQ(w.output.max, 6);
  EXPECT_EQ(w.max_concurrency, 4);
  EXPECT_FALSE(w.auto_rate());
  EXPECT_TRUE(parse_workload_json(R"({"rate": "auto"})", "w", 0).auto_rate());
  EXPECT_TRUE(std::isinf(parse_workload_json(R"({"rate": "inf"})", "w", 0).rate));
  auto err = [](const std::string& t) { return error_of([&] { parse_workload_json(t, "w.json", 512); }); };
  EXPECT_NE(err(R"({"rates": 1})").find("w.json: unknown field \"rates\""), std::string::npos);
  EXPECT_NE(err(R"({"input_len": [8, 4]})").find("\"input_len\""), std::string::npos);
  EXPECT_NE(err(R"({"input_len": "long"})").find("integer or [min, max]"), std::string::npos);
  EXPECT_NE(err(R"({"prefix_share": 0.5})").find("prefix_len"), std::string::npos);
  EXPECT_NE(err(R"({"input_len": 500, "output_len": 100})").find("beyond the model's context of 512"), std::string::npos);
  EXPECT_NE(err(R"({"rate": -1})").find("out of range"), std::string::npos);
  EXPECT_NE(err("[1, 2]").find("not a JSON object"), std::string::npos);
  for (const auto& b : builtin_workloads()) {
    const WorkloadSpec s = builtin_workload(b, 2048);
    EXPECT_LE(int64_t(s.prefix_share > 0 ? s.prefix_len : 0) + s.input.max + s.output.max, 2048) << b;
    EXPECT_LE(int64_t(builtin_workload(b, 128).input.max) + builtin_workload(b, 128).output.max, 128) << b;
  }
  EXPECT_TRUE(std::isinf(builtin_workload("burst", 2048).rate));
  EXPECT_EQ(builtin_workload("rag", 2048).prefix_share, 1.0);
  EXPECT_THROW(builtin_workload("nope", 2048), Error);
}

TEST(Workload, LoadTellsTracesFromDescriptions) {
  const std::string d = testing::TempDir() + "/wl.json", t = testing::TempDir() + "/wl.trace";
  std::ofstream(d) << "{\n  \"rate\": 3,\n  \"input_len\": 8\n}\n";
  std::ofstream(t) << "{\"t\": 0.5, \"prompt_len\": 12, \"max_tokens\": 4}\n{\"t\": 0.1, \"prompt\": [9, 9], \"max_tokens\": 2}\n";
  EXPECT_FALSE(load_workload(d, 2048, 1000).replay());
  const WorkloadSpec w = load_workload(t, 2048, 1000);
  ASSERT_TRUE(w.replay());
  EXPECT_EQ(w.trace.size(), 2u);
  const auto reqs = make_requests(w, 0, 0, 1000, 7);
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].prompt, (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(reqs[1].prompt.size(), 12u);  // drawn for a length-only request
  EXPECT_NE(error_of([&] { load_workload(t, 10, 1000); }).find("beyond the model's context of 10"), std::string::npos);
  EXPECT_NE(error_of([&] { load_workload(testing::TempDir() + "/none.json", 2048, 1000); }).find("none.json"),
            std::string::npos);
  EXPECT_EQ(load_workload("rag", 2048, 1000).name, "rag");
}

TEST(Workload, RequestsFollowTheDescription) {
  WorkloadSpec w;
  w.input = {5, 9};
  w.output = {2, 4};
  w.prefix_len = 32;
  w.num_prefixes = 2;
  w.prefix_share = 0.5;
  const auto r = make_requests(w, 2000, 10.0, 500, 1);
  ASSERT_EQ(r.size(), 2000u);
  int shared = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const int32_t own = r[i].prompt_len - (r[i].prompt_len > 9 ? 32 : 0);
    shared += r[i].prompt_len > 9;
    EXPECT_GE(own, 5);
    EXPECT_LE(own, 9);
    EXPECT_GE(r[i].output_tokens, 2);
    EXPECT_LE(r[i].output_tokens, 4);
    for (int32_t id : r[i].prompt) EXPECT_TRUE(id >= 3 && id < 500);
    if (i) {
      EXPECT_GE(r[i].t, r[i - 1].t);
    }
  }
  EXPECT_NEAR(shared / 2000.0, 0.5, 0.05);
  EXPECT_NEAR(r.back().t / 1999.0, 0.1, 0.01);  // mean gap 1 / rate
  const auto again = make_requests(w, 2000, 10.0, 500, 1);
  EXPECT_EQ(again[777].prompt, r[777].prompt);
  for (const auto& q : make_requests(w, 5, kInf, 500, 1)) EXPECT_EQ(q.t, 0);
}

TEST(Slo, ParsesLimitsAndRefusesNonsense) {
  const Slo s = parse_slo("ttft_p99=2s,tpot_p90=100ms");
  EXPECT_DOUBLE_EQ(s.ttft_s, 2);
  EXPECT_DOUBLE_EQ(s.tpot_s, 0.1);
  EXPECT_EQ(s.tpot_pct, 90);
  EXPECT_EQ(s.str(), "ttft_p99=2000ms,tpot_p90=100ms");
  const Slo t = parse_slo("tpot=0.05");
  EXPECT_TRUE(std::isinf(t.ttft_s));
  EXPECT_DOUBLE_EQ(t.tpot_s, 0.05);
  for (const char* bad : {"", "ttft", "ttft_p99=fast", "itl_p99=1s", "ttft_p0=1s", "ttft_p99=-1s", "ttft_p99=0"})
    EXPECT_THROW(parse_slo(bad), Error) << bad;
}

TEST(TrialMetrics, HandComputedExample) {
  Slo slo;
  slo.ttft_s = 1.0;
  slo.tpot_s = 0.1;
  TrialMetrics m;
  // Four requests: good; TTFT too slow; TPOT too slow; never finished.
  summarize(m, {0, 1, 2, 3}, {0.5, 1.5, 0.2, kInf}, {0.05, 0.05, 0.2, kInf}, {2, 4, 6, kInf}, {10, 20, 30, 5}, slo);
  EXPECT_EQ(m.requests, 4);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.good, 1);
  EXPECT_DOUBLE_EQ(m.duration_s, 6);
  EXPECT_DOUBLE_EQ(m.goodput, 1.0 / 6);
  EXPECT_DOUBLE_EQ(m.output_throughput, 65.0 / 6);
  EXPECT_DOUBLE_EQ(m.good_output_throughput, 10.0 / 6);
  EXPECT_DOUBLE_EQ(m.attainment, 0.25);
  EXPECT_DOUBLE_EQ(m.ttft_ok, 0.5);
  EXPECT_TRUE(std::isinf(m.ttft_slo_pct));  // the unfinished request tops the percentile
  EXPECT_DOUBLE_EQ(m.ttft_p50, 1.0);        // between 0.5 and 1.5
}

TEST(StepModel, FitRecoversALine) {
  StepModel sm;
  sm.prior_fixed_s = sm.fixed_s = 0.002;
  sm.prior_per_token_s = sm.per_token_s = 1e-5;
  std::vector<StepRecord> steps;
  for (int t : {1, 2, 4, 8, 64, 256, 512, 3, 100})
    for (int s : {1, 4, 16})
      for (double pairs : {0.0, 3000.0 * s, 40000.0 + 7 * t}) {
        StepRecord r;
        r.tokens = t + s, r.seqs = s, r.pairs = pairs;
        r.seconds = 0.010 + 0.0002 * r.tokens + 0.0005 * s + 2e-7 * pairs;
        steps.push_back(r);
      }
  fit_step_model(sm, steps);
  // The prior's pseudo-steps pull a little (2% here, where the prior is 5x off).
  EXPECT_NEAR(sm.fixed_s, 0.010, 2e-4);
  EXPECT_NEAR(sm.per_token_s, 0.0002, 4e-6);
  EXPECT_NEAR(sm.per_seq_s, 0.0005, 1e-5);
  EXPECT_NEAR(sm.per_pair_s, 2e-7, 4e-9);
  EXPECT_EQ(sm.fitted_steps, int64_t(steps.size()));
}

TEST(StepModel, SimulationOfAHandWorkedSchedule) {
  StepModel sm;
  sm.fixed_s = 0.010;  // every step 10 ms
  EngineConfig c;
  c.max_num_batched_tokens = 4;
  c.max_num_seqs = 2;
  c.prefix_cache = false;
  Slo slo;
  slo.ttft_s = 0.025;
  // One request: an 8-token prompt is 2 chunks (20 ms to the first token), then 2 more tokens.
  std::vector<TracedRequest> one(1);
  one[0].prompt.assign(8, 5), one[0].prompt_len = 8, one[0].output_tokens = one[0].max_tokens = 3;
  TrialMetrics m = simulate(sm, c, 1000, one, 0, slo);
  EXPECT_NEAR(m.ttft_p50, 0.020, 1e-12);
  EXPECT_NEAR(m.tpot_p50, 0.010, 1e-12);
  EXPECT_EQ(m.good, 1);
  // Attention's pairs: the chunks score 4 x (0 + 2.5) and 4 x (4 + 2.5), the decodes of
  // positions 8 and 9 score 9 and 10; an 8-bit cache reads half the bytes per pair.
  {
    StepModel pm;
    pm.per_pair_s = 0.001;
    TrialMetrics a = simulate(pm, c, 1000, one, 0, slo);
    EXPECT_NEAR(a.ttft_p50, 0.036, 1e-12);
    EXPECT_NEAR(a.tpot_p50, 0.0095, 1e-12);
    EngineConfig c8 = c;
    c8.kv_dtype = DType::I8;
    a = simulate(pm, c8, 1000, one, 0, slo);
    EXPECT_NEAR(a.ttft_p50, 0.018, 1e-12);
  }
  // Three at once with two seats: the third waits for a seat and misses the TTFT limit.
  std::vector<TracedRequest> three(3, one[0]);
  for (int i = 0; i < 3; ++i) three[size_t(i)].prompt.assign(2, 5 + i), three[size_t(i)].prompt_len = 2;
  m = simulate(sm, c, 1000, three, 0, slo);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.good, 2);
  // A shared prefix is computed once with the prefix cache on.
  c.prefix_cache = true;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  std::vector<TracedRequest> shared(2);
  for (auto& r : shared) r.prompt.assign(33, 7), r.prompt_len = 33, r.output_tokens = r.max_tokens = 1;
  shared[1].t = 1.0;
  sm.fixed_s = 0, sm.per_token_s = 0.001;
  m = simulate(sm, c, 1000, shared, 0, slo);
  // The first computes 33 tokens, the second one (32 cached): p50 and p99 between them.
  EXPECT_NEAR(m.ttft_p50, (0.033 + 0.001) / 2, 1e-9);
  EXPECT_NEAR(m.ttft_slo_pct, 0.001 + 0.99 * 0.032, 1e-9);
}

TEST(Tuner, DiagnosisReadsTheSymptoms) {
  StepModel sm;  // a floor of 10 ms, no per-row cost yet: budgets halve
  sm.prior_fixed_s = sm.fixed_s = 0.01;
  TuneOptions o;
  o.slo = parse_slo("ttft_p99=2s,tpot_p99=100ms");
  Knobs k;
  TrialMetrics m;
  m.tpot_slo_pct = 0.3;           // TPOT fails ...
  m.max_prompt_step_s = 1.2;      // ... because prompt chunks stall decodes
  m.ttft_slo_pct = 0.5;
  auto c = diagnose(m, k, o, sm);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0].knobs.max_num_batched_tokens, 1024);
  EXPECT_NE(c[0].reason.find("stalled decodes"), std::string::npos);
  EXPECT_EQ(c[0].change, "max-num-batched-tokens=1024");
  // With a per-row cost the budget is what keeps a prompt step under half the limit:
  // (50 ms - 10 ms) / 0.3 ms = 133 rows -> 128.
  sm.per_token_s = 0.0003;
  c = diagnose(m, k, o, sm);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0].knobs.max_num_batched_tokens, 128);
  sm.per_token_s = 0;
  m = TrialMetrics{};
  m.preemptions = 3;
  m.kv_peak = 0.97;
  c = diagnose(m, k, o, sm);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0].knobs.kv_dtype, DType::I8);
  EXPECT_EQ(c[0].change, "kv-cache-dtype=int8");
  // Preemptions with an 8-bit pool already: a larger pool where the memory allows it, swap
  // space instead of recomputing, fewer sequences.
  Knobs k8 = k;
  k8.kv_dtype = DType::I8;
  m.kv_pool_bytes = int64_t(100) << 20;
  o.mem_limit_bytes = int64_t(1) << 30;
  o.swap_limit_bytes = int64_t(64) << 20;
  c = diagnose(m, k8, o, sm);
  auto has = [&](auto pred) { return std::any_of(c.begin(), c.end(), [&](const Candidate& x) { return pred(x.knobs); }); };
  EXPECT_TRUE(has([](const Knobs& x) { return x.kv_cache_bytes == int64_t(200) << 20; }));
  EXPECT_TRUE(has([](const Knobs& x) {
    return x.preemption == PreemptionMode::Auto && x.swap_bytes == int64_t(64) << 20;  // the disk's limit
  }));
  EXPECT_TRUE(has([](const Knobs& x) { return x.max_num_seqs == 128; }));
  o.mem_limit_bytes = int64_t(150) << 20;  // no room for twice the pool
  o.swap_limit_bytes = 0;                  // nor any swap space
  c = diagnose(m, k8, o, sm);
  EXPECT_FALSE(has([](const Knobs& x) { return x.kv_cache_bytes > 0; }));
  EXPECT_FALSE(has([](const Knobs& x) { return x.preemption != PreemptionMode::Recompute; }));
  m = TrialMetrics{};
  m.tpot_slo_pct = 0.2;  // TPOT fails with long contexts: the KV stream is a third of a step's bytes
  m.kv_read_share = 0.35;
  c = diagnose(m, k, o, sm);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0].knobs.kv_dtype, DType::I8);
  EXPECT_NE(c[0].reason.find("KV stream"), std::string::npos);
  m = TrialMetrics{};
  m.ttft_slo_pct = 5;  // TTFT fails with every seat taken
  m.full_seqs_share = 0.5;
  m.kv_peak = 0.3;
  k.max_num_seqs = 16;
  c = diagnose(m, k, o, sm);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0].knobs.max_num_seqs, 32);
  m = TrialMetrics{};  // all fine, memory-bound decode of one sequence: try speculation
  m.mean_decode_batch = 1;
  m.decode_step_s = 0.012;
  c = diagnose(m, k, o, sm);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].knobs.spec, SpecMethod::Ngram);
  k.spec = SpecMethod::Ngram;
  m.spec_draft_tokens = 100, m.spec_accepted_tokens = 5;  // and turn it off when it fails
  c = diagnose(m, k, o, sm);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].knobs.spec, SpecMethod::None);
}

TEST(Tuner, ObjectiveRanksAnUnreachableSloByCloseness) {
  TrialMetrics a, b;
  a.ttft_slo_pct = 3, a.tpot_slo_pct = 0.1;
  b.ttft_slo_pct = 5, b.tpot_slo_pct = 0.1;
  EXPECT_GT(objective_value(a, Objective::Goodput, 2, 2, 1, 1), objective_value(b, Objective::Goodput, 2, 2, 1, 1));
  TrialMetrics c;
  c.good = 1, c.goodput = 0.01;
  EXPECT_GT(objective_value(c, Objective::Goodput, 2, 2, 1, 1), objective_value(a, Objective::Goodput, 2, 2, 1, 1));
  // A trial cut off has infinite percentiles: still finite, and below one that finished.
  TrialMetrics cut;
  cut.ttft_slo_pct = kInf;
  const double v = objective_value(cut, Objective::Goodput, 2, 2, 1, 1);
  EXPECT_TRUE(std::isfinite(v));
  EXPECT_LT(v, objective_value(b, Objective::Goodput, 2, 2, 1, 1));
  // The limits weigh the percentiles: TPOT at 3x its limit is further than TTFT at 2x.
  TrialMetrics t1, t2;
  t1.ttft_slo_pct = 2.0, t1.tpot_slo_pct = 0.05;  // 2x, 0.5x
  t2.ttft_slo_pct = 0.5, t2.tpot_slo_pct = 0.3;   // 0.5x, 3x
  EXPECT_GT(objective_value(t1, Objective::Goodput, 2, 2, 1, 0.1), objective_value(t2, Objective::Goodput, 2, 2, 1, 0.1));
  c.good_output_throughput = 100;
  EXPECT_DOUBLE_EQ(objective_value(c, Objective::Cost, 1, 2), 100);
  EXPECT_DOUBLE_EQ(objective_value(c, Objective::Cost, 0, 2), 50);
  EXPECT_THROW(objective_from_name("speed"), Error);
}

TEST(Tuner, KnobFlagsAreWhatServeReads) {
  Knobs d, k;
  k.max_num_seqs = 32;
  k.kv_dtype = DType::I8;
  k.prefix_cache = false;
  k.spec = SpecMethod::Suffix;
  k.spec_tokens = 6;
  k.kv_cache_bytes = int64_t(3) << 29;
  k.preemption = PreemptionMode::Auto;
  k.swap_bytes = int64_t(1) << 30;
  const auto f = k.flags(d);
  std::string s;
  for (const auto& [n, v] : f) s += n + "=" + v + ";";
  EXPECT_EQ(s, "max-num-seqs=32;kv-cache-dtype=int8;no-prefix-cache=;speculative-method=suffix;num-speculative-tokens=6;"
               "kv-cache-memory=1536M;preemption-mode=auto;swap-space=1024M;");
  EXPECT_TRUE(d.flags(d).empty());
  // What serve reads back is what the knobs were.
  EngineConfig c;
  k.apply(c);
  EXPECT_EQ(Knobs::of(c), k);
}

struct TinyModel {
  std::string path = testing::TempDir() + "/tune-tiny.gguf";
  std::unique_ptr<Model> m;
  TinyModel() {
    make_model({"llama", "tiny", DType::Q8_0, 5, "", 0, 2}, path);
    m = Model::load(path);
  }
};

TEST(Tuner, ATrialRunsEveryRequestAndCutsAtItsDeadline) {
  TinyModel t;
  EngineConfig c;
  c.threads = 2;
  c.max_num_seqs = 4;
  c.kv_cache_tokens = 4096;
  c.prefix_cache = false;  // every prompt token computed: the pairs below are exact
  WorkloadSpec w;
  w.input = {4, 20};
  w.output = {3, 12};
  const auto reqs = make_requests(w, 24, 400.0, t.m->hparams().n_vocab, 1);
  Slo slo;
  const TrialResult r = run_trial(*t.m, nullptr, c, reqs, 0, slo, 60);
  EXPECT_FALSE(r.m.truncated);
  EXPECT_EQ(r.m.completed, 24);
  EXPECT_EQ(r.m.good, 24);  // no limits
  int64_t out = 0;
  for (const auto& q : reqs) out += q.output_tokens;
  EXPECT_NEAR(r.m.output_throughput * r.m.duration_s, double(out), 1e-6);
  EXPECT_GT(r.m.steps, 0);
  EXPECT_GT(r.m.kv_tokens, 0);
  EXPECT_GT(r.m.kv_read_share, 0);
  EXPECT_LT(r.m.kv_read_share, 1);
  EXPECT_LE(r.m.full_seqs_share, 1.0);
  for (const auto& s : r.steps) EXPECT_LE(s.seqs, 4);
  // Attention's pairs: every position a request computes (its prompt, its outputs but the
  // last) scores itself and those before it; f16 KV counts them once.
  double pairs = 0, want = 0;
  for (const auto& s : r.steps) pairs += s.pairs;
  for (const auto& q : reqs) {
    const double n = q.prompt_len + q.output_tokens - 1;
    want += n * (n + 1) / 2;
  }
  EXPECT_DOUBLE_EQ(pairs, want);
  // With a concurrency limit of one, every request runs alone.
  const TrialResult one = run_trial(*t.m, nullptr, c, reqs, 1, slo, 60);
  EXPECT_EQ(one.m.completed, 24);
  for (const auto& s : one.steps) EXPECT_EQ(s.seqs, 1);
  // A deadline before the requests end: truncated, the rest not good.
  std::vector<TracedRequest> late = reqs;
  late.back().t = 30;
  const TrialResult cut = run_trial(*t.m, nullptr, c, late, 0, slo, 0.5);
  EXPECT_TRUE(cut.m.truncated);
  EXPECT_LT(cut.m.good, 24);
  EXPECT_GE(cut.m.duration_s, 0.5);
}

TEST(Tuner, AShortTuningRunKeepsItsBudgetAndReports) {
  TinyModel t;
  TuneOptions o;
  o.base.threads = 2;
  o.base.kv_cache_tokens = 8192;
  o.cores = 2;
  o.workload = builtin_workload("chat", t.m->hparams().n_ctx_train);
  o.slo = parse_slo("ttft_p99=1us,tpot_p99=1us");  // unreachable on purpose, whatever the machine
  o.budget_s = 6;
  o.trial_s = 0.3;
  Peaks peaks;  // none measured: the prior's defaults
  int reported = 0;
  const TuneResult r = tune(*t.m, nullptr, peaks, o, [&](const TrialRecord&) { ++reported; });
  EXPECT_EQ(reported, int(r.trials.size()));
  EXPECT_GE(r.trials.size(), 3u);  // calibration and two baselines at least
  // The search stops when the budget, less the final rounds, would be exceeded: the run
  // may overshoot by the trials the budget does not cover (calibration, baselines, final
  // rounds) and the last search trial or confirmation, whatever this machine's speed
  // (sanitizer builds are several times slower).
  double mandatory = 0, longest = 0;
  for (const auto& t : r.trials) {
    if (t.phase == "calibrate" || t.phase == "baseline" || t.phase == "verify") mandatory += t.wall_s;
    longest = std::max(longest, t.wall_s);
  }
  EXPECT_LT(r.elapsed_s, o.budget_s + mandatory + 4 * longest + 1);
  EXPECT_FALSE(r.slo_met);
  EXPECT_FALSE(r.binding.empty());
  EXPECT_NE(r.summary.find("not met"), std::string::npos);
  // The engine options tune was given beside the knobs travel into the output as they were.
  TuneReportContext ctx{t.path, "test CPU", &o, {{"block-size", "32"}, {"mlock", std::nullopt}, {"swap-dir", "007"},
                                                 {"draft-model", "my draft.gguf"}}};
  const std::string json = tune_report_json(r, ctx);
  EXPECT_NE(json.find("\"flags\""), std::string::npos);
  EXPECT_NE(json.find("\"block-size\": 32"), std::string::npos) << json.substr(0, 400);
  EXPECT_NE(json.find("\"mlock\": true"), std::string::npos);
  EXPECT_NE(json.find("\"swap-dir\": \"007\""), std::string::npos);  // a string that is not a number
  EXPECT_NE(tune_command_line(r, ctx).find("--block-size 32 --mlock --swap-dir 007 --draft-model 'my draft.gguf'"),
            std::string::npos)
      << tune_command_line(r, ctx);
  // A draft model with no method would speculate: the output says none where tuning chose none.
  if (r.chosen.spec == SpecMethod::None) {
    EXPECT_NE(json.find("\"speculative-method\": \"none\""), std::string::npos);
  }
  EXPECT_NE(json.find("\"trials\""), std::string::npos);
  const std::string html = tune_report_html(r, ctx);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(tune_report_text(r, ctx).find("chosen: ridge serve -m"), std::string::npos);
}

}  // namespace
}  // namespace ridge::tools
