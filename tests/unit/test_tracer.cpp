// The tracer: its file is valid Chrome trace JSON whatever happens (full buffers, four
// threads at once), every event carries the fields viewers need, and an engine run shows
// its steps' phases, the forward's ops, the scheduler's decisions and a track per request.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "perf/tracer.h"

namespace ridge {
namespace {

using nlohmann::json;

#if RIDGE_TRACE
#define SKIP_WITHOUT_TRACER() (void)0
#else
#define SKIP_WITHOUT_TRACER() GTEST_SKIP() << "built with -DRIDGE_TRACE=OFF"
#endif

std::string temp_path(const std::string& name) { return testing::TempDir() + "/" + name; }

json read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  json j = json::parse(in);  // throws on invalid JSON: the test fails with the parse error
  EXPECT_TRUE(j.is_object());
  EXPECT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  return j;
}

// The Trace Event Format's required fields per phase.
void expect_well_formed(const json& ev) {
  ASSERT_TRUE(ev.is_object()) << ev.dump();
  ASSERT_TRUE(ev.contains("name") && ev["name"].is_string()) << ev.dump();
  ASSERT_TRUE(ev.contains("ph") && ev["ph"].is_string()) << ev.dump();
  ASSERT_TRUE(ev.contains("pid") && ev["pid"].is_number_integer()) << ev.dump();
  ASSERT_TRUE(ev.contains("tid") && ev["tid"].is_number_integer()) << ev.dump();
  const std::string ph = ev["ph"];
  ASSERT_TRUE(ph == "X" || ph == "i" || ph == "C" || ph == "M") << ev.dump();
  if (ph == "M") {
    ASSERT_TRUE(ev.contains("args") && ev["args"].is_object()) << ev.dump();
    return;
  }
  ASSERT_TRUE(ev.contains("ts") && ev["ts"].is_number()) << ev.dump();
  EXPECT_GE(ev["ts"].get<double>(), 0.0) << ev.dump();
  if (ph == "X") {
    ASSERT_TRUE(ev.contains("dur") && ev["dur"].is_number()) << ev.dump();
    EXPECT_GE(ev["dur"].get<double>(), 0.0) << ev.dump();
    ASSERT_TRUE(ev.contains("cat") && ev["cat"].is_string()) << ev.dump();
  }
  if (ph == "i") {
    EXPECT_EQ(ev.value("s", ""), "t") << ev.dump();
  }
  if (ph == "C") {
    ASSERT_TRUE(ev.contains("args") && ev["args"].is_object()) << ev.dump();
  }
}

std::vector<json> named(const json& trace, const std::string& name, const std::string& ph = "") {
  std::vector<json> out;
  for (const auto& ev : trace["traceEvents"])
    if (ev["name"] == name && (ph.empty() || ev["ph"] == ph)) out.push_back(ev);
  return out;
}

TEST(Tracer, WritesValidJsonWithTheRequiredFields) {
  SKIP_WITHOUT_TRACER();
  const std::string path = temp_path("trace-basic.json");
  perf::trace_start(path);
  ASSERT_TRUE(perf::trace_on());
  perf::trace_thread_name("test \"main\"");  // escaped in the file
  const int64_t t0 = perf::trace_clock_ns();
  perf::trace_op("attn_qkv", t0, t0 + 1500, 3, 64, 1e9, 2.5e6);
  perf::trace_op("output", t0 + 1500, t0 + 2500, -1, 64, 2e9, 1e7);
  perf::trace_span("step", "engine", t0 - 1, t0 + 3000, {{"step", 1}, {"ratio", 0.5}, {"ok", true}, {"s", "a\nb"}});
  perf::trace_instant("admit", "sched", {{"req", 7}, {"prefix_hit", 32}});
  perf::trace_counter("kv_blocks", {{"free", 10}, {"used", 6}});
  perf::trace_req_begin(7, t0, {{"prompt_tokens", 40}});
  perf::trace_req_state(7, "", t0 + 100);
  perf::trace_req_span(7, "prefill", t0 + 200, t0 + 900, {{"tokens", 40}, {"pos", 0}});
  perf::trace_req_decode(7, t0 + 1000);
  perf::trace_req_decode(7, t0 + 2000);
  perf::trace_req_end(7, "length", {{"generated", 2}});
  perf::trace_req_begin(8, t0);  // never ends: closed as "unfinished" by trace_stop
  const perf::TraceStats st = perf::trace_stop();
  EXPECT_FALSE(perf::trace_on());
  EXPECT_EQ(st.dropped, 0);
  EXPECT_FALSE(st.io_error);
  EXPECT_EQ(int64_t(std::filesystem::file_size(path)), st.bytes);

  const json j = read_trace(path);
  EXPECT_EQ(int64_t(j["traceEvents"].size()), st.events + 1);  // + the dropped-events counter
  EXPECT_EQ(j["otherData"]["dropped_events"], 0);
  for (const auto& ev : j["traceEvents"]) expect_well_formed(ev);

  const auto ops = named(j, "attn_qkv", "X");
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]["cat"], "op");
  EXPECT_EQ(ops[0]["args"]["layer"], 3);
  EXPECT_EQ(ops[0]["args"]["tokens"], 64);
  EXPECT_DOUBLE_EQ(ops[0]["args"]["flops"].get<double>(), 1e9);
  EXPECT_DOUBLE_EQ(ops[0]["args"]["bytes"].get<double>(), 2.5e6);
  EXPECT_DOUBLE_EQ(ops[0]["dur"].get<double>(), 1.5);  // microseconds
  EXPECT_FALSE(named(j, "output", "X")[0]["args"].contains("layer"));
  const auto step = named(j, "step", "X");
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0]["args"]["s"], "a\nb");
  EXPECT_EQ(step[0]["args"]["ok"], true);
  EXPECT_EQ(step[0]["tid"], ops[0]["tid"]);  // same thread, same track
  bool named_thread = false;
  for (const auto& m : named(j, "thread_name", "M"))
    named_thread |= m["tid"] == ops[0]["tid"] && m["args"]["name"] == "test \"main\"";
  EXPECT_TRUE(named_thread);
  EXPECT_EQ(named(j, "kv_blocks", "C")[0]["args"]["free"], 10);
  EXPECT_EQ(named(j, "admit", "i")[0]["args"]["req"], 7);

  // Request 7's track: pid 2, its own tid, queued -> prefill -> decode -> finished.
  const auto queued = named(j, "queued", "X");
  ASSERT_EQ(queued.size(), 2u);  // 7's, and 8's closed at the end
  EXPECT_EQ(queued[0]["pid"], 2);
  const int64_t tid7 = queued[0]["tid"];
  EXPECT_DOUBLE_EQ(queued[0]["dur"].get<double>(), 0.1);
  const auto decode = named(j, "decode", "X");
  ASSERT_EQ(decode.size(), 1u);
  EXPECT_EQ(decode[0]["args"]["tokens"], 2);
  EXPECT_EQ(decode[0]["tid"], tid7);
  std::map<std::string, std::string> reasons;  // tid -> reason
  for (const auto& f : named(j, "finished", "i")) reasons[f["tid"].dump()] = f["args"]["reason"].get<std::string>();
  EXPECT_EQ(reasons[std::to_string(tid7)], "length");
  EXPECT_EQ(reasons.size(), 2u);
  for (const auto& r : named(j, "request", "X")) {
    if (r["tid"] != tid7) {
      EXPECT_EQ(r["args"]["reason"], "unfinished");
      continue;
    }
    EXPECT_EQ(r["args"]["prompt_tokens"], 40);
    EXPECT_EQ(r["args"]["generated"], 2);
    EXPECT_EQ(r["args"]["reason"], "length");
    // The request span encloses its states, starting 1 ns before "queued".
    EXPECT_LT(r["ts"].get<double>(), queued[0]["ts"].get<double>());
  }
  bool track_named = false;
  for (const auto& m : named(j, "thread_name", "M"))
    track_named |= m["tid"] == tid7 && m["args"]["name"] == "request 7";
  EXPECT_TRUE(track_named);
}

TEST(Tracer, FullBuffersDropEventsAndCountThem) {
  SKIP_WITHOUT_TRACER();
  const std::string path = temp_path("trace-drops.json");
  perf::TraceOptions o;
  o.buffer_bytes = 4096;
  o.hold_writer = true;  // the writer "cannot keep up": nothing leaves the buffer
  perf::trace_start(path, o);
  const int n = 1000;
  const int64_t t = perf::trace_clock_ns();
  for (int i = 0; i < n; ++i) perf::trace_span("spin", "test", t + i, t + i + 1, {{"i", i}});
  const perf::TraceStats st = perf::trace_stop();
  EXPECT_GT(st.dropped, 0);
  EXPECT_GT(st.events, 0);
  const json j = read_trace(path);
  EXPECT_LE(std::filesystem::file_size(path), 4096u + 512u);  // one buffer, the header and the footer
  const auto spins = named(j, "spin", "X");
  EXPECT_EQ(int64_t(spins.size()) + st.dropped, n);
  const auto c = named(j, "trace_dropped_events", "C");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["args"]["dropped"], st.dropped);
  EXPECT_EQ(j["otherData"]["dropped_events"], st.dropped);
  // Kept events are the first ones, in order.
  for (size_t i = 0; i < spins.size(); ++i) ASSERT_EQ(spins[i]["args"]["i"], int(i));
}

TEST(Tracer, FourThreadsWriteOneValidFile) {
  SKIP_WITHOUT_TRACER();
  const std::string path = temp_path("trace-threads.json");
  perf::TraceOptions o;
  o.buffer_bytes = 256 << 10;  // small: buffers change hands many times while they write
  o.flush_ms = 1;
  perf::trace_start(path, o);
  const int n = 20000;
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([k] {
      perf::trace_thread_name("writer " + std::to_string(k));
      for (int i = 0; i < n; ++i) {
        const int64_t t = perf::trace_clock_ns();
        perf::trace_span("work", "test", t, t + 10, {{"k", k}, {"i", i}});
        if (i % 100 == 0) {
          perf::trace_instant("tick", "test", {{"k", k}, {"i", i}});
          std::this_thread::yield();  // real emitters do work between events
        }
      }
    });
  for (auto& t : ts) t.join();
  const perf::TraceStats st = perf::trace_stop();
  const json j = read_trace(path);
  for (const auto& ev : j["traceEvents"]) expect_well_formed(ev);
  EXPECT_EQ(int64_t(j["traceEvents"].size()), st.events + 1);  // + the dropped-events counter

  // Each thread: its own named track (names use a reserve: never dropped here), its
  // events in its order. Which thread's events the full buffers dropped is up to timing.
  std::map<int, int64_t> tid_of;
  for (const auto& m : named(j, "thread_name", "M")) {
    const std::string name = m["args"]["name"];
    if (name.starts_with("writer ")) tid_of[std::stoi(name.substr(7))] = m["tid"];
  }
  ASSERT_EQ(tid_of.size(), 4u);
  std::set<int64_t> distinct;
  for (const auto& [k, tid] : tid_of) distinct.insert(tid);
  EXPECT_EQ(distinct.size(), 4u);
  std::map<int, int> last;  // thread -> last i seen, in file order
  int64_t kept = 0;
  for (const auto& ev : named(j, "work", "X")) {
    const int k = ev["args"]["k"], i = ev["args"]["i"];
    ASSERT_EQ(ev["tid"], tid_of[k]);
    if (last.count(k)) {
      ASSERT_LT(last[k], i);
    }
    last[k] = i;
    ++kept;
  }
  EXPECT_GT(kept, 0);
  const int64_t ticks = int64_t(named(j, "tick", "i").size());
  EXPECT_EQ(kept + ticks + st.dropped, 4 * (n + n / 100));
  std::printf("4 threads: %lld events kept, %lld dropped, %.1f MiB\n", (long long)(kept + ticks),
              (long long)st.dropped, double(st.bytes) / 1048576.0);
}

// Buffers of a few events, handed over by the emitters and by the 1 ms flush in turns:
// a flush that swapped right after an emitter's hand-over wrote newer events before older
// ones. (Track names may be dropped with buffers this small: only the order is checked.)
TEST(Tracer, EventsKeepTheirOrderWhenBuffersChangeHandsConstantly) {
  SKIP_WITHOUT_TRACER();
  const std::string path = temp_path("trace-handoffs.json");
  for (int rep = 0; rep < 10; ++rep) {
    perf::TraceOptions o;
    o.buffer_bytes = 2048;
    o.flush_ms = 1;
    perf::trace_start(path, o);
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; ++k)
      ts.emplace_back([k] {
        for (int i = 0; i < 20000; ++i) {
          const int64_t t = perf::trace_clock_ns();
          perf::trace_span("work", "test", t, t + 10, {{"k", k}, {"i", i}});
        }
      });
    for (auto& t : ts) t.join();
    perf::trace_stop();
    std::map<int, int> last;  // thread -> last i seen, in file order
    for (const auto& ev : named(read_trace(path), "work", "X")) {
      const int k = ev["args"]["k"], i = ev["args"]["i"];
      if (last.count(k)) {
        ASSERT_LT(last[k], i) << "thread " << k << ", repetition " << rep;
      }
      last[k] = i;
    }
    EXPECT_FALSE(last.empty());
  }
}

TEST(Tracer, BadPathAndSecondTraceAreErrors) {
  SKIP_WITHOUT_TRACER();
  const std::string bad = "/nonexistent-ridge-dir/trace.json";
  try {
    perf::trace_start(bad);
    FAIL() << "no error for " << bad;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_FALSE(perf::trace_on());
  const std::string path = temp_path("trace-twice.json");
  perf::trace_start(path);
  EXPECT_THROW(perf::trace_start(temp_path("trace-second.json")), Error);
  perf::trace_stop();
  read_trace(path);
  EXPECT_EQ(perf::trace_stop().events, 0);  // closing twice is harmless
}

// X events of one track, by tid.
struct Span {
  std::string name;
  double t0, t1;
};

TEST(Tracer, GeneratorRunShowsStepPhasesOpsAndRequestTracks) {
  SKIP_WITHOUT_TRACER();
  const std::string model_path = temp_path("trace-model.gguf");
  make_model({"llama", "tiny", DType::F32, 5, "", 0, 2}, model_path);
  auto m = Model::load(model_path);
  std::vector<GenRequest> reqs(3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (int k = 0; k < 20 + 30 * int(i); ++k) reqs[i].prompt.push_back(3 + int32_t((k * 7 + i) % 400));
    reqs[i].max_tokens = 6;
    reqs[i].ignore_eos = true;
    reqs[i].sampling.temperature = 0;
  }
  GenOptions o;
  o.threads = 2;
  o.max_num_batched_tokens = 32;  // chunked prefill: the 80-token prompt takes several chunks
  const std::string path = temp_path("trace-engine.json");
  perf::trace_start(path);
  Generator g(*m, nullptr, o);
  const auto res = g.run(reqs);
  const perf::TraceStats st = perf::trace_stop();
  EXPECT_EQ(st.dropped, 0);
  const json j = read_trace(path);
  for (const auto& ev : j["traceEvents"]) expect_well_formed(ev);

  // Every step nests schedule, forward, sample and postprocess, in that order.
  std::map<int64_t, std::vector<Span>> by_tid;
  for (const auto& ev : j["traceEvents"])
    if (ev["ph"] == "X" && ev["pid"] == 1)
      by_tid[ev["tid"].get<int64_t>()].push_back({ev["name"].get<std::string>(), ev["ts"].get<double>(),
                                                  ev["ts"].get<double>() + ev["dur"].get<double>()});
  const auto steps = named(j, "step", "X");
  ASSERT_EQ(int64_t(steps.size()), g.stats().steps);
  const double eps = 0.002;  // µs: rounding of ts + dur in doubles
  int64_t ops_in_forward = 0;
  for (const auto& s : steps) {
    EXPECT_EQ(s["cat"], "engine");
    const double t0 = s["ts"].get<double>(), t1 = t0 + s["dur"].get<double>();
    std::vector<std::string> phases;
    double fwd0 = 0, fwd1 = 0;
    for (const Span& c : by_tid[s["tid"].get<int64_t>()]) {
      if (c.t0 <= t0 || c.t1 > t1 + eps) continue;  // not a child
      if (c.name == "schedule" || c.name == "forward" || c.name == "sample" || c.name == "postprocess")
        phases.push_back(c.name);
      if (c.name == "forward") fwd0 = c.t0, fwd1 = c.t1;
    }
    ASSERT_EQ(phases, (std::vector<std::string>{"schedule", "forward", "sample", "postprocess"})) << s.dump();
    for (const auto& ev : j["traceEvents"])
      if (ev["ph"] == "X" && ev["cat"] == "op" && ev["tid"] == s["tid"] && ev["ts"].get<double>() > fwd0 &&
          ev["ts"].get<double>() + ev["dur"].get<double>() <= fwd1 + eps)
        ++ops_in_forward;
  }
  // The forward's ops (perf::trace_op from model/forward.cpp), inside the forward spans,
  // with their roofline accounting and the batch shape.
  int64_t n_ops = 0;
  std::set<std::string> op_names;
  for (const auto& ev : j["traceEvents"])
    if (ev["ph"] == "X" && ev["cat"] == "op") {
      ++n_ops;
      op_names.insert(ev["name"].get<std::string>());
      EXPECT_TRUE(ev["args"].contains("flops") && ev["args"].contains("bytes") && ev["args"].contains("tokens") &&
                  ev["args"].contains("seqs"))
          << ev.dump();
    }
  EXPECT_GT(n_ops, 0) << "no per-op spans: does the forward call perf::trace_op?";
  EXPECT_EQ(ops_in_forward, n_ops);
  EXPECT_TRUE(op_names.count("attention")) << "ops seen: " << json(op_names).dump();

  // Scheduler decisions: every request admitted, the long prompt chunked.
  EXPECT_EQ(named(j, "admit", "i").size(), reqs.size());
  EXPECT_FALSE(named(j, "chunk", "i").empty());
  EXPECT_FALSE(named(j, "seqs", "C").empty());
  EXPECT_FALSE(named(j, "kv_blocks", "C").empty());

  // One track per request: queued, prefill chunk(s) with sizes, decode, finished.
  std::map<int64_t, std::vector<std::string>> track;  // tid -> event names in time order
  std::map<int64_t, int64_t> prefill_tokens;
  std::vector<json> req_events;
  for (const auto& ev : j["traceEvents"])
    if (ev["pid"] == 2 && ev["ph"] != "M") req_events.push_back(ev);
  std::stable_sort(req_events.begin(), req_events.end(),
                   [](const json& a, const json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  for (const auto& ev : req_events) {
    track[ev["tid"].get<int64_t>()].push_back(ev["name"].get<std::string>());
    if (ev["name"] == "prefill") prefill_tokens[ev["tid"].get<int64_t>()] += ev["args"]["tokens"].get<int64_t>();
  }
  ASSERT_EQ(track.size(), reqs.size());
  size_t i = 0;
  for (const auto& [tid, names] : track) {
    ASSERT_GE(names.size(), 5u);
    EXPECT_EQ(names[0], "request");
    EXPECT_EQ(names[1], "queued");
    EXPECT_EQ(names[2], "prefill");
    EXPECT_NE(std::find(names.begin(), names.end(), "decode"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "first_token"), names.end());
    EXPECT_EQ(names.back(), "finished");
    EXPECT_EQ(prefill_tokens[tid], int64_t(reqs[i].prompt.size()));
    ++i;
  }
  const auto long_prefill = std::count_if(req_events.begin(), req_events.end(), [&](const json& ev) {
    return ev["name"] == "prefill" && ev["tid"] == track.rbegin()->first;
  });
  EXPECT_GE(long_prefill, 3);  // 80 tokens in chunks of at most 32
  for (const auto& f : named(j, "finished", "i")) EXPECT_EQ(f["args"]["reason"], "length");
}

TEST(Tracer, PreemptionAndSwapAreTraced) {
  SKIP_WITHOUT_TRACER();
  const std::string model_path = temp_path("trace-preempt.gguf");
  make_model({"llama", "tiny", DType::F32, 6, "", 0, 2}, model_path);
  auto m = Model::load(model_path);
  for (const PreemptionMode mode : {PreemptionMode::Recompute, PreemptionMode::Swap}) {
    const bool swap = mode == PreemptionMode::Swap;
    EngineConfig c;
    c.threads = 2;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 64;
    KVLayout kl{m->hparams().n_layer, m->hparams().n_head_kv, m->hparams().head_dim_k, m->hparams().head_dim_v, 16, 0,
                DType::F16};
    c.kv_cache_bytes = 12 * 16 * kl.bytes_per_token();  // 12 blocks for 8 growing sequences
    c.preemption = mode;
    c.prefix_cache = false;
    if (swap) c.swap_bytes = int64_t(16) << 20;
    const std::string path = temp_path(swap ? "trace-swap.json" : "trace-recompute.json");
    perf::trace_start(path);
    {
      Engine e(*m, nullptr, c);
      RequestParams p;
      p.max_tokens = 40;
      p.ignore_eos = true;
      p.sampling.temperature = 0;
      for (int r = 0; r < 8; ++r) e.add_request(std::vector<int32_t>(10, 5 + r), p);
      while (e.has_work()) e.step();
      EXPECT_GT(e.n_preemptions(), 0);
    }
    perf::trace_stop();
    const json j = read_trace(path);
    const auto pre = named(j, "preempt", "i");
    ASSERT_FALSE(pre.empty());
    for (const auto& ev : pre) {
      EXPECT_EQ(ev["cat"], "sched");
      EXPECT_EQ(ev["args"]["reason"], "out_of_kv_blocks");
      EXPECT_EQ(ev["args"]["mode"], swap ? "swap" : "recompute");
      EXPECT_TRUE(ev["args"].contains("req") && ev["args"].contains("for"));
    }
    const auto state = named(j, swap ? "swapped" : "preempted", "X");
    ASSERT_FALSE(state.empty());
    EXPECT_EQ(state[0]["pid"], 2);
    EXPECT_EQ(state[0]["args"]["mode"], swap ? "swap" : "recompute");
    if (swap) {
      EXPECT_FALSE(named(j, "swap_in", "i").empty());
      EXPECT_FALSE(named(j, "swap", "X").empty());
    } else {
      bool resumed = false;
      for (const auto& a : named(j, "admit", "i")) resumed |= a["args"]["resumed"] == true;
      EXPECT_TRUE(resumed);
      bool recompute = false;
      for (const auto& ev : named(j, "prefill", "X")) recompute |= ev["args"]["recompute"] == true;
      EXPECT_TRUE(recompute);
    }
    EXPECT_EQ(named(j, "finished", "i").size(), 8u);
  }
}

TEST(Tracer, SessionGuardClosesTheFileOnAnException) {
  SKIP_WITHOUT_TRACER();
  const std::string path = temp_path("trace-guard.json");
  try {
    perf::TraceSession s(path, "test");
    perf::trace_instant("before_error", "test");
    fail("an error in the middle of a command");
  } catch (const Error&) {
  }
  EXPECT_FALSE(perf::trace_on());
  const json j = read_trace(path);
  EXPECT_EQ(named(j, "before_error", "i").size(), 1u);
  // No path: no trace.
  { perf::TraceSession none(std::nullopt, "test"); EXPECT_FALSE(perf::trace_on()); }
}

#if !RIDGE_TRACE
// Without the tracer, --trace is an error that says so, not a silently missing file.
TEST(Tracer, OffBuildRefusesToTrace) {
  EXPECT_FALSE(perf::trace_on());
  EXPECT_THROW(perf::TraceSession(std::string(temp_path("off.json")), "test"), Error);
}
#endif

}  // namespace
}  // namespace ridge
