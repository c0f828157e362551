// The network side of `ridge bench serve`: one io_context on this thread, one C++20
// coroutine per request, Boost.Beast for HTTP/1.1.
//
// Each request opens its own TCP connection and asks for "Connection: close". That is
// right with any server, and a loopback connect costs tens of microseconds, small next
// to one token's time; a keep-alive pool would save it but would have to retry a request
// whose reused connection the server had closed in the meantime, which would blur TTFT.
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/bench_serve.h"

namespace ridge {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string clip(std::string_view s, size_t n) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

struct Server {
  HttpUrl url;
  std::string host_header;
  std::string authorization;  // "Bearer KEY", or empty
  tcp::resolver::results_type endpoints;
  double timeout_s = 600;

  // A timeout names the limit that was hit, not "Operation canceled".
  std::string error(std::string_view what, const beast::error_code& ec) const {
    if (ec == beast::error::timeout)
      return fmt::format("{} {}:{}: timed out (--timeout-s {:g})", what, url.host, url.port, timeout_s);
    if (ec == http::error::partial_message || ec == http::error::end_of_stream)
      return fmt::format("{} {}:{}: the server closed the connection", what, url.host, url.port);
    return fmt::format("{} {}:{}: {}", what, url.host, url.port, ec.message());
  }
  void arm(beast::tcp_stream& s) const {
    // One deadline for the whole request: Beast's timer is not reset by each operation.
    s.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  }
};

// The message in an OpenAI-style error body, else the body's start.
std::string error_body_message(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_string()) return e->get<std::string>();
      if (e->is_object())
        if (auto m = e->find("message"); m != e->end() && m->is_string()) return m->get<std::string>();
    }
    for (const char* k : {"message", "detail"})
      if (auto m = j.find(k); m != j.end() && m->is_string()) return m->get<std::string>();
  }
  return clip(body, 200);
}

// The token arrivals of one streamed response.
struct Tokens {
  Clock::time_point first, last;
  int64_t n = 0;
  std::vector<double> itl;
  std::optional<int64_t> usage_out, usage_in;
  bool done = false;
  std::string error;

  // False once the stream's events are over ([DONE]) or wrong.
  bool on_event(const SseEvent& e, Clock::time_point now) {
    if (done || !error.empty()) return false;
    if (e.data == "[DONE]") {
      done = true;
      return false;
    }
    const json j = json::parse(e.data, nullptr, false);
    if (!j.is_object()) {
      error = fmt::format("the stream sent an event that is not a JSON object: '{}'", clip(e.data, 120));
      return false;
    }
    if (auto err = j.find("error"); err != j.end() && !err->is_null()) {
      error = "the stream sent an error: " + error_body_message(e.data);
      return false;
    }
    if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty() && (*c)[0].is_object()) {
      const json& c0 = (*c)[0];
      const json* text = nullptr;
      if (auto t = c0.find("text"); t != c0.end() && t->is_string()) text = &*t;
      else if (auto d = c0.find("delta"); d != c0.end() && d->is_object())
        if (auto t2 = d->find("content"); t2 != d->end() && t2->is_string()) text = &*t2;
      // Events without text (the finish_reason chunk, a role-only delta) are no token.
      if (text && !text->get_ref<const std::string&>().empty()) {
        if (n == 0) first = now;
        else itl.push_back(seconds(now - last));
        last = now;
        ++n;
      }
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto k = u->find("completion_tokens"); k != u->end() && k->is_number_integer()) usage_out = k->get<int64_t>();
      if (auto k = u->find("prompt_tokens"); k != u->end() && k->is_number_integer()) usage_in = k->get<int64_t>();
    }
    return true;
  }
};

struct Bench {
  asio::io_context& io;
  const Server& srv;
  std::string target;
  const std::vector<std::string>& bodies;
  std::vector<RequestResult>& results;
  int64_t limit = 0;  // 0: unlimited
  int64_t in_flight = 0, peak = 0;
  std::deque<size_t> waiting;  // arrived, waiting for a free slot
};

asio::awaitable<void> stream_request(Bench& b, size_t i) {
  RequestResult& r = b.results[i];
  // The request's clock starts when it is sent, after any wait for a slot, as in vLLM.
  const Clock::time_point st = Clock::now();
  beast::error_code ec;
  beast::tcp_stream stream(b.io);
  b.srv.arm(stream);
  co_await stream.async_connect(b.srv.endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    r.error = b.srv.error("connect to", ec);
    co_return;
  }
  http::request<http::string_body> req{http::verb::post, b.target, 11};
  req.set(http::field::host, b.srv.host_header);
  req.set(http::field::user_agent, "ridge-bench-serve");
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  if (!b.srv.authorization.empty()) req.set(http::field::authorization, b.srv.authorization);
  req.keep_alive(false);
  req.body() = b.bodies[i];
  req.prepare_payload();
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    r.error = b.srv.error("send to", ec);
    co_return;
  }
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> p;
  p.body_limit(boost::none);
  co_await http::async_read_header(stream, buf, p, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    r.error = b.srv.error("read the response header from", ec);
    co_return;
  }
  const unsigned status = p.get().result_int();
  std::array<char, 16384> chunk;
  SseParser sse;
  std::vector<SseEvent> events;
  Tokens tk;
  std::string err_body;
  // Read to the end of the body even after [DONE]: leaving bytes unread would make the
  // close a reset, and vLLM's client waits for the body's end as well.
  while (!p.is_done() && tk.error.empty()) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    co_await http::async_read_some(stream, buf, p, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
    const auto now = Clock::now();
    const std::string_view got(chunk.data(), chunk.size() - p.get().body().size);
    if (status != 200) {
      err_body.append(got.substr(0, std::min(got.size(), 4096 - std::min<size_t>(err_body.size(), 4096))));
      continue;
    }
    sse.feed(got, events);
    for (const auto& e : events)
      if (!tk.on_event(e, now)) break;
    events.clear();
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (status != 200) {
    r.error = fmt::format("HTTP {}: {}", status, error_body_message(err_body));
  } else if (!tk.error.empty()) {
    r.error = tk.error;
  } else if (ec && !tk.done) {
    r.error = fmt::format("{} after {} tokens", b.srv.error("read the stream from", ec), tk.n);
  } else if (tk.n == 0) {
    const auto type = p.get()[http::field::content_type];
    r.error = type.starts_with("text/event-stream")
                  ? "the stream ended without any token"
                  : fmt::format("the answer is not an event stream (Content-Type '{}')", std::string_view(type));
  } else {
    r.ok = true;
    r.ttft_s = seconds(tk.first - st);
    r.e2e_s = seconds(tk.last - st);
    r.itl_s = std::move(tk.itl);
    // Without a usage chunk, every text event is taken for one token.
    r.output_tokens = tk.usage_out.value_or(tk.n);
    if (tk.usage_in) r.prompt_tokens = *tk.usage_in;
  }
}

void start(Bench& b, size_t i);

void arrive(Bench& b, size_t i) {
  if (b.limit == 0 || b.in_flight < b.limit) start(b, i);
  else b.waiting.push_back(i);
}

void start(Bench& b, size_t i) {
  b.peak = std::max(b.peak, ++b.in_flight);
  asio::co_spawn(b.io, stream_request(b, i), [&b, i](std::exception_ptr e) {
    if (e) {
      RequestResult& r = b.results[i];
      r.ok = false;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        r.error = fmt::format("client error: {}", x.what());
      } catch (...) {
        r.error = "client error";
      }
    }
    --b.in_flight;
    if (!b.waiting.empty()) {
      const size_t j = b.waiting.front();
      b.waiting.pop_front();
      start(b, j);
    }
  });
}

asio::awaitable<void> dispatch(Bench& b, Clock::time_point t0, const std::vector<double>& at) {
  asio::steady_timer timer(b.io);
  for (size_t i = 0; i < at.size(); ++i) {
    const auto due = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at[i]));
    if (due > Clock::now()) {
      timer.expires_at(due);
      beast::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    arrive(b, i);
  }
}

// GET path: the body of a 200, else err says why.
asio::awaitable<void> http_get(asio::io_context& io, const Server& srv, std::string path, std::string& body,
                               std::string& err) {
  beast::error_code ec;
  beast::tcp_stream stream(io);
  srv.arm(stream);
  co_await stream.async_connect(srv.endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    err = srv.error("connect to", ec);
    co_return;
  }
  http::request<http::empty_body> req{http::verb::get, srv.url.base_path + path, 11};
  req.set(http::field::host, srv.host_header);
  req.set(http::field::user_agent, "ridge-bench-serve");
  if (!srv.authorization.empty()) req.set(http::field::authorization, srv.authorization);
  req.keep_alive(false);
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  beast::flat_buffer buf;
  http::response_parser<http::string_body> res;
  res.body_limit(64 << 20);
  if (!ec) co_await http::async_read(stream, buf, res, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    err = srv.error(fmt::format("GET {} from", path), ec);
    co_return;
  }
  if (res.get().result_int() != 200) {
    err = fmt::format("HTTP {}: {}", res.get().result_int(), error_body_message(res.get().body()));
    co_return;
  }
  body = std::move(res.get().body());
}

asio::awaitable<void> fetch_model(asio::io_context& io, const Server& srv, std::string& model, std::string& err) {
  std::string body;
  co_await http_get(io, srv, "/v1/models", body, err);
  if (!err.empty()) co_return;
  const json j = json::parse(body, nullptr, false);
  if (j.is_object())
    if (auto d = j.find("data"); d != j.end() && d->is_array() && !d->empty() && (*d)[0].is_object())
      if (auto id = (*d)[0].find("id"); id != (*d)[0].end() && id->is_string()) model = id->get<std::string>();
  if (model.empty()) err = fmt::format("no data[0].id in '{}'", clip(body, 200));
}

// Every in-flight request holds a socket: lift the soft limit on open files to the hard
// one, or a few hundred concurrent requests would fail with "Too many open files".
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? rlim_t(1 << 20) : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

std::string request_body(const ServeBenchOptions& o, const std::string& model, const std::vector<int32_t>& prompt) {
  json j;
  j["model"] = model;
  if (o.endpoint.find("chat/completions") != std::string::npos) {
    // A chat message is text: the ids as words, so the prompt's length is only roughly
    // input_len tokens; the input count then comes from the server's usage.
    std::string text;
    for (int32_t t : prompt) text += (text.empty() ? "" : " ") + std::to_string(t);
    j["messages"] = json::array({{{"role", "user"}, {"content", text}}});
  } else {
    j["prompt"] = prompt;
  }
  j["max_tokens"] = o.output_len;
  j["ignore_eos"] = true;
  j["temperature"] = 0;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  return j.dump();
}

}  // namespace

ServeBenchRun run_serve_bench(const ServeBenchOptions& o) {
  check_serve_options(o);
  raise_fd_limit();
  Server srv;
  srv.url = parse_http_url(o.url);
  srv.timeout_s = o.timeout_s;
  if (!o.api_key.empty()) srv.authorization = "Bearer " + o.api_key;
  const bool v6 = srv.url.host.find(':') != std::string::npos;
  srv.host_header = (v6 ? "[" + srv.url.host + "]" : srv.url.host) +
                    (srv.url.port == 80 ? "" : ":" + std::to_string(srv.url.port));
  asio::io_context io(1);  // one thread: no locks anywhere
  {
    tcp::resolver resolver(io);
    beast::error_code ec;
    srv.endpoints = resolver.resolve(srv.url.host, std::to_string(srv.url.port), ec);
    if (ec) fail("--url '{}': cannot resolve '{}': {}", o.url, srv.url.host, ec.message());
  }
  // A failure escaping a coroutine is stored, never thrown through io.run().
  std::string internal_error;
  auto on_done = [&](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      internal_error = x.what();
    } catch (...) {
      internal_error = "unknown error";
    }
  };

  ServeBenchRun run;
  run.model = o.model;
  if (run.model.empty()) {
    std::string err;
    asio::co_spawn(io, fetch_model(io, srv, run.model, err), on_done);
    io.run();
    io.restart();
    if (run.model.empty())
      fail("no --model given, and GET {}/v1/models named none: {}", o.url, internal_error.empty() ? err : internal_error);
  }

  const auto prompts = make_serve_prompts(o);
  std::vector<std::string> bodies;
  bodies.reserve(prompts.size());
  for (const auto& p : prompts) bodies.push_back(request_body(o, run.model, p));
  const std::vector<double> at = arrival_times(o.num_prompts, o.request_rate, o.seed);
  run.results.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) run.results[i].prompt_tokens = int64_t(prompts[i].size());

  Bench b{io, srv, srv.url.base_path + o.endpoint, bodies, run.results, o.max_concurrency, 0, 0, {}};
  std::fputs(fmt::format("ridge bench serve: {} requests to http://{}{}, model {}, rate {} req/s, max concurrency {}\n",
                         o.num_prompts, srv.host_header, b.target, run.model,
                         std::isinf(o.request_rate) ? "inf" : fmt::format("{:g}", o.request_rate),
                         o.max_concurrency ? std::to_string(o.max_concurrency) : "unlimited")
                 .c_str(),
             stderr);
  // The server's speculative-decoding counters around the run; a server without
  // /metrics (or without them) leaves them not found.
  auto spec_counters = [&] {
    std::string body, err;
    asio::co_spawn(io, http_get(io, srv, "/metrics", body, err), on_done);
    io.run();
    io.restart();
    return err.empty() ? parse_spec_counters(body) : SpecCounters{};
  };
  run.spec_before = spec_counters();
  const auto t0 = Clock::now();
  asio::co_spawn(io, dispatch(b, t0, at), on_done);
  io.run();
  io.restart();
  run.duration_s = seconds(Clock::now() - t0);
  run.peak_in_flight = b.peak;
  if (!internal_error.empty()) fail("bench serve: {}", internal_error);
  run.spec_after = spec_counters();
  return run;
}

}  // namespace ridge
