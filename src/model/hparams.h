// Hyperparameters of a decoder-only transformer, read from GGUF's `{arch}.*` keys.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "perf/op_cost.h"

namespace ridge {

struct HParams {
  std::string arch;          // general.architecture: llama, qwen2, qwen3, qwen3moe, deepseek2, phi3, gpt2, gemma3
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_ff = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim_k = 0;    // {arch}.attention.key_length, else n_embd / n_head
  int32_t head_dim_v = 0;    // {arch}.attention.value_length, else head_dim_k
  int32_t rope_dim = 0;      // {arch}.rope.dimension_count, else head_dim_k; 0 without RoPE (gpt2)
  float rope_freq_base = 10000.f;
  float rope_freq_scale = 1.f;  // 1 / rope.scaling.factor for linear scaling
  // The norms' epsilon: attention.layer_norm_rms_epsilon for RMSNorm, or
  // attention.layer_norm_epsilon for an architecture of LayerNorms (ArchSpec::layer_norm).
  float norm_eps = 1e-5f;
  // Mixture of experts ({arch}.expert_count, expert_used_count, expert_feed_forward_length):
  // 0 experts for a dense model.
  int32_t n_expert = 0, n_expert_used = 0;
  int32_t n_ff_exp = 0;      // an expert's hidden width (else feed_forward_length)
  bool moe() const { return n_expert > 0; }
  // How the router chooses (llama.cpp's build_moe_ffn): probabilities by softmax or
  // sigmoid; the top k of probability plus the exp_probs_b bias where the layer has one,
  // among the experts of the n_group_used best of n_expert_groups groups where grouped;
  // the chosen probabilities renormalized to sum to one (expert_weights_norm), then scaled.
  bool gating_sigmoid = false;
  bool expert_weights_norm = true;   // qwen3moe and Mixtral renormalize; DeepSeek says
  float expert_weights_scale = 1.f;
  int32_t n_expert_groups = 0, n_group_used = 0;  // 0: one group
  int32_t n_expert_shared = 0;       // DeepSeek's always-on experts, n_ff_exp wide each
  int32_t n_layer_dense_lead = 0;    // DeepSeek: the first layers' FFN is dense (n_ff)
  bool moe_layer(int32_t il) const { return moe() && il >= n_layer_dense_lead; }

  // Multi-head latent attention (deepseek2). Its cache holds one KV "head" per token: K is
  // [rope key | latent] (head_dim_k = rope_dim + n_lora_kv) and V the latent (head_dim_v
  // = n_lora_kv), as llama.cpp's converter writes key_length and value_length; the heads'
  // own sizes after decompression are the _mla ones.
  int32_t n_lora_q = 0;              // q through attn_q_a/q_b of this rank; 0: attn_q
  int32_t n_lora_kv = 0;             // the latent's width; 0: no MLA
  int32_t head_dim_qk_mla = 0;       // a head's key: the no-RoPE part, then rope_dim
  int32_t head_dim_v_mla = 0;        // a head's value
  bool mla() const { return n_lora_kv > 0; }
  int32_t qk_nope() const { return head_dim_qk_mla - rope_dim; }
  // Attention's score scale: 1/sqrt(head_dim_k) unless the architecture sets it.
  float kq_scale = 0.f;
  float attn_scale() const;
  // YaRN context extension (rope.scaling.type yarn), for the architectures that take it:
  // factor (0: none), the original context, and DeepSeek's attention-scale multiplier.
  float yarn_factor = 0.f;
  int32_t yarn_orig_ctx = 0;
  float yarn_log_mul = 0.f;
  // LongRoPE (phi3): the context its short factors were trained for
  // (rope.scaling.original_context_length; 0: none) and the factor q's and k's rotated
  // dimensions are scaled by (rope.scaling.attn_factor: RopeParams::attn_factor).
  int32_t longrope_orig_ctx = 0;
  float rope_attn_factor = 1.f;
  // Sliding windows (gemma3): a window layer attends to a query's last n_swa positions
  // (attention.sliding_window; 0: none) with RoPE of base rope_freq_base_swa and no
  // scaling; with a period p, every p-th layer (il % p == p - 1) is global, with
  // rope_freq_base and rope_freq_scale (p = 1: all, as llama.cpp's pattern 1); p = 0:
  // every layer is a window layer.
  int32_t n_swa = 0, swa_period = 0;
  float rope_freq_base_swa = 10000.f;
  bool swa_layer(int32_t il) const { return n_swa > 0 && (swa_period == 0 || il % swa_period < swa_period - 1); }
  // Gemma: the token embeddings are scaled by sqrt(n_embd) (0: not scaled); the logits
  // capped to c tanh(l / c) (final_logit_softcapping; 0: none).
  float embd_scale = 0.f;
  float final_softcap = 0.f;

  int32_t n_q() const { return n_head * head_dim_k; }     // width of q
  int32_t n_kv_k() const { return n_head_kv * head_dim_k; }
  int32_t n_kv_v() const { return n_head_kv * head_dim_v; }
  int32_t n_attn_out() const { return n_head * head_dim_v; }
  perf::AttnShape attn_shape() const { return {n_head, n_head_kv, head_dim_k, head_dim_v, rope_dim, mla()}; }
};

// Throws ridge::Error naming the missing or invalid key.
HParams read_hparams(const gguf::File& f);

// Llama 3.1's rope scaling as llama.cpp's converter writes it into rope_freqs.weight: per
// frequency pair of a head_dim head, 1 for wavelengths under orig_ctx / high, `factor`
// over orig_ctx / low, a smooth blend between; in f32 arithmetic, as the converter's.
// YaRN as llama.cpp's ggml_rope_yarn computes it, folded into per-pair frequency factors
// (they divide each pair's frequency): pair i's angle blends the interpolated (pos x
// freq / factor) and extrapolated (pos x freq) ones by a ramp over the pairs between the
// beta_fast and beta_slow correction dimensions. Its magnitude scale is not here: the
// architectures that use it fold theirs into the attention scale.
std::vector<float> yarn_rope_factors(int32_t rope_dim, float base, float factor, int32_t orig_ctx,
                                     float beta_fast = 32.f, float beta_slow = 1.f);

std::vector<float> llama3_rope_factors(int32_t head_dim, float base, float factor, float low, float high, float orig_ctx);

}  // namespace ridge
