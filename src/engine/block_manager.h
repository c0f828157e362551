// Owner of the KV pool's pages: a free list, and per block of a sequence (an entry of its
// block table) a reference count. Sequences hold block tables; the model only reads them.
// Ref counts are there for shared prefixes (the engine's radix cache), so release
// decrements and frees at zero.
//
// Pages and entries. Without sliding windows an entry is one page holding its tokens'
// K/V in every layer, and the entry's id is that page. A model that mixes window and
// global layers keeps them in pages of their own (model/kv_cache.h KvGroups): an entry is
// n_global global pages then n_window window pages, its id its first global page. A
// window page is dropped once every holder has left it behind: a table claims the window
// pages of its entries from n_slid on (those a query at its next position still sees),
// the radix cache claims those it keeps; the last claim gone, the pages go back to the
// pool while the entry (its global pages) lives on. So a window layer's memory is bounded
// by the window, not by the context.
//
// Placement: a table grows into the page after its last entry's (each page kind after
// its own) when that page is free, so a sequence's K/V lie in long runs of adjacent
// pages and decode attention reads them as streams the hardware prefetcher follows
// (measurably faster than the same blocks shuffled: docs/BENCHMARKS.md, issue 6 session
// 9). A page that cannot go there starts a new run at the lowest slot of kSlot wholly
// free pages, where no other table is growing; with no such slot left, on the most
// recently freed page. 16 tables taking a block each in turns, as a decode batch does,
// stay almost wholly adjacent, where handing out the most recently freed page
// interleaved them block by block (no neighbours adjacent). A window page goes first to
// a page of its kind dropped earlier (oldest first): a sequence's window then turns in
// a ring over the same pages, still in order, and its memory stays that of the window
// instead of walking through the whole pool.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <set>
#include <span>
#include <vector>

namespace ridge {

// One sequence's entries in position order: entry i holds positions [i*bs, (i+1)*bs).
// The table references every entry and claims the window pages of entries [n_slid, size).
struct BlockTable {
  using value_type = int32_t;
  using const_iterator = std::vector<int32_t>::const_iterator;
  using iterator = const_iterator;

  std::vector<int32_t> ids;
  int32_t n_slid = 0;

  BlockTable() = default;
  BlockTable(std::initializer_list<int32_t> l) : ids(l) {}
  int32_t back() const { return ids.back(); }
  friend bool operator==(const BlockTable& a, const std::vector<int32_t>& b) { return a.ids == b; }

  size_t size() const { return ids.size(); }
  bool empty() const { return ids.empty(); }
  int32_t operator[](size_t i) const { return ids[i]; }
  auto begin() const { return ids.begin(); }
  auto end() const { return ids.end(); }
  operator std::span<const int32_t>() const { return ids; }
};

// Pages per entry and the window that bounds the window pages (KvGroups' numbers).
struct PageGroups {
  int32_t n_global = 1, n_window = 0;
  int32_t window = 0;  // tokens a window layer's query sees (itself included)
};

class BlockManager {
 public:
  BlockManager(int32_t n_pages, int32_t block_size, const PageGroups& groups = {});

  int32_t block_size() const { return block_size_; }
  int32_t n_total() const { return int32_t(owner_.size()); }  // pages
  int32_t n_free() const { return int32_t(free_.size()); }    // pages
  const PageGroups& groups() const { return g_; }
  int32_t pages_per_entry() const { return P_; }
  bool windowed() const { return g_.n_window > 0; }
  int32_t ref_count(int32_t entry) const { return ref_[size_t(entry)]; }
  int32_t claim_count(int32_t entry) const { return claims_[size_t(entry)]; }
  // The entry's page k (0 .. pages_per_entry), -1 where a window page was dropped.
  int32_t page(int32_t entry, int32_t k) const { return pages_[size_t(entry) * P_ + size_t(k)]; }
  bool has_window(int32_t entry) const { return !windowed() || page(entry, g_.n_global) >= 0; }
  int32_t entry_pages(int32_t entry) const { return g_.n_global + (has_window(entry) ? g_.n_window : 0); }
  int64_t blocks_for(int64_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  // The first entry a query at position next_pos still sees through the window: the
  // window pages before it are of no use to that table (0 without windows).
  int64_t first_live(int64_t next_pos) const;
  // Pages reserve(t, n_tokens) takes; pages a table of n_tokens, slid to n_tokens, holds.
  int64_t pages_needed(const BlockTable& t, int64_t n_tokens) const;
  int64_t pages_for(int64_t n_tokens) const;
  // The pages t holds (global pages of every entry, window pages of those it claims),
  // entry by entry: what a swap-out copies and a swap-in of the same table fills.
  void held_pages(const BlockTable& t, std::vector<int32_t>& out) const;
  int64_t n_held_pages(const BlockTable& t) const;
  // The page table the forward reads: [pages_per_entry][t.size()], -1 where dropped.
  void page_table(const BlockTable& t, std::vector<int32_t>& out) const;
  // The longest sequence the pool holds alone, in tokens, when a step runs at most
  // `chunk` of its tokens at once.
  int64_t max_tokens_one_seq(int32_t chunk) const;

  // Grows t to cover n_tokens positions (entries before t.n_slid without window pages).
  // All or nothing: false (t untouched) when the free pages do not suffice.
  bool reserve(BlockTable& t, int64_t n_tokens);
  // Drops t's claims on window pages a query at next_pos no longer sees.
  void slide(BlockTable& t, int64_t next_pos);
  // t's entries were retained for it (a prefix-cache hit, a shared draft prefix) without
  // claims: claims those a query at next_pos sees (they must still have window pages).
  void adopt(BlockTable& t, int64_t next_pos);
  // Drops the table's entries past the first blocks_for(n_tokens).
  void truncate(BlockTable& t, int64_t n_tokens);
  // Drops this table's reference (and claims) on each of its entries; empties it.
  void release(BlockTable& t);
  void retain(int32_t entry);
  int32_t release_entry(int32_t entry);  // one reference (no claim); returns the pages freed
  void claim(int32_t entry);             // its window pages must be there
  int32_t unclaim(int32_t entry);        // returns the pages freed

  // Free + used = total, every used page owned by a referenced entry, no page both free
  // and used, window pages present exactly while claimed, no negative counts.
  void check_invariants() const;

 private:
  // Pages per slot: a table that cannot grow into its next page starts a new run at a
  // slot all of whose pages are free, so it can grow kSlot pages before it meets
  // another table (16 pages: 256 tokens at the default block size).
  static constexpr int32_t kSlot = 16;
  static constexpr int32_t kMaxPages = 64;  // per block

  void take(int32_t page, int32_t entry);  // off the free list, owned by entry
  void give_back(int32_t page);            // onto the free list
  int32_t fresh_page() const;              // where a page that cannot follow its run goes
  int32_t place(int32_t prev) const;       // a free page: prev + 1 if free, else fresh
  int32_t drop_window(int32_t entry);      // frees its window pages; returns how many
  int32_t window_page(int32_t k, int32_t prev);  // a free page for window kind k

  int32_t block_size_;
  PageGroups g_;
  int32_t P_ = 1;
  std::vector<int32_t> free_;    // a stack: the most recently freed page on top
  std::vector<int32_t> pos_;     // [page] its index in free_ while free
  std::vector<int32_t> owner_;   // [page] the entry it belongs to, -1 while free
  std::vector<int32_t> ref_, claims_;  // [entry id]
  std::vector<int32_t> pages_;   // [entry id][P] its pages
  std::vector<int32_t> slot_free_;  // [slot] its free pages (whole slots only)
  std::set<int32_t> free_slots_;    // the slots with every page free
  // [window kind] pages of that kind dropped, oldest first; an entry may be stale (taken
  // again since by another kind): skipped.
  std::vector<std::deque<int32_t>> dropped_;
};

}  // namespace ridge
