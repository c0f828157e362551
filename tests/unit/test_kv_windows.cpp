// Window layers' KV bounded by the window: BlockManager's window pages, the radix cache's
// claims on them, and the engine end to end, where a model with window layers gives the
// same tokens and logits bit for bit as with every position kept (--swa-full) under the
// prefix cache, preemption by recompute and by swap, speculative decoding and small
// pools; and a 32k-token sequence with a 1k window runs in a pool far smaller than full
// window layers would take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "engine/engine.h"
#include "engine/radix_cache.h"
#include "model/kv_cache.h"
#include "model/mkmodel.h"
#include "model/model.h"

namespace ridge {
namespace {

std::vector<int32_t> iota(int32_t first, int32_t n) {
  std::vector<int32_t> v(size_t(n), 0);
  for (int32_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
  return v;
}

// Pages of the smaller kind's layer count: gemma3-1b's 4 global and 22 window layers as
// 1 + 6 pages of 4 slots, gpt-oss's 12 and 12 as 1 + 1 of 12; a block never over 64
// pages; a model of one kind (or --swa-full) one page of every layer.
TEST(KvGroups, LayersGoToPagesOfTheirKind) {
  HParams h;
  h.n_layer = 26, h.n_swa = 512, h.swa_period = 6;
  KvGroups g = kv_groups_for(h, true);
  EXPECT_EQ(g.slots, 4);
  EXPECT_EQ(g.n_global, 1);
  EXPECT_EQ(g.n_window, 6);
  EXPECT_EQ(g.window, 512);
  std::vector<int> used(size_t(g.pages() * g.slots), 0);
  for (int32_t il = 0; il < h.n_layer; ++il) {
    EXPECT_EQ(g.page[size_t(il)] >= g.n_global, h.swa_layer(il)) << il;
    ++used[size_t(g.page[size_t(il)] * g.slots + g.slot[size_t(il)])];
  }
  EXPECT_EQ(*std::max_element(used.begin(), used.end()), 1);  // no two layers share a slot
  h.n_layer = 24, h.swa_period = 2;
  g = kv_groups_for(h, true);
  EXPECT_EQ(g.slots, 12);
  EXPECT_EQ(g.pages(), 2);
  h.n_layer = 200, h.swa_period = 200;  // one global layer to 199 window ones
  g = kv_groups_for(h, true);
  EXPECT_LE(g.pages(), 64);
  EXPECT_TRUE(g.grouped());
  g = kv_groups_for(h, false);
  EXPECT_EQ(g.slots, 200);
  EXPECT_FALSE(g.grouped());
  h.n_swa = 0;
  EXPECT_FALSE(kv_groups_for(h, true).grouped());
}

// Pipeline stages: every stage's pages are laid out alike (rank 0's block manager names
// them for all), each stage's layers have a place of their kind and no two share one, and
// the layers of other stages have none; one stage is the whole model's grouping.
TEST(KvGroups, PipelineStagesShareOneLayout) {
  HParams h;
  for (const auto& [n_layer, period, stages] :
       std::vector<std::tuple<int32_t, int32_t, int32_t>>{{26, 6, 2}, {26, 6, 3}, {24, 2, 4}, {7, 6, 2}, {12, 6, 4}}) {
    h.n_layer = n_layer, h.n_swa = 64, h.swa_period = period;
    const KvGroups one = kv_groups_for(h, true, 0, 1), whole = kv_groups_for(h, true);
    EXPECT_EQ(one.slots, whole.slots);
    EXPECT_EQ(one.pages(), whole.pages());
    KvGroups first;
    for (int32_t s = 0; s < stages; ++s) {
      const KvGroups g = kv_groups_for(h, true, s, stages);
      if (s == 0) first = g;
      SCOPED_TRACE(testing::Message() << n_layer << " layers, period " << period << ", stage " << s << " of " << stages);
      EXPECT_TRUE(g.grouped());
      EXPECT_EQ(g.slots, first.slots);
      EXPECT_EQ(g.n_global, first.n_global);
      EXPECT_EQ(g.n_window, first.n_window);
      EXPECT_LE(g.pages(), 64);
      std::vector<int> used(size_t(g.pages() * g.slots), 0);
      const int32_t lo = n_layer * s / stages, hi = n_layer * (s + 1) / stages;
      for (int32_t il = lo; il < hi; ++il) {
        EXPECT_EQ(g.page[size_t(il)] >= g.n_global, h.swa_layer(il)) << il;
        ASSERT_LT(g.page[size_t(il)], g.pages());
        ASSERT_LT(g.slot[size_t(il)], g.slots);
        ++used[size_t(g.page[size_t(il)] * g.slots + g.slot[size_t(il)])];
      }
      EXPECT_EQ(*std::max_element(used.begin(), used.end()), 1);
    }
  }
  // Without window pages a stage's page holds its own layers.
  h.n_layer = 7, h.n_swa = 0;
  EXPECT_EQ(kv_groups_for(h, true, 0, 2).slots, 3);
  EXPECT_EQ(kv_groups_for(h, true, 1, 2).slots, 4);
  EXPECT_FALSE(kv_groups_for(h, true, 1, 2).grouped());
}

// One global and two window pages a block, a window of 8, blocks of 4 tokens.
TEST(BlockManagerWindows, WindowPagesGoOnceNoQuerySeesThem) {
  BlockManager bm(64, 4, {1, 2, 8});
  EXPECT_EQ(bm.pages_per_entry(), 3);
  BlockTable t;
  ASSERT_TRUE(bm.reserve(t, 20));  // 5 blocks of 3 pages
  EXPECT_EQ(bm.n_free(), 64 - 15);
  // A query at 20 sees keys 13..20: blocks 3 and 4.
  EXPECT_EQ(bm.first_live(20), 3);
  EXPECT_EQ(bm.first_live(7), 0);
  bm.slide(t, 20);
  EXPECT_EQ(t.n_slid, 3);
  EXPECT_EQ(bm.n_free(), 64 - 15 + 6);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(bm.has_window(t[i]), i >= 3) << i;
    EXPECT_EQ(bm.page(t[i], 0), t[i]);  // a block's id is its global page
  }
  EXPECT_EQ(bm.n_held_pages(t), 5 + 2 * 2);
  EXPECT_EQ(bm.pages_for(20), 9);  // what a swap-in of 20 tokens takes
  std::vector<int32_t> held, pt;
  bm.held_pages(t, held);
  EXPECT_EQ(held.size(), 9u);
  bm.page_table(t, pt);  // [3 pages][5 blocks]
  ASSERT_EQ(pt.size(), 15u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(pt[i], t[i]);
    EXPECT_EQ(pt[5 + i] >= 0, i >= 3);
    EXPECT_EQ(pt[10 + i] >= 0, i >= 3);
  }
  EXPECT_EQ(bm.pages_needed(t, 24), 3);
  EXPECT_NO_THROW(bm.check_invariants());

  // Another holder's claim keeps a block's window pages after the table slid past them.
  bm.retain(t[3]);
  bm.claim(t[3]);
  bm.slide(t, 32);  // first_live 6, past the table's end: every claim dropped
  EXPECT_EQ(t.n_slid, 5);
  EXPECT_TRUE(bm.has_window(t[3]));
  EXPECT_FALSE(bm.has_window(t[4]));
  EXPECT_NO_THROW(bm.check_invariants());
  EXPECT_EQ(bm.unclaim(t[3]), 2);
  EXPECT_EQ(bm.release_entry(t[3]), 0);
  bm.release(t);
  EXPECT_EQ(bm.n_free(), 64);
  EXPECT_NO_THROW(bm.check_invariants());

  // A table slid before it grows (a swap-in): blocks before n_slid get no window pages.
  BlockTable u;
  u.n_slid = int32_t(bm.first_live(40));
  EXPECT_EQ(u.n_slid, 8);
  EXPECT_EQ(bm.pages_needed(u, 40), 10 + 2 * 2);
  ASSERT_TRUE(bm.reserve(u, 40));
  EXPECT_EQ(bm.n_held_pages(u), bm.pages_for(40));
  EXPECT_EQ(bm.n_free(), 64 - 14);
  EXPECT_FALSE(bm.reserve(u, 40 + 4 * 17));  // 17 more blocks of 3 pages: 51 > 50, nothing taken
  EXPECT_EQ(bm.n_free(), 64 - 14);
  EXPECT_NO_THROW(bm.check_invariants());
  bm.release(u);
  EXPECT_EQ(bm.n_free(), 64);

  // The longest sequence alone: window pages for a window and a chunk, global for all.
  // blocks_for(1023 + 2048) + 1 = 193 blocks live; 6 x 193 pages over 1000: no savings.
  EXPECT_EQ(BlockManager(1000, 16, {1, 5, 1024}).max_tokens_one_seq(2048), 1000 / 6 * 16);
  EXPECT_EQ(BlockManager(5000, 16, {1, 5, 1024}).max_tokens_one_seq(2048), (193 + (5000 - 6 * 193)) * 16);
  EXPECT_EQ(BlockManager(1000, 16).max_tokens_one_seq(2048), 16000);
}

// Each page kind of a table grows in its own run of adjacent pages.
TEST(BlockManagerWindows, EachPageKindRunsOnItsOwn) {
  BlockManager bm(512, 16, {1, 2, 64});
  BlockTable t;
  ASSERT_TRUE(bm.reserve(t, 16 * 12));
  for (size_t i = 1; i < t.size(); ++i)
    for (int32_t k = 0; k < 3; ++k) EXPECT_EQ(bm.page(t[i], k), bm.page(t[i - 1], k) + 1) << i << " page " << k;
  bm.release(t);
  EXPECT_NO_THROW(bm.check_invariants());
}

// A sequence decoding far past its window turns its window pages in a ring: it touches
// as many as the window takes, in order, not the whole pool.
TEST(BlockManagerWindows, AWindowTurnsInARingOverTheSamePages) {
  BlockManager bm(4096, 4, {1, 2, 8});
  BlockTable t;
  std::set<int32_t> window_pages;
  int64_t in_order = 0, pairs = 0;
  for (int64_t n = 1; n <= 4000; ++n) {  // a token a step: reserve, then slide past it
    ASSERT_TRUE(bm.reserve(t, n));
    bm.slide(t, n);
    const size_t i = t.size() - 1;
    for (int32_t k = 1; k < 3; ++k) window_pages.insert(bm.page(t[i], k));
    if (n % 4 == 0 && i > 0 && bm.has_window(t[i - 1])) in_order += bm.page(t[i], 1) == bm.page(t[i - 1], 1) + 1, ++pairs;
  }
  EXPECT_LE(window_pages.size(), 2u * 4u);  // (window 8 + a block) / 4 blocks live, 2 kinds
  EXPECT_GE(in_order * 3, pairs * 2) << in_order << " of " << pairs;  // mostly adjacent still
  EXPECT_NO_THROW(bm.check_invariants());
  bm.release(t);
  EXPECT_EQ(bm.n_free(), 4096);
}

TEST(RadixCacheWindows, AHitNeedsTheWindowPagesItsQuerySeesAndThoseEvictFirst) {
  BlockManager bm(128, 4, {1, 1, 8});
  RadixCache rc(bm);
  const std::vector<int32_t> toks = iota(0, 40);  // 10 blocks
  BlockTable seq;
  ASSERT_TRUE(bm.reserve(seq, 40));
  rc.insert(toks, seq);
  bm.slide(seq, 40);  // the sequence sees blocks 8 and 9 only
  EXPECT_EQ(seq.n_slid, 8);
  for (size_t i = 0; i < 10; ++i) EXPECT_TRUE(bm.has_window(seq[i])) << i;  // the tree claims them
  EXPECT_EQ(rc.n_evictable(), 8);  // the window pages of blocks 0..7: only the tree claims them
  {
    BlockTable a;
    EXPECT_EQ(rc.match(toks, 39, a), 36);
    EXPECT_EQ(a.n_slid, 7);
    bm.release(a);
  }
  {
    BlockTable a;
    EXPECT_EQ(rc.match(toks, 20, a), 20);  // blocks 0..4 are now the most recently used
    bm.release(a);
  }
  EXPECT_EQ(rc.evict(3), 3);  // the window pages of blocks 5, 6, 7
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(bm.has_window(seq[i]), i < 5 || i >= 8) << i;
  EXPECT_EQ(rc.n_nodes(), 10);
  {
    // 36 would need blocks 7 and 8; 20 needs 3 and 4 (first_live(20) = 3).
    BlockTable a;
    EXPECT_EQ(rc.match(toks, 39, a), 20);
    EXPECT_EQ(a.n_slid, 3);
    bm.release(a);
  }
  EXPECT_NO_THROW(rc.check_invariants());
  EXPECT_NO_THROW(bm.check_invariants());
  {
    // Another sequence computes the same tokens: its blocks, window pages and all, take
    // the places of those that lost theirs, and the whole prefix hits again.
    BlockTable again;
    ASSERT_TRUE(bm.reserve(again, 40));
    rc.insert(toks, again);
    bm.release(again);
    BlockTable a;
    EXPECT_EQ(rc.match(toks, 39, a), 36);
    bm.release(a);
    EXPECT_NO_THROW(rc.check_invariants());
    EXPECT_NO_THROW(bm.check_invariants());
  }
  bm.release(seq);
  EXPECT_EQ(rc.n_evictable(), bm.n_total() - bm.n_free());
  rc.evict(1 << 20);
  EXPECT_EQ(bm.n_free(), bm.n_total());
  EXPECT_EQ(rc.n_nodes(), 0);
  EXPECT_NO_THROW(bm.check_invariants());
}

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

RequestParams greedy(int32_t max_tokens) {
  RequestParams p;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  p.capture_logits = true;
  return p;
}

// All prompts at once; the invariants after every step.
std::vector<Out> run_all(const Model& m, const EngineConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                         const RequestParams& p, int64_t* preemptions = nullptr) {
  Engine e(m, nullptr, c);
  std::vector<int64_t> ids;
  for (const auto& pr : prompts) ids.push_back(e.add_request(pr, p));
  while (e.has_work()) {
    e.step();
    e.check_invariants();
  }
  std::vector<Out> out;
  for (int64_t id : ids) {
    const Sequence* s = e.get(id);
    EXPECT_TRUE(s->finished());
    out.push_back({std::vector<int32_t>(s->tokens.begin() + s->n_prompt, s->tokens.end()), s->logits});
  }
  const int32_t evictable = e.prefix_cache() ? e.prefix_cache()->n_evictable() : 0;
  EXPECT_EQ(e.blocks().n_free() + evictable, e.blocks().n_total());
  if (preemptions) *preemptions = e.n_preemptions();
  return out;
}

// Random prompts, some over a few shared heads (prefix-cache hits past the window).
std::vector<std::vector<int32_t>> prompts_for(const HParams& h, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> heads(3);
  for (auto& hd : heads)
    for (int j = 0; j < 37; ++j) hd.push_back(3 + int32_t(rng() % uint64_t(h.n_vocab - 3)));
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p{1};
    if (i % 2 == 0) {
      const auto& hd = heads[rng() % 3];
      p.insert(p.end(), hd.begin(), hd.end());
    }
    const int len = 1 + int(rng() % 40);
    for (int j = 0; j < len; ++j) p.push_back(3 + int32_t(rng() % uint64_t(h.n_vocab - 3)));
    out.push_back(p);
  }
  return out;
}

class KvWindows : public ::testing::TestWithParam<const char*> {};

TEST_P(KvWindows, BoundedWindowsGiveTheTokensAndLogitsOfFullOnes) {
  const std::string preset = GetParam();
  const std::string path = testing::TempDir() + "/kvwin-" + preset + ".gguf";
  make_model({"", preset, DType::F32, 5, "", 0, 0}, path);
  auto m = Model::load(path);
  const HParams& h = m->hparams();
  const auto prompts = prompts_for(h, 24, 7);
  const int32_t max_tokens = 14;
  const RequestParams p = greedy(max_tokens);

  EngineConfig full;
  full.threads = 2;
  full.max_num_seqs = 8;
  full.max_num_batched_tokens = 48;
  full.prefix_cache = false;
  full.swa_full = true;
  full.kv_cache_tokens = 24 * 128;
  // The block size sets attention's tiles (the online softmax's order): one reference each.
  std::map<int32_t, std::vector<Out>> want;
  for (int32_t bs : {4, 16}) {
    full.block_size = bs;
    want[bs] = run_all(*m, full, prompts, p);
  }

  struct Case {
    const char* name;
    int32_t block_size;
    int64_t pool_tokens;
    PreemptionMode mode;
    SpecMethod spec;
    bool prefix;
  };
  const Case cases[] = {
      {"prefix cache, large pool", 16, 24 * 128, PreemptionMode::Recompute, SpecMethod::None, true},
      {"blocks of 4, small pool, recompute", 4, 112, PreemptionMode::Recompute, SpecMethod::None, true},
      {"blocks of 4, small pool, swap", 4, 112, PreemptionMode::Swap, SpecMethod::None, true},
      {"small pool, swap, ngram speculation", 16, 128, PreemptionMode::Swap, SpecMethod::Ngram, true},
      {"no prefix cache, small pool", 4, 112, PreemptionMode::Recompute, SpecMethod::Ngram, false},
  };
  for (const Case& k : cases) {
    EngineConfig c = full;
    c.swa_full = false;
    c.block_size = k.block_size;
    c.kv_cache_tokens = k.pool_tokens;
    c.preemption = k.mode;
    if (k.mode == PreemptionMode::Swap) c.swap_bytes = int64_t(64) << 20;
    c.prefix_cache = k.prefix;
    c.speculative.method = k.spec;
    int64_t preempted = 0;
    const std::vector<Out> got = run_all(*m, c, prompts, p, &preempted);
    const std::vector<Out>& w = want[k.block_size];
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].tokens, w[i].tokens) << preset << ", " << k.name << ", request " << i;
      ASSERT_EQ(got[i].logits.size(), w[i].logits.size());
      EXPECT_EQ(std::memcmp(got[i].logits.data(), w[i].logits.data(), got[i].logits.size() * 4), 0)
          << preset << ", " << k.name << ", request " << i << ": logits differ";
    }
    std::printf("[KvWindows] %-14s %-40s preemptions %lld\n", preset.c_str(), k.name, (long long)preempted);
    if (k.pool_tokens < 24 * 128) {
      EXPECT_GT(preempted, 0) << k.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, KvWindows, ::testing::Values("gemma3-tiny", "gpt-oss-tiny"));

// The bound: a 32k-token sequence through a model with a 1k window (gemma3's
// shape: five window layers to a global one) in a pool that holds 32k tokens of the
// global layer but barely three thousand of the window layers: it runs without a
// preemption, the pages in use stay within the window's bound, and its tokens are those
// of the same model with every position kept. Under the sanitizers (ten times slower) a
// quarter of it: 8k tokens, a 256 window, 512-token chunks.
#if defined(__SANITIZE_ADDRESS__)
constexpr int32_t kSeq = 8192, kWindow = 256, kChunk = 512;
#else
constexpr int32_t kSeq = 32768, kWindow = 1024, kChunk = 2048;
#endif

TEST(KvWindows, A32kSequenceWithA1kWindowStaysBounded) {
  const std::string path = testing::TempDir() + "/kvwin-32k.gguf";
  MkModelOptions o{"", "gemma3-tiny", DType::F32, 9, "", 0, 0};
  o.window = kWindow;
  o.ctx = kSeq;
  make_model(o, path);
  auto m = Model::load(path);
  ASSERT_EQ(m->hparams().n_swa, kWindow);
  std::mt19937_64 rng(1);
  std::vector<int32_t> prompt{1};
  while (prompt.size() < size_t(kSeq - 16)) prompt.push_back(3 + int32_t(rng() % 500));
  const RequestParams p = greedy(16);

  EngineConfig c;
  c.threads = 2;
  c.max_num_batched_tokens = kChunk;
  c.prefix_cache = false;  // its claims would hold window pages (evictable) beyond the sequence's own
  const int32_t bs = c.block_size;
  const int64_t blocks = kSeq / bs;                                  // 2048
  const int64_t live = (kWindow - 1 + kChunk + bs - 1) / bs + 1;     // window pages a step can need: 193
  const int64_t bound = blocks * 1 + live * 5;                       // 1 global page a block, 5 window pages live
  c.kv_cache_tokens = (bound + 64) / 6 * bs;                         // pages / 6 per block, in tokens
  Engine e(*m, nullptr, c);
  EXPECT_LT(e.blocks().n_total(), blocks * 6 / 3);  // a third of what full window layers take
  EXPECT_GE(e.kv_capacity_tokens(), kSeq);
  const int64_t id = e.add_request(prompt, p);
  int32_t peak = 0;
  while (e.has_work()) {
    e.step();
    peak = std::max(peak, e.kv_usage(true).blocks_in_use);
  }
  e.check_invariants();
  const Sequence* s = e.get(id);
  ASSERT_TRUE(s->finished());
  EXPECT_EQ(s->n_generated(), 16);
  EXPECT_EQ(e.n_preemptions(), 0);
  EXPECT_LE(peak, bound);
  std::printf("[KvWindows] %d tokens, window %d: pool %d pages, peak in use %d (bound %lld; full windows %lld)\n",
              kSeq, kWindow, e.blocks().n_total(), peak, (long long)bound, (long long)(blocks * 6));

  EngineConfig f = c;
  f.swa_full = true;
  f.kv_cache_tokens = kSeq;
  const std::vector<Out> full = run_all(*m, f, {prompt}, p);
  EXPECT_EQ(std::vector<int32_t>(s->tokens.begin() + s->n_prompt, s->tokens.end()), full[0].tokens);
  EXPECT_EQ(std::memcmp(s->logits.data(), full[0].logits.data(), s->logits.size() * 4), 0) << "logits differ";
}

}  // namespace
}  // namespace ridge
