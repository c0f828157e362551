#include "engine/radix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

RadixCache::~RadixCache() { release_all(root_.get()); }

void RadixCache::release_all(Node* n) {
  for (auto& [k, c] : n->children) release_all(c.get());
  if (n->block >= 0) {
    std::vector<int32_t> one{n->block};
    bm_.release(one);
  }
}

void RadixCache::block_key(std::span<const int32_t> tokens, int32_t b, int32_t ns, std::vector<int32_t>& key) const {
  const int32_t bs = bm_.block_size();
  key.assign(tokens.begin() + int64_t(b) * bs, tokens.begin() + int64_t(b + 1) * bs);
  if (b == 0 && ns > 0) key.push_back(-ns);
}

int32_t RadixCache::match(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& blocks,
                          int32_t ns) {
  RIDGE_CHECK(ns >= 0, "radix cache: namespace {} is negative", ns);
  const int32_t bs = bm_.block_size();
  ++stats_.queries;
  stats_.query_tokens += int64_t(tokens.size());
  Node* n = root_.get();
  int32_t matched = 0;
  std::vector<int32_t> key;
  const uint64_t now = ++clock_;
  while (matched + bs <= max_tokens && matched + bs <= int32_t(tokens.size())) {
    block_key(tokens, matched / bs, ns, key);
    auto it = n->children.find(key);
    if (it == n->children.end()) break;
    n = it->second.get();
    n->last_use = now;
    bm_.retain(n->block);
    blocks.push_back(n->block);
    matched += bs;
  }
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
      bm_.retain(blocks[b]);
      ++n_nodes_;
      ++stats_.inserted_blocks;
      it = n->children.emplace(std::move(key), std::move(child)).first;
    }
    n = it->second.get();
    n->last_use = now;
  }
}

void RadixCache::collect_leaves(Node* n, std::vector<Node*>& out) const {
  for (auto& [k, c] : n->children) {
    if (c->children.empty()) {
      if (bm_.ref_count(c->block) == 1) out.push_back(c.get());
    } else {
      collect_leaves(c.get(), out);
    }
  }
}

int32_t RadixCache::evict(int32_t n) {
  int32_t freed = 0;
  while (freed < n) {
    std::vector<Node*> leaves;
    collect_leaves(root_.get(), leaves);
    if (leaves.empty()) break;
    std::sort(leaves.begin(), leaves.end(), [](const Node* a, const Node* b) { return a->last_use < b->last_use; });
    // Evicting a leaf can turn its parent into a leaf; re-collect after each round.
    for (Node* leaf : leaves) {
      if (freed >= n) break;
      std::vector<int32_t> one{leaf->block};
      bm_.release(one);
      Node* parent = leaf->parent;
      parent->children.erase(leaf->key);
      --n_nodes_;
      ++freed;
      ++stats_.evicted_blocks;
    }
  }
  return freed;
}

// Returns whether n's whole subtree (n included) is held by the tree alone; counts the
// blocks of such subtrees: exactly what repeated leaf eviction could free.
bool RadixCache::count_evictable(const Node* n, int32_t& out) const {
  bool all = true;
  for (const auto& [k, c] : n->children) all &= count_evictable(c.get(), out);
  if (n == root_.get()) return all;
  if (all && bm_.ref_count(n->block) == 1) {
    ++out;
    return true;
  }
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
    check_node(c.get());
  }
}

void RadixCache::collect(const Node* n, std::vector<int32_t>& out) const {
  for (const auto& [k, c] : n->children) {
    out.push_back(c->block);
    collect(c.get(), out);
  }
}

void RadixCache::collect_blocks(std::vector<int32_t>& out) const { collect(root_.get(), out); }

void RadixCache::check_invariants() const { check_node(root_.get()); }

}  // namespace ridge
