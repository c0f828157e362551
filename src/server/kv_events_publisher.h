// The engine's KV-cache events (engine/kv_events.h) published as vLLM publishes them
// (vllm/distributed/kv_events.py, ZmqEventPublisher), so that the routers that read
// vLLM's events (llm-d's inference scheduler, NVIDIA Dynamo, `ridge router`) read ridge's
// unchanged:
//  - a ZeroMQ PUB socket sends each step's batch as three frames: the topic, the batch's
//    sequence number (8 bytes, big-endian, from 0), the msgpack payload;
//  - a ZeroMQ ROUTER socket answers a replay request (the first sequence number wanted,
//    8 bytes big-endian) with every buffered batch from it, [seq, payload] each, then
//    [-1 as 8 bytes, empty]; the last buffer_steps batches are kept;
//  - the payload is vLLM's KVEventBatch as msgspec encodes its array-like structs (the
//    layout of vLLM's documented subscriber, examples/online_serving/kv_events_subscriber):
//      [ts, [event, ...]]
//      ["BlockStored", [hash, ...], parent hash | nil, [token id, ...], block_size,
//       lora_id = nil, medium = "CPU", lora_name = nil]
//      ["BlockRemoved", [hash, ...], medium = "CPU"]
//      ["AllBlocksCleared"]
//    (medium "CPU": ridge's cache is in host memory; vLLM's own is "GPU").
// An endpoint holding "*", "::", ipc:// or inproc:// is bound, any other connected (vLLM's
// rule). The engine thread only queues; a thread of its own encodes and sends, and a
// subscriber that is slow or gone never holds the engine up (PUB drops past its
// high-water mark, as vLLM's does; a lost batch is what replay is for).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/kv_events.h"

namespace ridge::server {

struct KvEventsOptions {
  std::string endpoint;         // --kv-events-endpoint, e.g. tcp://*:5557
  std::string replay_endpoint;  // --kv-events-replay-endpoint, e.g. tcp://*:5558 (empty: no replay)
  std::string topic;            // --kv-events-topic ("" as vLLM's default)
  int64_t buffer_steps = 10000; // batches kept for replay
  int32_t hwm = 100000;         // the PUB socket's send high-water mark
};

// One batch in vLLM's msgpack layout (above).
std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events);

class KvEventsPublisher {
 public:
  // Binds or connects both sockets now: an endpoint that cannot be used is an error
  // naming it, before the server starts.
  explicit KvEventsPublisher(const KvEventsOptions& o);
  ~KvEventsPublisher();  // sends what is queued (the sockets linger up to 1 s), then stops
  KvEventsPublisher(const KvEventsPublisher&) = delete;
  KvEventsPublisher& operator=(const KvEventsPublisher&) = delete;

  // One step's events, at wall-clock time ts (seconds since the epoch). Never blocks on
  // the network.
  void publish(double ts, std::vector<KvEvent> events);
  int64_t published() const;  // batches sent so far

 private:
  struct Sockets;
  void run();

  KvEventsOptions opt_;
  std::unique_ptr<Sockets> z_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<double, std::vector<KvEvent>>> queue_;
  bool stop_ = false;
  int64_t sent_ = 0;
  std::thread thread_;
};

}  // namespace ridge::server
