// The paged KV pool's memory: one anonymous mapping of n_blocks blocks in the layout of
// kernels/kv_view.h, committed lazily as blocks fill. The view is what the kernels
// read; this class only owns the bytes.
#pragma once
#include <cstddef>

#include "kernels/kv_view.h"
#include "model/hparams.h"

namespace ridge {

// The cache layout a model's forward writes: one K/V head per KV head of head_dim_k /
// head_dim_v; under multi-head latent attention its single head's value is the key's
// latent part, kept once (v_in_k) where the dtype allows (the 8-bit ones keep a copy) and
// the CPU runs the AVX-512 attention.
KVLayout kv_layout_for(const HParams& h, int32_t block_size, int32_t n_blocks, DType dtype);

class KVCache : public KVView {
 public:
  explicit KVCache(const KVLayout& layout);  // throws ridge::Error on an impossible layout
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

 private:
  size_t map_len_ = 0;
};

}  // namespace ridge
