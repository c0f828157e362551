// ridge serve: the OpenAI-compatible server. Routes HTTP requests to the API layer,
// submits generation to the engine loop, and serves /health, /metrics, /v1/models,
// /tokenize and /detokenize. The HTTP thread never runs the model.
#pragma once
#include <memory>
#include <string>

#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/structured_output.h"

namespace ridge::server {

struct ServeOptions {
  HttpOptions http;
  LoopOptions loop;
  std::string api_key;  // "" -> no authentication
};

class Server {
 public:
  Server(Engine& engine, const Tokenizer& tok, ApiContext ctx, const ServeOptions& o);
  ~Server();
  uint16_t listen();
  // Serves until SIGINT/SIGTERM; in-flight requests finish within the shutdown timeout,
  // the rest end with finish_reason "abort".
  void run();
  void stop();  // as a signal would (tests)

  HttpReply handle(const HttpRequest& req);

 private:
  HttpReply generate(Endpoint ep, const HttpRequest& req);
  HttpResponse models() const;
  HttpResponse tokenize(const HttpRequest& req) const;
  HttpResponse detokenize(const HttpRequest& req) const;

  const Tokenizer& tok_;
  GrammarCache grammars_;
  ApiContext ctx_;
  ServeOptions opt_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<HttpServer> http_;
  int64_t created_ = 0;
};

}  // namespace ridge::server
