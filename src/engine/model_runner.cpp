#include "engine/model_runner.h"

#include <numeric>
#include <string>

#include "core/error.h"
#include "core/meminfo.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "engine/tp_worker.h"
#include "model/forward.h"

namespace ridge {
namespace {

// A device's pool: cfg.kv_cache_bytes, else mem_fraction of the device memory the
// weights (uploaded on first use, not yet there) and the activations leave.
int64_t device_budget_bytes(const Model& m, const EngineConfig& cfg, const kernels::Backend& be) {
  if (cfg.kv_cache_bytes > 0) return cfg.kv_cache_bytes;
  const int64_t reserve = (int64_t(4) << 30) + Forward::activation_bytes(m.hparams(), cfg.max_num_batched_tokens,
                                                                            cfg.max_num_seqs);
  const int64_t left = be.device_free_bytes() - m.resident_weight_bytes() - reserve;
  return int64_t(double(std::max<int64_t>(left, 0)) * cfg.mem_fraction);
}

std::unique_ptr<kernels::Backend> make_backend(const Model& m, const EngineConfig& cfg, ThreadPool& pool) {
  if (cfg.device == Device::Cpu) return kernels::make_cpu_backend(pool);
  const HParams& h = m.hparams();
  if (h.mla()) fail("--device cuda: {}'s latent attention does not run on the CUDA backend yet; use --device cpu", h.arch);
  if (cfg.swap_bytes > 0 || cfg.preemption != PreemptionMode::Recompute)
    fail("--device cuda: preemption by swap copies KV blocks through host memory, which the CUDA backend does not "
         "do yet; use --preemption-mode recompute without --swap-space");
  if (cfg.kv_dtype != DType::F16 && cfg.kv_dtype != DType::BF16 && cfg.kv_dtype != DType::F32)
    fail("--device cuda: the KV cache type {} is not one the CUDA backend reads (f16, bf16, f32)",
         dtype_name(cfg.kv_dtype));
  return kernels::make_cuda_backend();
}

// The bytes of a block of the pool's (a page of each group). Pipeline stages differ by a
// layer at most, and every stage makes the same number of pages: counted at the largest
// stage's size, so none takes more than its bytes (window and global pages are alike on
// every stage already).
int64_t block_bytes(const Model& m, const KVLayout& kl, const KvGroups& g) {
  const int64_t per_block = kl.block_bytes() * g.pages();
  const PpStage& pp = m.pp_stage();
  if (!pp.on() || g.grouped()) return per_block;
  return per_block / (pp.end - pp.first) * ((m.hparams().n_layer + pp.size - 1) / pp.size);
}

// The pool: cfg.kv_cache_bytes (ModelRunner::kv_budget_bytes), or a device's budget.
KVLayout pool_layout(const Model& m, const EngineConfig& cfg, const kernels::Backend& be) {
  const HParams& h = m.hparams();
  RIDGE_CHECK(cfg.block_size > 0 && cfg.block_size <= 1024, "block size {} is out of range (1..1024)", cfg.block_size);
  KVLayout kl = kv_layout_for(h, cfg.block_size, 0, cfg.kv_dtype);
  const KvGroups g = kv_groups_for(h, !cfg.swa_full, m.pp_stage().stage, m.pp_stage().size);
  kl.n_layer = g.slots;  // a page: `slots` layers of a block
  int64_t bytes = be.device_free_bytes() >= 0 ? device_budget_bytes(m, cfg, be)
                                              : ModelRunner::kv_budget_bytes(cfg, m.mapped_bytes());
  // A split model: the ranks on this machine each make a pool of this many pages, out of
  // the same free memory (--kv-cache-memory is each rank's as given).
  if ((m.tp_shard().on() || m.pp_stage().on()) && cfg.kv_cache_bytes <= 0) bytes /= dist::local_ranks();
  const int64_t per_block = block_bytes(m, kl, g);
  const int64_t n_blocks = bytes / per_block;
  if (n_blocks < 1)
    fail("the KV cache gets {} bytes, less than one block ({} bytes: {} tokens x {} bytes); give more memory",
         bytes, per_block, cfg.block_size, (per_block + cfg.block_size - 1) / cfg.block_size);
  RIDGE_CHECK(n_blocks * g.pages() < (int64_t(1) << 31), "KV pool of {} blocks is too large", n_blocks);
  kl.n_blocks = int32_t(n_blocks * g.pages());  // pages
  return kl;
}

}  // namespace

int64_t ModelRunner::kv_budget_bytes(const EngineConfig& cfg, int64_t mapped_bytes) {
  if (cfg.kv_cache_bytes > 0) return cfg.kv_cache_bytes;
  RIDGE_CHECK(cfg.mem_fraction > 0 && cfg.mem_fraction <= 1, "--mem-fraction {} is not in (0, 1]", cfg.mem_fraction);
  // The repacked panels are resident already (MemAvailable counts them); what the
  // forward still reads through the mapping is page cache, counted as available.
  const int64_t avail = mem_available_bytes() - mapped_bytes;
  return int64_t(double(std::max<int64_t>(avail, 0)) * cfg.mem_fraction);
}

int64_t ModelRunner::kv_bytes_per_token(const Model& m, const EngineConfig& cfg) {
  const HParams& h = m.hparams();
  // A block of every page: a windowed pool's pages carry a few unused slots.
  KVLayout kl = kv_layout_for(h, cfg.block_size, 0, cfg.kv_dtype);
  const KvGroups g = kv_groups_for(h, !cfg.swa_full, m.pp_stage().stage, m.pp_stage().size);
  kl.n_layer = g.slots;
  return (block_bytes(m, kl, g) + cfg.block_size - 1) / cfg.block_size;
}

namespace {

// A split model's ranks (tensor or pipeline parallel, or both), after the checks of what
// does not run split yet; null for a model of this process alone.
dist::Comm* split_ranks(const Model& m, const EngineConfig& cfg, const std::string& path) {
  const TpShard& ts = m.tp_shard();
  const PpStage& ps = m.pp_stage();
  if (!ts.on() && !ps.on()) return nullptr;
  dist::Comm* c = dist::world();
  RIDGE_CHECK(c && c->size() == ts.size * ps.size && c->rank() == 0, "a split model's runner runs on rank 0 of its ranks");
  RIDGE_CHECK(!path.empty(), "a split model's runner needs the path its ranks load");
  const std::string flag = ts.on() && ps.on() ? fmt::format("--tensor-parallel-size {} --pipeline-parallel-size {}", ts.size, ps.size)
                           : ts.on()          ? fmt::format("--tensor-parallel-size {}", ts.size)
                                              : fmt::format("--pipeline-parallel-size {}", ps.size);
  if (cfg.device != Device::Cpu) fail("{}: the CUDA backend does not run split models yet", flag);
  return c;
}

// The pool's pages: a page of every layer this process runs (a pipeline stage: its own).
KvGroups groups_for(const Model& m, const EngineConfig& cfg) {
  return kv_groups_for(m.hparams(), !cfg.swa_full, m.pp_stage().stage, m.pp_stage().size);
}

}  // namespace

ModelRunner::ModelRunner(const Model& m, const EngineConfig& cfg, ThreadPool& pool)
    : world_(split_ranks(m, cfg, m.path())),
      backend_(make_backend(m, cfg, pool)),
      kv_(std::make_unique<KVCache>(pool_layout(m, cfg, *backend_), groups_for(m, cfg), backend_.get())) {
  if (cfg.swap_bytes > 0) {
    // --swap-space is each rank's, as --kv-cache-memory: slots of the largest stage's page.
    const int64_t per_slot = block_bytes(m, kv_->layout(), kv_->groups()) / kv_->groups().pages();
    if (cfg.swap_bytes < per_slot)
      fail("--swap-space of {} bytes holds no KV page ({} bytes each)", cfg.swap_bytes, per_slot);
    swap_ = std::make_unique<SwapSpace>(*kv_, cfg.swap_bytes / per_slot * kv_->block_bytes(), cfg.swap_dir,
                                        SwapFaults::parse(cfg.swap_faults));
  }
  if (world_) {
    tp_send_setup(*world_, {m.path(), cfg, kv_->layout().n_blocks, swap_ ? swap_->capacity_blocks() : 0,
                            m.tp_shard().size, m.pp_stage().size});
    ranks_ = std::make_unique<dist::Ranks>(*world_, m.tp_shard().size, m.pp_stage().size);
  }
  try {
    fwd_ = std::make_unique<Forward>(m, *kv_, *backend_, ranks_.get());
    if (world_) tp_wait_ready(*world_);
  } catch (const std::exception& e) {  // the workers wait in the ready barrier: end them all
    if (world_) world_->abort(1, e.what());
    throw;
  }
  if (backend_->device_free_bytes() >= 0) {
    // A device: one token through the model puts the weights there now, not in the first
    // request's time (the backend uploads each on first use). Its K/V lands in a free
    // block, which whoever gets that block overwrites.
    const std::vector<int32_t> tok{0};
    std::vector<int32_t> table(size_t(kv_->groups().pages()));
    std::iota(table.begin(), table.end(), 0);
    Batch b;
    b.add(tok, 0, table, Logits::Last);
    fwd_->run(b);
  }
}

std::span<const float> ModelRunner::run(const std::vector<ScheduledChunk>& chunks, const BlockManager& bm,
                                        std::vector<int32_t>& rows, std::vector<int32_t>& prompt_rows) {
  batch_.tokens.clear();
  batch_.seqs.clear();
  rows.assign(chunks.size(), -1);
  prompt_rows.assign(chunks.size(), -1);
  RIDGE_CHECK(bm.pages_per_entry() == kv_->groups().pages(), "model runner: {} pages per block, the pool has {}",
              bm.pages_per_entry(), kv_->groups().pages());
  if (page_tables_.size() < chunks.size()) page_tables_.resize(chunks.size());
  int32_t r = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& c = chunks[i];
    const Sequence& s = *c.seq;
    // One page per block: the table is the page table.
    std::span<const int32_t> table = s.blocks;
    if (bm.pages_per_entry() > 1) {
      bm.page_table(s.blocks, page_tables_[i]);
      table = page_tables_[i];
    }
    if (c.n_draft > 0) {  // the pending token and its drafts, a logit row each to verify
      spec_.assign(s.tokens.begin() + s.n_computed, s.tokens.end());
      spec_.insert(spec_.end(), s.draft.begin(), s.draft.begin() + c.n_draft);
      RIDGE_ASSERT(int32_t(spec_.size()) == c.n_tokens);
      batch_.add(spec_, s.n_computed, table, Logits::All, s.n_expand);
      rows[i] = r;
      r += c.n_tokens;
      continue;
    }
    const bool last = s.n_computed + c.n_tokens == int32_t(s.tokens.size());
    const std::span<const int32_t> toks = std::span<const int32_t>(s.tokens).subspan(size_t(s.n_computed), size_t(c.n_tokens));
    if (s.needs_prompt_logits()) {  // a row per token: the prompt's logprobs
      batch_.add(toks, s.n_computed, table, Logits::All, s.n_expand);
      prompt_rows[i] = r;
      r += c.n_tokens;
      if (last) rows[i] = r - 1;
      continue;
    }
    batch_.add(toks, s.n_computed, table, last ? Logits::Last : Logits::None, s.n_expand);
    if (last) rows[i] = r++;
  }
  if (!world_) return fwd_->run(batch_);
  // The ranks run the step together: a batch the forward would refuse is refused before
  // they start, and a failure after that ends them all (they wait in its collectives).
  fwd_->validate(batch_);
  tp_send_batch(*world_, batch_);
  try {
    return fwd_->run(batch_);
  } catch (const std::exception& e) {
    world_->abort(1, e.what());
  }
}

std::vector<int64_t> ModelRunner::swap_out(std::span<const int32_t> blocks) {
  std::vector<int64_t> slots = swap_->swap_out(blocks);  // the slots first: they go in the message
  if (world_) tp_send_swap(*world_, SwapOp::Out, blocks, slots);
  return slots;
}

bool ModelRunner::swap_in(std::span<const int64_t> slots, std::span<const int32_t> blocks) {
  if (!world_) return swap_->swap_in(slots, blocks);
  tp_send_swap(*world_, SwapOp::In, blocks, slots);
  // The workers wait in the agreement: a failure here ends them all, as in run().
  try {
    return tp_swap_in_agree(*world_, swap_->swap_in(slots, blocks));
  } catch (const std::exception& e) {
    world_->abort(1, e.what());
  }
}

void ModelRunner::swap_free(std::span<const int64_t> slots) {
  if (world_) tp_send_swap(*world_, SwapOp::Free, {}, slots);
  swap_->free(slots);
}

ModelRunner::~ModelRunner() {
  if (world_) tp_send_release(*world_);
}

}  // namespace ridge
