// The paged KV cache as the kernels see it: a layout and a base pointer, no ownership.
// A sequence's tokens live in the blocks its block table names, position p in block
// table[p / block_size], slot p % block_size. Who owns the bytes (model/kv_cache.h) and
// which blocks belong to whom (engine/block_manager.h) are other layers' business.
//
// Layout, in the cache dtype: per layer, the K tiles of every block, then the V tiles of
// every block; a block's K (V) tiles of all KV heads are one contiguous run:
//   [n_layer] { K [n_blocks][n_kv_head][head_dim_k][block_size],
//               V [n_blocks][n_kv_head][block_size][head_dim_v] }
// (int8 interleaves four dimensions of K, four positions of V: k_element, v_element).
// The 8-bit dtypes (I8, F8_E4M3, F8_E5M2) are scaled: a head's K (V) tile is followed by
// its slots' f32 scales, [block_size] each, computed when a position is written (the
// absolute maximum of that token's head vector over the code's largest value). A key's
// scale multiplies its whole dot product, a value's scale its probability, so the
// kernels convert codes and apply one scale per position. Scales live inside the block,
// so whatever moves blocks (prefix cache, swap, rollback) moves them.
// int8 keys lie four dimensions to a slot ([ceil(head_dim_k / 4)][block_size][4]: k_element):
// a 64-byte load is 16 slots' next four dimensions, which one vpdpbusd dots with four of a
// query's int8 dimensions, so the scores run in integer arithmetic (attention_avx512.cpp).
// int8 values lie four positions to a slot ([ceil(block_size / 4)][head_dim_v][4]:
// v_element): a 64-byte load is 16 dimensions of four positions, which one vpdpbusd
// weighs with four positions' 8-bit probabilities, so P.V runs in integers too.
// Attention computes a tile's scores with keys across the vector lanes (16 slots of one
// dimension are one load, no transpose) and P.V with dimensions across the lanes (one
// position's V row is one load; int8's, four positions' rows). A decode attention task over several heads reads one
// piece of K and one of V per block, and the scores of a tile of blocks read all its K
// pieces before P.V reads its V pieces: with K and V in their own regions a table of
// adjacent blocks (BlockManager's placement) is one stream of K and one of V, which the
// hardware prefetchers follow further than pieces with the other half between them
// (docs/BENCHMARKS.md, issue 6 session 9, has the measurements).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "quant/fp8.h"

namespace ridge {

struct KVLayout {
  int32_t n_layer = 0, n_kv_head = 0, head_dim_k = 0, head_dim_v = 0;
  int32_t block_size = 16;
  int32_t n_blocks = 0;
  DType dtype = DType::F16;
  // Multi-head latent attention: a value is its key's last head_dim_v dimensions (the
  // latent after the RoPE key), so a block has no V tiles and attention reads values out
  // of the K tiles. Every dtype; a scaled one's value shares its key's codes and scale
  // (int8: v_dim0 and head_dim_v whole four-dimension slots).
  bool v_in_k = false;

  bool scaled() const { return is_scaled_kv_dtype(dtype); }
  // Whether this dtype and these head dimensions may keep values in keys (v_in_k).
  bool values_in_keys_allowed() const {
    return dtype != DType::I8 || ((head_dim_k - head_dim_v) % 4 == 0 && head_dim_v % 4 == 0);
  }
  // A head's K or V tile in a block: codes, then (scaled) the slots' scales; and a whole
  // block, all layers. Scaled codes are padded to whole 32-bit slots: int8 K's dimensions
  // (and the other 8-bit dtypes', which keeps their scales aligned) and int8 V's slots.
  int64_t k_codes_bytes() const {
    return scaled() ? int64_t(block_size) * round4(head_dim_k) : int64_t(block_size) * head_dim_k * elem_bytes();
  }
  int64_t v_codes_bytes() const {
    if (v_in_k) return 0;
    return dtype == DType::I8 ? int64_t(round4(block_size)) * head_dim_v
           : scaled()         ? int64_t(block_size) * round4(head_dim_v)
                              : int64_t(block_size) * head_dim_v * elem_bytes();
  }
  // Element (dimension d, slot) of a K tile, and (slot, dimension d) of a V tile, in
  // elements from the tile's start.
  int64_t k_element(int32_t d, int32_t slot) const {
    return dtype == DType::I8 ? (int64_t(d >> 2) * block_size + slot) * 4 + (d & 3) : int64_t(d) * block_size + slot;
  }
  int64_t v_element(int32_t slot, int32_t d) const {
    return dtype == DType::I8 ? (int64_t(slot >> 2) * head_dim_v + d) * 4 + (slot & 3) : int64_t(slot) * head_dim_v + d;
  }
  int64_t scale_bytes() const { return scaled() ? int64_t(block_size) * 4 : 0; }
  int64_t v_scale_bytes() const { return v_in_k ? 0 : scale_bytes(); }  // a V tile's (v_in_k: none, the key's serve)
  // The K dimension where a value starts (v_in_k), or -1.
  int32_t v_dim0() const { return v_in_k ? head_dim_k - head_dim_v : -1; }
  int64_t block_bytes() const {
    return int64_t(n_layer) * n_kv_head * (k_codes_bytes() + scale_bytes() + v_codes_bytes() + v_scale_bytes());
  }
  int64_t bytes_per_token() const {  // K and V (and their scales), all layers: a block's share, rounded up
    return (block_bytes() + block_size - 1) / block_size;
  }
  // The largest code value of a scaled dtype: a position's scale is its amax over this.
  static float kv_code_max(DType t) {
    return t == DType::I8 ? 127.f : t == DType::F8_E4M3 ? quant::kFp8E4M3Max : quant::kFp8E5M2Max;
  }

 private:
  static int32_t round4(int32_t x) { return (x + 3) / 4 * 4; }
  int64_t elem_bytes() const { return int64_t(dtype_info(dtype).type_size); }
};

class KVView {
 public:
  KVView() = default;
  KVView(const KVLayout& layout, uint8_t* base)
      : l_(layout), esz_(int64_t(dtype_info(layout.dtype).type_size)), base_(base) {}

  const KVLayout& layout() const { return l_; }
  int64_t total_bytes() const { return block_bytes() * l_.n_blocks; }

  // Sizes of one block's K tiles (all heads) and V tiles in one layer: also the bytes from
  // one block's K (V) tiles to the next block's.
  int64_t k_block_bytes() const { return int64_t(l_.n_kv_head) * k_head_bytes(); }
  int64_t v_block_bytes() const { return int64_t(l_.n_kv_head) * v_head_bytes(); }
  int64_t block_bytes() const { return int64_t(l_.n_layer) * (k_block_bytes() + v_block_bytes()); }  // all layers
  // Bytes from one head's K (V) tile to the next head's in a block (codes and scales).
  int64_t k_head_bytes() const { return k_codes_bytes() + scale_bytes(); }
  int64_t v_head_bytes() const { return v_codes_bytes() + l_.v_scale_bytes(); }
  // A head's K (V) codes, then (scaled dtypes) its slots' f32 scales, 4-byte aligned.
  int64_t k_codes_bytes() const { return l_.k_codes_bytes(); }
  int64_t v_codes_bytes() const { return l_.v_codes_bytes(); }
  int64_t scale_bytes() const { return l_.scale_bytes(); }
  float* k_scales(int32_t layer, int32_t block, int32_t head) const {
    return reinterpret_cast<float*>(k_tile(layer, block, head) + k_codes_bytes());
  }
  float* v_scales(int32_t layer, int32_t block, int32_t head) const {  // v_in_k: the keys'
    if (l_.v_in_k) return k_scales(layer, block, head);
    return reinterpret_cast<float*>(v_tile(layer, block, head) + v_codes_bytes());
  }

  // Head h's K tile [head_dim_k][block_size] of (layer, block) (int8: k_element).
  uint8_t* k_tile(int32_t layer, int32_t block, int32_t head) const {
    return layer_base(layer) + int64_t(block) * k_block_bytes() + head * k_head_bytes();
  }
  // Head h's V tile [block_size][head_dim_v] of (layer, block) (int8: v_element).
  uint8_t* v_tile(int32_t layer, int32_t block, int32_t head) const {
    return layer_base(layer) + int64_t(l_.n_blocks) * k_block_bytes() + int64_t(block) * v_block_bytes() +
           head * v_head_bytes();
  }

  // One position's K or V vector of one head, from or to f32 (elements where k_element
  // and v_element put them; a scaled dtype's codes times their scale).
  void write_k(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const;
  void read_k(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const;
  void write_v(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const;
  void read_v(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const;

 protected:
  uint8_t* layer_base(int32_t layer) const {
    return base_ + int64_t(layer) * l_.n_blocks * (k_block_bytes() + v_block_bytes());
  }

  KVLayout l_;
  int64_t esz_ = 2;
  uint8_t* base_ = nullptr;
};

}  // namespace ridge
