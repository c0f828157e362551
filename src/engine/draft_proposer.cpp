#include "engine/draft_proposer.h"

#include <algorithm>
#include <bit>
#include <chrono>

#include "core/error.h"
#include "gguf/gguf.h"

namespace ridge {
namespace {

constexpr std::string_view kTokens = "tokenizer.ggml.tokens";

}  // namespace

void check_draft_vocabulary(const Model& target, const Model& draft) {
  const int32_t nt = target.hparams().n_vocab, nd = draft.hparams().n_vocab;
  if (nt != nd)
    fail("the draft model {} has a vocabulary of {} tokens, the target {} has {}: a draft model must share the "
         "target's vocabulary", draft.file().name(), nd, target.file().name(), nt);
  const gguf::Value* a = target.file().get_array(kTokens, gguf::ValueType::STRING);
  const gguf::Value* b = draft.file().get_array(kTokens, gguf::ValueType::STRING);
  if (!a || !b) return;  // one has no token list to compare: the sizes agree
  for (size_t i = 0; i < a->strs.size() && i < b->strs.size(); ++i)
    if (a->strs[i] != b->strs[i])
      fail("the draft model {} and the target {} differ at token {} ('{}' vs '{}'): a draft model must share the "
           "target's vocabulary", draft.file().name(), target.file().name(), i, b->strs[i], a->strs[i]);
}

DraftModelProposer::DraftModelProposer(const Model& draft, const EngineConfig& cfg, ThreadPool& pool)
    : model_(draft), cfg_(cfg) {
  cfg_.swap_bytes = 0;
  runner_ = std::make_unique<ModelRunner>(draft, cfg_, pool);
  bm_ = std::make_unique<BlockManager>(runner_->kv_layout().n_blocks, runner_->kv_layout().block_size,
                                       runner_->page_groups());
  // The warm-up (draft_proposer.h): a block of token 0 (first touches), a second block
  // timed (the catch-up rate until a catch-up is measured), then one token at a time,
  // each with its logits as a drafting forward has them, the faster timing a
  // one-sequence forward; in blocks given back after.
  constexpr int32_t kTimed = 2;
  const int32_t n = std::min(runner_->kv_layout().block_size, std::max(1, cfg_.max_num_batched_tokens));
  Sequence warm(-1, std::vector<int32_t>(size_t(n), 0), RequestParams{}, draft.hparams().n_vocab, 0);
  if (bm_->reserve(warm.blocks, 2 * n + kTimed)) {
    using Clock = std::chrono::steady_clock;
    runner_->run({{&warm, n}}, *bm_, rows_);
    warm.n_computed = n;
    auto forward = [&](int32_t tokens) {  // `tokens` more, the last with its logits
      warm.tokens.resize(warm.tokens.size() + size_t(tokens), 0);
      const auto t0 = Clock::now();
      runner_->run({{&warm, tokens}}, *bm_, rows_);
      warm.n_computed += tokens;
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    catchup_s_per_token_ = forward(n) / n;
    double best = 0;
    for (int32_t i = 0; i < kTimed; ++i) best = i == 0 ? forward(1) : std::min(best, forward(1));
    forward_s_[0] = best;
    bm_->release(warm.blocks);
  }
}

int DraftModelProposer::forward_bucket(int32_t n_seqs) {
  constexpr int kLast = int(std::tuple_size_v<decltype(forward_s_)>) - 1;
  return n_seqs <= 1 ? 0 : std::min(kLast, int(std::bit_width(uint32_t(n_seqs - 1))));
}

void DraftModelProposer::time_forward(int32_t n_seqs, double seconds) {
  double& f = forward_s_[size_t(forward_bucket(n_seqs))];
  f = f > 0 ? 0.8 * f + 0.2 * seconds : seconds;
}

double DraftModelProposer::token_seconds(int32_t n_seqs) const {
  for (int b = forward_bucket(n_seqs); b >= 0; --b)
    if (forward_s_[size_t(b)] > 0) return forward_s_[size_t(b)];
  return 0;
}

double DraftModelProposer::setup_seconds(int64_t seq, std::span<const int32_t> tokens) const {
  int64_t done = 0;
  if (auto it = shadows_.find(seq); it != shadows_.end() && it->second.seq) {
    const Sequence& s = *it->second.seq;
    const auto diverge = std::mismatch(s.tokens.begin(), s.tokens.end(), tokens.begin(), tokens.end()).first;
    done = std::min<int64_t>(s.n_computed, diverge - s.tokens.begin());
  }
  const int64_t behind = int64_t(tokens.size()) - 1 - done;
  return behind > kMergedCatchup ? double(behind) * catchup_s_per_token_ : 0.0;
}

DraftModelProposer::~DraftModelProposer() = default;

void DraftModelProposer::drop(std::unordered_map<int64_t, Shadow>::iterator it) {
  bm_->release(it->second.seq->blocks);
  shadows_.erase(it);
}

void DraftModelProposer::retire(int64_t seq, std::span<const int32_t>) {
  if (auto it = shadows_.find(seq); it != shadows_.end()) drop(it);
}

bool DraftModelProposer::reserve(Sequence& s, int64_t n_tokens) {
  while (!bm_->reserve(s.blocks, n_tokens)) {
    auto victim = shadows_.end();
    for (auto it = shadows_.begin(); it != shadows_.end(); ++it)
      if (it->second.last_use < now_ && (victim == shadows_.end() || it->second.last_use < victim->second.last_use))
        victim = it;
    if (victim == shadows_.end()) return false;
    drop(victim);
  }
  return true;
}

void DraftModelProposer::run(const std::vector<ScheduledChunk>& chunks) {
  logits_ = runner_->run(chunks, *bm_, rows_);
  ++n_forwards_;
  for (const ScheduledChunk& c : chunks) c.seq->n_computed += c.n_tokens;
}

// The whole blocks of tokens' prefix that donor's K/V hold among its first `upto` tokens
// (never the last of tokens: it is run again for its logits).
int32_t DraftModelProposer::shared_blocks(const Sequence& donor, int64_t upto, std::span<const int32_t> tokens) const {
  const int64_t lim = std::max<int64_t>(0, std::min<int64_t>({upto, int64_t(donor.tokens.size()), int64_t(tokens.size()) - 1}));
  const auto end = donor.tokens.begin() + lim;
  const int64_t common = std::mismatch(donor.tokens.begin(), end, tokens.begin()).first - donor.tokens.begin();
  return int32_t(common / bm_->block_size());
}

// s takes donor's first n blocks (their K/V are for the same tokens at the same
// positions: the batch-invariant forward would write the same bits) and has their tokens
// computed. Shared blocks are whole and before both tables' computed ends, so neither
// ever writes them again.
void DraftModelProposer::fork(Sequence& s, const Sequence& donor, int32_t n) {
  bm_->release(s.blocks);
  s.blocks.ids.assign(donor.blocks.begin(), donor.blocks.begin() + n);
  for (int32_t b : s.blocks) bm_->retain(b);
  // Shadows never slide (a shadow's tokens can be cut back anywhere): every block's
  // window pages are claimed, the donor's are all there.
  bm_->adopt(s.blocks, 0);
  shared_tokens_ += n * bm_->block_size() - s.n_computed;
  s.n_computed = n * bm_->block_size();
}

void DraftModelProposer::propose(std::span<const Ask> asks) {
  using Clock = std::chrono::steady_clock;
  ++now_;
  catchup_s_ = 0;
  n_forwards_ = 0;
  // Every asked shadow is in use this step before any reserves: none evicts another.
  for (const Ask& a : asks)
    if (a.max_tokens > 0 && !a.tokens.empty()) shadows_[a.seq].last_use = now_;
  // The shadows to draft for, each with its ask; a shadow that will share its prefix
  // with one caught up in this step (a leader) waits for it to be computed.
  struct Live {
    Sequence* s;
    const Ask* a;
    Sequence* leader = nullptr;
    bool alive = true;
  };
  std::vector<Live> live;
  int32_t depth = 0;
  // Every token and every draft but the last (which is never run) needs a slot; what the
  // whole pool cannot hold evicts nothing.
  auto reserve_ask = [&](Sequence& s, const Ask& a) {
    const int64_t need = int64_t(s.tokens.size()) + a.max_tokens - 1;
    return bm_->blocks_for(need) * bm_->pages_per_entry() <= bm_->n_total() && reserve(s, need);
  };
  for (const Ask& a : asks) {
    if (a.max_tokens <= 0 || a.tokens.empty()) continue;
    auto it = shadows_.find(a.seq);
    if (!it->second.seq)
      it->second.seq = std::make_unique<Sequence>(a.seq, std::vector<int32_t>{}, RequestParams{}, model_.hparams().n_vocab, 0);
    Sequence& s = *it->second.seq;
    // K/V stay valid for the prefix the shadow shares with the target's tokens; the last
    // token is run again in any case (its logits give the first draft), even when the
    // shadow ran it already (the target took fewer tokens than the shadow drafted).
    const auto diverge = std::mismatch(s.tokens.begin(), s.tokens.end(), a.tokens.begin(), a.tokens.end()).first;
    s.n_computed = std::min<int32_t>({s.n_computed, int32_t(diverge - s.tokens.begin()), int32_t(a.tokens.size()) - 1});
    s.tokens.assign(a.tokens.begin(), a.tokens.end());
    s.n_prompt = int32_t(s.tokens.size());
    bm_->truncate(s.blocks, s.n_computed);
    // A shadow far behind shares the prefix another has computed (the same prompt: n > 1
    // choices, a system prompt) or will compute in this step, rather than run it again.
    Live e{&s, &a};
    // A donor shares only tokens its target verified before its last ask (n_prompt):
    // those it never runs again, where its drafts past them may be rolled back and
    // rewritten.
    if (s.pending() - 1 > kMergedCatchup) {
      int32_t best = s.n_computed / bm_->block_size();
      const Sequence* donor = nullptr;
      for (const auto& [id, sh] : shadows_)
        if (sh.seq && sh.seq.get() != &s) {
          const int64_t stable = std::min<int64_t>(sh.seq->n_computed, int64_t(sh.seq->n_prompt) - 1);
          const int32_t n = shared_blocks(*sh.seq, stable, a.tokens);
          if (n > best) best = n, donor = sh.seq.get();
        }
      for (const Live& l : live)
        if (!l.leader)
          if (const int32_t n = shared_blocks(*l.s, int64_t(l.s->tokens.size()) - 1, a.tokens); n > best)
            best = n, donor = nullptr, e.leader = l.s;
      if (donor) fork(s, *donor, best);
    }
    if (!e.leader && !reserve_ask(s, a)) {
      drop(it);
      continue;
    }
    live.push_back(e);
    depth = std::max(depth, a.max_tokens);
  }
  if (live.empty()) return;

  // Catch-up of long stretches (a new prompt, text the draft has not seen for a while):
  // forwards of at most the token budget, timed apart (a cost of the sequence, not of
  // the step's rows). A few tokens behind (the target accepted all drafts, or the
  // shadow sat out some steps) ride in the first drafting forward instead. The leaders
  // and the others first, then the shadows that share a leader's prefix.
  const auto t0 = Clock::now();
  const int64_t budget = std::max(1, cfg_.max_num_batched_tokens);
  int64_t caught_up = 0;
  auto catch_up = [&](bool followers) {
    for (;;) {
      std::vector<ScheduledChunk> chunks;
      int64_t used = 0;
      for (const Live& l : live) {
        if (!l.alive || (l.leader && !followers)) continue;
        const int32_t behind = l.s->pending() - 1;
        if (behind <= kMergedCatchup || used >= budget) continue;
        const int32_t n = int32_t(std::min<int64_t>(behind, budget - used));
        chunks.push_back({l.s, n});
        used += n;
      }
      if (chunks.empty()) break;
      run(chunks);
      caught_up += used;
    }
  };
  catch_up(false);
  bool followers = false;
  for (Live& l : live) {
    if (!l.leader) continue;
    followers = true;
    const auto lead = std::find_if(live.begin(), live.end(), [&](const Live& o) { return o.s == l.leader; });
    const int32_t n = lead->alive ? shared_blocks(*l.leader, l.leader->n_computed, l.a->tokens) : 0;
    if (n > l.s->n_computed / bm_->block_size()) fork(*l.s, *l.leader, n);
    if (!reserve_ask(*l.s, *l.a)) {
      l.alive = false;
      drop(shadows_.find(l.a->seq));
    }
  }
  if (followers) catch_up(true);
  catchup_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  catchup_tokens_ += caught_up;
  if (caught_up > 0) {
    const double rate = catchup_s_ / double(caught_up);
    catchup_s_per_token_ = catchup_s_per_token_ > 0 ? 0.7 * catchup_s_per_token_ + 0.3 * rate : rate;
  }

  // Drafting: position j of every sequence that wants j + 1 tokens, in one forward.
  const int32_t n_vocab = model_.hparams().n_vocab;
  std::vector<ScheduledChunk> chunks;
  for (int32_t j = 0; j < depth; ++j) {
    chunks.clear();
    for (const Live& l : live)
      if (l.alive && j < l.a->max_tokens) chunks.push_back({l.s, l.s->pending()});
    if (chunks.empty()) break;
    // A forward's own time: the first may carry a few tokens of catch-up.
    const bool plain = std::all_of(chunks.begin(), chunks.end(), [](const ScheduledChunk& c) { return c.n_tokens == 1; });
    const auto f0 = Clock::now();
    run(chunks);
    if (plain) time_forward(int32_t(chunks.size()), std::chrono::duration<double>(Clock::now() - f0).count());
    for (size_t i = 0; i < chunks.size(); ++i) {
      RIDGE_ASSERT(rows_[i] >= 0);
      Sequence* s = chunks[i].seq;
      s->tokens.push_back(argmax(logits_.data() + int64_t(rows_[i]) * n_vocab, n_vocab));
    }
  }
  // The shadow keeps its drafts as tokens (and K/V for all but the last): the next step
  // keeps the prefix of them the target accepted.
  for (const Live& l : live)
    if (l.alive) l.a->out->insert(l.a->out->end(), l.s->tokens.end() - l.a->max_tokens, l.s->tokens.end());
}

}  // namespace ridge
