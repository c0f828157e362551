// qwen2: Qwen 2 / 2.5. Biases on q, k, v; NeoX-style RoPE (rotate halves).
#include "model/model.h"

namespace ridge {
const ArchSpec& arch_qwen2() {
  static const ArchSpec s{"qwen2", /*rope_neox=*/true, /*qkv_bias=*/true, /*qk_norm=*/false};
  return s;
}
}  // namespace ridge
