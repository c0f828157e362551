#include "engine/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

BlockManager::BlockManager(int32_t n_pages, int32_t block_size, const PageGroups& groups)
    : block_size_(block_size), g_(groups), P_(groups.n_global + groups.n_window) {
  RIDGE_CHECK(n_pages > 0 && block_size > 0, "block manager needs pages ({}) and a block size ({})", n_pages, block_size);
  RIDGE_CHECK(g_.n_global >= 1 && g_.n_window >= 0 && (g_.n_window == 0 || g_.window > 0),
              "block manager: {} global and {} window pages per block, window {}", g_.n_global, g_.n_window, g_.window);
  RIDGE_CHECK(P_ <= kMaxPages, "a KV block of {} pages (over {}): too many window layers to a global one", P_,
              kMaxPages);
  owner_.assign(size_t(n_pages), -1);
  pos_.assign(size_t(n_pages), 0);
  ref_.assign(size_t(n_pages), 0);
  claims_.assign(size_t(n_pages), 0);
  pages_.assign(size_t(n_pages) * size_t(P_), -1);
  free_.reserve(size_t(n_pages));
  for (int32_t b = n_pages - 1; b >= 0; --b) {
    pos_[size_t(b)] = int32_t(free_.size());
    free_.push_back(b);
  }
  slot_free_.assign(size_t(n_pages / kSlot), kSlot);
  for (int32_t s = 0; s < n_pages / kSlot; ++s) free_slots_.insert(free_slots_.end(), s);
  dropped_.resize(size_t(g_.n_window));
}

int32_t BlockManager::window_page(int32_t k, int32_t prev) {
  auto& d = dropped_[size_t(k - g_.n_global)];
  while (!d.empty()) {
    const int32_t p = d.front();
    d.pop_front();
    if (owner_[size_t(p)] < 0) return p;
  }
  return place(prev);
}

void BlockManager::take(int32_t page, int32_t entry) {
  // Out of the middle of the stack in O(1): the top page moves into its slot.
  const int32_t i = pos_[size_t(page)], top = free_.back();
  free_[size_t(i)] = top;
  pos_[size_t(top)] = i;
  free_.pop_back();
  owner_[size_t(page)] = entry;
  const size_t s = size_t(page / kSlot);
  if (s < slot_free_.size() && slot_free_[s]-- == kSlot) free_slots_.erase(int32_t(s));
}

void BlockManager::give_back(int32_t page) {
  owner_[size_t(page)] = -1;
  pos_[size_t(page)] = int32_t(free_.size());
  free_.push_back(page);
  const size_t s = size_t(page / kSlot);
  if (s < slot_free_.size() && ++slot_free_[s] == kSlot) free_slots_.insert(int32_t(s));
}

int32_t BlockManager::fresh_page() const {
  // The lowest slot with every page free: no table is growing through it, and the pool
  // fills from its start (the cache's pages are committed as first touched). Else, with
  // the free pages scattered, the most recently freed.
  return free_slots_.empty() ? free_.back() : *free_slots_.begin() * kSlot;
}

int32_t BlockManager::place(int32_t prev) const {
  const int32_t next = prev >= 0 ? prev + 1 : -1;
  return next >= 0 && next < n_total() && owner_[size_t(next)] < 0 ? next : fresh_page();
}

int64_t BlockManager::first_live(int64_t next_pos) const {
  if (!windowed()) return 0;
  return std::max<int64_t>(0, next_pos - g_.window + 1) / block_size_;
}

int64_t BlockManager::pages_needed(const BlockTable& t, int64_t n_tokens) const {
  int64_t pages = 0;
  for (int64_t i = int64_t(t.size()); i < blocks_for(n_tokens); ++i)
    pages += g_.n_global + (i >= t.n_slid ? g_.n_window : 0);
  return pages;
}

int64_t BlockManager::pages_for(int64_t n_tokens) const {
  const int64_t n = blocks_for(n_tokens);
  return n * g_.n_global + (n - std::min(n, first_live(n_tokens))) * g_.n_window;
}

void BlockManager::held_pages(const BlockTable& t, std::vector<int32_t>& out) const {
  out.clear();
  for (size_t i = 0; i < t.size(); ++i) {
    const int32_t e = t[i], n = g_.n_global + (int64_t(i) >= t.n_slid ? g_.n_window : 0);
    for (int32_t k = 0; k < n; ++k) out.push_back(page(e, k));
  }
}

int64_t BlockManager::n_held_pages(const BlockTable& t) const {
  const int64_t n = int64_t(t.size());
  return n * g_.n_global + (n - std::min<int64_t>(n, t.n_slid)) * g_.n_window;
}

void BlockManager::page_table(const BlockTable& t, std::vector<int32_t>& out) const {
  const size_t n = t.size();
  out.resize(n * size_t(P_));
  for (size_t i = 0; i < n; ++i)
    for (int32_t k = 0; k < P_; ++k) out[size_t(k) * n + i] = page(t[i], k);
}

int64_t BlockManager::max_tokens_one_seq(int32_t chunk) const {
  const int64_t pages = n_total();
  if (!windowed()) return pages / g_.n_global * block_size_;
  // Window pages for the window behind the first query of a chunk and the chunk itself.
  const int64_t live = blocks_for(int64_t(g_.window) - 1 + std::max(chunk, 1)) + 1;
  const int64_t entries = P_ * live >= pages ? pages / P_ : live + (pages - P_ * live) / g_.n_global;
  return entries * block_size_;
}

bool BlockManager::reserve(BlockTable& t, int64_t n_tokens) {
  if (blocks_for(n_tokens) <= int64_t(t.size())) return true;
  if (pages_needed(t, n_tokens) > int64_t(free_.size())) return false;
  while (int64_t(t.size()) < blocks_for(n_tokens)) {
    const bool live = int64_t(t.size()) >= t.n_slid;
    const int32_t prev = t.empty() ? -1 : t.ids.back();
    int32_t pg[kMaxPages] = {};
    for (int32_t k = 0; k < P_; ++k) {
      if (k >= g_.n_global && !live) {
        pg[k] = -1;
        continue;
      }
      const int32_t pk = prev >= 0 ? page(prev, k) : -1;
      pg[k] = k < g_.n_global ? place(pk) : window_page(k, pk);
      take(pg[k], pg[0]);
    }
    const int32_t e = pg[0];
    for (int32_t k = 0; k < P_; ++k) pages_[size_t(e) * P_ + size_t(k)] = pg[k];
    ref_[size_t(e)] = 1;
    claims_[size_t(e)] = live && windowed() ? 1 : 0;
    t.ids.push_back(e);
  }
  return true;
}

void BlockManager::slide(BlockTable& t, int64_t next_pos) {
  if (!windowed()) return;
  const int32_t to = int32_t(std::min<int64_t>(first_live(next_pos), int64_t(t.size())));
  for (int32_t i = t.n_slid; i < to; ++i) unclaim(t[size_t(i)]);
  t.n_slid = std::max(t.n_slid, to);
}

void BlockManager::adopt(BlockTable& t, int64_t next_pos) {
  if (!windowed()) return;
  t.n_slid = int32_t(std::min<int64_t>(first_live(next_pos), int64_t(t.size())));
  for (size_t i = size_t(t.n_slid); i < t.size(); ++i) claim(t[i]);
}

void BlockManager::retain(int32_t entry) {
  RIDGE_ASSERT(ref_[size_t(entry)] > 0);
  ++ref_[size_t(entry)];
}

void BlockManager::claim(int32_t entry) {
  RIDGE_CHECK(windowed() && ref_[size_t(entry)] > 0 && has_window(entry),
              "block {}: its window pages are gone, nothing to claim", entry);
  ++claims_[size_t(entry)];
}

int32_t BlockManager::drop_window(int32_t entry) {
  int32_t n = 0;
  for (int32_t k = g_.n_global; k < P_; ++k) {
    int32_t& p = pages_[size_t(entry) * P_ + size_t(k)];
    if (p < 0) continue;
    give_back(p);
    auto& d = dropped_[size_t(k - g_.n_global)];
    d.push_back(p);
    if (d.size() > owner_.size()) d.pop_front();  // stale entries beyond the pool's pages
    p = -1, ++n;
  }
  return n;
}

int32_t BlockManager::unclaim(int32_t entry) {
  RIDGE_CHECK(claims_[size_t(entry)] > 0, "block {}: its window pages are not claimed", entry);
  return --claims_[size_t(entry)] == 0 ? drop_window(entry) : 0;
}

int32_t BlockManager::release_entry(int32_t entry) {
  // A misuse (a table released twice) must not free pages that are someone else's now.
  RIDGE_CHECK(ref_[size_t(entry)] > 0, "block {} is released but not held", entry);
  if (--ref_[size_t(entry)] > 0) return 0;
  RIDGE_ASSERT(claims_[size_t(entry)] == 0);
  int32_t n = drop_window(entry);
  // The entry's id is its first page: give it back last, so that the others (its run's
  // neighbours) are on the free stack below it.
  for (int32_t k = g_.n_global - 1; k >= 0; --k) {
    int32_t& p = pages_[size_t(entry) * P_ + size_t(k)];
    give_back(p), p = -1, ++n;
  }
  return n;
}

void BlockManager::release(BlockTable& t) {
  for (int64_t i = int64_t(t.size()) - 1; i >= 0; --i) {
    if (windowed() && i >= t.n_slid) unclaim(t[size_t(i)]);
    release_entry(t[size_t(i)]);
  }
  t.ids.clear();
  t.n_slid = 0;
}

void BlockManager::truncate(BlockTable& t, int64_t n_tokens) {
  const size_t keep = size_t(std::min<int64_t>(blocks_for(n_tokens), int64_t(t.size())));
  while (t.size() > keep) {
    const int64_t i = int64_t(t.size()) - 1;
    if (windowed() && i >= t.n_slid) unclaim(t[size_t(i)]);
    release_entry(t[size_t(i)]);
    t.ids.pop_back();
  }
  t.n_slid = std::min(t.n_slid, int32_t(t.size()));
}

void BlockManager::check_invariants() const {
  std::vector<char> is_free(owner_.size(), 0);
  for (int32_t b : free_) {
    RIDGE_CHECK(b >= 0 && size_t(b) < owner_.size() && !is_free[size_t(b)], "page {} is on the free list twice", b);
    is_free[size_t(b)] = 1;
    RIDGE_CHECK(owner_[size_t(b)] < 0, "free page {} is owned by block {}", b, owner_[size_t(b)]);
    RIDGE_CHECK(free_[size_t(pos_[size_t(b)])] == b, "free page {} is not where its index says", b);
  }
  for (size_t b = 0; b < owner_.size(); ++b) {
    RIDGE_CHECK(ref_[b] >= 0 && claims_[b] >= 0, "block {} has a negative count", b);
    if (is_free[b]) continue;
    const int32_t e = owner_[b];
    RIDGE_CHECK(e >= 0 && ref_[size_t(e)] > 0, "page {} is neither free nor held (leaked)", b);
    RIDGE_CHECK(std::count(pages_.begin() + int64_t(e) * P_, pages_.begin() + int64_t(e + 1) * P_, int32_t(b)) == 1,
                "page {} is not among its block {}'s pages", b, e);
  }
  for (size_t e = 0; e < ref_.size(); ++e) {
    if (ref_[e] == 0) {
      RIDGE_CHECK(claims_[e] == 0, "released block {} is still claimed", e);
      continue;
    }
    RIDGE_CHECK(page(int32_t(e), 0) == int32_t(e), "block {} is not its first page", e);
    RIDGE_CHECK(claims_[e] <= ref_[e], "block {} has {} claims but {} references", e, claims_[e], ref_[e]);
    for (int32_t k = 0; k < P_; ++k) {
      const int32_t p = page(int32_t(e), k);
      const bool want = k < g_.n_global || claims_[e] > 0;
      RIDGE_CHECK((p >= 0) == want, "block {} page {}: {} but its window is {}claimed", e, k, p >= 0 ? "present" : "absent",
                  claims_[e] > 0 ? "" : "un");
      if (p >= 0) RIDGE_CHECK(owner_[size_t(p)] == int32_t(e), "page {} of block {} is owned by {}", p, e, owner_[size_t(p)]);
    }
  }
  for (size_t s = 0; s < slot_free_.size(); ++s) {
    int32_t n = 0;
    for (size_t b = s * kSlot; b < (s + 1) * kSlot; ++b) n += is_free[b];
    RIDGE_CHECK(slot_free_[s] == n && (n == kSlot) == (free_slots_.count(int32_t(s)) == 1),
                "slot {} counts {} free pages, has {}", s, slot_free_[s], n);
  }
}

}  // namespace ridge
