// llama: Llama 2/3, TinyLlama, Mistral (no sliding window), and Mixtral: a llama whose
// metadata has llama.expert_count is a mixture of experts as llama.cpp's converter lays
// Mixtral out (ffn_gate_inp, ffn_gate/up/down_exps of feed_forward_length; routing as
// qwen3moe's: softmax, top-k, renormalized). RoPE on adjacent pairs, no biases; Llama
// 3.1/3.2 rope scaling arrives as the optional rope_freqs.weight tensor.
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  load_llama_family(ld, h, w, /*dense_ffn=*/h.n_expert == 0);
  if (ld.find("rope_freqs.weight")) w.rope_freqs = ld.vec("rope_freqs.weight", h.rope_dim / 2);
}

}  // namespace

const ArchSpec& arch_llama() {
  static const ArchSpec s{"llama", /*rope_neox=*/false, /*qkv_bias=*/false, /*qk_norm=*/false, load};
  return s;
}

}  // namespace ridge
