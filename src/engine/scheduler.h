// Continuous batching. Every step: running sequences first (decodes, then unfinished
// prompt chunks), then swapped-out sequences coming back, then waiting requests, all
// under a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs).
// When KV blocks run out: evict unreferenced prefix-cache blocks, then preempt the
// lowest-priority, newest running sequence, by recompute (drop its KV, requeue it; its
// prefix may still hit the radix cache) or by swap (move its KV to the swap space).
//
// Order is (effective priority, arrival): lower priority values first, FCFS among equals.
// No starvation: a waiting request's effective priority improves by one for every
// `aging_steps` steps it has waited, so it eventually outranks any newer arrival.
//
// A request that asks for its prompt's logprobs is scored in the prefill: it skips the
// prefix cache (a cached prefix has no logits), and a step runs at most
// kPromptLogitsChunk such prompt tokens in all (each token a logit row: n_vocab floats).
//
// The scheduler returns its decisions as data and never touches KV bytes: copying blocks
// to and from the swap space is the engine's job.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/config.h"
#include "engine/radix_cache.h"
#include "engine/sequence.h"

namespace ridge {

constexpr int32_t kPromptLogitsChunk = 256;

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  PreemptionMode preemption = PreemptionMode::Recompute;
  int32_t aging_steps = 256;
};

struct ScheduledChunk {
  Sequence* seq;
  int32_t n_tokens;     // tokens [seq->n_computed, seq->n_computed + n_tokens) run this step
  int32_t n_draft = 0;  // of which the last n_draft are seq->draft, proposed, to verify
  // One decode token (and its drafts, if any), not prompt or recompute work.
  bool decode() const { return n_tokens - n_draft == 1 && seq->n_generated() > 0; }
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> swap_out;  // KV to copy out (blocks still valid) before they are reused
  std::vector<Sequence*> swap_in;   // KV to copy back into their new blocks before the forward
  int32_t n_preempted = 0;
  int64_t budget_left = 0;  // of max_num_batched_tokens, after the chunks
  int64_t n_tokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.n_tokens;
    return n;
  }
};

// Decides, per preempted sequence, whether swapping beats recomputing (Auto mode).
struct PreemptionCost {
  virtual ~PreemptionCost() = default;
  virtual bool prefer_swap(const Sequence& s) const = 0;
  // The swap space has room for s on top of `reserved` blocks promised this step.
  virtual bool can_swap(const Sequence& s, int64_t reserved) const = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, BlockManager& bm, RadixCache* radix, const PreemptionCost* cost);

  void add(Sequence* s);
  // Removes a sequence wherever it is and frees its blocks (abort or finish).
  void remove(Sequence* s);
  SchedulerOutput schedule();
  // A new token budget from the next step on (an online tuner's; the engine bounds it).
  void set_token_budget(int32_t n) { cfg_.max_num_batched_tokens = n; }
  int32_t token_budget() const { return cfg_.max_num_batched_tokens; }
  // After the forward: the chunk's tokens are in the cache; record full blocks in the
  // prefix cache, let go of the window pages no query of s sees any more.
  void on_computed(Sequence* s);
  // A finished sequence: keep its full blocks in the prefix cache, free the rest.
  void finish(Sequence* s);
  // The engine copied the swapped-out KV; the scheduler may now free those blocks.
  void swapped_out(Sequence* s);
  // Up to n draft tokens more for decode chunk c, within the token budget and the free
  // blocks (speculation never preempts or evicts); returns how many were granted.
  int32_t grant_draft(SchedulerOutput& so, ScheduledChunk& c, int32_t n);
  // After verification: the blocks past s's computed tokens held only rejected drafts;
  // they go back to the pool, leaving the table as a step without drafts leaves it (what
  // a swap-out copies and a swap-in reserves: blocks_for(n_computed)).
  void rollback(Sequence* s);
  // Swap-in of s (scheduled this step, no work yet) lost its KV to an I/O error: drop
  // its blocks and requeue it for recompute, as if it had been preempted that way.
  void swap_in_failed(Sequence* s);

  int32_t n_running() const { return int32_t(running_.size()); }
  int32_t n_waiting() const { return int32_t(waiting_.size() + swapped_.size()); }
  int64_t n_preemptions() const { return n_preemptions_; }
  int64_t n_swaps() const { return n_swaps_; }
  const std::vector<Sequence*>& running() const { return running_; }
  void check_invariants() const;

 private:
  bool make_room(int64_t need_free_pages);  // evicts from the prefix cache when that suffices
  void insert_prefix(Sequence* s);  // its computed full blocks into the prefix cache
  bool reserve(Sequence* s, int64_t n_tokens, SchedulerOutput& out, std::vector<Sequence*>& scheduled);
  void preempt(Sequence* victim, SchedulerOutput& out, int64_t for_id);  // for_id: who needed the blocks (trace)
  void requeue(Sequence* s);  // drops its KV and puts it back in the queue, to be recomputed
  bool before(const Sequence* a, const Sequence* b) const;  // a runs before b
  int64_t effective_priority(const Sequence* s) const;
  uint64_t first_block_key(const Sequence* s) const;  // hash of the first block's tokens (and namespace)
  // The prefix cache's namespace of a sequence's blocks: an expanded prompt's K/V are
  // other bits than the absorbed form's for the same tokens (radix_cache.h).
  static int32_t prefix_ns(const Sequence* s) { return s->n_expand > 0 ? 1 : 0; }

  SchedulerConfig cfg_;
  BlockManager& bm_;
  RadixCache* radix_;
  const PreemptionCost* cost_;
  std::vector<Sequence*> running_;
  std::vector<Sequence*> waiting_;
  std::deque<Sequence*> swapped_;
  uint64_t step_ = 0;
  int64_t swap_reserved_ = 0;  // swap blocks promised to this step's swap-outs
  int64_t n_preemptions_ = 0, n_swaps_ = 0;
};

}  // namespace ridge
