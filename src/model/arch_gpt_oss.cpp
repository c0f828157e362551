// gpt-oss: OpenAI's open-weight mixtures of experts (gpt-oss-20b, gpt-oss-120b), as
// llama.cpp's converter writes them (general.architecture "gpt-oss"). Sliding-window and
// global layers alternate (attention.sliding_window; layer il windowed when il is even,
// llama.cpp's pattern 2), every layer with the same YaRN RoPE (NeoX pairs) and a learned
// sink logit per query head in its softmax (attn_sinks); biases on q, k, v and the
// output. The MoE's pre-norm is the tensor named post_attention_norm; the router has a
// bias, picks the top expert_used_count experts by logit and weighs them by a softmax
// over those; every expert matrix has a bias and the activation is the clamped SwiGLU
// (Ffn::SwiGluOai). The output matrix is its own (not tied). Scores are scaled by
// 1/sqrt(head_dim) times YaRN's magnitude scale squared (cos and sin carry it in
// llama.cpp's rope, so q.k takes it twice).
#include <cmath>

#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void read_hparams(const gguf::File& f, HParams& h) {
  const std::string a = h.arch + ".";
  const auto w = f.get_uint(a + "attention.sliding_window");
  if (!w || *w == 0) fail("{}: {}attention.sliding_window is missing: gpt-oss's window layers need it", f.name(), a);
  if (*w > (1u << 24)) fail("{}: {}attention.sliding_window {} is out of range (1..2^24)", f.name(), a, *w);
  h.n_swa = int32_t(*w);
  h.swa_period = 2;
  if (auto period = f.get_uint(a + "attention.sliding_window_pattern")) {
    if (*period == 0 || *period > 4096)
      fail("{}: {}attention.sliding_window_pattern {} is out of range (1..4096)", f.name(), a, *period);
    h.swa_period = int32_t(*period);
  }
  // The window layers' rope is the global one's (YaRN included) unless the file says.
  h.rope_freq_base_swa = float(f.get_float(a + "rope.freq_base_swa").value_or(h.rope_freq_base));
  if (!(h.rope_freq_base_swa > 0)) fail("{}: {}rope.freq_base_swa must be positive", f.name(), a);
  // YaRN's factors are computed once, from rope.freq_base (llama.cpp computes them per
  // layer's base): a window base of its own would need a second table.
  if (h.yarn_factor > 0 && h.rope_freq_base_swa != h.rope_freq_base)
    fail("{}: {}rope.freq_base_swa {} differs from rope.freq_base {} under YaRN: not supported", f.name(), a,
         h.rope_freq_base_swa, h.rope_freq_base);
  if (!h.moe()) fail("{}: {}expert_count is missing: gpt-oss is a mixture of experts", f.name(), a);
  // YaRN's magnitude (ggml_rope_yarn): 1 + 0.1 ln(factor) on cos and sin.
  const float mscale = h.yarn_factor > 0 ? 1.f + 0.1f * std::log(h.yarn_factor) : 1.f;
  h.kq_scale = mscale * mscale / std::sqrt(float(h.head_dim_k));
}

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  const int64_t E = h.n_embd, NE = h.n_expert, Fe = h.n_ff_exp;
  if (!ld.find("output.weight")) fail("{}: required tensor 'output.weight' is missing (gpt-oss's output is not tied)", ld.file().name());
  load_embeddings(ld, h, w);
  if (h.yarn_factor > 0) w.rope_freqs = yarn_rope_factors(h.rope_dim, h.rope_freq_base, h.yarn_factor, h.yarn_orig_ctx);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.attn_norm = ld.vec(p + "attn_norm.weight", E);
    L.wq = ld.matrix(p + "attn_q.weight", E, h.n_q());
    L.wk = ld.matrix(p + "attn_k.weight", E, h.n_kv_k());
    L.wv = ld.matrix(p + "attn_v.weight", E, h.n_kv_v());
    L.bq = ld.vec(p + "attn_q.bias", h.n_q());
    L.bk = ld.vec(p + "attn_k.bias", h.n_kv_k());
    L.bv = ld.vec(p + "attn_v.bias", h.n_kv_v());
    L.wo = ld.matrix(p + "attn_output.weight", h.n_attn_out(), E);
    L.bo = ld.vec(p + "attn_output.bias", E);
    L.attn_sinks = ld.vec(p + "attn_sinks.weight", h.n_head);
    L.ffn_norm = ld.vec(p + "post_attention_norm.weight", E);
    load_experts(ld, h, L, p);
    L.router_b = ld.vec(p + "ffn_gate_inp.bias", NE);
    L.gate_exps_b = ld.table(p + "ffn_gate_exps.bias", Fe, NE);
    L.up_exps_b = ld.table(p + "ffn_up_exps.bias", Fe, NE);
    L.down_exps_b = ld.table(p + "ffn_down_exps.bias", E, NE);
  });
}

}  // namespace

const ArchSpec& arch_gpt_oss() {
  static const ArchSpec s{.name = "gpt-oss",
                          .rope_neox = true,
                          .qkv_bias = true,
                          .qk_norm = false,
                          .load = load,
                          .moe = true,
                          .read_hparams = read_hparams,
                          .yarn = true,
                          .ffn = Ffn::SwiGluOai};
  return s;
}

}  // namespace ridge
