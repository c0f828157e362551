// Speculative decoding with a draft model: a smaller model with the target's vocabulary
// continues each speculating sequence greedily, and the target verifies (proposer.h).
//
// The draft runs on the engine's threads with its own paged KV pool, and keeps, per
// target sequence, a shadow sequence: the tokens it has seen and how many of them have
// K/V in its pool. Each step it first catches up on what it has not seen (a new prompt:
// forwards for all sequences, timed apart; the few tokens the target accepted and its
// correction ride in the first drafting forward), then drafts position by position, every speculating sequence in the same forward, so
// k drafts of a batch cost k forwards of the draft model. What the target rejected is
// undone next step: the shadow keeps only the prefix it shares with the target's tokens,
// and its blocks past that prefix go back to the draft's pool.
//
// A forward of one block at construction touches the pool's first pages and the forward's
// buffers, which the first drafting step would otherwise pay for (on a small model,
// many steps' time); two one-token forwards after it time a drafting forward of one
// sequence before any step needs to know (token_seconds).
//
// The draft's pool holds as many tokens as the target's (the engine splits the KV memory
// between them by their bytes per token). When it is full, the shadows used least
// recently are dropped; a sequence that still does not fit gets no proposal this step.
// A shadow far behind (a new request) first looks for another shadow that has its
// prompt's first blocks computed, or will in this step, and shares those blocks (ref
// counted) instead of running them again: n > 1 choices and requests with one system
// prompt run it once.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/threadpool.h"
#include "engine/block_manager.h"
#include "engine/config.h"
#include "engine/model_runner.h"
#include "engine/proposer.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace ridge {

// Throws ridge::Error naming the difference when the draft cannot propose the target's
// tokens: another vocabulary size, or another token list in the GGUF metadata.
void check_draft_vocabulary(const Model& target, const Model& draft);

class DraftModelProposer final : public Proposer {
 public:
  // cfg: the draft's pool (kv_cache_bytes, block size, KV type) and token budget per
  // forward (max_num_batched_tokens, which catch-up splits into).
  DraftModelProposer(const Model& draft, const EngineConfig& cfg, ThreadPool& pool);
  ~DraftModelProposer() override;

  void propose(std::span<const Ask> asks) override;
  bool costly() const override { return true; }
  // The tokens the shadow has not run, at the measured catch-up time per token.
  double setup_seconds(int64_t seq, std::span<const int32_t> tokens) const override;
  // A drafting forward's measured time at this many sequences, or, not measured yet, the
  // time at the largest measured count below it (a forward over more sequences takes no
  // less); one sequence's is timed at construction.
  double token_seconds(int32_t n_seqs) const override;
  void retire(int64_t seq, std::span<const int32_t> tokens) override;

  // Of the last propose(): seconds spent catching up (not drafting), and forwards run.
  double catchup_seconds() const { return catchup_s_; }
  int64_t n_forwards() const { return n_forwards_; }
  int32_t n_shadows() const { return int32_t(shadows_.size()); }
  // Since construction: tokens run by catch-up forwards, and tokens a shadow took
  // computed from another's blocks instead.
  int64_t catchup_tokens() const { return catchup_tokens_; }
  int64_t shared_tokens() const { return shared_tokens_; }
  const BlockManager& blocks() const { return *bm_; }
  int64_t kv_pool_bytes() const { return runner_->kv_pool_bytes(); }

  // Tokens behind that ride in the first drafting forward rather than a catch-up of
  // their own.
  static constexpr int32_t kMergedCatchup = 8;

 private:
  struct Shadow {
    std::unique_ptr<Sequence> seq;
    uint64_t last_use = 0;
  };
  // Blocks for n_tokens positions of s, dropping the least recently used shadows not in
  // this step (last_use < now) while the pool is short. False: it does not fit.
  bool reserve(Sequence& s, int64_t n_tokens);
  void drop(std::unordered_map<int64_t, Shadow>::iterator it);
  void run(const std::vector<ScheduledChunk>& chunks);
  int32_t shared_blocks(const Sequence& donor, int64_t upto, std::span<const int32_t> tokens) const;
  void fork(Sequence& s, const Sequence& donor, int32_t n_blocks);

  const Model& model_;
  EngineConfig cfg_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<BlockManager> bm_;
  std::unordered_map<int64_t, Shadow> shadows_;  // by target sequence id
  uint64_t now_ = 0;
  std::vector<int32_t> rows_;
  std::span<const float> logits_;
  double catchup_s_ = 0;
  double catchup_s_per_token_ = 0;  // measured (decaying mean), first from the warm-up block
  // A drafting forward's seconds by sequences in it (powers of two: 1, 2, 3-4, 5-8, ...):
  // decaying means, 0 until measured.
  std::array<double, 10> forward_s_{};
  static int forward_bucket(int32_t n_seqs);
  void time_forward(int32_t n_seqs, double seconds);
  int64_t n_forwards_ = 0;
  int64_t catchup_tokens_ = 0, shared_tokens_ = 0;
};

}  // namespace ridge
