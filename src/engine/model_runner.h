// The model side of a step: chooses the backend (the CPU's, or CUDA's with --device cuda),
// owns the KV pool (sized from the config and the memory the weights leave, on the
// backend's device), the swap space behind it and the
// forward; turns the scheduler's chunks
// into one varlen batch and returns one logit row per chunk that reaches the end of its
// sequence's tokens (a prompt chunk that does not finish the prompt produces none).
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "core/threadpool.h"
#include "dist/comm.h"
#include "engine/config.h"
#include "engine/scheduler.h"
#include "engine/swap_space.h"
#include "kernels/backend.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace ridge {

class ModelRunner {
 public:
  // Throws ridge::Error when the pool would hold no block, or the swap space cannot be
  // made (a --swap-dir that cannot hold it).
  // A model split over ranks (m.tp_shard(), m.pp_stage()): this is rank 0's runner; it sends the setup
  // to the other ranks (engine/tp_worker.h: they load their shards of m.path()) and each
  // batch before running its own part.
  ModelRunner(const Model& m, const EngineConfig& cfg, ThreadPool& pool);
  ~ModelRunner();

  // rows[i] = index of chunk i's logit row (its first: a chunk with drafts has one per
  // token), or -1. prompt_rows[i] = the first of a row per token of a prompt chunk that
  // is being scored (Sequence::needs_prompt_logits), or -1; its last row is rows[i] when
  // the chunk ends the prompt.
  // bm: the owner of the sequences' block tables (their pages).
  std::span<const float> run(const std::vector<ScheduledChunk>& chunks, const BlockManager& bm,
                             std::vector<int32_t>& rows, std::vector<int32_t>& prompt_rows);
  std::span<const float> run(const std::vector<ScheduledChunk>& chunks, const BlockManager& bm,
                             std::vector<int32_t>& rows) {
    return run(chunks, bm, rows, prompt_rows_);
  }

  // The KV pool's bytes: cfg.kv_cache_bytes, else cfg.mem_fraction of the memory left
  // besides the weights still read through their mapping (mapped_bytes).
  static int64_t kv_budget_bytes(const EngineConfig& cfg, int64_t mapped_bytes);
  // K and V bytes of one token of m's in cfg's KV type.
  static int64_t kv_bytes_per_token(const Model& m, const EngineConfig& cfg);

  const KVLayout& kv_layout() const { return kv_->layout(); }
  // How the pool's pages make a block (its BlockManager's PageGroups).
  PageGroups page_groups() const {
    const KvGroups& g = kv_->groups();
    return {g.n_global, g.n_window, g.window};
  }
  int64_t kv_pool_bytes() const { return kv_->total_bytes(); }
  SwapSpace* swap() const { return swap_.get(); }  // null without a swap space
  // The swap space's copies (SwapSpace's), on every rank of a split model: rank 0 chooses
  // the slots and sends each operation to the others with them; a swap-in succeeds
  // only where every rank read its share back.
  std::vector<int64_t> swap_out(std::span<const int32_t> blocks);
  [[nodiscard]] bool swap_in(std::span<const int64_t> slots, std::span<const int32_t> blocks);
  void swap_free(std::span<const int64_t> slots);
  perf::OpProfile& profile() { return fwd_->profile(); }

 private:
  // A split model: the world, whose other ranks run the other shards and stages (null:
  // one process), and how the forward's collectives run over it.
  dist::Comm* world_ = nullptr;
  std::unique_ptr<dist::Ranks> ranks_;
  std::unique_ptr<kernels::Backend> backend_;  // the device the forward's operations run on
  std::unique_ptr<KVCache> kv_;
  std::unique_ptr<SwapSpace> swap_;
  std::unique_ptr<Forward> fwd_;
  Batch batch_;
  std::vector<int32_t> spec_;  // a verified chunk's tokens (batch_.add copies them)
  std::vector<int32_t> prompt_rows_;  // run() without prompt_rows: scratch
  std::vector<std::vector<int32_t>> page_tables_;  // [chunks] each sequence's page table (windowed pools)
};

}  // namespace ridge
