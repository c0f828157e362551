// Hyperparameters of a decoder-only transformer, read from GGUF's `{arch}.*` keys.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "perf/op_cost.h"

namespace ridge {

struct HParams {
  std::string arch;          // general.architecture: llama, qwen2, qwen3
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_ff = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim_k = 0;    // {arch}.attention.key_length, else n_embd / n_head
  int32_t head_dim_v = 0;    // {arch}.attention.value_length, else head_dim_k
  int32_t rope_dim = 0;      // {arch}.rope.dimension_count, else head_dim_k
  float rope_freq_base = 10000.f;
  float rope_freq_scale = 1.f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;
  // Mixture of experts ({arch}.expert_count, expert_used_count, expert_feed_forward_length):
  // 0 experts for a dense model.
  int32_t n_expert = 0, n_expert_used = 0;
  int32_t n_ff_exp = 0;      // an expert's hidden width (else feed_forward_length)
  bool moe() const { return n_expert > 0; }

  int32_t n_q() const { return n_head * head_dim_k; }     // width of q
  int32_t n_kv_k() const { return n_head_kv * head_dim_k; }
  int32_t n_kv_v() const { return n_head_kv * head_dim_v; }
  int32_t n_attn_out() const { return n_head * head_dim_v; }
  perf::AttnShape attn_shape() const { return {n_head, n_head_kv, head_dim_k, head_dim_v, rope_dim}; }
};

// Throws ridge::Error naming the missing or invalid key.
HParams read_hparams(const gguf::File& f);

// Llama 3.1's rope scaling as llama.cpp's converter writes it into rope_freqs.weight: per
// frequency pair of a head_dim head, 1 for wavelengths under orig_ctx / high, `factor`
// over orig_ctx / low, a smooth blend between; in f32 arithmetic, as the converter's.
std::vector<float> llama3_rope_factors(int32_t head_dim, float base, float factor, float low, float high, float orig_ctx);

}  // namespace ridge
