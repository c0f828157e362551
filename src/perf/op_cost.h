// The roofline cost of each forward op for a batch: useful operations (2 per multiply-add;
// elementwise work counted per element as written below) and the minimum bytes the op
// must move between memory and the cores. "Minimum" means each weight byte once per
// step, the KV context once per sequence per layer (GQA heads share it), activations in
// and out once. Pure arithmetic, tested against hand-computed values.
#pragma once
#include <cstdint>
#include <span>
#include <utility>

#include "core/dtype.h"
#include "perf/op_profile.h"

namespace ridge::perf {

// What the attention ops' costs need of a model's shape (the model layer fills it from
// its hyperparameters: instrumentation knows no model).
struct AttnShape {
  int32_t n_head = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0, rope_dim = 0;
  // Multi-head latent attention: the cache keeps a value inside its key where the KV dtype
  // allows (kv_view.h KVLayout::values_in_keys_allowed; an AVX-512 CPU, and for FP8 one
  // without AMX tiles: kv_cache.h kv_layout_for), so no V bytes (or V scales) move then.
  bool mla = false;
  bool v_in_k(DType kv) const {
    return mla && (kv != DType::I8 || ((head_dim_k - head_dim_v) % 4 == 0 && head_dim_v % 4 == 0));
  }
  int64_t n_q() const { return int64_t(n_head) * head_dim_k; }
  int64_t n_kv_k() const { return int64_t(n_head_kv) * head_dim_k; }
  int64_t n_kv_v() const { return int64_t(n_head_kv) * head_dim_v; }
  int64_t n_attn_out() const { return int64_t(n_head) * head_dim_v; }
};

struct OpCost {
  double flops = 0;
  double bytes = 0;
  OpCost& operator+=(const OpCost& o) {
    flops += o.flops, bytes += o.bytes;
    return *this;
  }
};

// y[m][n] = x[m][k] W^T with W stored as `type`: 2mkn; W's bytes + x (f32) + y (f32).
OpCost matmul_cost(int64_t m, int64_t k, int64_t n, DType type);
// The class of the kernel that runs a matmul on `type`: int8 VNNI for block-quantized
// weights (activations are quantized to 8 bits), fp32 FMA for f32/f16/bf16 (converted on
// load).
ComputeClass matmul_class(DType type);
// RMSNorm of `rows` rows of width n: 3 ops per element (square-accumulate, scale,
// weight); the rows in and out plus the weight once.
OpCost rms_norm_cost(int64_t rows, int64_t n);
// LayerNorm with a bias: 6 ops per element (sum, centred square-accumulate, subtract,
// scale, weight, bias); the rows in and out plus the weight and bias once.
OpCost layer_norm_cost(int64_t rows, int64_t n);
// x += y over rows x n: 1 op per element; read x and y, write x.
OpCost residual_cost(int64_t rows, int64_t n);
// x += b over rows x n (a matmul's bias): 1 op per element; read and write x, b once.
OpCost bias_cost(int64_t rows, int64_t n);
// silu(gate) * up over rows x n_ff: 5 ops per element (negate, exp, add, divide,
// multiply); read gate and up, write the product.
OpCost swiglu_cost(int64_t rows, int64_t n_ff);
// gelu(x) (tanh form) over rows x n: 8 ops per element (the cubic, tanh, the products);
// read x, write the result.
OpCost gelu_cost(int64_t rows, int64_t n);
// Per token: optional biases (1 op per q/k/v element), optional q/k norms (3 per element),
// RoPE on rope_dim of every q and k head (3 per rotated element: two products, one add);
// read q, k, v, write q and k back and K/V into the cache in kv_type.
OpCost rope_kv_cost(const AttnShape& h, int64_t tokens, bool bias, bool qk_norm, DType kv_type);
// Attention over the cache: each token at position p attends p + 1 keys: per query head
// 2 (p + 1) head_dim_k ops for the scores and 2 (p + 1) head_dim_v for P.V (softmax
// counted as 5 per score). Bytes: each sequence's K and V context once per layer (all
// tokens and GQA heads of the sequence share it), q in, output out. seqs: (pos0, n_tokens).
// window > 0: each token attends to its last `window` positions only.
OpCost attention_cost(const AttnShape& h, std::span<const std::pair<int32_t, int32_t>> seqs, DType kv_type,
                      int32_t window = 0);
// Gathering `tokens` embedding rows of width n stored as `type`: no operations; the rows
// read, the f32 rows written.
OpCost embed_cost(int64_t tokens, int64_t n, DType type);
// Sampling one logit row of n_vocab: about 4 ops per logit (max, exp, sum, compare);
// the row read once.
OpCost sampling_cost(int64_t rows, int64_t n_vocab);

}  // namespace ridge::perf
