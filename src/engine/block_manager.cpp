#include "engine/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
  RIDGE_CHECK(n_blocks > 0 && block_size > 0, "block manager needs blocks ({}) and a block size ({})", n_blocks, block_size);
  ref_.assign(size_t(n_blocks), 0);
  pos_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) {
    pos_[size_t(b)] = int32_t(free_.size());
    free_.push_back(b);
  }
}

void BlockManager::take(int32_t block) {
  // Out of the middle of the stack in O(1): the top block moves into its slot.
  const int32_t i = pos_[size_t(block)], top = free_.back();
  free_[size_t(i)] = top;
  pos_[size_t(top)] = i;
  free_.pop_back();
  ref_[size_t(block)] = 1;
}

int32_t BlockManager::free_run(int32_t block, int32_t dir) const {
  int32_t n = 0;
  for (int32_t b = block + dir; n < kRunCap && b >= 0 && b < n_total() && ref_[size_t(b)] == 0; b += dir) ++n;
  // Free back to the pool's start: no table there needs room to grow into it.
  if (dir < 0 && block - n - 1 < 0) n = kRunCap;
  return n;
}

int32_t BlockManager::fresh_block() {
  // The most recently freed block and kProbes free blocks drawn at random, scored by the
  // room on their smaller side: a new run starts in the middle of a free gap, leaving
  // the table before the gap as much room to grow as itself.
  int32_t best = free_.back(), best_score = -1;
  for (int32_t i = 0; i <= kProbes && best_score < kRunCap; ++i) {
    int32_t b = free_.back();
    if (i > 0) {
      rng_ += 0x9E3779B97F4A7C15ull;  // splitmix64
      uint64_t z = rng_;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      b = free_[size_t((z ^ (z >> 31)) % free_.size())];
    }
    const int32_t score = std::min(free_run(b, -1), free_run(b, +1));
    if (score > best_score) best = b, best_score = score;
  }
  return best;
}

bool BlockManager::reserve(std::vector<int32_t>& table, int64_t n_tokens) {
  const int64_t need = blocks_for(n_tokens) - int64_t(table.size());
  if (need <= 0) return true;
  if (need > int64_t(free_.size())) return false;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t next = table.empty() ? -1 : table.back() + 1;
    const int32_t b = next >= 0 && next < n_total() && ref_[size_t(next)] == 0 ? next : fresh_block();
    take(b);
    table.push_back(b);
  }
  return true;
}

void BlockManager::retain(int32_t block) {
  RIDGE_ASSERT(ref_[size_t(block)] > 0);
  ++ref_[size_t(block)];
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t b = *it;
    RIDGE_ASSERT(ref_[size_t(b)] > 0);
    if (--ref_[size_t(b)] == 0) {
      pos_[size_t(b)] = int32_t(free_.size());
      free_.push_back(b);
    }
  }
  table.clear();
}

void BlockManager::check_invariants() const {
  std::vector<char> is_free(ref_.size(), 0);
  for (int32_t b : free_) {
    RIDGE_CHECK(b >= 0 && size_t(b) < ref_.size() && !is_free[size_t(b)], "block {} is on the free list twice", b);
    is_free[size_t(b)] = 1;
    RIDGE_CHECK(ref_[size_t(b)] == 0, "free block {} has ref count {}", b, ref_[size_t(b)]);
    RIDGE_CHECK(free_[size_t(pos_[size_t(b)])] == b, "free block {} is not where its index says", b);
  }
  for (size_t b = 0; b < ref_.size(); ++b) {
    RIDGE_CHECK(ref_[b] >= 0, "block {} has negative ref count", b);
    RIDGE_CHECK(is_free[b] || ref_[b] > 0, "block {} is neither free nor referenced (leaked)", b);
  }
}

}  // namespace ridge
