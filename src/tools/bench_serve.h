// `ridge bench serve`: an asynchronous load generator for an OpenAI-compatible server,
// reporting what `vllm bench serve` reports (TTFT, TPOT, ITL, end-to-end latency,
// throughputs, goodput under SLOs).
//
// Requests arrive as a Poisson process (or all at once), at most `max_concurrency` in
// flight; each streams its answer as server-sent events, and every event carrying text
// is one token arrival for the timings. The networking (Boost.Beast, one io_context on
// one thread) lives in bench_serve.cpp; everything here that does not touch a socket
// (URL and SSE parsing, prompts, arrival times, statistics, the report) is pure and is
// in bench_serve_stats.cpp, unit-tested without a server.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ridge {

struct HttpUrl {
  std::string host;       // without the brackets of an IPv6 literal
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing '/'), put before the endpoint
};

// http://HOST[:PORT][/PATH]; anything else (https, a user, a query) is an Error.
HttpUrl parse_http_url(std::string_view url);

struct ServeBenchOptions {
  std::string url;
  std::string endpoint = "/v1/completions";  // "/v1/chat/completions" sends messages
  std::string model;                         // "": the first id of GET /v1/models
  int64_t num_prompts = 64;
  double request_rate = std::numeric_limits<double>::infinity();  // req/s
  int64_t max_concurrency = 0;                                    // 0: unlimited
  int64_t input_len = 128, output_len = 128, prefix_len = 0;
  int32_t vocab_max = 1000;  // random prompt ids are in [10, vocab_max)
  uint64_t seed = 0;
  std::optional<double> slo_ttft_ms, slo_tpot_ms;
  double timeout_s = 600;  // per request, connect to last byte
  double price_per_hour = 0;  // the server's cost per hour (any currency); > 0 adds cost per 1M tokens
  std::string api_key;        // sent as "Authorization: Bearer KEY" when set
};

// Throws an Error naming the first impossible setting.
void check_serve_options(const ServeBenchOptions& o);

// The token ids of every prompt: the first prefix_len are the same in all of them.
std::vector<std::vector<int32_t>> make_serve_prompts(const ServeBenchOptions& o);
// Seconds after the start at which each request arrives: 0 for all with an infinite
// rate, else exponential gaps (the first at 0), as vLLM's benchmark does.
std::vector<double> arrival_times(int64_t n, double rate, uint64_t seed);

// Server-sent events (the WHATWG rules): lines end in \r\n, \n or \r; a line starting
// with ':' is a comment; "data:" lines accumulate and a blank line ends the event.
// Bytes may be split anywhere between feed() calls.
struct SseEvent {
  std::string event;  // the "event:" field, usually empty
  std::string data;
};
class SseParser {
 public:
  void feed(std::string_view bytes, std::vector<SseEvent>& out);

 private:
  void line(std::string_view l, std::vector<SseEvent>& out);
  std::string line_, data_, event_;
  bool after_cr_ = false, started_ = false;
};

// numpy.percentile's default (linear interpolation between the closest ranks);
// q in [0, 100]; 0 for no values.
double percentile(std::vector<double> v, double q);

struct RequestResult {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double ttft_s = 0, e2e_s = 0;  // e2e: to the last token, as vLLM measures it
  std::vector<double> itl_s;
};

// A server's speculative-decoding counters on /metrics (ridge's ridge:spec_decode_* or
// vLLM's vllm:spec_decode_*, every label set summed); found: the server has them.
struct SpecCounters {
  bool found = false;
  double drafts = 0, draft_tokens = 0, accepted = 0;
};
SpecCounters parse_spec_counters(std::string_view prometheus_text);

struct ServeBenchRun {
  std::string model;
  std::vector<RequestResult> results;
  double duration_s = 0;
  int64_t peak_in_flight = 0;
  SpecCounters spec_before, spec_after;  // /metrics around the run (not found: no /metrics)
};

// Sends every request and waits for all of them; failed requests are results, not
// exceptions. Throws only for bad options or when --model is absent and GET /v1/models
// does not answer with a model.
ServeBenchRun run_serve_bench(const ServeBenchOptions& o);

struct LatencyStats {
  double mean = 0, median = 0, p99 = 0, std = 0;  // ms
};
struct ServeMetrics {
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  double request_goodput = 0;  // requests within both SLOs (an absent one: no limit) / s
  int64_t peak_in_flight = 0;
  // Speculative decoding during the run, from the server's counters (spec: it speculated).
  bool spec = false;
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  double spec_acceptance_rate = 0, spec_acceptance_length = 0;  // accepted / drafted; tokens per verification
  double cost_per_m_output = 0, cost_per_m_total = 0;  // price_per_hour over the token rates (0: no price)
  LatencyStats ttft, tpot, itl, e2el;
  std::vector<std::string> errors;  // the first 10
};

ServeMetrics compute_serve_metrics(const ServeBenchRun& run, const ServeBenchOptions& o);
// The table `vllm bench serve` prints.
std::string serve_report_table(const ServeMetrics& m, const ServeBenchRun& run, const ServeBenchOptions& o);
// vLLM's result keys plus the configuration and "errors".
std::string serve_report_json(const ServeMetrics& m, const ServeBenchRun& run, const ServeBenchOptions& o);

}  // namespace ridge
