#include "server/router.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/kv_block_index.h"

namespace ridge::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

ReplicaSpec parse_replica(const std::string& spec) {
  ReplicaSpec r;
  std::vector<std::string> parts;
  size_t a = 0;
  for (size_t b; (b = spec.find(',', a)) != std::string::npos; a = b + 1) parts.push_back(spec.substr(a, b - a));
  parts.push_back(spec.substr(a));
  if (parts.size() > 3) fail("--replica {}: expected URL[,EVENTS[,REPLAY]]", spec);
  r.url = parts[0];
  if (parts.size() > 1) r.events = parts[1];
  if (parts.size() > 2) r.replay = parts[2];
  if (r.url.rfind("http://", 0) != 0) fail("--replica {}: the URL must start with http://", spec);
  if (!r.replay.empty() && r.events.empty()) fail("--replica {}: a replay endpoint needs an events endpoint", spec);
  return r;
}

namespace {

std::string be64(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint64_t(v) >> (8 * (7 - i)));
  return s;
}
int64_t from_be64(const zmq::message_t& m) {
  if (m.size() != 8) return INT64_MIN;
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = v << 8 | m.data<uint8_t>()[i];
  return int64_t(v);
}

std::string error_json(int status, const std::string& msg) {
  return json{{"error", {{"message", msg}, {"type", status == 503 ? "ServiceUnavailableError" : "RouterError"},
                         {"code", status}}}}
      .dump();
}

// The bytes of one proxied response, produced on the upstream thread, drained by the
// HTTP server's.
class ProxyStream final : public HttpStream {
 public:
  explicit ProxyStream(bool sse) : sse_(sse) {}
  bool sse() const override { return sse_; }
  bool drain(std::string& out, int& status) override {
    std::lock_guard lk(mu_);
    out += buf_;
    buf_.clear();
    status = status_;
    return done_;
  }
  void set_notify(std::function<void()> n) override {
    std::lock_guard lk(mu_);
    notify_ = std::move(n);
  }
  void cancel() override {
    std::function<void()> c;
    {
      std::lock_guard lk(mu_);
      cancelled_ = true;
      c = on_cancel_;
    }
    if (c) c();
  }
  bool cancelled() const { return cancelled_; }
  // What cancel() does besides marking the stream (the upstream exchange in progress).
  void on_cancel(std::function<void()> c) {
    std::lock_guard lk(mu_);
    on_cancel_ = std::move(c);
  }

  void append(std::string_view s, bool done, int status = 200) {
    std::function<void()> n;
    {
      std::lock_guard lk(mu_);
      buf_.append(s);
      done_ = done_ || done;
      status_ = status;
      n = notify_;
    }
    if (n) n();
  }
  // An error as this stream can carry it: the body of a plain response, or an SSE event.
  void error(int status, const std::string& body) {
    if (!sse_) return append(body, true, status);
    append("data: " + body + "\n\ndata: [DONE]\n\n", true);
  }

 private:
  const bool sse_;
  std::mutex mu_;
  std::string buf_;
  bool done_ = false;
  int status_ = 200;
  std::function<void()> notify_, on_cancel_;
  std::atomic<bool> cancelled_{false};
};

// Whether an SSE buffer holds a first token: an event with text (completions) or content
// (chat), or the end.
bool has_first_token(const std::string& s) {
  for (const char* key : {"\"text\":\"", "\"content\":\""}) {
    for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + 1)) {
      const size_t q = p + std::strlen(key);
      if (q < s.size() && s[q] != '"') return true;
    }
  }
  return s.find("[DONE]") != std::string::npos;
}

}  // namespace

struct Router::Impl {
  struct Replica {
    ReplicaSpec spec;
    std::string host, port, host_header;
    std::atomic<bool> healthy{true};
    std::atomic<int32_t> inflight{0};
    std::atomic<int64_t> routed{0};
    std::atomic<bool> resync{false};  // set when it rejoins: the events thread reads its cache again
  };
  enum class Outcome { Done, Retry, RetryDown };

  RouterOptions opt;
  std::vector<std::unique_ptr<Replica>> reps;
  KvBlockIndex index;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread up_thread, ev_thread;
  std::atomic<bool> stopping{false};
  std::unique_ptr<HttpServer> http;
  std::mutex rr_mu;
  size_t rr = 0;
  std::atomic<int64_t> retries{0}, failed{0}, prompt_tokens{0}, matched_tokens{0};

  explicit Impl(const RouterOptions& o) : opt(o), index(int32_t(o.replicas.size())) {
    RIDGE_CHECK(!o.replicas.empty(), "ridge router: give at least one --replica URL");
    for (const ReplicaSpec& s : o.replicas) {
      auto r = std::make_unique<Replica>();
      r->spec = s;
      const std::string hp = s.url.substr(7, s.url.find('/', 7) == std::string::npos ? std::string::npos : s.url.find('/', 7) - 7);
      const size_t c = hp.rfind(':');
      if (c == std::string::npos || c + 1 == hp.size()) fail("--replica {}: give the port (http://HOST:PORT)", s.url);
      r->host = hp.substr(0, c), r->port = hp.substr(c + 1), r->host_header = hp;
      reps.push_back(std::move(r));
    }
  }

  // ---- choosing a replica
  int pick(const std::vector<int32_t>& tokens, const std::vector<bool>& tried, bool generation) {
    std::vector<int> cand;
    for (size_t i = 0; i < reps.size(); ++i)
      if (!tried[i] && reps[i]->healthy) cand.push_back(int(i));
    if (cand.empty())  // health may be stale: any not tried
      for (size_t i = 0; i < reps.size(); ++i)
        if (!tried[i]) cand.push_back(int(i));
    if (cand.empty()) return -1;
    std::lock_guard lk(rr_mu);
    if (opt.policy == RouterOptions::Policy::RoundRobin && generation) return cand[rr++ % cand.size()];
    int least = cand[0];
    for (int c : cand)
      if (reps[size_t(c)]->inflight < reps[size_t(least)]->inflight) least = c;
    if (!generation) return least;  // /tokenize and the like: no turn taken from the requests
    // Among the least loaded, in turns (a burst does not all land on replica 0).
    std::vector<int> ties;
    for (int c : cand)
      if (reps[size_t(c)]->inflight == reps[size_t(least)]->inflight) ties.push_back(c);
    least = ties[rr++ % ties.size()];
    if (tokens.empty()) return least;
    int best = -1, best_m = 0;
    for (int c : cand) {
      const int32_t m = index.matched_tokens(c, tokens);
      if (m > best_m || (m == best_m && best >= 0 && m > 0 && reps[size_t(c)]->inflight < reps[size_t(best)]->inflight))
        best = c, best_m = m;
    }
    if (best < 0 || reps[size_t(best)]->inflight - reps[size_t(least)]->inflight > opt.balance_threshold) return least;
    return best;
  }

  // ---- one upstream exchange
  // timeout_s: the whole exchange's bound (0: request_timeout_s).
  asio::awaitable<Outcome> forward(int ri, const HttpRequest& req, std::shared_ptr<ProxyStream> out, bool last,
                                   double timeout_s = 0) {
    Replica& r = *reps[size_t(ri)];
    beast::error_code ec;
    tcp::resolver res(io);
    auto eps = co_await res.async_resolve(r.host, r.port, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Outcome::RetryDown;
    if (out->cancelled()) co_return Outcome::Done;
    auto sp = std::make_shared<beast::tcp_stream>(io);
    beast::tcp_stream& s = *sp;
    // The client leaving closes the upstream connection (on this thread), whatever the
    // exchange is waiting for.
    out->on_cancel([this, w = std::weak_ptr<beast::tcp_stream>(sp)] {
      asio::post(io, [w] {
        if (auto p = w.lock()) p->cancel();
      });
    });
    s.expires_after(std::chrono::milliseconds(int64_t(opt.connect_timeout_s * 1000)));
    co_await s.async_connect(eps, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Outcome::RetryDown;
    const double total = timeout_s > 0 ? timeout_s : opt.request_timeout_s;
    // A stream's headers come at once: a replica that does not send them in
    // header_timeout_s is hung, and the request goes elsewhere.
    s.expires_after(std::chrono::milliseconds(int64_t((out->sse() ? std::min(total, opt.header_timeout_s) : total) * 1000)));
    http::request<http::string_body> up{req.method == "GET" ? http::verb::get : http::verb::post, req.target, 11};
    up.set(http::field::host, r.host_header);
    up.set(http::field::content_type, "application/json");
    if (!req.authorization.empty()) up.set(http::field::authorization, req.authorization);
    up.keep_alive(false);
    up.body() = req.body;
    up.prepare_payload();
    co_await http::async_write(s, up, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Outcome::RetryDown;
    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    co_await http::async_read_header(s, buf, p, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return out->cancelled() ? Outcome::Done : Outcome::RetryDown;  // lost before any byte
    s.expires_after(std::chrono::milliseconds(int64_t(total * 1000)));
    const int status = int(p.get().result_int());
    const bool stream = out->sse() && status == 200;
    std::array<char, 16384> chunk;
    std::string body;  // held back: all of a plain response; a stream until its first token
    bool forwarded = false;
    while (!p.is_done()) {
      if (out->cancelled()) co_return Outcome::Done;  // the client left: drop the upstream
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      co_await http::async_read_some(s, buf, p, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      body.append(chunk.data(), chunk.size() - p.get().body().size);
      if (stream && (forwarded || has_first_token(body))) {
        out->append(body, false);
        body.clear();
        forwarded = true;
      }
    }
    if (out->cancelled()) co_return Outcome::Done;
    if (ec && !forwarded) co_return Outcome::RetryDown;  // lost before its first token
    if (ec) {  // lost mid-stream: what came is the client's, the end says what happened
      out->append("data: " + error_json(502, "the replica's stream broke off") + "\n\ndata: [DONE]\n\n", true);
      co_return Outcome::Done;
    }
    if ((status == 503 || status >= 500) && !last) co_return Outcome::Retry;
    if (stream) out->append(body, true);
    else if (out->sse()) out->error(status, body);  // an error for a streamed request
    else out->append(body, true, status);
    co_return Outcome::Done;
  }

  // A replica's /tokenize for a prompt given as text or messages: its token ids, or none.
  asio::awaitable<std::vector<int32_t>> tokenize(const json& body, bool chat) {
    std::vector<bool> tried(reps.size(), false);
    const int ri = pick({}, tried, false);
    if (ri < 0) co_return std::vector<int32_t>{};
    HttpRequest req;
    req.method = "POST";
    req.target = "/tokenize";
    json t = body;
    if (!chat && body.contains("add_special_tokens")) t["add_special_tokens"] = body["add_special_tokens"];
    req.body = t.dump();
    auto sink = std::make_shared<ProxyStream>(false);
    const Outcome o = co_await forward(ri, req, sink, true, 10);  // a hung replica does not hold the request
    std::string got;
    int status = 0;
    sink->drain(got, status);
    std::vector<int32_t> ids;
    if (o != Outcome::Done || status != 200) co_return ids;
    try {
      const json j = json::parse(got);  // named: a range-for over a temporary's member would dangle
      for (const auto& v : j.at("tokens")) ids.push_back(v.get<int32_t>());
    } catch (const std::exception&) {
      ids.clear();
    }
    co_return ids;
  }

  // Every request's stream ends, whatever is thrown.
  asio::awaitable<void> proxy(HttpRequest req, std::shared_ptr<ProxyStream> out, bool generation) {
    try {
      co_await route(std::move(req), out, generation);
    } catch (const std::exception& e) {
      ++failed;
      out->error(500, error_json(500, std::string("router: ") + e.what()));
    }
  }

  asio::awaitable<void> route(HttpRequest req, std::shared_ptr<ProxyStream> out, bool generation) {
    std::vector<int32_t> tokens;
    if (generation && opt.policy == RouterOptions::Policy::Prefix) {
      try {
        const json j = json::parse(req.body);
        const bool chat = req.target == "/v1/chat/completions";
        if (!chat && j.contains("prompt")) {
          const json& p = j["prompt"];
          const json& first = p.is_array() && !p.empty() && !p[0].is_number_integer() ? p[0] : p;
          if (first.is_array())
            for (const auto& v : first) tokens.push_back(v.get<int32_t>());
          else if (first.is_string()) {
            json tb = json::object();  // built before the co_await (GCC 12: no braced lists in one)
            tb["prompt"] = first;
            if (j.contains("add_special_tokens")) tb["add_special_tokens"] = j["add_special_tokens"];
            tokens = co_await tokenize(tb, false);
          }
        } else if (chat && j.contains("messages")) {
          tokens = co_await tokenize(j, true);
        }
      } catch (const std::exception&) {
        tokens.clear();  // the replica will say what is wrong with the body
      }
    }
    std::vector<bool> tried(reps.size(), false);
    for (int32_t attempt = 0; attempt < opt.max_attempts && !out->cancelled(); ++attempt) {
      const int ri = pick(tokens, tried, generation);
      if (ri < 0) break;
      tried[size_t(ri)] = true;
      Replica& r = *reps[size_t(ri)];
      if (attempt == 0 && generation) {
        prompt_tokens += int64_t(tokens.size());
        matched_tokens += index.matched_tokens(ri, tokens);
      }
      bool last = attempt + 1 == opt.max_attempts;
      if (!last) {  // the last replica left to try gets no second chance either
        bool any = false;
        for (size_t i = 0; i < reps.size(); ++i) any |= !tried[i];
        last = !any;
      }
      ++r.inflight;
      Outcome o = Outcome::RetryDown;
      try {
        o = co_await forward(ri, req, out, last);
      } catch (const std::exception&) {
      }
      --r.inflight;
      if (o == Outcome::Done) {
        ++r.routed;
        co_return;
      }
      if (o == Outcome::RetryDown && r.healthy.exchange(false))
        std::fprintf(stderr, "router: %s stopped answering; out of the rotation\n", r.spec.url.c_str());
      ++retries;
    }
    ++failed;
    out->error(503, error_json(503, "no replica could take the request"));
  }

  // ---- health: one loop per replica, so a hung one delays no other's checks
  asio::awaitable<void> health_loop(size_t i) {
    asio::steady_timer t(io);
    Replica& r = *reps[i];
    while (!stopping) {
      HttpRequest req;
      req.method = "GET";
      req.target = "/health";
      auto sink = std::make_shared<ProxyStream>(false);
      Outcome o = Outcome::RetryDown;
      try {
        o = co_await forward(int(i), req, sink, true, std::max(1.0, opt.connect_timeout_s));
      } catch (const std::exception&) {
      }
      std::string b;
      int st = 0;
      sink->drain(b, st);
      const bool ok = o == Outcome::Done && st == 200;
      if (ok && !r.healthy.exchange(true)) {
        std::fprintf(stderr, "router: %s answers again\n", r.spec.url.c_str());
        r.resync = true;  // its cache may be another process's now: read it again
      }
      if (!ok && r.healthy.exchange(false))
        std::fprintf(stderr, "router: %s fails its health check; out of the rotation\n", r.spec.url.c_str());
      t.expires_after(std::chrono::milliseconds(int64_t(opt.health_interval_s * 1000)));
      beast::error_code ec;
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

  // ---- KV events: one thread, every replica's SUB socket
  void events_loop() {
    zmq::context_t ctx(1);
    struct Sub {
      int32_t r;
      std::unique_ptr<zmq::socket_t> sub, replay;
      int64_t next = 0;  // the sequence number expected
    };
    std::vector<Sub> subs;
    // A replay socket per request: a DEALER keeps what it could not send, and a reply
    // that came after its request timed out would answer the next one.
    auto dealer = [&](const std::string& e) {
      auto d = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
      d->set(zmq::sockopt::linger, 0);
      d->set(zmq::sockopt::rcvtimeo, 1000);
      d->connect(e);
      return d;
    };
    for (size_t i = 0; i < reps.size(); ++i) {
      const ReplicaSpec& s = reps[i]->spec;
      if (s.events.empty()) continue;
      try {
        Sub x{int32_t(i), std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::sub), nullptr, 0};
        x.sub->set(zmq::sockopt::linger, 0);
        x.sub->set(zmq::sockopt::subscribe, "");
        x.sub->connect(s.events);
        if (!s.replay.empty()) x.replay = dealer(s.replay);
        subs.push_back(std::move(x));
      } catch (const zmq::error_t& e) {
        std::fprintf(stderr, "router: %s: its events (%s) cannot be read: %s\n", s.url.c_str(), s.events.c_str(), e.what());
      }
    }
    if (subs.empty()) return;
    std::vector<zmq::pollitem_t> items;
    for (auto& x : subs) items.push_back({x.sub->handle(), 0, ZMQ_POLLIN, 0});
    // Batches [from, ...) of one replica again, in order, applied. False when it did not
    // answer, or no longer holds `from`: what the router knows of it is then incomplete.
    auto replay = [&](Sub& x, int64_t from) {
      if (!x.replay) return false;
      bool whole = true;
      try {
        x.replay->send(zmq::buffer(std::string_view()), zmq::send_flags::sndmore);
        x.replay->send(zmq::buffer(be64(from)), zmq::send_flags::none);
        for (bool first = true;; first = false) {
          std::vector<zmq::message_t> m;
          if (!zmq::recv_multipart(*x.replay, std::back_inserter(m))) {  // timed out
            x.replay = dealer(reps[size_t(x.r)]->spec.replay);
            return false;
          }
          if (m.size() != 3) continue;
          const int64_t seq = from_be64(m[1]);
          if (seq == -1) return whole;
          if (first && seq != from) whole = false;
          if (seq >= x.next || !whole) {
            if (!index.apply(x.r, m[2].to_string_view())) whole = false;
            x.next = seq + 1;
          }
        }
      } catch (const zmq::error_t&) {
        x.replay = dealer(reps[size_t(x.r)]->spec.replay);
        return false;
      }
    };
    // All of a replica's state again: at start (a router that starts after its replicas:
    // one serving only cache hits publishes nothing that would show a gap), after a
    // restart, and when it rejoins the rotation.
    auto resync = [&](Sub& x) {
      index.clear(x.r);
      x.next = 0;
      replay(x, 0);
    };
    for (auto& x : subs) resync(x);
    while (!stopping) {
      for (auto& x : subs)
        if (reps[size_t(x.r)]->resync.exchange(false)) resync(x);
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
      } catch (const zmq::error_t&) {
        continue;
      }
      for (size_t k = 0; k < subs.size(); ++k) {
        if (!(items[k].revents & ZMQ_POLLIN)) continue;
        Sub& x = subs[k];
        std::vector<zmq::message_t> m;
        try {
          if (!zmq::recv_multipart(*x.sub, std::back_inserter(m), zmq::recv_flags::dontwait)) continue;
        } catch (const zmq::error_t&) {
          continue;
        }
        if (m.size() != 3) continue;
        const int64_t seq = from_be64(m[1]);
        if (seq < 0) continue;
        if (seq < x.next) {  // numbering started again: another process at that address
          resync(x);
          if (seq < x.next) continue;  // the replay had it
        }
        if (seq > x.next && !replay(x, x.next)) index.clear(x.r);  // a gap nobody could fill
        if (seq >= x.next) {
          // A batch that does not decode leaves the view unknown: forget it until the next.
          if (!index.apply(x.r, m[2].to_string_view())) index.clear(x.r);
          x.next = seq + 1;
        }
      }
    }
  }

  // ---- HTTP front
  HttpReply handle(const HttpRequest& req) {
    HttpReply reply;
    const std::string& t = req.target;
    if (t == "/health") {
      bool any = false;
      for (const auto& r : reps) any |= bool(r->healthy);
      reply.response.content_type = "text/plain";
      if (!any) reply.response.status = 503;
      return reply;
    }
    if (t == "/metrics") {
      reply.response.content_type = "text/plain; version=0.0.4; charset=utf-8";
      reply.response.body = metrics();
      return reply;
    }
    const bool generation = t == "/v1/completions" || t == "/v1/chat/completions";
    if (!generation && t != "/v1/models" && t != "/tokenize" && t != "/detokenize") {
      reply.response.status = 404;
      reply.response.body = error_json(404, fmt::format("no route {} {}", req.method, t));
      return reply;
    }
    bool sse = false;
    if (generation) {
      try {
        const json j = json::parse(req.body);
        sse = j.value("stream", false);
      } catch (const std::exception&) {
        sse = false;  // the replica answers a malformed body with its 400
      }
    }
    auto out = std::make_shared<ProxyStream>(sse);
    asio::co_spawn(io, proxy(req, out, generation), asio::detached);
    reply.stream = out;
    return reply;
  }

  std::string metrics() const {
    std::string o;
    auto line = [&](const char* name, const char* type, const char* help) {
      o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    line("ridge_router:requests_total", "counter", "Requests a replica answered, by replica.");
    for (const auto& r : reps) o += fmt::format("ridge_router:requests_total{{replica=\"{}\"}} {}\n", r->spec.url, r->routed.load());
    line("ridge_router:replica_healthy", "gauge", "1 while the replica is in the rotation.");
    for (const auto& r : reps) o += fmt::format("ridge_router:replica_healthy{{replica=\"{}\"}} {}\n", r->spec.url, r->healthy ? 1 : 0);
    line("ridge_router:replica_cached_blocks", "gauge", "KV blocks the replica's events say it holds.");
    for (size_t i = 0; i < reps.size(); ++i)
      o += fmt::format("ridge_router:replica_cached_blocks{{replica=\"{}\"}} {}\n", reps[i]->spec.url, index.blocks(int32_t(i)));
    line("ridge_router:retries_total", "counter", "Requests handed to another replica after one refused or lost them.");
    o += fmt::format("ridge_router:retries_total {}\n", retries.load());
    line("ridge_router:failed_total", "counter", "Requests no replica could take.");
    o += fmt::format("ridge_router:failed_total {}\n", failed.load());
    line("ridge_router:prompt_tokens_total", "counter", "Prompt tokens routed (those the router could tokenize).");
    o += fmt::format("ridge_router:prompt_tokens_total {}\n", prompt_tokens.load());
    line("ridge_router:matched_tokens_total", "counter", "Of those, the tokens the chosen replica held in its prefix cache.");
    o += fmt::format("ridge_router:matched_tokens_total {}\n", matched_tokens.load());
    return o;
  }
};

Router::Router(const RouterOptions& o) : impl_(std::make_unique<Impl>(o)) {
  Impl& m = *impl_;
  HttpOptions ho = o.http;
  ho.error_body = [](int status, const std::string& msg) {
    HttpResponse r;
    r.status = status;
    r.body = error_json(status, msg);
    return r;
  };
  m.http = std::make_unique<HttpServer>(
      ho, [&m](const HttpRequest& r) { return m.handle(r); }, [] {},
      [&m] {
        for (const auto& r : m.reps)
          if (r->inflight > 0) return false;
        return true;
      });
}

Router::~Router() {
  Impl& m = *impl_;
  m.stopping = true;
  m.work.reset();
  m.io.stop();
  if (m.up_thread.joinable()) m.up_thread.join();
  if (m.ev_thread.joinable()) m.ev_thread.join();
  m.http.reset();
}

uint16_t Router::listen() { return impl_->http->listen(); }

void Router::run() {
  Impl& m = *impl_;
  m.work.emplace(m.io.get_executor());
  for (size_t i = 0; i < m.reps.size(); ++i) asio::co_spawn(m.io, m.health_loop(i), asio::detached);
  m.up_thread = std::thread([&m] { m.io.run(); });
  m.ev_thread = std::thread([&m] {
    try {
      m.events_loop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "router: KV events stopped: %s\n", e.what());
    }
  });
  m.http->run();
  m.stopping = true;
}

void Router::stop() { impl_->http->stop(); }

}  // namespace ridge::server
