// qwen3moe: Qwen 3 mixture of experts (Qwen3-30B-A3B, Qwen3-235B-A22B). Attention as
// qwen3's (per-head q/k RMSNorm, NeoX RoPE); the FFN is a mixture of experts: a softmax
// router over all experts, the top expert_used_count of them, their weights renormalized
// to sum to one, each a SwiGLU of expert_feed_forward_length; no shared expert.
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  load_llama_family(ld, h, w, /*dense_ffn=*/false);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.q_norm = ld.vec(p + "attn_q_norm.weight", h.head_dim_k);
    L.k_norm = ld.vec(p + "attn_k_norm.weight", h.head_dim_k);
  });
}

}  // namespace

const ArchSpec& arch_qwen3moe() {
  static const ArchSpec s{"qwen3moe", /*rope_neox=*/true, /*qkv_bias=*/false, /*qk_norm=*/true, load, /*moe=*/true};
  return s;
}

}  // namespace ridge
