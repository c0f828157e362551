// HTTP/1.1 server on Boost.Beast: one Asio thread owns every socket; handlers run on it
// and must not block. The server knows requests, responses and byte streams, not
// OpenAI: a handler answers at once (HttpResponse) or hands back an HttpStream whose
// bytes another thread produces (the engine loop) and the server writes as they come.
//
// Boost is included only in http_server.cpp: it is heavy to compile.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ridge::server {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // path (query string stripped)
  std::string authorization;
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra, e.g. Retry-After
};

// Bytes produced by another thread. The server calls set_notify once, then drain on its
// own thread whenever notified (and after each write completes); notify may be called
// from any thread, any number of times.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Server-sent events (chunked text/event-stream, written as they come) or one body
  // sent when complete.
  virtual bool sse() const = 0;
  // Appends the bytes ready now to `out`; true once the stream is complete (nothing more
  // will come). For a non-SSE stream `out` is the whole body and `status` its status.
  virtual bool drain(std::string& out, int& status) = 0;
  virtual void set_notify(std::function<void()> notify) = 0;
  // The client went away (or the server is shutting down): stop producing.
  virtual void cancel() = 0;
};

struct HttpReply {
  HttpResponse response;                // used when stream is null
  std::shared_ptr<HttpStream> stream;
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  int64_t max_body_bytes = 8 << 20;     // larger bodies get 413
  double read_timeout_s = 60;           // a request must arrive within this (slow-loris guard)
  double shutdown_timeout_s = 10;       // how long a shutdown waits for in-flight streams
  double write_timeout_s = 60;          // a response write must finish within this (a client
                                        // that stopped reading, or a peer that vanished)
  // How the server's own errors (413, malformed HTTP, 503 while shutting down) look:
  // the application's error shape; null: plain text.
  std::function<HttpResponse(int status, const std::string& message)> error_body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;
  // Called once on SIGINT/SIGTERM, on the server thread, after the listener closed: begin
  // finishing or aborting in-flight work. `idle` tells the server whether work remains.
  // A second SIGINT/SIGTERM while draining stops at once, closing every connection.
  using OnShutdown = std::function<void()>;

  HttpServer(const HttpOptions& o, Handler handler, OnShutdown on_shutdown, std::function<bool()> idle);
  ~HttpServer();

  // Binds (throws ridge::Error naming the address when it cannot) and returns the bound
  // port (useful with port 0).
  uint16_t listen();
  // Serves until a signal arrives and in-flight streams are done (or the shutdown timeout
  // passes). Returns normally; the caller exits 0.
  void run();
  // Asks run() to return as a signal would (thread-safe).
  void stop();
  // Status counts for /metrics: called on the server thread after every response.
  void set_on_status(std::function<void(int)> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::server
