// KV-cache events for cache-aware routers, in the shape of vLLM's (its
// distributed/kv_events.py): the blocks the prefix cache stores and evicts, each named by
// a hash chained over the token blocks before it, so that a router (llm-d's scheduler,
// Dynamo, SGLang's router, `ridge router`) can tell which prompt prefixes a replica holds.
// The radix cache records them (engine/radix_cache.h); the server publishes them
// (server/kv_events_publisher.h).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ridge {

struct KvEvent {
  enum class Kind { BlockStored, BlockRemoved, AllBlocksCleared };
  Kind kind = Kind::BlockStored;
  // BlockStored: a chain of new blocks, each the child of the one before; BlockRemoved:
  // blocks gone from the cache, in any order.
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;  // BlockStored: the block before the first (none: a prompt's start)
  std::vector<int32_t> tokens;     // BlockStored: the blocks' token ids, block_size of them each
  int32_t block_size = 0;          // BlockStored
};

// A block's hash: its token ids (and the prefix cache's namespace mark on a first block,
// radix_cache.h) mixed into its parent's hash by a 64-bit splitmix step per id, kept to 63
// bits so that decoders reading signed and unsigned integers agree. The same tokens after
// the same prefix give the same hash on every replica.
uint64_t kv_block_hash(std::optional<uint64_t> parent, std::span<const int32_t> key);

}  // namespace ridge
