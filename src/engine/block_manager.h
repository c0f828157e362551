// Owner of the KV blocks: a free list and a reference count per block. Sequences hold
// block tables (lists of block ids); the model only reads them. Ref counts are there for
// shared prefixes (the engine's radix cache), so release decrements and frees at zero.
//
// Placement: a table grows into the block after its last one when that block is free, so
// a sequence's K/V lie in long runs of adjacent blocks and decode attention reads them as
// streams the hardware prefetcher follows (measurably faster than the same blocks
// shuffled: docs/BENCHMARKS.md, issue 6 session 9). A table that cannot grow there starts
// a new run at the lowest slot of kSlot wholly free blocks, where no other table is
// growing; with no such slot left, on the most recently freed block. 16 tables taking a
// block each in turns, as a decode batch does, stay almost wholly adjacent, where handing
// out the most recently freed block interleaved them block by block (no neighbours
// adjacent).
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
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
  // Drops the table's blocks past the first blocks_for(n_tokens).
  void truncate(std::vector<int32_t>& table, int64_t n_tokens);
  // Drops this table's reference to each of its blocks; empties it.
  void release(std::vector<int32_t>& table);
  void retain(int32_t block);

  // Free + referenced = total, no block both free and referenced, no negative counts.
  void check_invariants() const;

 private:
  // Blocks per slot: a table that cannot grow into its next block starts a new run at a
  // slot all of whose blocks are free, so it can grow kSlot blocks before it meets
  // another table (16 blocks: 256 tokens at the default block size).
  static constexpr int32_t kSlot = 16;

  void take(int32_t block);       // off the free list, ref count 1
  void give_back(int32_t block);  // onto the free list (ref count already 0)
  int32_t fresh_block() const;    // where a table that cannot grow into its next block goes on

  int32_t block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block on top
  std::vector<int32_t> pos_;   // [block] its index in free_ while free
  std::vector<int32_t> ref_;
  std::vector<int32_t> slot_free_;  // [slot] its free blocks (whole slots only)
  std::set<int32_t> free_slots_;    // the slots with every block free
};

}  // namespace ridge
