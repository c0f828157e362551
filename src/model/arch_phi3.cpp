// phi3: Phi-3 and Phi-3.5 mini / medium, Phi-4 and Phi-4-mini. The llama family's forward
// (RMSNorm, SwiGLU, no biases) with NeoX-style RoPE and its projections fused in the
// file, as llama.cpp's converter writes them: attn_qkv holds q's rows, then k's, then v's
// (separate attn_q/k/v are read too, as llama.cpp does), and ffn_up holds the gate's rows
// then up's. The fused tensors become views of their row ranges, which the CPU backend
// packs as it packs separate matrices.
#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  // LongRoPE (the 128k-context models): per-dimension factors, long or short by context,
  // and an attention factor. Not read yet: refused rather than run with plain RoPE.
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (ld.find(name)) fail("{}: phi3 LongRoPE scaling ('{}') is not supported yet", ld.file().name(), name);
  if (h.moe()) fail("{}: {}.expert_count is {}, but phi3 has no mixture of experts", ld.file().name(), h.arch, h.n_expert);
  load_embeddings(ld, h, w);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.attn_norm = ld.vec(p + "attn_norm.weight", h.n_embd);
    if (ld.find(p + "attn_qkv.weight") || !ld.find(p + "attn_q.weight")) {  // a missing one is named
      const auto qkv = ld.row_parts(p + "attn_qkv.weight", h.n_embd, {h.n_q(), h.n_kv_k(), h.n_kv_v()});
      L.wq = qkv[0], L.wk = qkv[1], L.wv = qkv[2];
    } else {
      L.wq = ld.matrix(p + "attn_q.weight", h.n_embd, h.n_q());
      L.wk = ld.matrix(p + "attn_k.weight", h.n_embd, h.n_kv_k());
      L.wv = ld.matrix(p + "attn_v.weight", h.n_embd, h.n_kv_v());
    }
    L.wo = ld.matrix(p + "attn_output.weight", h.n_attn_out(), h.n_embd);
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", h.n_embd);
    const auto gate_up = ld.row_parts(p + "ffn_up.weight", h.n_embd, {h.n_ff, h.n_ff});
    L.w_gate = gate_up[0], L.w_up = gate_up[1];
    L.w_down = ld.matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
  });
}

}  // namespace

const ArchSpec& arch_phi3() {
  static const ArchSpec s{.name = "phi3",
                          .rope_neox = true,
                          .qkv_bias = false,
                          .qk_norm = false,
                          .load = load,
                          .fused_qkv = true,
                          .fused_gate_up = true};
  return s;
}

}  // namespace ridge
