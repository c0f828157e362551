// The engine's KV-cache events (engine/kv_events.h) published as vLLM publishes them
// (vllm/distributed/kv_events.py, ZmqEventPublisher), so that the routers that read
// vLLM's events (llm-d's inference scheduler, NVIDIA Dynamo, `ridge router`) read ridge's
// unchanged:
//  - a ZeroMQ PUB socket sends each step's batch as three frames: the topic, the batch's
//    sequence number (8 bytes, big-endian, from 0), the msgpack payload;
//  - a ZeroMQ ROUTER socket answers a replay request (the first sequence number wanted,
//    8 bytes big-endian) with every buffered batch from it, [seq, payload] each, then
//    [-1 as 8 bytes, empty]; the last buffer_steps batches are kept;
//  - the payload is vLLM's KVEventBatch in msgpack. Current vLLM (since its PR #42892,
//    2026) writes each event as a map tagged under "type" (--kv-events-format map, the
//    default); before, msgspec's array-like structs, tag first (array):
//      map:   [ts, [{"type": "BlockStored", "block_hashes": [...], "parent_block_hash":
//              hash | nil, "token_ids": [...], "block_size": n, "lora_id": nil, "medium":
//              M, "lora_name": nil} | {"type": "BlockRemoved", "block_hashes": [...],
//              "medium": M} | {"type": "AllBlocksCleared"}, ...], data_parallel_rank = 0]
//      array: [ts, [["BlockStored", hashes, parent, token ids, block_size, lora_id,
//              medium, lora_name] | ["BlockRemoved", hashes, medium] |
//              ["AllBlocksCleared"], ...]]
//    M (--kv-events-medium) is "GPU" by default: routers read it as the tier of a block
//    (GPU for an engine's own cache, CPU for offloaded copies, weighted less), and
//    ridge's cache is its engine's own, in host memory though it is.
// A replay client should be a DEALER: a REQ socket takes only the first of the replies.
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

struct KvEventsFormat {
  enum class Layout { Map, Array } layout = Layout::Map;
  std::string medium = "GPU";
};

struct KvEventsOptions {
  std::string endpoint;         // --kv-events-endpoint, e.g. tcp://*:5557
  std::string replay_endpoint;  // --kv-events-replay-endpoint, e.g. tcp://*:5558 (empty: no replay)
  std::string topic;            // --kv-events-topic ("" as vLLM's default)
  int64_t buffer_steps = 10000; // batches kept for replay
  int32_t hwm = 100000;         // the PUB socket's send high-water mark
  KvEventsFormat format;        // --kv-events-format, --kv-events-medium
};

// One batch in vLLM's msgpack layout (above).
std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events, const KvEventsFormat& f = {});

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
