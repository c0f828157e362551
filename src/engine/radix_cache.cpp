#include "engine/radix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

RadixCache::~RadixCache() { release_all(root_.get()); }

void RadixCache::release_all(Node* n) {
  for (auto& [k, c] : n->children) release_all(c.get());
  if (n->block >= 0) {
    if (n->window) bm_.unclaim(n->block);
    bm_.release_entry(n->block);
  }
}

void RadixCache::record_events(bool on) {
  if (on && !record_) {
    events_.push_back(KvEvent{KvEvent::Kind::AllBlocksCleared, {}, {}, {}, 0});
    announce(root_.get());  // what the tree holds already, parents first
  }
  record_ = on;
  if (!on) events_.clear();
}

void RadixCache::announce(const Node* n) {
  const int32_t bs = bm_.block_size();
  for (const auto& [k, c] : n->children) {
    const std::optional<uint64_t> parent = n == root_.get() ? std::nullopt : std::optional<uint64_t>(n->hash);
    events_.push_back(KvEvent{KvEvent::Kind::BlockStored, {c->hash}, parent, {}, bs});
    events_.back().tokens.assign(c->key.begin(), c->key.begin() + bs);
    announce(c.get());
  }
}

void RadixCache::block_key(std::span<const int32_t> tokens, int32_t b, int32_t ns, std::vector<int32_t>& key) const {
  const int32_t bs = bm_.block_size();
  key.assign(tokens.begin() + int64_t(b) * bs, tokens.begin() + int64_t(b + 1) * bs);
  if (b == 0 && ns > 0) key.push_back(-ns);
}

int32_t RadixCache::match(std::span<const int32_t> tokens, int32_t max_tokens, BlockTable& blocks, int32_t ns) {
  RIDGE_CHECK(ns >= 0, "radix cache: namespace {} is negative", ns);
  RIDGE_CHECK(blocks.empty(), "radix cache: a match goes into an empty block table");
  const int32_t bs = bm_.block_size();
  ++stats_.queries;
  stats_.query_tokens += int64_t(tokens.size());
  Node* n = root_.get();
  std::vector<Node*> path;
  std::vector<int32_t> key;
  while (int32_t(path.size() + 1) * bs <= max_tokens && int32_t(path.size() + 1) * bs <= int32_t(tokens.size())) {
    block_key(tokens, int32_t(path.size()), ns, key);
    auto it = n->children.find(key);
    if (it == n->children.end()) break;
    n = it->second.get();
    path.push_back(n);
  }
  // The longest prefix whose next query finds the window pages it sees: none missing
  // from its first live block on.
  size_t m = path.size();
  if (bm_.windowed()) {
    int64_t last_missing = -1;  // the last block of path[0, m) without window pages
    std::vector<int64_t> missing_upto(path.size() + 1, -1);
    for (size_t i = 0; i < path.size(); ++i) {
      if (!bm_.has_window(path[i]->block)) last_missing = int64_t(i);
      missing_upto[i + 1] = last_missing;
    }
    while (m > 0 && missing_upto[m] >= bm_.first_live(int64_t(m) * bs)) --m;
  }
  const uint64_t now = ++clock_;
  for (size_t i = 0; i < m; ++i) {
    path[i]->last_use = now;
    bm_.retain(path[i]->block);
    blocks.ids.push_back(path[i]->block);
  }
  const int32_t matched = int32_t(m) * bs;
  bm_.adopt(blocks, matched);
  stats_.hit_tokens += matched;
  return matched;
}

void RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks, int32_t ns) {
  RIDGE_CHECK(ns >= 0, "radix cache: namespace {} is negative", ns);
  RIDGE_ASSERT(int64_t(tokens.size()) >= int64_t(blocks.size()) * bm_.block_size());
  Node* n = root_.get();
  const uint64_t now = ++clock_;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::vector<int32_t> key;
    block_key(tokens, int32_t(b), ns, key);
    auto it = n->children.find(key);
    if (it == n->children.end()) {
      auto child = std::make_unique<Node>();
      child->key = key;
      child->block = blocks[b];
      child->parent = n;
      child->depth = n->depth + 1;
      const std::optional<uint64_t> parent = n == root_.get() ? std::nullopt : std::optional<uint64_t>(n->hash);
      child->hash = kv_block_hash(parent, key);
      if (record_) {
        // A run of new blocks in one insert is one event: its chain continues the last.
        const int32_t bs = bm_.block_size();
        if (events_.empty() || events_.back().kind != KvEvent::Kind::BlockStored || !parent ||
            events_.back().hashes.back() != *parent)
          events_.push_back(KvEvent{KvEvent::Kind::BlockStored, {}, parent, {}, bs});
        events_.back().hashes.push_back(child->hash);
        events_.back().tokens.insert(events_.back().tokens.end(), key.begin(), key.begin() + bs);
      }
      bm_.retain(blocks[b]);
      if (bm_.windowed() && bm_.has_window(blocks[b])) bm_.claim(blocks[b]), child->window = true;
      ++n_nodes_;
      ++stats_.inserted_blocks;
      it = n->children.emplace(std::move(key), std::move(child)).first;
    }
    n = it->second.get();
    // A node whose window pages were evicted takes this copy, which has them (the same
    // tokens at the same positions: the same K/V), or hits would stop before it for good.
    if (bm_.windowed() && !n->window && bm_.has_window(blocks[b])) {
      bm_.retain(blocks[b]);
      bm_.claim(blocks[b]);
      bm_.release_entry(n->block);
      n->block = blocks[b];
      n->window = true;
    }
    n->last_use = now;
  }
}

void RadixCache::collect_victims(Node* n, std::vector<Node*>& out) const {
  for (auto& [k, c] : n->children) {
    if (c->children.empty() && bm_.ref_count(c->block) == 1) out.push_back(c.get());
    else if (c->window && bm_.claim_count(c->block) == 1) out.push_back(c.get());
    if (!c->children.empty()) collect_victims(c.get(), out);
  }
}

int32_t RadixCache::evict(int32_t n) {
  int32_t freed = 0;
  while (freed < n) {
    std::vector<Node*> victims;
    collect_victims(root_.get(), victims);
    if (victims.empty()) break;
    // Least recently used first; on a tie (a path recorded or matched at once) the deeper
    // first, so a prefix loses its tail before its head.
    std::sort(victims.begin(), victims.end(), [](const Node* a, const Node* b) {
      return a->last_use != b->last_use ? a->last_use < b->last_use : a->depth > b->depth;
    });
    // Evicting a leaf can turn its parent into a leaf; re-collect after each round.
    for (Node* v : victims) {
      if (freed >= n) break;
      if (v->window) freed += bm_.unclaim(v->block), v->window = false;
      if (!v->children.empty() || bm_.ref_count(v->block) > 1) continue;  // its window pages were the victim
      freed += bm_.release_entry(v->block);
      if (record_) {
        if (events_.empty() || events_.back().kind != KvEvent::Kind::BlockRemoved)
          events_.push_back(KvEvent{KvEvent::Kind::BlockRemoved, {}, {}, {}, 0});
        events_.back().hashes.push_back(v->hash);
      }
      Node* parent = v->parent;
      parent->children.erase(v->key);
      --n_nodes_;
      ++stats_.evicted_blocks;
    }
  }
  return freed;
}

// Returns whether n's whole subtree (n included) is held by the tree alone; counts the
// pages of such subtrees and the window pages only the tree claims elsewhere: exactly
// what repeated eviction could free.
bool RadixCache::count_evictable(const Node* n, int32_t& out) const {
  bool all = true;
  for (const auto& [k, c] : n->children) all &= count_evictable(c.get(), out);
  if (n == root_.get()) return all;
  if (all && bm_.ref_count(n->block) == 1) {
    out += bm_.entry_pages(n->block);
    return true;
  }
  if (n->window && bm_.claim_count(n->block) == 1) out += bm_.groups().n_window;
  return false;
}

int32_t RadixCache::n_evictable() const {
  int32_t out = 0;
  count_evictable(root_.get(), out);
  return out;
}

void RadixCache::check_node(const Node* n) const {
  for (const auto& [k, c] : n->children) {
    RIDGE_CHECK(c->parent == n, "radix node parent link broken");
    const bool ns_key = n == root_.get() && int32_t(k.size()) == bm_.block_size() + 1 && k.back() < 0;
    RIDGE_CHECK(c->key == k && (int32_t(k.size()) == bm_.block_size() || ns_key), "radix node key mismatch");
    RIDGE_CHECK(c->block >= 0 && bm_.ref_count(c->block) >= 1, "radix node block {} is not referenced", c->block);
    RIDGE_CHECK(!c->window || bm_.claim_count(c->block) >= 1, "radix node block {}'s window pages are not claimed",
                c->block);
    check_node(c.get());
  }
}

void RadixCache::collect(const Node* n, std::vector<int32_t>& out, bool claims) const {
  for (const auto& [k, c] : n->children) {
    if (!claims || c->window) out.push_back(c->block);
    collect(c.get(), out, claims);
  }
}

void RadixCache::collect_blocks(std::vector<int32_t>& out) const { collect(root_.get(), out, false); }
void RadixCache::collect_claims(std::vector<int32_t>& out) const { collect(root_.get(), out, true); }

void RadixCache::check_invariants() const { check_node(root_.get()); }

}  // namespace ridge
