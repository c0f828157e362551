// deepseek2: DeepSeek V2, V2-Lite, V3 (and the models laid out as they are), as llama.cpp's
// converter writes them. Attention is multi-head latent attention: each token's keys and
// values come from one compressed latent (attn_kv_a_mqa, then attn_kv_a_norm) and a
// single RoPE key shared by all heads; the query comes straight from attn_q (V2-Lite) or
// through a low-rank pair (attn_q_a, attn_q_a_norm, attn_q_b). The converter splits the
// decompression into attn_k_b and attn_v_b per head and writes the cache shape as one KV
// head of key_length = kv_lora_rank + rope and value_length = kv_lora_rank (the absorbed
// form's), the heads' own sizes as key_length_mla and value_length_mla. The first
// leading_dense_block_count layers have a dense FFN; the rest a mixture of experts with
// expert_shared_count always-on experts, softmax (V2) or sigmoid with a selection bias
// and grouped choice (V3) routing. RoPE on adjacent pairs, YaRN in the V2/V3 checkpoints.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

uint32_t get_u32(const gguf::File& f, const std::string& key, uint32_t dflt, uint32_t max) {
  const auto v = f.get_uint(key);
  if (v && *v > max) fail("{}: metadata '{}' = {} is out of range (0..{})", f.name(), key, *v, max);
  return v ? uint32_t(*v) : dflt;
}

void read_hparams(const gguf::File& f, HParams& h) {
  const std::string a = h.arch + ".";
  auto need = [&](const std::string& k, uint32_t max) {
    if (!f.get_uint(a + k)) fail("{}: required metadata '{}{}' is missing", f.name(), a, k);
    return int32_t(get_u32(f, a + k, 0, max));
  };
  constexpr uint32_t kMaxDim = 1u << 16;
  h.n_lora_q = int32_t(get_u32(f, a + "attention.q_lora_rank", 0, kMaxDim));
  h.n_lora_kv = need("attention.kv_lora_rank", kMaxDim);
  if (h.n_lora_kv == 0) fail("{}: {}attention.kv_lora_rank is 0: deepseek2 needs a latent", f.name(), a);
  if (!f.get_uint(a + "attention.key_length_mla"))
    fail("{}: {}attention.key_length_mla is missing: a deepseek2 file from a converter older than llama.cpp's MLA split "
         "(attn_kv_b, not attn_k_b/attn_v_b); convert it again",
         f.name(), a);
  h.head_dim_qk_mla = need("attention.key_length_mla", kMaxDim);
  h.head_dim_v_mla = need("attention.value_length_mla", kMaxDim);
  // The cache's shape as the converter writes it, checked against the latent's.
  if (h.n_head_kv != 1 || h.head_dim_k != h.rope_dim + h.n_lora_kv || h.head_dim_v != h.n_lora_kv)
    fail("{}: deepseek2's cache is one KV head of key_length = kv_lora_rank + rope.dimension_count ({} + {}) and "
         "value_length = kv_lora_rank; the file says {} head(s) of {} and {}",
         f.name(), h.n_lora_kv, h.rope_dim, h.n_head_kv, h.head_dim_k, h.head_dim_v);
  if (h.head_dim_qk_mla <= h.rope_dim)
    fail("{}: {}attention.key_length_mla {} leaves no dimensions without RoPE (rope.dimension_count {})", f.name(), a,
         h.head_dim_qk_mla, h.rope_dim);
  if (h.head_dim_v_mla < 1) fail("{}: {}attention.value_length_mla must be at least 1", f.name(), a);
  if (int64_t(h.n_head) * std::max({h.head_dim_qk_mla, h.n_lora_kv + h.rope_dim, h.head_dim_v_mla}) > (int64_t(1) << 24))
    fail("{}: attention head_count x key_length_mla (or value_length_mla) is out of range", f.name());

  if (!h.moe()) fail("{}: {}expert_count is missing: deepseek2 is a mixture of experts", f.name(), a);
  h.n_layer_dense_lead = int32_t(get_u32(f, a + "leading_dense_block_count", 0, uint32_t(h.n_layer)));
  h.n_expert_shared = int32_t(get_u32(f, a + "expert_shared_count", 0, 64));
  h.expert_weights_scale = float(f.get_float(a + "expert_weights_scale").value_or(1.0));
  if (!(std::isfinite(h.expert_weights_scale) && h.expert_weights_scale >= 0))
    fail("{}: {}expert_weights_scale must be finite and not negative", f.name(), a);
  h.expert_weights_norm = f.get_bool(a + "expert_weights_norm").value_or(false);
  // llama_expert_gating_func_type: absent or 0 (files before the key) and 1 are softmax.
  const uint32_t gating = get_u32(f, a + "expert_gating_func", 1, 1u << 16);
  if (gating > 2) fail("{}: {}expert_gating_func {} is not supported (1 softmax, 2 sigmoid)", f.name(), a, gating);
  h.gating_sigmoid = gating == 2;
  h.n_expert_groups = int32_t(get_u32(f, a + "expert_group_count", 0, uint32_t(h.n_expert)));
  h.n_group_used = int32_t(get_u32(f, a + "expert_group_used_count", 0, uint32_t(h.n_expert)));
  if (h.n_expert_groups > 1) {
    if (h.n_expert % h.n_expert_groups != 0 || h.n_group_used < 1 || h.n_group_used >= h.n_expert_groups ||
        int64_t(h.n_group_used) * (h.n_expert / h.n_expert_groups) < h.n_expert_used)
      fail("{}: {}expert_group_count {} and expert_group_used_count {} do not fit {} experts with {} used", f.name(), a,
           h.n_expert_groups, h.n_group_used, h.n_expert, h.n_expert_used);
  }

  // YaRN (llama.cpp's deepseek2 graph): the rotation itself keeps unit magnitude, and the
  // scores take mscale^2 with mscale = 1 + yarn_log_multiplier x ln(factor) (the file's
  // multiplier already carries the converter's 0.1).
  const float mscale = h.yarn_factor > 0 ? 1.f + h.yarn_log_mul * std::log(h.yarn_factor) : 1.f;
  if (!(mscale > 0) || !std::isfinite(mscale))
    fail("{}: {}rope.scaling.yarn_log_multiplier {} makes the attention scale {} (not positive)", f.name(), a,
         h.yarn_log_mul, mscale);
  h.kq_scale = mscale * mscale / std::sqrt(float(h.head_dim_qk_mla));
}

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  const int64_t E = h.n_embd, nh = h.n_head, dqk = h.head_dim_qk_mla, dv = h.head_dim_v_mla;
  const int64_t C = h.n_lora_kv, R = h.rope_dim, Fe = h.n_ff_exp;
  load_embeddings(ld, h, w);
  if (h.yarn_factor > 0) w.rope_freqs = yarn_rope_factors(h.rope_dim, h.rope_freq_base, h.yarn_factor, h.yarn_orig_ctx);
  int32_t il = 0;
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.attn_norm = ld.vec(p + "attn_norm.weight", E);
    if (h.n_lora_q > 0) {
      L.wq_a = ld.matrix(p + "attn_q_a.weight", E, h.n_lora_q);
      L.q_a_norm = ld.vec(p + "attn_q_a_norm.weight", h.n_lora_q);
      L.wq_b = ld.matrix(p + "attn_q_b.weight", h.n_lora_q, nh * dqk);
    } else {
      L.wq = ld.matrix(p + "attn_q.weight", E, nh * dqk);
    }
    const auto kv_a = ld.row_parts(p + "attn_kv_a_mqa.weight", E, {C, R});
    L.wkv_c = kv_a[0], L.wk_pe = kv_a[1];
    L.kv_a_norm = ld.vec(p + "attn_kv_a_norm.weight", C);
    if (!ld.find(p + "attn_k_b.weight") && ld.find(p + "attn_kv_b.weight"))
      fail("{}: '{}attn_kv_b.weight' is the unsplit decompression of converters before llama.cpp's MLA split; "
           "convert the model again (attn_k_b, attn_v_b)",
           ld.file().name(), p);
    L.wk_b = ld.experts(p + "attn_k_b.weight", dqk - R, C, nh);
    L.wv_b = ld.experts(p + "attn_v_b.weight", C, dv, nh);
    L.wo = ld.matrix(p + "attn_output.weight", nh * dv, E);
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", E);
    if (!h.moe_layer(il++)) {
      load_dense_ffn(ld, h, L, p);
      return;
    }
    load_experts(ld, h, L, p);
    if (ld.find(p + "exp_probs_b.bias")) L.exp_probs_b = ld.vec(p + "exp_probs_b.bias", h.n_expert);
    if (h.n_expert_shared > 0) {
      const int64_t Fs = Fe * h.n_expert_shared;
      L.gate_shexp = ld.matrix(p + "ffn_gate_shexp.weight", E, Fs);
      L.up_shexp = ld.matrix(p + "ffn_up_shexp.weight", E, Fs);
      L.down_shexp = ld.matrix(p + "ffn_down_shexp.weight", Fs, E);
    }
  });
}

}  // namespace

const ArchSpec& arch_deepseek2() {
  static const ArchSpec s{"deepseek2", /*rope_neox=*/false, /*qkv_bias=*/false, /*qk_norm=*/false, load,
                          /*moe=*/true, read_hparams, /*yarn=*/true};
  return s;
}

}  // namespace ridge
