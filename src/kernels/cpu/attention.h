// Attention of one query row over a sequence's paged K/V, tiled by KV block with an
// online softmax (FlashAttention-style: no score row longer than a block is ever held).
// Tiles are the cache blocks themselves, aligned to absolute positions, and the query
// reads exactly positions [0, n_ctx): a prefill row and a decode row at the same position
// run the same arithmetic in the same order, bit for bit.
#pragma once
#include <cstdint>
#include <span>

#include "model/kv_cache.h"

namespace ridge::kernels {

struct AttnArgs {
  const KVCache* kv = nullptr;
  int32_t layer = 0;
  std::span<const int32_t> block_table;
  int32_t n_ctx = 0;   // attend to positions [0, n_ctx)
  float scale = 1.f;   // 1/sqrt(head_dim)
};

// q[head_dim_k] for KV head kv_head -> out[head_dim_v].
// scratch: at least block_size + head_dim_k + head_dim_v floats.
void attention_row(const AttnArgs& a, int32_t kv_head, const float* q, float* out, float* scratch);

}  // namespace ridge::kernels
