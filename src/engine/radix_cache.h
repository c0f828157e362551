// Prefix cache (SGLang's RadixAttention at block granularity): a tree whose edges are
// full KV blocks keyed by their token ids. A new request walks it for the longest prefix
// of full blocks already computed and shares those blocks instead of recomputing them.
//
// Ownership is by block reference counts (BlockManager): the tree holds one reference
// per node; every sequence using a block holds another. A node whose block only the tree
// references (ref == 1) and that has no children is an evictable leaf. "Locking" a
// matched path is taking the sequence's references.
//
// Window layers (BlockManager's window pages): the tree claims the window pages of the
// blocks it records, so a prefix stays servable after the sequences that computed it
// have slid past it. A hit at length L needs the window pages of the blocks a query at L
// sees; the match stops at the longest such L. Window pages only the tree claims are
// evictable on their own (the node keeps its global pages and its place in the tree):
// eviction is LRU over those and the evictable leaves, counted in pages.
//
// A namespace ns > 0 keeps blocks apart whose K/V were computed another way for the same
// tokens (multi-head latent attention's expanded prompts: engine/sequence.h n_expand):
// they are shared only within their namespace. It is a suffix -ns on the first block's
// key (token ids are never negative), so the tree below is the same tree.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/block_manager.h"
#include "engine/kv_events.h"

namespace ridge {

class RadixCache {
 public:
  explicit RadixCache(BlockManager& bm) : bm_(bm) { root_ = std::make_unique<Node>(); }
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // Longest cached prefix of `tokens` in full blocks, at most max_tokens long, into the
  // empty table `blocks`: a reference on each block and (BlockManager::adopt) claims on
  // the window pages a query after it sees, for the caller. Returns the number of tokens
  // matched (a multiple of the block size).
  int32_t match(std::span<const int32_t> tokens, int32_t max_tokens, BlockTable& blocks, int32_t ns = 0);

  // Records the computed full blocks of a sequence (tokens[0 .. blocks.size()*bs)) so that
  // later requests can share them. Blocks already in the tree under the same tokens stay
  // as they are (the sequence keeps its own copy).
  void insert(std::span<const int32_t> tokens, std::span<const int32_t> blocks, int32_t ns = 0);

  // Frees at least n pages if it can, least recently used first. Returns how many.
  int32_t evict(int32_t n);
  int32_t n_evictable() const;  // pages that evict() could free now
  int32_t n_nodes() const { return n_nodes_; }

  void collect_blocks(std::vector<int32_t>& out) const;  // every node's block
  void collect_claims(std::vector<int32_t>& out) const;  // the blocks whose window pages the tree claims
  // Every node's block is referenced, children's keys match, the tree is acyclic.
  void check_invariants() const;

  // KV-cache events (engine/kv_events.h): while on, every block the tree records and every
  // block it evicts is an event, taken (and cleared) by take_events. Turning it on records
  // AllBlocksCleared (a router that knew an earlier process at this address drops what it
  // held), then every block the tree holds already, each after its parent.
  void record_events(bool on);
  std::vector<KvEvent> take_events() { return std::exchange(events_, {}); }

  struct Stats {
    int64_t queries = 0, hit_tokens = 0, query_tokens = 0, inserted_blocks = 0, evicted_blocks = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Node {
    std::vector<int32_t> key;  // the block's token ids [block_size] (a first block: then -ns, ns > 0)
    int32_t block = -1;
    bool window = false;  // the tree claims the block's window pages
    int32_t depth = 0;    // blocks from the root
    Node* parent = nullptr;
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
    uint64_t last_use = 0;
    uint64_t hash = 0;  // kv_block_hash of the key after the parent's
  };
  // The key of block b of tokens: its ids, and the namespace on a first block.
  void block_key(std::span<const int32_t> tokens, int32_t b, int32_t ns, std::vector<int32_t>& key) const;
  bool count_evictable(const Node* n, int32_t& out) const;
  void check_node(const Node* n) const;
  void collect(const Node* n, std::vector<int32_t>& out, bool claims) const;
  // Evictable leaves and nodes whose window pages only the tree claims.
  void collect_victims(Node* n, std::vector<Node*>& out) const;
  void release_all(Node* n);
  void announce(const Node* n);  // BlockStored for n's subtree, parents first

  BlockManager& bm_;
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;
  int32_t n_nodes_ = 0;
  Stats stats_;
  bool record_ = false;
  std::vector<KvEvent> events_;
};

}  // namespace ridge
