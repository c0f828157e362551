// llama: Llama 2/3, TinyLlama, Mistral (no sliding window). RoPE on adjacent pairs, no
// biases; Llama 3.1/3.2 rope scaling arrives as the rope_freqs.weight tensor.
#include "model/model.h"

namespace ridge {
const ArchSpec& arch_llama() {
  static const ArchSpec s{"llama", /*rope_neox=*/false, /*qkv_bias=*/false, /*qk_norm=*/false};
  return s;
}
}  // namespace ridge
