// Metrics: exposition format (HELP/TYPE once per family, cumulative buckets, +Inf ==
// _count), label escaping, peak tracking, scrape_value, and concurrent updates.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics.h"

namespace ridge {
namespace {

constexpr const char* kModel = R"(model_name="m")";

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

const char* kHistograms[] = {
    "ridge:time_to_first_token_seconds", "ridge:time_per_output_token_seconds",
    "ridge:inter_token_latency_seconds", "ridge:e2e_request_latency_seconds",
    "ridge:request_queue_time_seconds",  "ridge:request_prompt_tokens",
    "ridge:request_generation_tokens"};

// The le bounds and cumulative counts of one histogram, in order of appearance.
std::vector<std::pair<std::string, double>> buckets(const std::string& text,
                                                    const std::string& name) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& l : lines(text)) {
    if (l.rfind(name + "_bucket{", 0) != 0) continue;
    const size_t a = l.find("le=\"") + 4;
    const size_t b = l.find('"', a);
    out.emplace_back(l.substr(a, b - a), std::stod(l.substr(l.rfind(' ') + 1)));
  }
  return out;
}

TEST(Metrics, HelpAndTypeOncePerFamily) {
  Metrics m("m");
  m.observe_ttft(0.2);
  const std::string t = m.render();
  std::map<std::string, int> help, type;
  std::map<std::string, std::string> kind;
  for (const auto& l : lines(t)) {
    ASSERT_FALSE(l.empty());
    std::istringstream w(l);
    std::string hash, what, name, k;
    w >> hash >> what >> name >> k;
    if (hash != "#") {
      // Every sample belongs to a family declared above it.
      std::string s = l.substr(0, l.find('{'));
      for (const char* suf : {"_bucket", "_sum", "_count"})
        if (!type.count(s) && s.size() > strlen(suf) && s.ends_with(suf))
          s.resize(s.size() - strlen(suf));
      EXPECT_EQ(type.count(s), 1u) << l;
      EXPECT_NE(l.find(kModel), std::string::npos) << l;
      continue;
    }
    if (what == "HELP") ++help[name];
    if (what == "TYPE") {
      ++type[name];
      kind[name] = k;
    }
  }
  for (const auto& [n, c] : type) {
    EXPECT_EQ(c, 1) << n;
    EXPECT_EQ(help[n], 1) << n;
    // kv_blocks_total is a gauge by the name it was given (promtool would flag it).
    if (n.ends_with("_total") && n != "ridge:kv_blocks_total")
      EXPECT_EQ(kind[n], "counter") << n;
    else
      EXPECT_NE(kind[n], "counter") << n;
  }
  for (const char* h : kHistograms) EXPECT_EQ(kind[h], "histogram") << h;
  for (const char* g : {"ridge:num_requests_running", "ridge:num_requests_waiting",
                        "ridge:num_requests_peak", "ridge:kv_cache_usage_perc",
                        "ridge:kv_blocks_total", "ridge:kv_blocks_free",
                        "ridge:kv_blocks_evictable", "ridge:kv_blocks_in_use"})
    EXPECT_EQ(kind[g], "gauge") << g;
  for (const char* c : {"ridge:prompt_tokens_total", "ridge:generation_tokens_total",
                        "ridge:prefix_cache_queries_total", "ridge:prefix_cache_hits_total",
                        "ridge:num_preemptions_total", "ridge:request_success_total",
                        "ridge:engine_invariant_checks_total",
                        "ridge:engine_invariant_failures_total", "ridge:http_requests_total"})
    EXPECT_EQ(kind[c], "counter") << c;
  // vLLM's names, which routers read, with vLLM's labels.
  for (const char* g : {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                        "vllm:gpu_cache_usage_perc"})
    EXPECT_EQ(kind[g], "gauge") << g;
  for (const char* c : {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"})
    EXPECT_EQ(kind[c], "counter") << c;
  EXPECT_NE(t.find("vllm:num_requests_waiting{engine=\"0\",model_name="), std::string::npos);
  // Finish reasons and status classes are there from the start, at 0.
  for (const char* r : {"stop", "length", "abort"})
    EXPECT_EQ(scrape_value(t, "ridge:request_success_total",
                           std::string("finished_reason=\"") + r + "\""), 0.0) << r;
  for (const char* c : {"2xx", "4xx", "5xx"})
    EXPECT_EQ(scrape_value(t, "ridge:http_requests_total", std::string("status=\"") + c + "\""),
              0.0) << c;
}

TEST(Metrics, BucketsCumulativeAndInfEqualsCount) {
  Metrics m("m");
  // On a bound (le is inclusive), between bounds, below the first, above the last.
  for (double v : {0.001, 0.003, 0.0, 0.1, 0.7, 3000.0, 3000.0}) m.observe_ttft(v);
  for (double v : {0.01, 0.5, 100.0}) m.observe_itl(v);
  m.observe_request_tokens(7, 250000);
  const std::string t = m.render();
  for (const char* h : kHistograms) {
    const auto b = buckets(t, h);
    ASSERT_GT(b.size(), 10u) << h;
    EXPECT_EQ(b.back().first, "+Inf");
    for (size_t i = 1; i < b.size(); ++i) EXPECT_LE(b[i - 1].second, b[i].second) << h;
    EXPECT_EQ(b.back().second, scrape_value(t, std::string(h) + "_count")) << h;
  }
  const auto ttft = buckets(t, "ridge:time_to_first_token_seconds");
  ASSERT_EQ(ttft.size(), 23u);
  EXPECT_EQ(ttft[0], (std::pair<std::string, double>{"0.001", 2}));  // 0 and 0.001
  EXPECT_EQ(ttft[1], (std::pair<std::string, double>{"0.005", 3}));
  EXPECT_EQ(ttft[7], (std::pair<std::string, double>{"0.1", 4}));
  EXPECT_EQ(ttft[11], (std::pair<std::string, double>{"1", 5}));
  EXPECT_EQ(ttft[21], (std::pair<std::string, double>{"2560", 5}));
  EXPECT_EQ(ttft[22].second, 7);
  EXPECT_NEAR(*scrape_value(t, "ridge:time_to_first_token_seconds_sum"), 6000.804, 1e-9);
  EXPECT_EQ(buckets(t, "ridge:inter_token_latency_seconds").size(), 20u);
  EXPECT_EQ(buckets(t, "ridge:e2e_request_latency_seconds").size(), 22u);
  const auto gen = buckets(t, "ridge:request_generation_tokens");
  ASSERT_EQ(gen.size(), 17u);
  EXPECT_EQ(gen[15], (std::pair<std::string, double>{"100000", 0}));
  EXPECT_EQ(gen[16].second, 1);
  EXPECT_EQ(scrape_value(t, "ridge:request_prompt_tokens_bucket", R"(le="10")"), 1);
  EXPECT_EQ(scrape_value(t, "ridge:request_prompt_tokens_bucket", R"(le="5")"), 0);
}

TEST(Metrics, LabelEscaping) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), R"(a\\b\"c\nd)");
  Metrics m("we\"ird\\name\n2");
  m.add_prompt_tokens(3);
  const std::string t = m.render();
  const std::string label = R"(model_name="we\"ird\\name\n2")";
  EXPECT_NE(t.find("ridge:prompt_tokens_total{" + label + "} 3\n"), std::string::npos) << t;
  EXPECT_EQ(scrape_value(t, "ridge:prompt_tokens_total", label), 3);
  EXPECT_EQ(scrape_value(t, "ridge:prompt_tokens_total", R"(model_name="other")"), std::nullopt);
  for (const auto& l : lines(t)) EXPECT_TRUE(l[0] == '#' || l.find(label) != std::string::npos);
}

TEST(Metrics, PeakTracking) {
  Metrics m("m");
  auto peak = [&] { return scrape_value(m.render(), "ridge:num_requests_peak"); };
  EXPECT_EQ(peak(), 0);
  m.set_gauges({.running = 3, .waiting = 4});
  EXPECT_EQ(peak(), 7);
  m.set_gauges({.running = 5, .waiting = 0});
  EXPECT_EQ(peak(), 7);
  m.set_gauges({.running = 8, .waiting = 1});
  EXPECT_EQ(peak(), 9);
  m.set_gauges({});
  const std::string t = m.render();
  EXPECT_EQ(scrape_value(t, "ridge:num_requests_peak"), 9);
  EXPECT_EQ(scrape_value(t, "ridge:num_requests_running"), 0);
}

TEST(Metrics, ScrapeValueRoundTrips) {
  Metrics m("m");
  m.set_gauges({.running = 2, .waiting = 1, .kv_cache_usage = 0.375, .kv_blocks_total = 1024,
                .kv_blocks_free = 100, .kv_blocks_evictable = 24, .kv_blocks_in_use = 900});
  m.add_prompt_tokens(123456789012);
  m.add_prompt_tokens(-5);  // ignored: counters only go up
  m.add_generation_tokens(42);
  m.set_prefix_cache_totals(1000, 640);
  m.set_preemptions_total(3);
  m.request_finished("stop");
  m.request_finished("stop");
  m.request_finished("length");
  m.request_finished("tool_calls");
  m.invariant_check(true);
  m.invariant_check(false);
  m.http_status(200);
  m.http_status(201);
  m.http_status(404);
  m.http_status(503);
  m.http_status(99);  // nonsense: counted as 5xx
  const std::string t = m.render();
  EXPECT_NE(t.find("ridge:prompt_tokens_total{model_name=\"m\"} 123456789012\n"), std::string::npos);
  EXPECT_NE(t.find("ridge:kv_cache_usage_perc{model_name=\"m\"} 0.375\n"), std::string::npos);
  EXPECT_EQ(t.find("e+"), std::string::npos) << "integers print without exponent";
  EXPECT_EQ(scrape_value(t, "ridge:kv_cache_usage_perc"), 0.375);
  EXPECT_EQ(scrape_value(t, "ridge:kv_blocks_total", kModel), 1024);
  EXPECT_EQ(scrape_value(t, "ridge:kv_blocks_free"), 100);
  EXPECT_EQ(scrape_value(t, "ridge:kv_blocks_evictable"), 24);
  EXPECT_EQ(scrape_value(t, "ridge:kv_blocks_in_use"), 900);
  EXPECT_EQ(scrape_value(t, "ridge:num_requests_waiting"), 1);
  EXPECT_EQ(scrape_value(t, "ridge:prompt_tokens_total"), 123456789012.0);
  EXPECT_EQ(scrape_value(t, "ridge:generation_tokens_total"), 42);
  EXPECT_EQ(scrape_value(t, "ridge:prefix_cache_queries_total"), 1000);
  EXPECT_EQ(scrape_value(t, "ridge:prefix_cache_hits_total"), 640);
  EXPECT_EQ(scrape_value(t, "ridge:num_preemptions_total"), 3);
  EXPECT_EQ(scrape_value(t, "ridge:request_success_total", R"(finished_reason="stop")"), 2);
  // Label order in the filter does not matter.
  EXPECT_EQ(scrape_value(t, "ridge:request_success_total",
                         R"(finished_reason="length", model_name="m")"), 1);
  EXPECT_EQ(scrape_value(t, "ridge:request_success_total", R"(finished_reason="abort")"), 0);
  EXPECT_EQ(scrape_value(t, "ridge:request_success_total", R"(finished_reason="tool_calls")"), 1);
  EXPECT_EQ(scrape_value(t, "ridge:engine_invariant_checks_total"), 2);
  EXPECT_EQ(scrape_value(t, "ridge:engine_invariant_failures_total"), 1);
  EXPECT_EQ(scrape_value(t, "ridge:http_requests_total", R"(status="2xx")"), 2);
  EXPECT_EQ(scrape_value(t, "ridge:http_requests_total", R"(status="4xx")"), 1);
  EXPECT_EQ(scrape_value(t, "ridge:http_requests_total", R"(status="5xx")"), 2);
  // Exact names only; unknown series and malformed filters give nullopt.
  EXPECT_EQ(scrape_value(t, "ridge:kv_blocks"), std::nullopt);
  EXPECT_EQ(scrape_value(t, "ridge:nope"), std::nullopt);
  EXPECT_EQ(scrape_value(t, "ridge:http_requests_total", R"(status="3xx")"), std::nullopt);
  EXPECT_EQ(scrape_value(t, "ridge:http_requests_total", R"(status=2xx)"), std::nullopt);
  // Foreign exposition text: no labels, timestamps, special values.
  const std::string other = "# TYPE a gauge\na 1.5e3 1712345678\nb{x=\"1\"} +Inf\nc NaN\n";
  EXPECT_EQ(scrape_value(other, "a"), 1500);
  EXPECT_EQ(scrape_value(other, "b", R"(x="1")"), HUGE_VAL);
  EXPECT_TRUE(std::isnan(*scrape_value(other, "c")));
}

TEST(Metrics, ConcurrentObserveWhileRendering) {
  Metrics m("m");
  constexpr int kThreads = 4, kN = 20000;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      const std::string t = m.render();
      // A snapshot is consistent: +Inf equals _count even mid-update.
      const auto b = buckets(t, "ridge:inter_token_latency_seconds");
      ASSERT_EQ(b.back().second, scrape_value(t, "ridge:inter_token_latency_seconds_count"));
    }
  });
  std::vector<std::thread> ts;
  for (int k = 0; k < kThreads; ++k)
    ts.emplace_back([&, k] {
      for (int i = 0; i < kN; ++i) {
        m.observe_itl(0.001 * (i % 500));
        m.add_generation_tokens(1);
        m.request_finished(k % 2 ? "stop" : "length");
        m.set_gauges({.running = i % 7, .waiting = k});
      }
    });
  for (auto& t : ts) t.join();
  done = true;
  scraper.join();
  const std::string t = m.render();
  EXPECT_EQ(scrape_value(t, "ridge:inter_token_latency_seconds_count"), kThreads * kN);
  EXPECT_EQ(buckets(t, "ridge:inter_token_latency_seconds").back().second, kThreads * kN);
  EXPECT_EQ(scrape_value(t, "ridge:generation_tokens_total"), kThreads * kN);
  EXPECT_EQ(scrape_value(t, "ridge:request_success_total", R"(finished_reason="stop")"),
            kThreads / 2 * kN);
  EXPECT_EQ(scrape_value(t, "ridge:num_requests_peak"), 6 + kThreads - 1);
}

}  // namespace
}  // namespace ridge
