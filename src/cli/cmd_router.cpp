// ridge router: a cache-aware front end over replicas (server/router.h).
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "server/router.h"

namespace ridge::cli {

int cmd_router(Args& a) {
  server::RouterOptions o;
  o.http.host = a.str({"--host"}, "127.0.0.1");
  o.http.port = uint16_t(a.integer({"--port"}, 8000, 0, 65535));
  o.http.shutdown_timeout_s = a.number({"--shutdown-timeout"}, 10, 0, 3600);
  for (const std::string& r : a.all({"--replica"})) o.replicas.push_back(server::parse_replica(r));
  const std::string policy = a.str({"--policy"}, "prefix");
  o.health_interval_s = a.number({"--health-interval"}, o.health_interval_s, 0.05, 3600);
  o.connect_timeout_s = a.number({"--connect-timeout"}, o.connect_timeout_s, 0.01, 600);
  o.max_attempts = int32_t(a.integer({"--max-attempts"}, o.max_attempts, 1, 64));
  o.request_timeout_s = a.number({"--request-timeout"}, o.request_timeout_s, 0.1, 86400);
  o.balance_threshold = int32_t(a.integer({"--balance-threshold"}, o.balance_threshold, 0, 1 << 20));
  a.finish();
  if (o.replicas.empty()) fail("give at least one --replica http://HOST:PORT[,EVENTS[,REPLAY]]");
  if (policy == "prefix") o.policy = server::RouterOptions::Policy::Prefix;
  else if (policy == "round_robin") o.policy = server::RouterOptions::Policy::RoundRobin;
  else fail("--policy {}: not one of prefix, round_robin", policy);
  server::Router router(o);
  const uint16_t port = router.listen();
  std::fprintf(stderr, "router: %zu replicas, policy %s, on http://%s:%u\n", o.replicas.size(), policy.c_str(),
               o.http.host.c_str(), unsigned(port));
  router.run();
  std::fprintf(stderr, "router: shut down\n");
  return 0;
}

}  // namespace ridge::cli
