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
  slot_free_.assign(size_t(n_blocks / kSlot), kSlot);
  for (int32_t s = 0; s < n_blocks / kSlot; ++s) free_slots_.insert(free_slots_.end(), s);
}

void BlockManager::take(int32_t block) {
  // Out of the middle of the stack in O(1): the top block moves into its slot.
  const int32_t i = pos_[size_t(block)], top = free_.back();
  free_[size_t(i)] = top;
  pos_[size_t(top)] = i;
  free_.pop_back();
  ref_[size_t(block)] = 1;
  const size_t s = size_t(block / kSlot);
  if (s < slot_free_.size() && slot_free_[s]-- == kSlot) free_slots_.erase(int32_t(s));
}

void BlockManager::give_back(int32_t block) {
  pos_[size_t(block)] = int32_t(free_.size());
  free_.push_back(block);
  const size_t s = size_t(block / kSlot);
  if (s < slot_free_.size() && ++slot_free_[s] == kSlot) free_slots_.insert(int32_t(s));
}

int32_t BlockManager::fresh_block() const {
  // The lowest slot with every block free: no table is growing through it, and the pool
  // fills from its start (the cache's pages are committed as first touched). Else, with
  // the free blocks scattered, the most recently freed.
  return free_slots_.empty() ? free_.back() : *free_slots_.begin() * kSlot;
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
    if (--ref_[size_t(b)] == 0) give_back(b);
  }
  table.clear();
}

void BlockManager::truncate(std::vector<int32_t>& table, int64_t n_tokens) {
  const size_t keep = size_t(std::min<int64_t>(blocks_for(n_tokens), int64_t(table.size())));
  while (table.size() > keep) {
    const int32_t b = table.back();
    table.pop_back();
    RIDGE_ASSERT(ref_[size_t(b)] > 0);
    if (--ref_[size_t(b)] == 0) give_back(b);
  }
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
  for (size_t s = 0; s < slot_free_.size(); ++s) {
    int32_t n = 0;
    for (size_t b = s * kSlot; b < (s + 1) * kSlot; ++b) n += is_free[b];
    RIDGE_CHECK(slot_free_[s] == n && (n == kSlot) == (free_slots_.count(int32_t(s)) == 1),
                "slot {} counts {} free blocks, has {}", s, slot_free_[s], n);
  }
}

}  // namespace ridge
