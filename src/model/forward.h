// The forward pass of the llama family over a variable-length batch through the paged
// KV cache. Every intermediate has a stable name (the member buffers below, per layer);
// the tracer and roofline accounting hang on these names.
#pragma once
#include <algorithm>
#include <span>
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "perf/op_cost.h"
#include "perf/op_profile.h"

namespace ridge {

class Forward {
 public:
  Forward(const Model& model, KVCache& kv, ThreadPool& pool);

  // Writes the batch's K/V into the cache and returns the logits,
  // [batch.n_logit_rows()][n_vocab], valid until the next call.
  std::span<const float> run(const Batch& batch);

  // The most the named intermediates and the matmul's quantized activations take for a
  // step of `tokens` tokens with `rows` logit rows (they grow to the largest step seen).
  static int64_t activation_bytes(const HParams& h, int64_t tokens, int64_t rows);

  // Every op's FLOPs and bytes accumulate here on every run (a few multiplications per
  // op); set profile().timing to time each op too. The caller resets it between phases.
  perf::OpProfile& profile() { return profile_; }

 private:
  void validate(const Batch& b) const;
  void attention_block(int32_t il, const Batch& b);
  void ffn_block(int32_t il);
  // Runs fn as op `o` of layer `layer` (-1: outside the layers), accounting its cost and,
  // when profiling or tracing, timing it.
  template <typename F>
  void op(perf::Op o, perf::ComputeClass cls, int32_t layer, const perf::OpCost& c, F&& fn);
  // RMSNorm of x_ (weight nw; a residual add left in residual_ goes first) feeding op
  // mm_op's matmul of the fused weight w into outs: inside the matmul's activation
  // quantization where w takes a RowSource, else as op norm_op into buf, then the matmul
  // (w itself, or split(buf) for weights that run one by one).
  template <typename Split>
  void norm_matmul(int32_t il, perf::Op norm_op, perf::Op mm_op, perf::OpCost cost, DType type,
                   const std::vector<float>& nw, const kernels::WeightView& w,
                   std::initializer_list<kernels::MatmulOut> outs, std::vector<float>& buf, Split&& split);
  // fn(t) for every token row, spread over the pool (row ops write only their own row).
  template <typename F>
  void rows(int64_t T, F&& fn) {
    pool_.parallel_for(T, std::max<int64_t>(1, T / (int64_t(pool_.size()) * 4)), [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) fn(t);
    });
  }

  const Model& m_;
  const HParams& h_;
  KVCache& kv_;
  ThreadPool& pool_;
  kernels::Matmul mm_;
  kernels::RopeParams rope_;

  perf::OpProfile profile_;
  std::vector<std::pair<int32_t, int32_t>> seq_shape_;  // [seqs] (pos0, n_tokens) for the attention cost
  int64_t T_ = 0;                  // tokens in the batch
  std::vector<int32_t> tok_seq_;   // [T] sequence index of each token
  std::vector<int32_t> tok_pos_;   // [T] absolute position
  std::vector<float> rope_cs_;     // [T][rope_dim] (cos, sin) pairs
  // A residual add left to the next norm: that norm runs inside its matmul (RowSource)
  // and adds this [T][n_embd] into x_ row by row first, in place of a pass of its own.
  const float* residual_ = nullptr;

  // Named intermediates, row-major [T][width].
  std::vector<float> x_;           // residual stream [T][n_embd]
  std::vector<float> attn_norm_;   // [T][n_embd]
  std::vector<float> q_;           // [T][n_q]
  std::vector<float> k_;           // [T][n_kv_k]
  std::vector<float> v_;           // [T][n_kv_v]
  std::vector<float> kqv_;         // [T][n_attn_out] attention output before wo
  std::vector<float> attn_out_;    // [T][n_embd]
  std::vector<float> ffn_norm_;    // [T][n_embd]
  std::vector<float> ffn_gate_;    // [T][n_ff]
  std::vector<float> ffn_up_;      // [T][n_ff]
  std::vector<float> ffn_act_;     // [T][n_ff] silu(gate) * up
  std::vector<float> ffn_out_;     // [T][n_embd]
  std::vector<float> result_norm_; // [rows][n_embd] final norm of the logit rows
  std::vector<float> logits_;      // [rows][n_vocab]
  std::vector<float> attn_scratch_;  // [threads][kernels::attention_scratch_floats(kv, run * group)]
};

}  // namespace ridge
