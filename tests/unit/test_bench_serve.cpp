// bench serve's pure parts: numpy's percentile, the SSE parser under arbitrary read
// boundaries and line endings, URL and option checks, prompts, arrivals and the metrics;
// and that a refused connection fails every request quickly instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/bench_serve.h"

namespace ridge {
namespace {

TEST(BenchServe, PercentileIsNumpyLinear) {
  // Values from numpy.percentile (default method "linear").
  EXPECT_DOUBLE_EQ(percentile({15, 20, 35, 40, 50}, 40), 29.0);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);  // unsorted input
  EXPECT_NEAR(percentile({1, 2, 3, 4}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  std::vector<double> v;
  for (int i = 0; i < 101; ++i) v.push_back(100 - i);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99.0);
  EXPECT_DOUBLE_EQ(percentile(v, 12.5), 12.5);
}

std::vector<SseEvent> parse_in_pieces(const std::string& s, const std::vector<size_t>& cuts) {
  SseParser p;
  std::vector<SseEvent> out;
  size_t at = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(s).substr(at, c - at), out);
    at = c;
  }
  p.feed(std::string_view(s).substr(at), out);
  return out;
}

void expect_events(const std::vector<SseEvent>& got, const std::vector<SseEvent>& want, const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].data, want[i].data) << where << " event " << i;
    EXPECT_EQ(got[i].event, want[i].event) << where << " event " << i;
  }
}

TEST(BenchServe, SseParserAnySplitAnyLineEnd) {
  const std::vector<SseEvent> want = {
      {"", "{\"choices\":[{\"text\":\"a\"}]}"},
      {"", "line one\nline two"},
      {"error", "{\"error\":\"x\"}"},
      {"", ""},
      {"", "[DONE]"},
  };
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    const std::string s = ": keep-alive comment" + eol + eol +                          // a comment, no event
                          "data: {\"choices\":[{\"text\":\"a\"}]}" + eol + eol +       //
                          "data: line one" + eol + "data:line two" + eol + "id: 7" + eol + eol +  // two lines
                          "event: error" + eol + "data: {\"error\":\"x\"}" + eol + eol +  //
                          "retry: 10" + eol + eol +                                   // no data: no event
                          "data" + eol + eol +                                        // empty data
                          "data: [DONE]" + eol + eol +                                //
                          "data: unterminated";                                       // dropped at the end
    const std::string name = eol == "\n" ? "LF" : eol == "\r\n" ? "CRLF" : "CR";
    expect_events(parse_in_pieces(s, {}), want, name + " whole");
    // Every single cut, and byte by byte: a \r\n split between reads is one line end.
    for (size_t c = 0; c <= s.size(); ++c) expect_events(parse_in_pieces(s, {c}), want, name + " cut " + std::to_string(c));
    std::vector<size_t> bytes;
    for (size_t c = 1; c < s.size(); ++c) bytes.push_back(c);
    expect_events(parse_in_pieces(s, bytes), want, name + " byte by byte");
  }
}

TEST(BenchServe, SseParserBomAndEmptyFeeds) {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed("\xEF\xBB\xBF" "data: a\r", out);
  p.feed("", out);  // must not forget the pending \r
  p.feed("\n\r\n", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "a");
}

TEST(BenchServe, ParseUrl) {
  HttpUrl u = parse_http_url("http://127.0.0.1:8080");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 8080);
  EXPECT_EQ(u.base_path, "");
  u = parse_http_url("HTTP://localhost/");
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.base_path, "");
  u = parse_http_url("http://[::1]:9000/api/");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 9000);
  EXPECT_EQ(u.base_path, "/api");
  for (const char* bad : {"127.0.0.1:8080", "https://h:1", "ftp://h", "http://", "http://:80", "http://h:0",
                          "http://h:65536", "http://h:8x", "http://h:", "http://u@h", "http://h/?q", "http://::1:80",
                          "http://[::1"}) {
    EXPECT_THROW(parse_http_url(bad), Error) << bad;
  }
  try {
    parse_http_url("https://example.com");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("https is not supported"), std::string::npos) << e.what();
  }
}

ServeBenchOptions valid() {
  ServeBenchOptions o;
  o.url = "http://127.0.0.1:8080";
  o.model = "m";
  o.num_prompts = 8;
  o.input_len = 16;
  o.output_len = 4;
  o.prefix_len = 6;
  return o;
}

TEST(BenchServe, ImpossibleOptions) {
  EXPECT_NO_THROW(check_serve_options(valid()));
  auto bad = [](auto edit) {
    ServeBenchOptions o = valid();
    edit(o);
    EXPECT_THROW(check_serve_options(o), Error);
  };
  bad([](auto& o) { o.num_prompts = 0; });
  bad([](auto& o) { o.input_len = 0; });
  bad([](auto& o) { o.output_len = 0; });
  bad([](auto& o) { o.prefix_len = 17; });
  bad([](auto& o) { o.request_rate = 0; });
  bad([](auto& o) { o.request_rate = -1; });
  bad([](auto& o) { o.request_rate = NAN; });
  bad([](auto& o) { o.url = "localhost:8080"; });
  bad([](auto& o) { o.url = ""; });
  bad([](auto& o) { o.endpoint = "v1/completions"; });
  bad([](auto& o) { o.vocab_max = 10; });
  bad([](auto& o) { o.timeout_s = 0; });
}

TEST(BenchServe, PromptsShareThePrefixAndStayInTheVocabulary) {
  ServeBenchOptions o = valid();
  const auto a = make_serve_prompts(o), b = make_serve_prompts(o);
  EXPECT_EQ(a, b);  // seeded
  ASSERT_EQ(a.size(), 8u);
  for (const auto& p : a) {
    ASSERT_EQ(p.size(), 16u);
    for (int32_t t : p) EXPECT_TRUE(t >= 10 && t < 1000) << t;
    EXPECT_TRUE(std::equal(p.begin(), p.begin() + 6, a[0].begin()));
  }
  EXPECT_NE(a[0], a[1]);  // the rest differs
  o.seed = 1;
  EXPECT_NE(make_serve_prompts(o), a);
}

TEST(BenchServe, ArrivalsArePoisson) {
  for (double t : arrival_times(5, INFINITY, 0)) EXPECT_EQ(t, 0.0);
  const auto t = arrival_times(20000, 50.0, 3);
  EXPECT_EQ(t, arrival_times(20000, 50.0, 3));
  EXPECT_EQ(t[0], 0.0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  // Mean gap 1/rate; exponential gaps have a standard deviation equal to the mean.
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / double(gaps.size());
  for (double g : gaps) var += (g - mean) * (g - mean) / double(gaps.size());
  EXPECT_NEAR(mean, 0.02, 0.02 * 0.05);
  EXPECT_NEAR(std::sqrt(var), 0.02, 0.02 * 0.05);
}

TEST(BenchServe, MetricsAsVllmComputesThem) {
  ServeBenchOptions o = valid();
  ServeBenchRun run;
  run.duration_s = 2.0;
  run.peak_in_flight = 2;
  RequestResult a;  // 5 tokens: ttft 100 ms, then 4 gaps of 50 ms
  a.ok = true;
  a.prompt_tokens = 16;
  a.output_tokens = 5;
  a.ttft_s = 0.1;
  a.e2e_s = 0.3;
  a.itl_s = {0.05, 0.05, 0.05, 0.05};
  RequestResult b;  // 1 token: no TPOT, no ITL
  b.ok = true;
  b.prompt_tokens = 16;
  b.output_tokens = 1;
  b.ttft_s = 0.3;
  b.e2e_s = 0.3;
  RequestResult c;
  c.error = "connect to 127.0.0.1:1: Connection refused";
  run.results = {a, b, c};
  ServeMetrics m = compute_serve_metrics(run, o);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0], "request 2: connect to 127.0.0.1:1: Connection refused");
  EXPECT_EQ(m.total_input_tokens, 32);
  EXPECT_EQ(m.total_output_tokens, 6);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 19.0);
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.0);  // no SLO: every success counts
  EXPECT_NEAR(m.ttft.mean, 200, 1e-9);
  EXPECT_NEAR(m.ttft.median, 200, 1e-9);
  EXPECT_NEAR(m.ttft.p99, 298, 1e-9);
  EXPECT_NEAR(m.ttft.std, 100, 1e-9);
  EXPECT_NEAR(m.tpot.mean, 50, 1e-9);
  EXPECT_NEAR(m.itl.mean, 50, 1e-9);
  EXPECT_NEAR(m.e2el.mean, 300, 1e-9);
  o.slo_ttft_ms = 150;  // only a
  EXPECT_DOUBLE_EQ(compute_serve_metrics(run, o).request_goodput, 0.5);
  o.slo_ttft_ms.reset();
  o.slo_tpot_ms = 40;  // only b, whose TPOT counts as 0
  EXPECT_DOUBLE_EQ(compute_serve_metrics(run, o).request_goodput, 0.5);
  o.slo_ttft_ms = 150;  // neither
  EXPECT_DOUBLE_EQ(compute_serve_metrics(run, o).request_goodput, 0.0);
  const std::string j = serve_report_json(m, run, o);
  for (const char* k : {"\"completed\": 2", "\"failed\": 1", "\"mean_ttft_ms\"", "\"p99_itl_ms\"", "\"median_e2el_ms\"",
                        "\"request_goodput\"", "\"errors\"", "\"total_token_throughput\""})
    EXPECT_NE(j.find(k), std::string::npos) << k;
  const std::string t = serve_report_table(m, run, o);
  EXPECT_NE(t.find("Successful requests:                     2"), std::string::npos) << t;
  EXPECT_NE(t.find("1 x connect to 127.0.0.1:1: Connection refused"), std::string::npos) << t;
}

TEST(BenchServe, RefusedConnectionFailsEveryRequestQuickly) {
  ServeBenchOptions o = valid();
  o.url = "http://127.0.0.1:1";  // nothing listens on port 1
  o.max_concurrency = 2;
  o.timeout_s = 30;
  const auto t0 = std::chrono::steady_clock::now();
  const ServeBenchRun run = run_serve_bench(o);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ASSERT_EQ(run.results.size(), 8u);
  for (const auto& r : run.results) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("refused"), std::string::npos) << r.error;
  }
  EXPECT_EQ(compute_serve_metrics(run, o).failed, 8);
  // Without --model the models request fails first, with the same cause.
  o.model.clear();
  EXPECT_THROW(run_serve_bench(o), Error);
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// The server's speculative-decoding counters, ridge's or vLLM's names, summed over label
// sets, and the run's figures from the difference around it.
TEST(BenchServe, SpecCountersFromMetrics) {
  const SpecCounters none = parse_spec_counters("# HELP x\nridge:num_requests_running{model_name=\"m\"} 3\n");
  EXPECT_FALSE(none.found);
  const SpecCounters r = parse_spec_counters(
      "# TYPE ridge:spec_decode_num_drafts_total counter\n"
      "ridge:spec_decode_num_drafts_total{model_name=\"m\"} 10\n"
      "ridge:spec_decode_num_draft_tokens_total{model_name=\"m\"} 40\n"
      "ridge:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 25\n"
      "ridge:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 9\n");
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.drafts, 10);
  EXPECT_EQ(r.draft_tokens, 40);
  EXPECT_EQ(r.accepted, 25);
  const SpecCounters v = parse_spec_counters(
      "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"a\"} 7\n"
      "vllm:spec_decode_num_draft_tokens_total{engine=\"1\",model_name=\"a\"} 5\n"
      "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_accepted_tokens_total 6");
  EXPECT_EQ(v.draft_tokens, 12);
  EXPECT_EQ(v.drafts, 4);
  EXPECT_EQ(v.accepted, 6);

  ServeBenchOptions o;
  o.url = "http://127.0.0.1:1";
  ServeBenchRun run;
  run.duration_s = 1;
  run.spec_before = {true, 10, 40, 25};
  run.spec_after = {true, 30, 100, 55};
  const ServeMetrics m = compute_serve_metrics(run, o);
  ASSERT_TRUE(m.spec);
  EXPECT_EQ(m.spec_draft_tokens, 60);
  EXPECT_EQ(m.spec_accepted_tokens, 30);
  EXPECT_DOUBLE_EQ(m.spec_acceptance_rate, 0.5);
  EXPECT_DOUBLE_EQ(m.spec_acceptance_length, 2.5);  // 1 + 30 accepted / 20 drafts
  EXPECT_NE(serve_report_table(m, run, o).find("Acceptance rate (%):"), std::string::npos);
  EXPECT_NE(serve_report_json(m, run, o).find("spec_decode_acceptance_rate"), std::string::npos);
  run.spec_after = {};  // the server went away: nothing reported
  EXPECT_FALSE(compute_serve_metrics(run, o).spec);
}

}  // namespace
}  // namespace ridge
