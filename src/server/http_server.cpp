#include "server/http_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <csignal>
#include <cstdio>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace ridge::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

std::string status_line(int status) {
  const auto reason = http::obsolete_reason(http::status(unsigned(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions opt;
  Handler handler;
  OnShutdown on_shutdown;
  std::function<bool()> idle;
  std::function<void(int)> on_status;
  class Session;
  // Before ioc: sessions whose handlers ~io_context destroys erase themselves from it.
  std::unordered_set<Session*> live;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc, SIGINT, SIGTERM};
  asio::steady_timer shutdown_timer{ioc};
  asio::steady_timer accept_retry{ioc};
  std::chrono::steady_clock::time_point shutdown_deadline;
  bool shutting_down = false;

  void accept();
  void wait_signal();
  void begin_shutdown();
  void poll_shutdown();
  void stop_now();  // close every connection and leave run()
};

// One connection: read a request, answer it (at once or as a stream), repeat while
// keep-alive. While a stream is being produced a one-byte-at-a-time read watches the
// socket, so a client that disconnects mid-generation cancels its work at once rather
// than at the next write.
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, Impl& srv) : stream_(std::move(s)), srv_(srv) { srv_.live.insert(this); }
  ~Session() {
    srv_.live.erase(this);
    if (gen_) gen_->cancel();
  }

  void start() { read(); }

  // Shutdown: close a connection that sits between requests.
  void close_if_idle() {
    if (!gen_ && !writing_) {
      error_code ec;
      stream_.socket().cancel(ec);
    }
  }

  void close() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  void read() {
    if (srv_.shutting_down) return close();
    parser_.emplace();
    parser_->body_limit(uint64_t(srv_.opt.max_body_bytes));
    parser_->header_limit(64 * 1024);
    reading_ = true;
    stream_.expires_after(std::chrono::milliseconds(int64_t(srv_.opt.read_timeout_s * 1000)));
    http::async_read_header(stream_, buf_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  // The header alone decides two things before any body byte is read: a declared body
  // over the limit is refused at once, and a client waiting for "100 Continue" gets it.
  void on_header(error_code ec) {
    if (ec) return on_read(ec);
    auto& m = parser_->get();
    http10_ = m.version() < 11;
    if (auto len = parser_->content_length(); len && *len > uint64_t(srv_.opt.max_body_bytes))
      return on_read(http::error::body_limit);
    auto read_body = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buf_, *self->parser_,
                       [self](error_code e, size_t) { self->on_read(e); });
    };
    const auto expect = m[http::field::expect];
    if (!http10_ && beast::iequals(expect, "100-continue")) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_.socket(), asio::buffer(kContinue, sizeof kContinue - 1),
                        [self = shared_from_this(), read_body](error_code e, size_t) {
                          if (e) return self->close();
                          read_body();
                        });
      return;
    }
    read_body();
  }

  void on_read(error_code ec) {
    reading_ = false;
    stream_.expires_never();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      linger_ = true;
      return respond(error_json(413, "the request body is larger than the limit of " +
                                         std::to_string(srv_.opt.max_body_bytes) + " bytes"));
    }
    if (ec == http::error::end_of_stream || ec == asio::error::operation_aborted || ec == beast::error::timeout ||
        ec == asio::error::connection_reset || ec == asio::error::eof)
      return close();
    if (ec) {
      keep_alive_ = false;
      linger_ = true;
      return respond(error_json(400, "malformed HTTP request: " + ec.message()));
    }
    auto& m = parser_->get();
    keep_alive_ = m.keep_alive();
    HttpRequest req;
    req.method = std::string(m.method_string());
    req.target = std::string(m.target());
    if (auto q = req.target.find('?'); q != std::string::npos) req.target.resize(q);
    if (auto it = m.find(http::field::authorization); it != m.end()) req.authorization = std::string(it->value());
    req.body = std::move(m.body());
    if (srv_.shutting_down) {
      keep_alive_ = false;
      HttpResponse r = error_json(503, "the server is shutting down");
      r.headers.emplace_back("Retry-After", "1");
      return respond(std::move(r));
    }
    HttpReply reply;
    try {
      reply = srv_.handler(req);
    } catch (const std::exception& e) {
      reply.response = error_json(500, std::string("internal error: ") + e.what());
    }
    if (reply.stream) return start_stream(std::move(reply.stream));
    respond(std::move(reply.response));
  }

  // The errors the HTTP layer itself answers (bad HTTP, body too large, shutting down)
  // in the application's error shape when it gave one, else as plain text.
  HttpResponse error_json(int status, const std::string& msg) const {
    if (srv_.opt.error_body) return srv_.opt.error_body(status, msg);
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = msg + "\n";
    return r;
  }

  std::string head(int status, const std::string& content_type, const std::vector<std::pair<std::string, std::string>>& extra) {
    std::string h = status_line(status);
    h += "Server: ridge\r\nContent-Type: " + content_type + "\r\n";
    for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
    if (!keep_alive_ || srv_.shutting_down) h += "Connection: close\r\n";
    return h;
  }

  void respond(HttpResponse r) {
    if (srv_.on_status) srv_.on_status(r.status);
    out_ = head(r.status, r.content_type, r.headers);
    out_ += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n";
    out_ += r.body;
    write(true);
  }

  void start_stream(std::shared_ptr<HttpStream> g) {
    gen_ = std::move(g);
    sse_ = gen_->sse();
    if (sse_) {
      if (srv_.on_status) srv_.on_status(200);
      // HTTP/1.0 has no chunked encoding: the stream is the body and ends with the connection.
      if (http10_) keep_alive_ = false;
      out_ = head(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      out_ += http10_ ? "\r\n" : "Transfer-Encoding: chunked\r\n\r\n";
    }
    // Coalesce notifications: one post in flight per session, however many tokens arrive.
    auto flag = notify_pending_;
    std::weak_ptr<Session> weak = shared_from_this();
    asio::io_context& ioc = srv_.ioc;
    gen_->set_notify([flag, weak, &ioc] {
      if (flag->exchange(true)) return;
      asio::post(ioc, [flag, weak] {
        flag->store(false);
        if (auto s = weak.lock()) s->pump();
      });
    });
    probe();
    pump();
  }

  // Watches for the client going away while its response is produced. Bytes that do
  // arrive (a pipelined next request) are kept for the next parse.
  void probe() {
    probing_ = true;
    stream_.socket().async_read_some(asio::buffer(probe_buf_), [self = shared_from_this()](error_code ec, size_t n) {
      self->probing_ = false;
      if (!ec) {
        auto b = self->buf_.prepare(n);
        std::memcpy(b.data(), self->probe_buf_.data(), n);
        self->buf_.commit(n);
        if (self->gen_) return self->probe();
        if (self->want_read_) self->read_after_probe();
        return;
      }
      if (ec == asio::error::operation_aborted && self->want_read_) return self->read_after_probe();
      if (self->gen_) {  // the client is gone: stop its generation, drop the connection
        self->gen_->cancel();
        self->gen_.reset();
        self->close();
      }
    });
  }

  void read_after_probe() {
    want_read_ = false;
    read();
  }

  void pump() {
    if (!gen_ || writing_) return;
    std::string chunk;
    int status = 200;
    const bool done = gen_->drain(chunk, status);
    if (sse_ && http10_) {
      out_ += chunk;
    } else if (sse_) {
      if (!chunk.empty()) {
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
        out_ += size;
        out_ += chunk;
        out_ += "\r\n";
      }
      if (done) out_ += "0\r\n\r\n";
    } else if (done) {
      if (srv_.on_status) srv_.on_status(status);
      out_ = head(status, "application/json", {});
      out_ += "Content-Length: " + std::to_string(chunk.size()) + "\r\n\r\n";
      out_ += chunk;
    }
    if (done) gen_.reset();
    if (!out_.empty()) write(done);
  }

  void write(bool last) {
    writing_ = true;
    // Through the stream, under its timer: a client that stops reading, or a peer that
    // vanished without a reset, would otherwise hold the connection (and a shutdown) for
    // as long as the kernel retransmits.
    stream_.expires_after(std::chrono::milliseconds(int64_t(srv_.opt.write_timeout_s * 1000)));
    asio::async_write(stream_, asio::buffer(out_), [self = shared_from_this(), last](error_code ec, size_t) {
      self->writing_ = false;
      self->stream_.expires_never();
      self->out_.clear();
      if (ec) {
        if (self->gen_) self->gen_->cancel();
        self->gen_.reset();
        return self->close();
      }
      if (!last) return self->pump();
      if (self->linger_) return self->linger_close();
      if (!self->keep_alive_ || self->srv_.shutting_down) return self->close();
      // The probe may still be reading: cancel it and read once it has returned.
      if (self->probing_) {
        self->want_read_ = true;
        error_code ec2;
        self->stream_.socket().cancel(ec2);
        return;
      }
      self->read();
    });
  }

  // After refusing a request whose body is still arriving: closing at once with unread
  // bytes makes the kernel send a reset, which can destroy our response before the client
  // reads it. Stop sending, then read and drop what comes for a bounded time and size.
  void linger_close() {
    linger_ = false;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    drain_discard(0);
  }

  void drain_discard(size_t total) {
    if (total > (size_t(64) << 20)) return close();
    stream_.async_read_some(asio::buffer(probe_buf_), [self = shared_from_this(), total](error_code ec, size_t n) {
      if (ec) return self->close();
      self->drain_discard(total + n);
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Impl& srv_;
  std::shared_ptr<HttpStream> gen_;
  bool sse_ = false;
  std::string out_;
  bool writing_ = false, reading_ = false, probing_ = false, want_read_ = false, keep_alive_ = true;
  bool http10_ = false, linger_ = false;
  std::array<char, 512> probe_buf_{};
  std::shared_ptr<std::atomic<bool>> notify_pending_ = std::make_shared<std::atomic<bool>>(false);
};

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || shutting_down) return;
    if (ec) {
      // Out of file descriptors, typically: back off instead of spinning.
      std::fprintf(stderr, "serve: accept failed: %s\n", ec.message().c_str());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    error_code ig;
    s.set_option(tcp::no_delay(true), ig);
    std::make_shared<Session>(std::move(s), *this)->start();
    accept();
  });
}

// Signals stay watched for the whole run: the first begins a graceful shutdown, a second
// one during it stops at once (an operator's "now").
void HttpServer::Impl::wait_signal() {
  signals.async_wait([this](error_code e, int) {
    if (e) return;
    if (!shutting_down) {
      begin_shutdown();
      wait_signal();
    } else {
      std::fprintf(stderr, "serve: second signal: closing every connection now\n");
      stop_now();
    }
  });
}

void HttpServer::Impl::stop_now() {
  std::vector<Session*> open(live.begin(), live.end());
  for (Session* s : open) s->close();
  error_code ec;
  signals.cancel(ec);
  shutdown_timer.cancel();
  ioc.stop();
}

void HttpServer::Impl::begin_shutdown() {
  if (shutting_down) return;
  shutting_down = true;
  error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  if (on_shutdown) on_shutdown();
  for (Session* s : live) s->close_if_idle();
  shutdown_deadline = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(int64_t((opt.shutdown_timeout_s + 2.0) * 1000));
  poll_shutdown();
}

void HttpServer::Impl::poll_shutdown() {
  const bool work_left = !live.empty() || (idle && !idle());
  if (!work_left || std::chrono::steady_clock::now() >= shutdown_deadline) {
    stop_now();
    return;
  }
  for (Session* s : live) s->close_if_idle();
  shutdown_timer.expires_after(std::chrono::milliseconds(20));
  shutdown_timer.async_wait([this](error_code e) {
    if (!e) poll_shutdown();
  });
}

HttpServer::HttpServer(const HttpOptions& o, Handler handler, OnShutdown on_shutdown, std::function<bool()> idle)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = o;
  impl_->handler = std::move(handler);
  impl_->on_shutdown = std::move(on_shutdown);
  impl_->idle = std::move(idle);
}

HttpServer::~HttpServer() = default;

void HttpServer::set_on_status(std::function<void(int)> fn) { impl_->on_status = std::move(fn); }

uint16_t HttpServer::listen() {
  Impl& im = *impl_;
  error_code ec;
  const auto addr = asio::ip::make_address(im.opt.host, ec);
  if (ec) fail("--host '{}' is not an IP address ({})", im.opt.host, ec.message());
  const tcp::endpoint ep(addr, im.opt.port);
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", im.opt.host, im.opt.port, ec.message());
  im.wait_signal();
  im.accept();
  return im.acceptor.local_endpoint().port();
}

void HttpServer::run() { impl_->ioc.run(); }

void HttpServer::stop() {
  asio::post(impl_->ioc, [im = impl_.get()] { im->begin_shutdown(); });
}

}  // namespace ridge::server
