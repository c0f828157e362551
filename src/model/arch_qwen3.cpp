// qwen3: Qwen 3 dense. Per-head RMSNorm of q and k (attn_q_norm / attn_k_norm, shared
// across heads) before NeoX-style RoPE; no biases; head_dim from attention.key_length
// (Qwen3-0.6B: 128, not n_embd / n_head).
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  load_llama_family(ld, h, w);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.q_norm = ld.vec(p + "attn_q_norm.weight", h.head_dim_k);
    L.k_norm = ld.vec(p + "attn_k_norm.weight", h.head_dim_k);
  });
}

}  // namespace

const ArchSpec& arch_qwen3() {
  static const ArchSpec s{"qwen3", /*rope_neox=*/true, /*qkv_bias=*/false, /*qk_norm=*/true, load};
  return s;
}

}  // namespace ridge
