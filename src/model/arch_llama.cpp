// llama: Llama 2/3, TinyLlama, Mistral (no sliding window). RoPE on adjacent pairs, no
// biases; Llama 3.1/3.2 rope scaling arrives as the optional rope_freqs.weight tensor.
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  load_llama_family(ld, h, w);
  if (ld.find("rope_freqs.weight")) w.rope_freqs = ld.vec("rope_freqs.weight", h.rope_dim / 2);
}

}  // namespace

const ArchSpec& arch_llama() {
  static const ArchSpec s{"llama", /*rope_neox=*/false, /*qkv_bias=*/false, /*qk_norm=*/false, load};
  return s;
}

}  // namespace ridge
