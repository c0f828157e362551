// Owner of the KV blocks: a free list and a reference count per block. Sequences hold
// block tables (lists of block ids); the model only reads them. Ref counts are there for
// shared prefixes (the engine's radix cache), so release decrements and frees at zero.
//
// Placement: a table grows into the block after its last one when that block is free, so
// a sequence's K/V lie in long runs of adjacent blocks and decode attention reads them as
// streams the hardware prefetcher follows (bench kernels, 16 x 131072 tokens: 21 GB/s with
// each sequence's blocks in order against 17 shuffled). A table that cannot grow there
// starts a new run in the middle of a free gap (the best of a few candidates by the room on
// their smaller side), so the table before the gap keeps room to grow as well. 16 tables
// taking a block each in turns, as a decode batch does, stay 99.8% adjacent, where handing
// out the most recently freed block interleaved them block by block (0%; attention over
// them 19.1 against 20.5-21.0 GB/s, `bench kernels --attn-order turns`).
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
  // Free blocks a fresh run is placed by: the room counted on each side, and the random
  // candidates drawn besides the most recently freed block.
  static constexpr int32_t kRunCap = 64, kProbes = 15;

  void take(int32_t block);  // off the free list, ref count 1
  // Free blocks next to `block` in direction dir (-1, +1), up to kRunCap; backwards,
  // kRunCap when they reach the pool's start.
  int32_t free_run(int32_t block, int32_t dir) const;
  int32_t fresh_block();  // where a table that cannot grow into its next block goes on

  int32_t block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block on top
  std::vector<int32_t> pos_;   // [block] its index in free_ while free
  std::vector<int32_t> ref_;
  uint64_t rng_ = 0x2545F4914F6CDD1Dull;  // the probes' sequence: fixed, so runs repeat
};

}  // namespace ridge
