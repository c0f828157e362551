// What a router knows of each replica's prefix cache: the blocks its KV events say it
// holds (vLLM's layout, server/kv_events_publisher.h), and so how long a prompt's prefix
// it could serve from cache. Thread-safe: the events thread applies batches while request
// handlers ask.
#pragma once
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace ridge::server {

class KvBlockIndex {
 public:
  explicit KvBlockIndex(int32_t n_replicas) : r_(size_t(n_replicas)) {}

  // One batch's msgpack payload from replica r, in either of vLLM's layouts (tagged maps
  // or tag-first arrays): BlockStored adds its hashes (and sets the replica's block
  // size), BlockRemoved removes, AllBlocksCleared clears. A payload that does not decode
  // as that layout changes nothing and returns false.
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
    std::unordered_set<uint64_t> held;
    int32_t block_size = 0;
  };
  mutable std::mutex mu_;
  std::vector<Replica> r_;
};

}  // namespace ridge::server
