// Owner of the KV blocks: a free list and a reference count per block. Sequences hold
// block tables (lists of block ids); the model only reads them. Ref counts are there for
// shared prefixes (the engine's radix cache), so release decrements and frees at zero.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ridge {

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t n_total() const { return int32_t(ref_.size()); }
  int32_t n_free() const { return int32_t(free_.size()); }
  int32_t ref_count(int32_t block) const { return ref_[size_t(block)]; }
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }

  // Grows `table` to cover n_tokens positions. All or nothing: false (table untouched)
  // when the free blocks do not suffice.
  bool reserve(std::vector<int32_t>& table, int64_t n_tokens);
  // Drops this table's reference to each of its blocks; empties it.
  void release(std::vector<int32_t>& table);
  void retain(int32_t block);

  // Free + referenced = total, no block both free and referenced, no negative counts.
  void check_invariants() const;

 private:
  int32_t block_size_;
  std::vector<int32_t> free_;  // LIFO: recently freed blocks are warm in cache
  std::vector<int32_t> ref_;
};

}  // namespace ridge
