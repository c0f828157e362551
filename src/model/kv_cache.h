// Paged KV storage: a pool of fixed-size blocks per layer. A sequence's tokens live in the
// blocks its block table names, position p in block table[p / block_size], slot
// p % block_size. Which blocks belong to whom is the engine's business (block manager);
// this class only owns the bytes and knows the layout.
//
// Layout per layer, in the cache dtype:
//   K [n_blocks][n_kv_head][head_dim_k][block_size]   one head's tile dimension-major
//   V [n_blocks][n_kv_head][block_size][head_dim_v]   one head's tile position-major
// Attention computes a tile's scores with keys across the vector lanes (16 slots of one
// dimension are one load, no transpose) and P.V with dimensions across the lanes (one
// position's V row is one load). Either way one head's tile is contiguous.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"

namespace ridge {

struct KVLayout {
  int32_t n_layer = 0, n_kv_head = 0, head_dim_k = 0, head_dim_v = 0;
  int32_t block_size = 16;
  int32_t n_blocks = 0;
  DType dtype = DType::F16;

  int64_t bytes_per_token() const {  // K and V, all layers
    return int64_t(n_layer) * n_kv_head * (head_dim_k + head_dim_v) * int64_t(dtype_info(dtype).type_size);
  }
};

class KVCache {
 public:
  explicit KVCache(const KVLayout& layout);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  const KVLayout& layout() const { return l_; }
  int64_t total_bytes() const { return bytes_; }

  // One block of one layer is contiguous: [n_kv_head][block_size][head_dim] for K and V.
  int64_t k_block_bytes() const { return int64_t(l_.n_kv_head) * l_.block_size * l_.head_dim_k * esz_; }
  int64_t v_block_bytes() const { return int64_t(l_.n_kv_head) * l_.block_size * l_.head_dim_v * esz_; }
  int64_t block_bytes() const { return int64_t(l_.n_layer) * (k_block_bytes() + v_block_bytes()); }

  // Head h's K tile [head_dim_k][block_size] of (layer, block).
  uint8_t* k_tile(int32_t layer, int32_t block, int32_t head) const {
    return k_ + ((int64_t(layer) * l_.n_blocks + block) * l_.n_kv_head + head) * l_.block_size * l_.head_dim_k * esz_;
  }
  // Head h's V vector at (block, slot): head_dim_v contiguous elements.
  uint8_t* v(int32_t layer, int32_t block, int32_t head, int32_t slot) const {
    return v_ + ((((int64_t(layer) * l_.n_blocks + block) * l_.n_kv_head + head) * l_.block_size + slot) * l_.head_dim_v) * esz_;
  }

  // One position's K or V vector of one head, from or to f32 (K's elements lie
  // block_size apart, V's are contiguous).
  void write_k(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const;
  void read_k(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const;
  void write_v(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const;
  void read_v(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const;

 private:
  KVLayout l_;
  int64_t esz_ = 2;
  int64_t bytes_ = 0;
  size_t map_len_ = 0;
  std::unique_ptr<uint8_t[], void (*)(uint8_t*)> mem_{nullptr, nullptr};
  uint8_t* k_ = nullptr;
  uint8_t* v_ = nullptr;
};

}  // namespace ridge
