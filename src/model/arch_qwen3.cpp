// qwen3: Qwen 3 dense. Per-head RMSNorm of q and k (attn_q_norm / attn_k_norm, shared
// across heads) before NeoX-style RoPE; no biases; head_dim from attention.key_length
// (Qwen3-0.6B: 128, not n_embd / n_head).
#include "model/model.h"

namespace ridge {
const ArchSpec& arch_qwen3() {
  static const ArchSpec s{"qwen3", /*rope_neox=*/true, /*qkv_bias=*/false, /*qk_norm=*/true};
  return s;
}
}  // namespace ridge
