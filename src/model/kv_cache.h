// The paged KV pool's memory: one anonymous mapping of n_blocks blocks in the layout of
// kernels/kv_view.h, committed lazily as blocks fill. The view is what the kernels
// read; this class only owns the bytes.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kv_view.h"
#include "model/hparams.h"

namespace ridge {

// The cache layout a model's forward writes: one K/V head per KV head of head_dim_k /
// head_dim_v; under multi-head latent attention its single head's value is the key's
// latent part, kept once (v_in_k) where the CPU runs the AVX-512 attention (FP8's: and no
// AMX tiles) and the dtype allows (KVLayout::values_in_keys_allowed).
KVLayout kv_layout_for(const HParams& h, int32_t block_size, int32_t n_blocks, DType dtype);

// Which page of a block table entry, and which layer slot of that page, holds each
// layer's K/V (engine/block_manager.h has the entries). One kind of layer: one page per
// entry with a slot per layer, the layout every tool that makes its own cache uses. A
// model mixing window and global layers, bounded: pages of `slots` layers, global layers
// in the first n_global pages of an entry, window layers in the n_window after them, so
// the window pages can be dropped once no query sees them (vLLM's hybrid KV cache: one
// page size, a table per kind). slots = the smaller kind's layer count, so little is
// padding (gemma3's 4 global and 22 window layers: 1 + 6 pages of 4 slots, 2 unused).
struct KvGroups {
  int32_t slots = 0;                   // layers per page: the pool's KVLayout::n_layer
  int32_t n_global = 1, n_window = 0;  // pages per entry
  int32_t window = 0;                  // the window layers' window (tokens)
  std::vector<int32_t> page, slot;     // [n_layer]
  int32_t pages() const { return n_global + n_window; }
  bool grouped() const { return n_window > 0; }
};
// bounded = false (or a model without both kinds of layer): one page per entry. A
// pipeline stage (stage of stages, model/tp_shard.h) gets slots for its own layers only
// (the others' entries are 0 and never read), in pages laid out as every other stage's:
// rank 0's block manager names the same pages on every stage, so the pages per entry and
// the slots per page are the largest any stage needs (a stage may leave some unused).
KvGroups kv_groups_for(const HParams& h, bool bounded, int32_t stage = 0, int32_t stages = 1);

class KVCache : public KVView {
 public:
  // throws ridge::Error on an impossible layout; groups: layout.n_layer must be its slots
  // (default: one page of every layer)
  // device: the backend whose memory holds the pool (Backend::alloc_kv), or null for host
  // memory; it must outlive the cache.
  explicit KVCache(const KVLayout& layout, KvGroups groups = {}, kernels::Backend* device = nullptr);
  const KvGroups& groups() const { return groups_; }
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

 private:
  size_t map_len_ = 0;
  KvGroups groups_;
  kernels::Backend* device_ = nullptr;  // holds base_ when set
};

}  // namespace ridge
