// gpt2: GPT-2 (124M to 1.5B) as llama.cpp's converter writes it. Learned absolute
// positions (position_embd, [n_ctx_train][n_embd]) added to the token embeddings, no
// RoPE; every norm a LayerNorm with weight and bias; q, k and v one attn_qkv matrix with
// one bias (cut here into views and vectors); biases on attn_output, ffn_up and
// ffn_down; an ungated GELU FFN. The converter writes output.weight as a copy of the
// token embeddings; a file without it is read tied, as llama.cpp does.
#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void read_hparams(const gguf::File& f, HParams& h) {
  const std::string key = h.arch + ".attention.layer_norm_epsilon";
  const auto eps = f.get_float(key);
  if (!eps) fail("{}: required metadata '{}' is missing (gpt2's LayerNorms need it)", f.name(), key);
  if (!(*eps >= 0 && *eps < 1)) fail("{}: metadata '{}' = {} is out of range [0, 1)", f.name(), key, *eps);
  h.norm_eps = float(*eps);
  h.rope_dim = 0;  // positions are learned, not rotated
}

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  if (h.moe()) fail("{}: {}.expert_count is {}, but gpt2 has no mixture of experts", ld.file().name(), h.arch, h.n_expert);
  load_embeddings(ld, h, w);
  w.output_norm_b = ld.vec("output_norm.bias", h.n_embd);
  w.pos_embd = ld.table("position_embd.weight", h.n_embd, h.n_ctx_train);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.attn_norm = ld.vec(p + "attn_norm.weight", h.n_embd);
    L.attn_norm_b = ld.vec(p + "attn_norm.bias", h.n_embd);
    const auto qkv = ld.row_parts(p + "attn_qkv.weight", h.n_embd, {h.n_q(), h.n_kv_k(), h.n_kv_v()});
    L.wq = qkv[0], L.wk = qkv[1], L.wv = qkv[2];
    const std::vector<float> b = ld.vec(p + "attn_qkv.bias", int64_t(h.n_q()) + h.n_kv_k() + h.n_kv_v());
    L.bq.assign(b.begin(), b.begin() + h.n_q());
    L.bk.assign(b.begin() + h.n_q(), b.begin() + h.n_q() + h.n_kv_k());
    L.bv.assign(b.begin() + h.n_q() + h.n_kv_k(), b.end());
    L.wo = ld.matrix(p + "attn_output.weight", h.n_attn_out(), h.n_embd);
    L.bo = ld.vec(p + "attn_output.bias", h.n_embd);
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", h.n_embd);
    L.ffn_norm_b = ld.vec(p + "ffn_norm.bias", h.n_embd);
    L.w_up = ld.matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
    L.b_up = ld.vec(p + "ffn_up.bias", h.n_ff);
    L.w_down = ld.matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
    L.b_down = ld.vec(p + "ffn_down.bias", h.n_embd);
  });
}

}  // namespace

const ArchSpec& arch_gpt2() {
  static const ArchSpec s{.name = "gpt2",
                          .rope_neox = false,
                          .qkv_bias = true,
                          .qk_norm = false,
                          .load = load,
                          .read_hparams = read_hparams,
                          .fused_qkv = true,
                          .layer_norm = true,
                          .learned_pos = true,
                          .proj_bias = true,
                          .ffn = Ffn::Gelu};
  return s;
}

}  // namespace ridge
