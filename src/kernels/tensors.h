// What the forward's operations take, whatever device runs them (kernels/backend.h): a
// weight matrix as the model holds it, a fused matmul's outputs, RoPE's parameters.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace ridge::kernels {

// A weight matrix W [n_out rows][k] as the model holds it, in host memory.
struct WeightView {
  DType type = DType::F32;
  int64_t k = 0;       // row length (input features)
  int64_t n_out = 0;   // rows (output features)
  const uint8_t* data = nullptr;    // GGUF rows (row stride = row_bytes(type, k))
  const uint8_t* packed = nullptr;  // the CPU GEMM's 16-row panels (cpu/packed.h), or null
  bool fp8_bf16 = false;            // FP8 panels in the bf16 path's layout (core/cpu.h fp8_path)
};

// One output of a fused matmul: `n_out` consecutive output features into y[m][n_out].
struct MatmulOut {
  int64_t n_out;
  float* y;
};

// One matmul of a group run in one pass (Backend::matmul_grouped: a mixture of experts'
// active experts): y = x[m][w.k] . W^T into outs (split as a fused weight's), where x is
// silu(gate) * up row by row when gate is set.
// Rows that take one bias vector (Backend::add_bias_runs).
struct BiasRun {
  float* x = nullptr;  // [rows][n]
  const float* b = nullptr;  // [n]
  int64_t rows = 0;
};

struct GroupedMatmul {
  const WeightView* w = nullptr;
  const float* x = nullptr;
  const float* gate = nullptr;  // [m][w.k], with up: x made row by row
  const float* up = nullptr;
  int64_t m = 0;
  MatmulOut outs[2] = {};
  int32_t n_outs = 1;
};

// How a mixture of experts' router picks a token's k experts from its logits (llama.cpp's
// build_moe_ffn): probabilities p by softmax over all experts, or each expert's sigmoid;
// the choice by p + bias (DeepSeek V3's exp_probs_b; the weights stay p), limited to the
// experts of the n_groups_used best groups when the experts form n_groups > 1 equal
// groups (a group's score: the sum of its two best); the k best in descending order
// (ties: the lower id). The chosen p are renormalized to sum to one when norm, then
// multiplied by scale.
struct MoeRouting {
  int32_t n_expert = 0, k = 0;
  bool sigmoid = false;
  const float* bias = nullptr;  // [n_expert] or null
  int32_t n_groups = 0, n_groups_used = 0;
  bool norm = true;
  float scale = 1.f;
};

// Rotary embedding of the first rope_dim dims of each head vector. neox=false rotates
// adjacent pairs (x[2i], x[2i+1]) as Llama does; neox=true rotates halves (x[i],
// x[i+rope_dim/2]) as Qwen2/3 (GPT-NeoX) do. freq_factors (Llama 3.1 rope_freqs) divide
// each pair's frequency.
struct RopeParams {
  int32_t rope_dim = 0;
  float freq_base = 10000.f;
  float freq_scale = 1.f;  // linear position scaling (1 = none)
  bool neox = false;
  const float* freq_factors = nullptr;  // [rope_dim/2] or null
  // Multiplies cos and sin (llama.cpp's attn_factor: phi3 LongRoPE), so the rotated
  // dimensions of q and k are scaled by it and the rest are not.
  float attn_factor = 1.f;
};

}  // namespace ridge::kernels
