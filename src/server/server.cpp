#include "server/server.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {
namespace {

using json = nlohmann::json;

HttpResponse json_response(const json& j, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

}  // namespace

Server::Server(Engine& engine, const Tokenizer& tok, ApiContext ctx, const ServeOptions& o)
    : tok_(tok), ctx_(std::move(ctx)), opt_(o) {
  ctx_.tok = &tok_;
  ctx_.grammars = &grammars_;
  grammars_.set_vocabulary(engine.token_trie());  // before the engine's thread starts: it builds the trie
  created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  metrics_ = std::make_unique<Metrics>(ctx_.model_name);
  loop_ = std::make_unique<EngineLoop>(engine, tok_, *metrics_, o.loop);
  HttpOptions http = o.http;
  http.error_body = [](int status, const std::string& msg) { return error_response(status, msg); };
  http_ = std::make_unique<HttpServer>(
      http, [this](const HttpRequest& r) { return handle(r); },
      [this] { loop_->shutdown(opt_.http.shutdown_timeout_s); }, [this] { return loop_->idle(); });
  http_->set_on_status([this](int s) { metrics_->http_status(s); });
}

Server::~Server() {
  http_.reset();  // sessions (and their streams) go before the loop they point into
  loop_.reset();
}

uint16_t Server::listen() { return http_->listen(); }
void Server::run() { http_->run(); }
void Server::stop() { http_->stop(); }

HttpReply Server::handle(const HttpRequest& req) {
  HttpReply reply;
  try {
    const std::string& t = req.target;
    const bool v1 = t.rfind("/v1/", 0) == 0;
    if (v1 && !opt_.api_key.empty() && req.authorization != "Bearer " + opt_.api_key)
      throw ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY)", "", "AuthenticationError");
    auto only = [&](const char* method) {
      if (req.method != method) throw ApiError(405, fmt::format("{} takes {} requests", t, method));
    };
    if (t == "/v1/completions") {
      only("POST");
      return generate(Endpoint::Completions, req);
    }
    if (t == "/v1/chat/completions") {
      only("POST");
      return generate(Endpoint::Chat, req);
    }
    if (t == "/health") {
      reply.response.content_type = "text/plain";
      return reply;
    }
    if (t == "/metrics") {
      reply.response.content_type = "text/plain; version=0.0.4; charset=utf-8";
      const GrammarCache::Stats gs = grammars_.stats();
      metrics_->set_grammar_totals(gs.compiled, gs.hits, gs.compile_s);
      reply.response.body = metrics_->render();
      return reply;
    }
    if (t == "/v1/models") {
      only("GET");
      reply.response = models();
      return reply;
    }
    if (t == "/tokenize") {
      only("POST");
      reply.response = tokenize(req);
      return reply;
    }
    if (t == "/detokenize") {
      only("POST");
      reply.response = detokenize(req);
      return reply;
    }
    throw ApiError(404, fmt::format("no route {} {}", req.method, t), "", "NotFoundError");
  } catch (const ApiError& e) {
    reply.response = error_response(e.status, e.what(), e.param, e.type);
  } catch (const std::exception& e) {
    reply.response = error_response(500, std::string("internal error: ") + e.what());
  }
  return reply;
}

HttpReply Server::generate(Endpoint ep, const HttpRequest& req) {
  ParsedRequest pr = parse_request(ep, req.body, ctx_);
  auto job = std::make_shared<Job>();
  job->choices = pr.choices;
  EngineLoop* loop = loop_.get();
  std::weak_ptr<Job> weak = job;
  HttpReply reply;
  reply.stream = make_openai_stream(std::move(pr), job, ctx_, [loop, weak] {
    if (auto j = weak.lock()) loop->cancel(j);
  });
  if (!loop_->submit(job)) {
    HttpReply busy;
    busy.response = error_response(503, "too many requests are waiting; retry later");
    busy.response.headers.emplace_back("Retry-After", "1");
    return busy;
  }
  return reply;
}

HttpResponse Server::models() const {
  json m = {{"id", ctx_.model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "ridge"},
            {"root", ctx_.model_name}, {"parent", nullptr}, {"max_model_len", ctx_.max_model_len}};
  return json_response({{"object", "list"}, {"data", json::array({m})}});
}

HttpResponse Server::tokenize(const HttpRequest& req) const {
  const json j = parse_body(req.body);
  if (auto it = j.find("model"); it != j.end() && it->is_string()) check_model(it->get<std::string>(), ctx_);
  bool add_special = true;
  if (auto it = j.find("add_special_tokens"); it != j.end()) {
    if (!it->is_boolean()) throw ApiError(400, "add_special_tokens must be a boolean", "add_special_tokens");
    add_special = it->get<bool>();
  }
  std::string text;
  if (auto it = j.find("prompt"); it != j.end()) {
    if (!it->is_string()) throw ApiError(400, "prompt must be a string", "prompt");
    text = it->get<std::string>();
  } else if (j.contains("messages")) {
    // The chat path renders the template exactly as a chat request would.
    ParsedRequest pr = parse_request_json(Endpoint::Chat, j, ctx_);
    return json_response({{"count", pr.prompts[0].size()}, {"max_model_len", ctx_.max_model_len}, {"tokens", pr.prompts[0]}});
  } else {
    throw ApiError(400, "give prompt (a string) or messages", "prompt");
  }
  const std::vector<int32_t> ids = tokenize_prompt(tok_, text, add_special);
  return json_response({{"count", ids.size()}, {"max_model_len", ctx_.max_model_len}, {"tokens", ids}});
}

HttpResponse Server::detokenize(const HttpRequest& req) const {
  const json j = parse_body(req.body);
  if (auto it = j.find("model"); it != j.end() && it->is_string()) check_model(it->get<std::string>(), ctx_);
  auto it = j.find("tokens");
  if (it == j.end() || !it->is_array()) throw ApiError(400, "tokens must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok_.n_vocab())
      throw ApiError(400, fmt::format("tokens must be ids in [0, {})", tok_.n_vocab()), "tokens");
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return json_response({{"prompt", tok_.decode(ids)}});
}

}  // namespace ridge::server
