#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "perf/tracer.h"

namespace ridge {

Scheduler::Scheduler(const SchedulerConfig& cfg, BlockManager& bm, RadixCache* radix, const PreemptionCost* cost)
    : cfg_(cfg), bm_(bm), radix_(radix), cost_(cost) {
  RIDGE_CHECK(cfg_.max_num_seqs > 0, "max_num_seqs must be positive");
  RIDGE_CHECK(cfg_.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive");
  RIDGE_CHECK(cfg_.aging_steps > 0, "aging steps must be positive");
  RIDGE_CHECK(cfg_.preemption == PreemptionMode::Recompute || cost_, "swap preemption needs a swap space");
}

int64_t Scheduler::effective_priority(const Sequence* s) const {
  if (s->status != SeqStatus::Waiting) return s->params.priority;
  return int64_t(s->params.priority) - int64_t((step_ - s->waiting_since_step) / uint64_t(cfg_.aging_steps));
}

uint64_t Scheduler::first_block_key(const Sequence* s) const {
  uint64_t h = 0xcbf29ce484222325ull;
  const size_t n = std::min(s->tokens.size(), size_t(bm_.block_size()));
  for (size_t i = 0; i < n; ++i) h = (h ^ uint64_t(uint32_t(s->tokens[i]))) * 0x100000001b3ull;
  return (h ^ uint64_t(prefix_ns(s))) * 0x100000001b3ull;
}

bool Scheduler::before(const Sequence* a, const Sequence* b) const {
  const int64_t pa = effective_priority(a), pb = effective_priority(b);
  return pa != pb ? pa < pb : a->arrival < b->arrival;
}

void Scheduler::add(Sequence* s) {
  s->status = SeqStatus::Waiting;
  s->waiting_since_step = step_;
  waiting_.push_back(s);
}

void Scheduler::remove(Sequence* s) {
  std::erase(running_, s);
  std::erase(waiting_, s);
  std::erase(swapped_, s);
  bm_.release(s->blocks);
  s->swap_src.clear();
  s->status = SeqStatus::Finished;
}

void Scheduler::finish(Sequence* s) {
  on_computed(s);
  remove(s);
}

void Scheduler::on_computed(Sequence* s) {
  // Recorded first, so that the tree claims the window pages of the blocks just filled
  // before the sequence lets go of those it no longer sees.
  insert_prefix(s);
  bm_.slide(s->blocks, s->n_computed);
}

void Scheduler::insert_prefix(Sequence* s) {
  if (!radix_) return;
  // An expanded prompt's blocks past its prompt hold positions computed absorbed after
  // expanded ones: no other request computes that mix, so they are not shared.
  const int32_t computed = s->n_expand > 0 ? std::min(s->n_computed, s->n_expand) : s->n_computed;
  const int32_t full = std::min<int32_t>(computed / bm_.block_size(), int32_t(s->blocks.size()));
  if (full <= s->n_inserted_blocks) return;
  radix_->insert(std::span<const int32_t>(s->tokens).first(size_t(full) * size_t(bm_.block_size())),
                 std::span<const int32_t>(s->blocks).first(size_t(full)), prefix_ns(s));
  s->n_inserted_blocks = full;
}

void Scheduler::swapped_out(Sequence* s) { s->swap_src.clear(); }

int32_t Scheduler::grant_draft(SchedulerOutput& so, ScheduledChunk& c, int32_t n) {
  Sequence* s = c.seq;
  RIDGE_ASSERT(c.decode() && c.n_draft == 0 && s->pending() == 1);
  // Never past max_tokens: every accepted draft and the row after the last one produce
  // a token each, and n_computed advances by all of them.
  n = int32_t(std::min<int64_t>({n, so.budget_left, int64_t(s->params.max_tokens) - s->n_generated() - 1,
                                 int64_t(s->draft.size())}));
  if (n <= 0) return 0;
  const int64_t end = int64_t(s->n_computed) + c.n_tokens + n;
  if (!bm_.reserve(s->blocks, end)) {
    // Only the free blocks, never another sequence's or the prefix cache's: as many
    // drafts as the blocks already held take.
    const int64_t room = int64_t(s->blocks.size()) * bm_.block_size() - (int64_t(s->n_computed) + c.n_tokens);
    n = int32_t(std::max<int64_t>(0, std::min<int64_t>(n, room)));
  }
  c.n_tokens += n;
  c.n_draft = n;
  so.budget_left -= n;
  return n;
}

void Scheduler::rollback(Sequence* s) { bm_.truncate(s->blocks, s->n_computed); }

void Scheduler::swap_in_failed(Sequence* s) {
  RIDGE_ASSERT(s->status == SeqStatus::Running);
  std::erase(running_, s);
  if (perf::trace_on())
    perf::trace_instant("swap_in_failed", "sched", {{"req", s->id}, {"blocks", s->blocks.size()}});
  requeue(s);
}

void Scheduler::requeue(Sequence* s) {
  bm_.release(s->blocks);
  s->n_computed = 0;
  s->n_inserted_blocks = 0;
  s->status = SeqStatus::Waiting;
  s->waiting_since_step = step_;
  waiting_.push_back(s);
}

void Scheduler::preempt(Sequence* v, SchedulerOutput& out, int64_t for_id) {
  std::erase(running_, v);
  ++n_preemptions_;
  ++v->n_preemptions;
  ++out.n_preempted;
  bool swap = cfg_.preemption == PreemptionMode::Swap ||
              (cfg_.preemption == PreemptionMode::Auto && cost_->prefer_swap(*v));
  const bool wanted_swap = swap;
  if (swap && !cost_->can_swap(*v, swap_reserved_)) swap = false;  // no room: recompute instead
  if (perf::trace_on()) {
    const char* mode = swap ? "swap" : "recompute";
    if (wanted_swap && !swap)
      perf::trace_instant("preempt", "sched",
                          {{"req", v->id}, {"reason", "out_of_kv_blocks"}, {"mode", mode}, {"blocks", v->blocks.size()},
                           {"generated", v->n_generated()}, {"for", for_id}, {"fallback", "swap_space_full"}});
    else
      perf::trace_instant("preempt", "sched",
                          {{"req", v->id}, {"reason", "out_of_kv_blocks"}, {"mode", mode}, {"blocks", v->blocks.size()},
                           {"generated", v->n_generated()}, {"for", for_id}});
    perf::trace_req_state(v->id, swap ? "swapped" : "preempted", perf::trace_clock_ns(),
                          {{"mode", mode}, {"reason", "out_of_kv_blocks"}});
  }
  if (swap) {
    bm_.held_pages(v->blocks, v->swap_src);
    swap_reserved_ += int64_t(v->swap_src.size());
    // The pages are free for reuse at once: the engine copies them out before this
    // step's forward pass writes anything.
    ++n_swaps_;
    bm_.release(v->blocks);
    v->status = SeqStatus::Swapped;
    out.swap_out.push_back(v);
    swapped_.push_back(v);
  } else {
    on_computed(v);  // its full blocks stay findable in the prefix cache
    requeue(v);
  }
}

bool Scheduler::make_room(int64_t need) {
  if (bm_.n_free() >= need) return true;
  // Evict only when that makes enough room: a request that would still not fit must not
  // throw the prefix cache away on every step it waits.
  if (!radix_ || bm_.n_free() + radix_->n_evictable() < need) return false;
  const int32_t evicted = radix_->evict(int32_t(need - bm_.n_free()));
  if (perf::trace_on()) perf::trace_instant("evict", "sched", {{"blocks", evicted}});
  return bm_.n_free() >= need;
}

bool Scheduler::reserve(Sequence* s, int64_t n_tokens, SchedulerOutput& out, std::vector<Sequence*>& scheduled) {
  for (;;) {
    if (bm_.reserve(s->blocks, n_tokens)) return true;
    const int64_t need = bm_.pages_needed(s->blocks, n_tokens) - bm_.n_free();
    if (radix_) {
      const int32_t evicted = radix_->evict(int32_t(need));
      if (perf::trace_on() && evicted > 0) perf::trace_instant("evict", "sched", {{"blocks", evicted}, {"for", s->id}});
      if (evicted > 0) continue;
    }
    // The victim: the running sequence that would run last, among those not already
    // given work this step; s itself when it is that sequence.
    Sequence* victim = nullptr;
    for (Sequence* r : running_)
      if (std::find(scheduled.begin(), scheduled.end(), r) == scheduled.end() && (!victim || before(victim, r)))
        victim = r;
    if (!victim) victim = s;
    preempt(victim, out, s->id);
    if (victim == s) return false;
  }
}

// The most tokens of s this step may run: scored prompt tokens (a logit row each) share
// kPromptLogitsChunk per step.
static int64_t chunk_cap(const Sequence& s, int64_t scored_left) {
  return s.needs_prompt_logits() ? std::min<int64_t>(s.pending(), scored_left) : s.pending();
}

SchedulerOutput Scheduler::schedule() {
  ++step_;
  swap_reserved_ = 0;
  SchedulerOutput out;
  int64_t budget = cfg_.max_num_batched_tokens;
  int64_t scored_left = kPromptLogitsChunk;
  std::vector<Sequence*> scheduled;

  // 1. Running sequences: decodes first, then unfinished prompt chunks, each best first
  // (a long prompt never stalls the streams already generating).
  std::sort(running_.begin(), running_.end(), [&](auto* a, auto* b) {
    const bool da = a->pending() == 1, db = b->pending() == 1;
    return da != db ? da : before(a, b);
  });
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t n = std::min<int64_t>(chunk_cap(*s, scored_left), budget);
    if (n == 0) {  // scored prompt rows are spent this step
      ++i;
      continue;
    }
    if (!reserve(s, s->n_computed + n, out, scheduled)) continue;  // s was preempted: same index
    if (s->needs_prompt_logits()) scored_left -= n;
    if (perf::trace_on() && !(n == 1 && s->n_generated() > 0))  // prompt (or recompute) work, not a decode
      perf::trace_instant("chunk", "sched",
                          {{"req", s->id}, {"tokens", n}, {"pos", s->n_computed},
                           {"remaining", int64_t(s->tokens.size()) - s->n_computed - n}});
    out.chunks.push_back({s, int32_t(n)});
    scheduled.push_back(s);
    budget -= n;
    ++i;
  }

  // 2. Swapped-out sequences come back before new work is admitted (FCFS): while one
  // waits for room, no waiting request is admitted ahead of it.
  bool swapped_blocked = false;
  while (!swapped_.empty() && int32_t(running_.size()) < cfg_.max_num_seqs) {
    Sequence* s = swapped_.front();
    if (!s->swap_src.empty()) break;  // its copy-out is this very step
    // The pages its swap-out copied: its window slid to where it stopped.
    s->blocks.n_slid = int32_t(bm_.first_live(s->n_computed));
    if (!make_room(bm_.pages_needed(s->blocks, s->n_computed + 1)) || !bm_.reserve(s->blocks, s->n_computed)) {
      s->blocks.n_slid = 0;
      swapped_blocked = true;
      break;
    }
    swapped_.pop_front();
    if (perf::trace_on()) {
      perf::trace_instant("swap_in", "sched", {{"req", s->id}, {"blocks", s->blocks.size()}});
      perf::trace_req_state(s->id, "", perf::trace_clock_ns());
    }
    s->status = SeqStatus::Running;
    running_.push_back(s);
    out.swap_in.push_back(s);  // its decode is scheduled from the next step on
  }

  // 3. Waiting requests, best first, while budget, sequence slots and blocks last.
  // A request whose first block is still being computed by another sequence waits a
  // step (it does not hold up the others): then the prefix cache serves it the whole
  // shared prefix instead of both computing it.
  std::vector<uint64_t> pending_first;
  if (radix_)
    for (const Sequence* r : running_)
      if (r->n_computed < bm_.block_size()) pending_first.push_back(first_block_key(r));
  std::sort(waiting_.begin(), waiting_.end(), [&](auto* a, auto* b) { return before(a, b); });
  std::vector<Sequence*> deferred;
  size_t admitted = 0;
  for (; !swapped_blocked && admitted < waiting_.size() && budget > 0 && int32_t(running_.size()) < cfg_.max_num_seqs;
       ++admitted) {
    Sequence* s = waiting_[admitted];
    if (radix_ && int32_t(s->tokens.size()) > bm_.block_size() && s->blocks.empty() && !s->needs_prompt_logits()) {
      const uint64_t key = first_block_key(s);
      if (std::find(pending_first.begin(), pending_first.end(), key) != pending_first.end()) {
        if (perf::trace_on()) perf::trace_instant("defer", "sched", {{"req", s->id}, {"reason", "shared_first_block"}});
        deferred.push_back(s);
        continue;
      }
      pending_first.push_back(key);
    }
    if (radix_ && s->blocks.empty() && !s->needs_prompt_logits()) {
      // Leave at least one token to compute: its logits give the next token.
      const int32_t most = int32_t(s->tokens.size()) - 1;
      s->n_computed = radix_->match(s->tokens, s->n_expand > 0 ? std::min(most, s->n_expand) : most, s->blocks, prefix_ns(s));
      s->n_prefix_hit = s->n_computed;
      s->n_inserted_blocks = int32_t(s->blocks.size());
    }
    const int64_t n = std::min<int64_t>(chunk_cap(*s, scored_left), budget);
    if (n == 0) {  // scored prompt rows are spent this step: it waits for the next
      deferred.push_back(s);
      continue;
    }
    const bool ok = make_room(bm_.pages_needed(s->blocks, s->n_computed + n)) && bm_.reserve(s->blocks, s->n_computed + n);
    if (!ok) {  // no room without preempting running work: undo the match, wait
      if (perf::trace_on())
        perf::trace_instant("blocked", "sched",
                            {{"req", s->id},
                             {"need_pages", bm_.pages_needed(s->blocks, s->n_computed + n)},
                             {"free_blocks", bm_.n_free()}});
      bm_.release(s->blocks);
      s->n_computed = 0;
      s->n_prefix_hit = 0;
      s->n_inserted_blocks = 0;
      break;
    }
    if (perf::trace_on()) {
      perf::trace_instant("admit", "sched",
                          {{"req", s->id}, {"prompt", s->n_prompt}, {"prefix_hit", s->n_computed}, {"chunk", n},
                           {"resumed", s->n_preemptions > 0}});
      perf::trace_req_state(s->id, "", perf::trace_clock_ns());
    }
    s->status = SeqStatus::Running;
    running_.push_back(s);
    out.chunks.push_back({s, int32_t(n)});
    if (s->needs_prompt_logits()) scored_left -= n;
    budget -= n;
  }
  waiting_.erase(waiting_.begin(), waiting_.begin() + std::ptrdiff_t(admitted));
  waiting_.insert(waiting_.begin(), deferred.begin(), deferred.end());
  out.budget_left = budget;
  return out;
}

void Scheduler::check_invariants() const {
  for (const Sequence* s : running_) {
    RIDGE_CHECK(s->status == SeqStatus::Running, "running sequence {} has another status", s->id);
    RIDGE_CHECK(int64_t(s->blocks.size()) >= bm_.blocks_for(s->n_computed), "sequence {} has too few blocks", s->id);
    RIDGE_CHECK(s->blocks.n_slid <= bm_.first_live(s->n_computed), "sequence {} slid past its window", s->id);
  }
  for (const Sequence* s : waiting_)
    RIDGE_CHECK(s->blocks.empty() && s->n_computed == 0, "waiting sequence {} holds blocks", s->id);
  for (const Sequence* s : swapped_) RIDGE_CHECK(s->blocks.empty(), "swapped sequence {} holds blocks", s->id);
}

}  // namespace ridge
