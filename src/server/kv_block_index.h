// What a router knows of each replica's prefix cache: the blocks its KV events say it
// holds (vLLM's layout, server/kv_events_publisher.h), and so how long a prompt's prefix
// it could serve from cache. Blocks are keyed by the router's own chain of hashes
// (engine/kv_events.h kv_block_hash) over the token ids each BlockStored carries, with the
// replica's hashes mapped to them, so that any engine's events serve (vLLM hashes its
// blocks otherwise than ridge does), as llm-d's index does. Thread-safe: the events
// thread applies batches while request handlers ask.
#pragma once
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ridge::server {

class KvBlockIndex {
 public:
  explicit KvBlockIndex(int32_t n_replicas) : r_(size_t(n_replicas)) {}

  // One batch's msgpack payload from replica r, in either of vLLM's layouts (tagged maps
  // or tag-first arrays): BlockStored adds its blocks (a chain whose parent the replica
  // announced before, or a prompt's start; others cannot be keyed and are left out) and
  // sets the replica's block size, BlockRemoved removes, AllBlocksCleared clears; events
  // of other types are skipped. A payload that does not decode as that layout changes
  // nothing and returns false.
  bool apply(int32_t r, std::string_view payload);
  // The replica's events can no longer be trusted (it stopped answering, or a gap could
  // not be replayed): it holds nothing until it says otherwise.
  void clear(int32_t r);
  // How many of `tokens`' leading full blocks replica r holds (0 before its first
  // BlockStored tells the block size), and the tokens they cover.
  int32_t matched_tokens(int32_t r, std::span<const int32_t> tokens) const;
  int64_t blocks(int32_t r) const;

 private:
  struct Replica {
    std::unordered_set<uint64_t> held;              // the router's hashes of its blocks
    std::unordered_map<uint64_t, uint64_t> mine;    // its hash -> the router's
    int32_t block_size = 0;
  };
  mutable std::mutex mu_;
  std::vector<Replica> r_;
};

}  // namespace ridge::server
