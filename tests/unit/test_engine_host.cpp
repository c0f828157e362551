// The engine's host-side bookkeeping without a model: BlockManager (free list and ref
// counts), RadixCache (prefix sharing and LRU eviction) and Scheduler (continuous
// batching, priorities, preemption). The scheduler returns decisions as data, so a test
// can drive it exactly like Engine::step does with the forward pass faked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "engine/block_manager.h"
#include "engine/radix_cache.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace ridge {
namespace {

std::vector<int32_t> iota(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
  return v;
}

// ---------------------------------------------------------------- BlockManager

TEST(BlockManager, ReserveIsAllOrNothingAndGrowsByBlocksForRounding) {
  BlockManager bm(4, 4);
  for (auto [n, want] : {std::pair<int64_t, int64_t>{0, 0}, {1, 1}, {4, 1}, {5, 2}, {8, 2}, {9, 3}})
    EXPECT_EQ(bm.blocks_for(n), want) << n << " tokens";
  BlockTable a, b;
  ASSERT_TRUE(bm.reserve(a, 9));   // 3 blocks
  EXPECT_FALSE(bm.reserve(b, 8));  // needs 2, 1 free: nothing taken
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(bm.n_free(), 1);
  EXPECT_TRUE(bm.reserve(a, 12));  // still covered; and a smaller reserve never shrinks
  EXPECT_TRUE(bm.reserve(a, 1));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_TRUE(bm.reserve(a, 13));  // grows by the one block position 13 needs
  EXPECT_EQ(a.size(), 4u);
  EXPECT_FALSE(bm.reserve(a, 17));
  EXPECT_EQ(a.size(), 4u);
  EXPECT_NO_THROW(bm.check_invariants());
}

TEST(BlockManager, RetainKeepsABlockUntilTheLastRelease) {
  BlockManager bm(4, 4);
  BlockTable a;
  ASSERT_TRUE(bm.reserve(a, 8));
  const int32_t shared = a[0];
  bm.retain(shared);  // a second holder (e.g. the radix tree)
  EXPECT_EQ(bm.ref_count(shared), 2);
  bm.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.ref_count(shared), 1);
  EXPECT_EQ(bm.n_free(), 3);  // only the unshared block came back
  BlockTable other{shared};
  bm.release(other);
  EXPECT_EQ(bm.n_free(), 4);
  EXPECT_NO_THROW(bm.check_invariants());
}

TEST(BlockManager, TablesGrowIntoTheNextBlockElseStartAtAWhollyFreeSlot) {
  BlockManager bm(72, 1);  // slots of 16 blocks: [0, 16), ..., [48, 64), and 8 blocks over
  BlockTable a, b, c;
  ASSERT_TRUE(bm.reserve(a, 3));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));  // a fresh pool fills from its start
  // b does not start at 3, where a grows, but at the next wholly free slot.
  ASSERT_TRUE(bm.reserve(b, 2));
  EXPECT_EQ(b, (std::vector<int32_t>{16, 17}));
  ASSERT_TRUE(bm.reserve(a, 6));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  // a table grows past its slot's end into the next block where that one is free
  ASSERT_TRUE(bm.reserve(b, 17));
  EXPECT_EQ(b.back(), 32);
  ASSERT_TRUE(bm.reserve(c, 1));
  EXPECT_EQ(c, (std::vector<int32_t>{48}));  // slot [32, 48) is b's now
  EXPECT_NO_THROW(bm.check_invariants());
  // A released table's slot is wholly free again, and the lowest such slot is next.
  bm.release(b);
  BlockTable d;
  ASSERT_TRUE(bm.reserve(d, 1));
  EXPECT_EQ(d, (std::vector<int32_t>{16}));
  // With no wholly free slot left, a table takes the most recently freed block.
  BlockTable rest;
  ASSERT_TRUE(bm.reserve(rest, bm.n_free() - 2));
  BlockTable e{a.back()};
  a.ids.pop_back();
  bm.release(e);  // block 5, on top of the stack
  ASSERT_TRUE(bm.reserve(c, 2));  // 49 is taken by rest: c goes on at 5
  EXPECT_EQ(c.back(), 5);
  EXPECT_NO_THROW(bm.check_invariants());
  ASSERT_TRUE(bm.reserve(c, 4));
  EXPECT_EQ(bm.n_free(), 0);
  EXPECT_FALSE(bm.reserve(d, 2));
  EXPECT_NO_THROW(bm.check_invariants());
}

// Sixteen tables growing in turns, one block each, as a decode batch takes them: each
// goes on in a run of its own instead of the 16 interleaving block by block.
TEST(BlockManager, TablesGrowingInTurnsStayInRuns) {
  BlockManager bm(4096, 16);
  std::vector<BlockTable> tables(16);
  for (int64_t len = 16; len <= 128 * 16; len += 16)
    for (auto& t : tables) ASSERT_TRUE(bm.reserve(t, len));
  int64_t adjacent = 0, pairs = 0;
  for (const auto& t : tables)
    for (size_t i = 1; i < t.size(); ++i) adjacent += t[i] == t[i - 1] + 1, ++pairs;
  std::printf("[BlockManager] in turns: %.1f%% of %lld block pairs adjacent\n", 100.0 * double(adjacent) / double(pairs),
              static_cast<long long>(pairs));
  EXPECT_GE(double(adjacent), 0.9 * double(pairs));
  EXPECT_NO_THROW(bm.check_invariants());
}

// A serving-like churn: sequences arrive with random prompts, grow by one token per step
// in turns, and finish at random; the free-list bookkeeping stays consistent and at least
// 90% of each table's blocks are adjacent to the one before (the printed share).
TEST(BlockManager, ChurnKeepsTheFreeListConsistentAndTablesMostlyAdjacent) {
  BlockManager bm(4096, 16);
  std::mt19937 rng(7);
  std::vector<BlockTable> tables(16);
  std::vector<int64_t> len(16, 0);
  int64_t adjacent = 0, pairs = 0;
  auto count = [&](const BlockTable& t) {
    for (size_t i = 1; i < t.size(); ++i) adjacent += t[i] == t[i - 1] + 1, ++pairs;
  };
  for (int step = 0; step < 20000; ++step) {
    const size_t s = size_t(rng() % 16);
    if (len[s] == 0) {
      const int64_t prompt = 64 + int64_t(rng() % 2048);
      if (!bm.reserve(tables[s], prompt)) continue;
      len[s] = prompt;
    } else if (rng() % 400 == 0) {
      count(tables[s]);
      bm.release(tables[s]);
      len[s] = 0;
    } else if (bm.reserve(tables[s], len[s] + 1)) {
      ++len[s];
    }
    if (step % 997 == 0) {
      ASSERT_NO_THROW(bm.check_invariants()) << "step " << step;
    }
  }
  for (auto& t : tables) count(t), bm.release(t);
  EXPECT_EQ(bm.n_free(), bm.n_total());
  EXPECT_NO_THROW(bm.check_invariants());
  std::printf("[BlockManager] churn: %.1f%% of %lld block pairs adjacent\n", 100.0 * double(adjacent) / double(pairs),
              static_cast<long long>(pairs));
  EXPECT_GT(pairs, 1000);
  EXPECT_GE(double(adjacent), 0.9 * double(pairs));
}

TEST(BlockManager, CheckInvariantsPassesValidUseAndCatchesADoubleRelease) {
  BlockManager bm(4, 2);
  BlockTable a, b;
  ASSERT_TRUE(bm.reserve(a, 3));
  ASSERT_TRUE(bm.reserve(b, 2));
  bm.retain(b[0]);
  EXPECT_NO_THROW(bm.check_invariants());
  BlockTable copy = a;
  bm.release(a);
  EXPECT_NO_THROW(bm.check_invariants());
  // Misuse: whether release() asserts (debug) or the count goes negative (release), it shows.
  EXPECT_THROW({ bm.release(copy); bm.check_invariants(); }, Error);
}

// ---------------------------------------------------------------- RadixCache

// A sequence that computed `toks` (a multiple of the block size) and recorded its blocks;
// returns its block table, still held.
BlockTable computed(BlockManager& bm, RadixCache& rc, const std::vector<int32_t>& toks) {
  BlockTable t;
  EXPECT_TRUE(bm.reserve(t, int64_t(toks.size())));
  rc.insert(toks, t);
  return t;
}
// The same, finished: only the tree holds the blocks. Returns their ids.
std::vector<int32_t> cached(BlockManager& bm, RadixCache& rc, const std::vector<int32_t>& toks) {
  BlockTable t = computed(bm, rc, toks);
  const std::vector<int32_t> ids = t.ids;
  bm.release(t);
  return ids;
}

TEST(RadixCache, MatchReturnsLongestFullBlockPrefixAndRetainsIt) {
  BlockManager bm(16, 4);
  RadixCache rc(bm);
  const std::vector<int32_t> blocks = cached(bm, rc, iota(0, 12));
  BlockTable got, got2;
  EXPECT_EQ(rc.match(iota(0, 10), 100, got), 8);  // 2 full blocks and a partial one
  EXPECT_EQ(got, (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(bm.ref_count(blocks[0]), 2);  // the caller's reference
  EXPECT_EQ(bm.ref_count(blocks[2]), 1);
  std::vector<int32_t> q = iota(0, 12);
  q[5] = 99;  // diverges inside the second block
  EXPECT_EQ(rc.match(q, 100, got2), 4);
  EXPECT_EQ(got2, (std::vector<int32_t>{blocks[0]}));
  bm.release(got);
  bm.release(got2);
  EXPECT_NO_THROW(rc.check_invariants());
}

TEST(RadixCache, MaxTokensCapsTheMatch) {
  // The scheduler passes tokens.size() - 1: a fully cached prompt still computes its
  // last block, whose logits give the next token.
  BlockManager bm(16, 4);
  RadixCache rc(bm);
  cached(bm, rc, iota(0, 12));
  BlockTable got;
  EXPECT_EQ(rc.match(iota(0, 12), 11, got), 8);
  EXPECT_EQ(got.size(), 2u);
  bm.release(got);
  EXPECT_EQ(rc.match(iota(0, 12), 3, got), 0);
  EXPECT_TRUE(got.empty());
}

TEST(RadixCache, InsertOfAnExistingPathKeepsTheExistingNodes) {
  BlockManager bm(16, 2);
  RadixCache rc(bm);
  const std::vector<int32_t> a = cached(bm, rc, iota(0, 4));
  // Another sequence computed the same tokens into its own blocks: the tree keeps a's.
  BlockTable c = computed(bm, rc, iota(0, 4));
  EXPECT_EQ(rc.n_nodes(), 2);
  EXPECT_EQ(rc.stats().inserted_blocks, 2);
  EXPECT_EQ(bm.ref_count(c[0]), 1);  // not retained by the tree
  EXPECT_EQ(bm.ref_count(c[1]), 1);
  // A longer one adds only its new tail, under the existing path.
  BlockTable d = computed(bm, rc, iota(0, 6));
  EXPECT_EQ(rc.n_nodes(), 3);
  BlockTable got;
  std::vector<int32_t> tree;
  EXPECT_EQ(rc.match(iota(0, 6), 6, got), 6);
  EXPECT_EQ(got, (std::vector<int32_t>{a[0], a[1], d[2]}));
  rc.collect_blocks(tree);
  EXPECT_EQ(std::set<int32_t>(tree.begin(), tree.end()), (std::set<int32_t>{a[0], a[1], d[2]}));
  for (auto* t : {&got, &c, &d}) bm.release(*t);
  EXPECT_NO_THROW(rc.check_invariants());
  EXPECT_NO_THROW(bm.check_invariants());
}

TEST(RadixCache, EvictFreesLeastRecentlyUsedLeafFirst) {
  BlockManager bm(8, 2);
  RadixCache rc(bm);
  const int32_t xb = cached(bm, rc, {1, 2})[0], yb = cached(bm, rc, {3, 4})[0];
  BlockTable got;
  ASSERT_EQ(rc.match(std::vector<int32_t>{1, 2, 0}, 2, got), 2);  // x is now the newer
  bm.release(got);
  EXPECT_EQ(rc.evict(1), 1);
  EXPECT_EQ(bm.ref_count(yb), 0);
  EXPECT_EQ(bm.ref_count(xb), 1);
  EXPECT_EQ(rc.n_nodes(), 1);
}

TEST(RadixCache, ParentsBecomeEvictableAfterTheirChildren) {
  BlockManager bm(8, 2);
  RadixCache rc(bm);
  const std::vector<int32_t> blocks = cached(bm, rc, iota(0, 6));
  EXPECT_EQ(rc.n_evictable(), 3);
  EXPECT_EQ(rc.evict(1), 1);
  EXPECT_EQ(bm.ref_count(blocks[2]), 0);  // the deepest goes first, never an inner node
  EXPECT_EQ(bm.ref_count(blocks[0]), 1);
  EXPECT_EQ(rc.evict(100), 2);  // one round per level
  EXPECT_EQ(rc.n_nodes(), 0);
  EXPECT_EQ(bm.n_free(), 8);
}

TEST(RadixCache, TreeOnlyNodeWithAHeldChildIsNotEvictable) {
  // s1 recorded [1,2]; s2 computed [1,2,3,4] in its own blocks before s1's hit was
  // there, so its second block hangs under s1's node. s1's node is tree-only (ref 1)
  // but cannot go while s2 holds the child.
  BlockManager bm(8, 2);
  RadixCache rc(bm);
  cached(bm, rc, {1, 2});
  BlockTable s2 = computed(bm, rc, {1, 2, 3, 4});
  ASSERT_EQ(rc.n_nodes(), 2);
  EXPECT_EQ(rc.n_evictable(), 0);
  EXPECT_EQ(rc.evict(100), 0);
  bm.release(s2);
  EXPECT_EQ(rc.n_evictable(), 2);
  EXPECT_EQ(rc.evict(100), 2);
  EXPECT_EQ(bm.n_free(), 8);
}

TEST(RadixCache, EvictNeverFreesHeldBlocksAndCountsExactlyWhatItCanFree) {
  // root -> a -> {b, c -> d}, a sequence holding a and b: c and d can go, a and b cannot.
  BlockManager bm(16, 2);
  RadixCache rc(bm);
  BlockTable held = computed(bm, rc, {1, 1, 2, 2});
  cached(bm, rc, {1, 1, 3, 3, 4, 4});
  EXPECT_EQ(rc.n_evictable(), 2);
  EXPECT_EQ(rc.evict(100), 2);
  EXPECT_EQ(rc.n_evictable(), 0);
  EXPECT_EQ(rc.n_nodes(), 2);
  EXPECT_EQ(bm.ref_count(held[0]), 2);  // sequence + tree, untouched
  EXPECT_EQ(bm.ref_count(held[1]), 2);
  bm.release(held);
  EXPECT_EQ(rc.n_evictable(), 2);
}

TEST(RadixCache, StatsCountQueriesHitsAndEvictions) {
  BlockManager bm(8, 2);
  RadixCache rc(bm);
  cached(bm, rc, {1, 2, 3, 4});
  BlockTable got, got2;
  rc.match(std::vector<int32_t>{1, 2, 3, 4, 5}, 4, got);  // 4 hit of 5
  rc.match(std::vector<int32_t>{7, 8}, 1, got2);          // miss
  bm.release(got);
  rc.evict(1);
  const RadixCache::Stats& st = rc.stats();
  EXPECT_EQ(st.queries, 2);
  EXPECT_EQ(st.query_tokens, 7);
  EXPECT_EQ(st.hit_tokens, 4);
  EXPECT_EQ(st.inserted_blocks, 2);
  EXPECT_EQ(st.evicted_blocks, 1);
}

TEST(RadixCache, DestructorReleasesTheTreesReferences) {
  BlockManager bm(8, 2);
  {
    RadixCache rc(bm);
    cached(bm, rc, iota(0, 8));
    EXPECT_EQ(bm.n_free(), 4);
  }
  EXPECT_EQ(bm.n_free(), 8);
  EXPECT_NO_THROW(bm.check_invariants());
}

// KV-cache events (engine/kv_events.h): the blocks the tree records and evicts, hashes
// chained from the prompt's start, as a router follows them.
TEST(RadixCache, EventsNameTheBlocksStoredAndEvictedByChainedHashes) {
  BlockManager bm(16, 4);
  RadixCache rc(bm);
  cached(bm, rc, iota(0, 8));  // before recording: no events
  EXPECT_TRUE(rc.take_events().empty());
  rc.record_events(true);  // a clear, then what the tree holds, parents first
  std::vector<KvEvent> ev = rc.take_events();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::AllBlocksCleared);
  EXPECT_EQ(ev[1].kind, KvEvent::Kind::BlockStored);
  EXPECT_FALSE(ev[1].parent.has_value());
  EXPECT_EQ(ev[1].tokens, iota(0, 4));
  EXPECT_EQ(ev[2].parent, std::optional<uint64_t>(ev[1].hashes[0]));
  EXPECT_EQ(ev[2].tokens, iota(4, 4));

  // 12 tokens sharing the first 8 with the cached prompt: one new block, child of block 2.
  cached(bm, rc, iota(0, 12));
  const uint64_t h0 = kv_block_hash(std::nullopt, iota(0, 4)), h1 = kv_block_hash(h0, iota(4, 4));
  const uint64_t h2 = kv_block_hash(h1, iota(8, 4));
  ev = rc.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::BlockStored);
  EXPECT_EQ(ev[0].hashes, std::vector<uint64_t>{h2});
  ASSERT_TRUE(ev[0].parent.has_value());
  EXPECT_EQ(*ev[0].parent, h1);
  EXPECT_EQ(ev[0].tokens, iota(8, 4));
  EXPECT_EQ(ev[0].block_size, 4);

  // A new prompt: one event, its chain from the start (no parent), tokens in order.
  std::vector<int32_t> other = iota(100, 8);
  cached(bm, rc, other);
  ev = rc.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_FALSE(ev[0].parent.has_value());
  const uint64_t o0 = kv_block_hash(std::nullopt, iota(100, 4));
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{o0, kv_block_hash(o0, iota(104, 4))}));
  EXPECT_EQ(ev[0].tokens, other);
  EXPECT_NE(h0, o0);
  EXPECT_EQ(h0 >> 63, 0u);  // 63 bits

  // Evicting everything: every stored block removed, each once.
  EXPECT_EQ(rc.evict(100), 5);
  ev = rc.take_events();
  std::multiset<uint64_t> removed;
  for (const auto& e : ev) {
    EXPECT_EQ(e.kind, KvEvent::Kind::BlockRemoved);
    removed.insert(e.hashes.begin(), e.hashes.end());
  }
  EXPECT_EQ(removed, (std::multiset<uint64_t>{h0, h1, h2, o0, kv_block_hash(o0, iota(104, 4))}));
  rc.record_events(false);
  cached(bm, rc, iota(0, 4));
  EXPECT_TRUE(rc.take_events().empty());
}

// ---------------------------------------------------------------- Scheduler

// Like Engine::Cost: can_swap asks whether the swap space has room for this sequence on
// top of what this step's earlier swap-outs were promised (slots are taken only when the
// engine copies out, after schedule() returns).
struct FakeCost : PreemptionCost {
  bool prefer = true;
  int64_t swap_free = 1 << 30;  // swap-space slots
  bool prefer_swap(const Sequence&) const override { return prefer; }
  bool can_swap(const Sequence& s, int64_t reserved) const override {
    return reserved + int64_t(s.blocks.size()) <= swap_free;
  }
};

// Drives the scheduler like Engine::step: schedule, acknowledge swap-outs, run the chunks
// (n_computed += n_tokens, on_computed), append a sampled token when a chunk reaches the
// end, finish at max_tokens. Checks every invariant after every step.
struct Sim {
  SchedulerConfig cfg;
  BlockManager bm;
  std::unique_ptr<RadixCache> radix;
  FakeCost cost;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  uint64_t arrivals = 0;

  Sim(SchedulerConfig c, int32_t n_blocks, int32_t bs, bool prefix_cache = true)
      : cfg(c), bm(n_blocks, bs), radix(prefix_cache ? std::make_unique<RadixCache>(bm) : nullptr),
        sched(cfg, bm, radix.get(), &cost) {}

  Sequence* add(std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority = 0) {
    RequestParams p;
    p.max_tokens = max_tokens;
    p.priority = priority;
    seqs.push_back(std::make_unique<Sequence>(int64_t(seqs.size()), std::move(prompt), p, 1 << 20, arrivals++));
    sched.add(seqs.back().get());
    return seqs.back().get();
  }

  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    EXPECT_LE(out.n_tokens(), cfg.max_num_batched_tokens);
    EXPECT_LE(sched.n_running(), cfg.max_num_seqs);
    for (Sequence* s : out.swap_out) {  // the engine's copies, slots taken and given back
      EXPECT_FALSE(s->swap_src.empty());
      s->swap_slots.assign(s->swap_src.size(), 0);
      cost.swap_free -= int64_t(s->swap_slots.size());
      sched.swapped_out(s);
    }
    for (Sequence* s : out.swap_in) {
      cost.swap_free += int64_t(s->swap_slots.size());
      s->swap_slots.clear();
    }
    for (const ScheduledChunk& c : out.chunks) {
      Sequence* s = c.seq;
      EXPECT_GT(c.n_tokens, 0);
      EXPECT_LE(s->n_computed + c.n_tokens, int32_t(s->tokens.size()));
      s->n_computed += c.n_tokens;
      sched.on_computed(s);
      if (s->n_computed == int32_t(s->tokens.size())) {
        s->tokens.push_back(int32_t(1'000'000 + s->id * 1000 + s->n_generated()));  // unique per sequence
        if (s->n_generated() >= s->params.max_tokens) sched.finish(s);
      }
    }
    check();
    return out;
  }

  // Engine::check_invariants: each block's count is exactly its holders (tables + tree).
  void check() const {
    ASSERT_NO_THROW(bm.check_invariants());
    ASSERT_NO_THROW(sched.check_invariants());
    std::vector<int32_t> refs(size_t(bm.n_total()), 0);
    for (const auto& s : seqs)
      for (int32_t b : s->blocks) ++refs[size_t(b)];
    if (radix) {
      ASSERT_NO_THROW(radix->check_invariants());
      std::vector<int32_t> tree;
      radix->collect_blocks(tree);
      for (int32_t b : tree) ++refs[size_t(b)];
    }
    for (int32_t b = 0; b < bm.n_total(); ++b) ASSERT_EQ(refs[size_t(b)], bm.ref_count(b)) << "block " << b;
  }

  bool idle() const {
    return std::all_of(seqs.begin(), seqs.end(), [](const auto& s) { return s->finished(); });
  }
  void run_until_idle(int max_steps = 1000) {
    for (int i = 0; i < max_steps && !idle(); ++i) step();
    ASSERT_TRUE(idle());
    // Nothing leaks: every block is free or an evictable prefix-cache block.
    EXPECT_EQ(bm.n_free() + (radix ? radix->n_evictable() : 0), bm.n_total());
  }
};

bool has_chunk(const SchedulerOutput& o, const Sequence* s) {
  return std::any_of(o.chunks.begin(), o.chunks.end(), [&](const ScheduledChunk& c) { return c.seq == s; });
}
using Seqs = std::vector<const Sequence*>;
Seqs chunk_seqs(const SchedulerOutput& o) {
  Seqs v;
  for (const auto& c : o.chunks) v.push_back(c.seq);
  return v;
}

TEST(Scheduler, TokenBudgetHoldsAndRunningDecodesComeBeforeNewPrompts) {
  Sim sim({8, 10, PreemptionMode::Recompute, 256}, 64, 4);
  Sequence* a = sim.add(iota(0, 3), 10);
  Sequence* b = sim.add(iota(100, 3), 10);
  Sequence* c = sim.add(iota(200, 3), 10);
  EXPECT_EQ(sim.step().n_tokens(), 9);
  Sequence* d = sim.add(iota(300, 20), 10);
  for (int32_t expect_d : {7, 7, 6}) {  // the new prompt gets what the decodes leave
    SchedulerOutput o = sim.step();
    ASSERT_EQ(chunk_seqs(o), (Seqs{a, b, c, d}));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(o.chunks[size_t(i)].n_tokens, 1);
    EXPECT_EQ(o.chunks[3].n_tokens, expect_d);
    EXPECT_EQ(o.n_tokens(), 3 + expect_d);
  }
  sim.run_until_idle();
}

// Regression: phase 1 once ordered running sequences by priority alone, so a
// better-priority sequence in chunked prefill took the whole budget and a running decode
// got nothing for as long as that prefill lasted.
TEST(Scheduler, RunningDecodesComeBeforeUnfinishedPromptChunks) {
  Sim sim({8, 8, PreemptionMode::Recompute, 256}, 64, 4);
  Sequence* b = sim.add(iota(0, 4), 10, /*priority=*/1);
  sim.step();                                      // b is decoding from now on
  Sequence* a = sim.add(iota(100, 30), 10, 0);  // better priority, long prompt
  SchedulerOutput o = sim.step();                  // b decodes, a gets 7
  ASSERT_TRUE(has_chunk(o, b));
  o = sim.step();                                  // a still has 23 prompt tokens
  EXPECT_TRUE(has_chunk(o, b)) << "the decode of b starved behind a's prompt chunk";
  EXPECT_TRUE(has_chunk(o, a));
  sim.run_until_idle();
}

TEST(Scheduler, MaxNumSeqsCapsTheRunningSet) {
  Sim sim({2, 1000, PreemptionMode::Recompute, 256}, 64, 4);
  Seqs s, admitted;
  for (int i = 0; i < 5; ++i) s.push_back(sim.add(iota(10 * i, 4), 3));
  for (int i = 0; i < 100 && !sim.idle(); ++i) {
    SchedulerOutput o = sim.step();
    EXPECT_LE(o.chunks.size(), 2u);
    for (const auto& c : o.chunks)
      if (c.seq->n_generated() == 1) admitted.push_back(c.seq);  // its first chunk
  }
  EXPECT_EQ(admitted, s);  // in arrival order
  sim.run_until_idle();
}

TEST(Scheduler, ChunkedPrefillSplitsALongPromptAcrossSteps) {
  Sim sim({8, 8, PreemptionMode::Recompute, 256}, 64, 4);
  Sequence* s = sim.add(iota(0, 20), 2);
  for (int32_t n : {8, 8, 4}) {
    SchedulerOutput o = sim.step();
    ASSERT_EQ(o.chunks.size(), 1u);
    EXPECT_EQ(o.chunks[0].n_tokens, n);
  }
  EXPECT_EQ(s->n_computed, 20);
  EXPECT_EQ(s->n_generated(), 1);  // sampled only when the prompt was complete
  EXPECT_EQ(sim.step().chunks[0].n_tokens, 1);
  EXPECT_TRUE(s->finished());
  sim.run_until_idle();
}

// One slot, one-step requests: the admission order is the scheduling order.
Seqs admission_order(Sim& sim) {
  Seqs order;
  for (int i = 0; i < 100 && !sim.idle(); ++i)
    for (const Sequence* s : chunk_seqs(sim.step())) order.push_back(s);
  return order;
}

TEST(Scheduler, FirstComeFirstServedAmongEqualPriorities) {
  Sim sim({1, 1000, PreemptionMode::Recompute, 256}, 64, 4);
  Sequence* a = sim.add(iota(0, 4), 1);
  Sequence* b = sim.add(iota(10, 4), 1);
  Sequence* c = sim.add(iota(20, 4), 1);
  EXPECT_EQ(admission_order(sim), (Seqs{a, b, c}));
}

TEST(Scheduler, LowerPriorityValueIsAdmittedFirst) {
  Sim sim({1, 1000, PreemptionMode::Recompute, 256}, 64, 4);
  Sequence* p2 = sim.add(iota(0, 4), 1, 2);
  Sequence* p0 = sim.add(iota(10, 4), 1, 0);
  Sequence* p1 = sim.add(iota(20, 4), 1, 1);
  EXPECT_EQ(admission_order(sim), (Seqs{p0, p1, p2}));
}

// A priority-3 request waits while a priority-0 request arrives every step. Its effective
// priority is 3 - floor(waited / aging_steps); it ties the fresh arrivals (effective 0)
// after 3 * aging_steps steps and wins the tie by arrival: admitted at step 6 when
// aging_steps = 2, after 5 newer requests. Without aging it starves.
int32_t step_admitting_low_priority(int32_t aging_steps) {
  Sim sim({1, 1000, PreemptionMode::Recompute, aging_steps}, 64, 4);
  Sequence* low = sim.add(iota(0, 4), 1, 3);
  for (int32_t step = 1; step <= 20; ++step) {
    sim.add(iota(100 * step, 4), 1, 0);
    if (has_chunk(sim.step(), low)) return step;
  }
  return -1;
}

TEST(Scheduler, AgingAdmitsAStarvedLowPriorityRequest) {
  EXPECT_EQ(step_admitting_low_priority(2), 6);
  EXPECT_EQ(step_admitting_low_priority(1 << 30), -1);
}

TEST(Scheduler, VictimIsLowestPriorityNewestUnscheduledSequence) {
  // 4 one-block sequences fill 6 blocks; at their first decode each needs a second.
  // a and d (priority 0) take the 2 free blocks; b (priority 1, older) needs one and the
  // victim is c: priority 1 and newest. Not d (newer, better priority), not b itself.
  Sim sim({8, 1000, PreemptionMode::Recompute, 256}, 6, 4);
  Sequence* a = sim.add(iota(0, 4), 10, 0);
  Sequence* b = sim.add(iota(10, 4), 10, 1);
  Sequence* c = sim.add(iota(20, 4), 10, 1);
  Sequence* d = sim.add(iota(30, 4), 10, 0);
  sim.step();
  SchedulerOutput o = sim.step();
  EXPECT_EQ(o.n_preempted, 1);
  EXPECT_EQ(c->n_preemptions, 1);
  EXPECT_EQ(c->status, SeqStatus::Waiting);
  EXPECT_EQ(chunk_seqs(o), (Seqs{a, d, b}));  // scheduled best first
  sim.run_until_idle();
}

TEST(Scheduler, RecomputePreemptionRequeuesAndKeepsItsPrefixCached) {
  Sim sim({8, 1000, PreemptionMode::Recompute, 256}, 5, 4);
  Sequence* a = sim.add(iota(0, 8), 4);
  Sequence* b = sim.add(iota(100, 6), 10);
  for (int i = 0; i < 3; ++i) sim.step();
  ASSERT_EQ(b->n_computed, 8);  // 2 full blocks recorded in the tree
  // Step 4: b's 9th position needs a third block; a (older) took the last one.
  SchedulerOutput o = sim.step();
  EXPECT_EQ(o.n_preempted, 1);
  EXPECT_FALSE(has_chunk(o, b));
  EXPECT_EQ(b->status, SeqStatus::Waiting);
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(b->n_generated(), 3);  // what it generated is kept and recomputed
  EXPECT_TRUE(a->finished());
  // Re-admitted: its 8 computed tokens come from the tree, one token is computed.
  o = sim.step();
  ASSERT_TRUE(has_chunk(o, b));
  EXPECT_EQ(b->n_prefix_hit, 8);
  EXPECT_EQ(o.chunks[0].n_tokens, 1);
  sim.run_until_idle();
}

TEST(Scheduler, FullyCachedPromptStillComputesItsLastBlock) {
  Sim sim({8, 1000, PreemptionMode::Recompute, 256}, 16, 4);
  sim.add(iota(0, 8), 1);
  sim.run_until_idle();
  Sequence* again = sim.add(iota(0, 8), 1);
  SchedulerOutput o = sim.step();
  EXPECT_EQ(again->n_prefix_hit, 4);  // match capped at 7 tokens: one block
  EXPECT_EQ(o.chunks[0].n_tokens, 4);
  sim.run_until_idle();
}

TEST(Scheduler, SwapPreemptionMovesKVOutAndBackBeforeWaitingWork) {
  Sim sim({8, 1000, PreemptionMode::Swap, 256}, 4, 4, /*prefix_cache=*/false);
  Sequence* a = sim.add(iota(0, 4), 6);
  Sequence* b = sim.add(iota(100, 4), 8);
  for (int i = 0; i < 5; ++i) sim.step();
  ASSERT_EQ(b->blocks.size(), 2u);
  const std::vector<int32_t> b_blocks = b->blocks.ids;
  // Step 6: a needs a third block, b is swapped out; its blocks are free at once, listed
  // in swap_src for the engine to copy before the forward.
  SchedulerOutput o = sim.sched.schedule();
  EXPECT_EQ(sim.sched.n_swaps(), 1);
  ASSERT_EQ(o.swap_out, std::vector<Sequence*>{b});
  EXPECT_EQ(b->swap_src, b_blocks);
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(b->status, SeqStatus::Swapped);
  EXPECT_EQ(b->n_computed, 8);  // kept: no recompute
  ASSERT_EQ(chunk_seqs(o), Seqs{a});
  sim.sched.swapped_out(b);
  a->n_computed += 1;  // finish the step by hand: a generates its 6th token and ends
  a->tokens.push_back(7);
  sim.sched.finish(a);
  sim.check();
  EXPECT_EQ(sim.bm.n_free(), 4);
  // c (needs 3 blocks) and b (needs 2, 3 with its next decode) compete: b comes back first.
  Sequence* c = sim.add(iota(200, 12), 1);
  o = sim.step();
  EXPECT_EQ(o.swap_in, std::vector<Sequence*>{b});
  EXPECT_EQ(b->status, SeqStatus::Running);
  EXPECT_EQ(b->blocks.size(), 2u);
  EXPECT_TRUE(o.chunks.empty());  // b decodes from the next step; c does not fit
  EXPECT_EQ(c->status, SeqStatus::Waiting);
  EXPECT_TRUE(has_chunk(sim.step(), b));
  sim.run_until_idle();
}

// Regression: while a swapped sequence waited for room, phase 3 still admitted newer
// requests that fit, taking the blocks it waited for; a stream of small requests could
// starve it (aging does not apply to Swapped).
TEST(Scheduler, WaitingWorkIsNotAdmittedAheadOfASwappedSequence) {
  Sim sim({8, 1000, PreemptionMode::Swap, 256}, 4, 4, false);
  sim.add(iota(0, 4), 20);
  Sequence* b = sim.add(iota(100, 4), 20);
  for (int i = 0; i < 6; ++i) sim.step();  // step 6 swaps b out; 1 block free, b needs 3
  ASSERT_EQ(b->status, SeqStatus::Swapped);
  Sequence* c = sim.add(iota(200, 2), 20);  // fits in the one free block
  sim.step();
  EXPECT_EQ(c->status, SeqStatus::Waiting) << "a newer request was admitted ahead of the swapped one";
}

// Regression: slots are taken only when Engine::step copies out, after schedule()
// returns, and can_swap once ignored this step's earlier swap-outs: with 1 free slot and
// 2 one-block victims both swapped, and SwapSpace::swap_out threw "swap space full" after
// the second victim's blocks were already freed.
TEST(Scheduler, SwapPreemptionsInOneStepFitTheSwapSpaceTogether) {
  Sim sim({8, 1000, PreemptionMode::Swap, 256}, 5, 4, false);
  sim.cost.swap_free = 1;
  for (int i = 0; i < 4; ++i) sim.add(iota(10 * i, 4), 10);
  sim.step();
  SchedulerOutput o = sim.sched.schedule();  // 1 block free, 3 sequences need one each
  int64_t swapped = 0;
  for (const Sequence* s : o.swap_out) swapped += int64_t(s->swap_src.size());
  EXPECT_LE(swapped, 1) << o.swap_out.size() << " sequences granted swap against the same free slot";
}

TEST(Scheduler, SwapWithoutRoomFallsBackToRecompute) {
  Sim sim({8, 1000, PreemptionMode::Auto, 256}, 4, 4, false);
  sim.cost.swap_free = 0;
  sim.add(iota(0, 4), 6);
  Sequence* b = sim.add(iota(100, 4), 8);
  for (int i = 0; i < 5; ++i) sim.step();
  SchedulerOutput o = sim.step();
  EXPECT_EQ(o.n_preempted, 1);
  EXPECT_TRUE(o.swap_out.empty());
  EXPECT_EQ(sim.sched.n_swaps(), 0);
  EXPECT_EQ(b->status, SeqStatus::Waiting);
  EXPECT_EQ(b->n_computed, 0);
  sim.run_until_idle();
}

TEST(Scheduler, WaitingRequestThatDoesNotFitBlocksTheQueueWithoutPreempting) {
  Sim sim({8, 1000, PreemptionMode::Recompute, 256}, 4, 4);
  Sequence* a = sim.add(iota(0, 8), 4);
  sim.step();
  // big (better priority) needs 3 blocks, 1 will be free; small would fit but is newer.
  Sequence* big = sim.add(iota(100, 12), 1, -5);
  Sequence* small = sim.add(iota(200, 2), 1);
  for (int i = 0; i < 3; ++i) {
    SchedulerOutput o = sim.step();
    EXPECT_EQ(o.n_preempted, 0);  // running work is never preempted for waiting work
    EXPECT_TRUE(has_chunk(o, a));
    EXPECT_EQ(big->status, SeqStatus::Waiting);
    EXPECT_EQ(small->status, SeqStatus::Waiting);  // head of line: no overtaking
  }
  EXPECT_TRUE(a->finished());
  EXPECT_EQ(admission_order(sim), (Seqs{big, small}));
  sim.run_until_idle();
}

// Regression: admission evicted first and checked afterwards, so a request that could not
// fit even after eviction threw the cached prefix away on every step it waited.
TEST(Scheduler, AdmissionThatCannotFitDoesNotEvictThePrefixCache) {
  Sim sim({8, 1000, PreemptionMode::Recompute, 256}, 6, 4);
  sim.add(iota(0, 8), 1);        // finishes at once; its 2 blocks stay cached
  sim.add(iota(100, 8), 20);     // keeps running, 3 blocks from step 2
  sim.step();
  ASSERT_EQ(sim.radix->n_evictable(), 2);
  Sequence* big = sim.add(iota(200, 16), 1);  // needs 4: 1 free + 2 evictable is not enough
  sim.step();
  ASSERT_EQ(big->status, SeqStatus::Waiting);
  EXPECT_EQ(sim.radix->n_evictable(), 2) << "the prefix cache was evicted for an admission that failed";
}

TEST(Scheduler, RemoveFromAnyStateFreesItsBlocks) {
  Sim sim({8, 1000, PreemptionMode::Swap, 256}, 4, 4, false);
  Sequence* a = sim.add(iota(0, 4), 20);
  Sequence* b = sim.add(iota(100, 4), 20);
  for (int i = 0; i < 5; ++i) sim.step();
  SchedulerOutput o = sim.sched.schedule();  // b swapped out, copy not yet done
  ASSERT_EQ(o.swap_out, std::vector<Sequence*>{b});
  sim.sched.remove(b);  // aborted mid-swap
  EXPECT_TRUE(b->swap_src.empty());
  EXPECT_TRUE(b->finished());
  Sequence* w = sim.add(iota(200, 4), 4);
  sim.sched.remove(w);  // aborted while waiting
  EXPECT_EQ(sim.sched.n_waiting(), 0);
  sim.sched.remove(a);  // aborted while running, with the blocks of this step's chunk
  EXPECT_TRUE(a->blocks.empty());
  EXPECT_EQ(sim.sched.n_running(), 0);
  EXPECT_EQ(sim.bm.n_free(), 4);
  sim.check();
  EXPECT_TRUE(sim.sched.schedule().chunks.empty());
}

TEST(Scheduler, RandomWorkloadKeepsEveryInvariantAndLeaksNothing) {
  // Shared prefixes, mixed priorities, a tight pool, swap or recompute, random aborts.
  for (PreemptionMode mode : {PreemptionMode::Recompute, PreemptionMode::Auto}) {
    Sim sim({6, 24, mode, 4}, 12, 4);
    std::mt19937_64 rng(7);
    for (int step = 0; step < 400; ++step) {
      if (step < 300 && rng() % 3 == 0) {
        std::vector<int32_t> p = iota(int32_t(rng() % 3) * 1000, 4 + int32_t(rng() % 8));  // shared heads
        for (uint64_t i = rng() % 6; i > 0; --i) p.push_back(int32_t(rng() % 50000));
        sim.add(std::move(p), 1 + int32_t(rng() % 12), int32_t(rng() % 3));
      }
      sim.cost.prefer = rng() % 2 == 0;
      if (rng() % 20 == 0 && !sim.seqs.empty()) {
        Sequence* s = sim.seqs[size_t(rng() % sim.seqs.size())].get();
        if (!s->finished()) sim.sched.remove(s);
        sim.cost.swap_free += int64_t(s->swap_slots.size());
        s->swap_slots.clear();
      }
      sim.step();
      if (HasFatalFailure()) return;
    }
    sim.run_until_idle();
    EXPECT_GT(sim.sched.n_preemptions(), 0);  // the pool was tight enough to matter
    if (mode == PreemptionMode::Auto) {
      EXPECT_GT(sim.sched.n_swaps(), 0);
    }
  }
}

}  // namespace
}  // namespace ridge
