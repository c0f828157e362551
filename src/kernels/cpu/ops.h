// Small row-wise ops of the forward pass (norms, RoPE, activations, embedding gather).
// They move a few KB per token, so their roof is DRAM (or cache) bandwidth. RMSNorm,
// SwiGLU, RoPE and the residual add have AVX-512 paths (ops_avx512.cpp; the roofline report
// found the baseline loops far under that roof: docs/ROOFLINE.md); the others are plain
// loops, except GELU's (AVX-512 and AVX2: ops_avx2.cpp). Each row is computed alone, so a row's result never depends on the batch around
// it.
#pragma once
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/tensors.h"

namespace ridge::kernels {

// y[n] = x[n] / sqrt(mean(x^2) + eps) * w[n]   (w may be null: no scale)
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// Rotary embedding of one head vector x[head_dim] (RopeParams, kernels/tensors.h):
// rope_cache makes cs[rope_dim], the interleaved (cos, sin) of each pair at one position,
// which rope_apply then rotates x by.
void rope_cache(const RopeParams& p, int32_t pos, float* cs);
void rope_apply(const RopeParams& p, const float* cs, float* x);

// y[n] = (x[n] - mean(x)) / sqrt(var(x) + eps) * w[n] + b[n]: LayerNorm (GPT-2's), its
// mean and variance summed in double as rms_norm's square. y may be x.
void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps);

// out[n] = silu(gate[n]) * up[n]
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out[n] = gelu(x[n]) in the tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): what
// GPT-2 ("gelu_new") and Gemma ("gelu_pytorch_tanh") were trained with and llama.cpp's
// GELU computes. out may be x.
void gelu(const float* x, float* out, int64_t n);
// gpt-oss's clamped SwiGLU (ggml's swiglu_oai): with x = min(gate, kOaiLimit) and y =
// clamp(up, -kOaiLimit, kOaiLimit), out = x sigmoid(kOaiAlpha x) (y + 1).
constexpr float kOaiAlpha = 1.702f, kOaiLimit = 7.f;
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);
// out[n] = gelu(gate[n]) * up[n] (GeGLU): gelu's value, then one rounded product.
void geglu(const float* gate, const float* up, float* out, int64_t n);

// x[n] += y[n]
void add_inplace(float* x, const float* y, int64_t n);
// x[n] += a * y[n]
void axpy_inplace(float* x, const float* y, float a, int64_t n);

// A mixture of experts' router on one row of logits[r.n_expert] as MoeRouting says, in
// double: ids[r.k] and weights[r.k]. At most kMaxRouteExperts experts (llama.cpp's bound).
constexpr int32_t kMaxRouteExperts = 512;
void moe_route_row(const float* logits, const MoeRouting& r, int32_t* ids, float* weights);

}  // namespace ridge::kernels
