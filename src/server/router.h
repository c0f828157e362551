// ridge router: an OpenAI-compatible front end over replicas of `ridge serve` (or any
// server that speaks vLLM's API and, for prefix-aware routing, publishes vLLM's KV-cache
// events: server/kv_events_publisher.h; blocks are matched by the token ids the events
// carry, not by the engine's own hashes: server/kv_block_index.h).
//
// Policy, per request (completions and chat; other endpoints go to the least loaded):
//  - the prompt's tokens (its ids, or a replica's /tokenize for text and messages) are
//    hashed block by block as the replicas' prefix caches hash them (engine/kv_events.h),
//    and each replica's held blocks (server/kv_block_index.h) give the prefix it could
//    serve from cache;
//  - the replica with the longest such prefix takes the request unless it has more than
//    balance_threshold requests in flight beyond the least loaded, which then takes it
//    (as SGLang's cache-aware router balances); no prefix anywhere: the least loaded;
//  - a replica that refuses (503, a 5xx, a connection that fails) or loses the request
//    before its first token (a stream is held back until its first text) is left for the
//    next best, up to max_attempts replicas; after the first token nothing is retried;
//  - a replica whose /health fails, or whose connection is refused, is out of the
//    rotation; /health answering again brings it back, and its cache is read again from
//    its events' replay (another process may answer at that address now);
//  - a client that leaves closes the exchange with the replica;
//  - a streamed request is answered 200 at once (the HTTP server starts streams so): an
//    error from the replica, or no replica, comes as an SSE error event, as vLLM sends an
//    error during a stream.
// The router's own /metrics (ridge_router:*) counts what went where.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/http_server.h"

namespace ridge::server {

struct ReplicaSpec {
  std::string url;             // http://HOST:PORT
  std::string events;          // its --kv-events-endpoint as seen from here ("": none)
  std::string replay;          // its --kv-events-replay-endpoint ("": none)
};

struct RouterOptions {
  HttpOptions http;
  std::vector<ReplicaSpec> replicas;
  enum class Policy { Prefix, RoundRobin } policy = Policy::Prefix;
  double health_interval_s = 1;
  double connect_timeout_s = 2;
  double request_timeout_s = 600;  // an upstream response must end within this
  double header_timeout_s = 30;    // a stream's headers must come within this
  int32_t max_attempts = 3;
  int32_t balance_threshold = 8;
};

// "http://HOST:PORT[,EVENTS[,REPLAY]]" as --replica takes it; an Error names what is wrong.
ReplicaSpec parse_replica(const std::string& spec);

class Router {
 public:
  explicit Router(const RouterOptions& o);
  ~Router();
  uint16_t listen();  // binds (port 0: any), returns the port
  void run();         // until SIGINT/SIGTERM
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::server
