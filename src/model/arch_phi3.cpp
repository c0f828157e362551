// phi3: Phi-3 and Phi-3.5 mini / medium, Phi-4 and Phi-4-mini. The llama family's forward
// (RMSNorm, SwiGLU, no biases) with NeoX-style RoPE and its projections fused in the
// file, as llama.cpp's converter writes them: attn_qkv holds q's rows, then k's, then v's
// (separate attn_q/k/v are read too, as llama.cpp does), and ffn_up holds the gate's rows
// then up's. The fused tensors become views of their row ranges, which the CPU backend
// packs as it packs separate matrices.
//
// LongRoPE (the 128k-context models): rope_factors_long / rope_factors_short divide each
// rotation pair's frequency, long where the context runs past the one the short factors
// were trained for (rope.scaling.original_context_length), as llama.cpp chooses them by
// its context per sequence. ridge's context is the file's context_length, so a file whose
// context_length is past the original always runs the long factors, at every position.
// rope.scaling.attn_factor scales the rotated dimensions of q and k alike: llama.cpp
// multiplies cos and sin by it, and so does RopeParams::attn_factor (exact with a partial
// rotation too, as Phi-4-mini's 96 of 128).
#include <cmath>

#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void read_hparams(const gguf::File& f, HParams& h) {
  const std::string a = h.arch + ".";
  if (auto v = f.get_uint(a + "rope.scaling.original_context_length")) {
    if (*v == 0 || *v > (1u << 24))
      fail("{}: {}rope.scaling.original_context_length {} is out of range (1..2^24)", f.name(), a, *v);
    h.longrope_orig_ctx = int32_t(*v);
  }
  if (auto af = f.get_float(a + "rope.scaling.attn_factor")) {
    if (!(*af > 0 && *af < 16)) fail("{}: {}rope.scaling.attn_factor {} is out of range (0, 16)", f.name(), a, *af);
    h.rope_attn_factor = float(*af);
  }
}

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  if (ld.find("rope_freqs.weight"))
    fail("{}: rope_freqs.weight is Llama 3's scaling; phi3 scales by rope_factors_long/short", ld.file().name());
  if (h.moe()) fail("{}: {}.expert_count is {}, but phi3 has no mixture of experts", ld.file().name(), h.arch, h.n_expert);
  const bool has_long = ld.find("rope_factors_long.weight"), has_short = ld.find("rope_factors_short.weight");
  if (has_long || has_short) {
    if (!(has_long && has_short))
      fail("{}: phi3 LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; '{}' is missing",
           ld.file().name(), has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
    if (h.longrope_orig_ctx == 0)
      fail("{}: phi3 LongRoPE factors without {}.rope.scaling.original_context_length", ld.file().name(), h.arch);
    auto f_long = ld.vec("rope_factors_long.weight", h.rope_dim / 2);
    auto f_short = ld.vec("rope_factors_short.weight", h.rope_dim / 2);
    w.rope_freqs = h.n_ctx_train > h.longrope_orig_ctx ? std::move(f_long) : std::move(f_short);
    for (float x : w.rope_freqs)
      if (!(x > 0) || !std::isfinite(x))
        fail("{}: a phi3 LongRoPE factor is {} (factors must be finite and positive)", ld.file().name(), x);
  }
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
                          .read_hparams = read_hparams,
                          .fused_qkv = true,
                          .fused_gate_up = true};
  return s;
}

}  // namespace ridge
