// qwen2: Qwen 2 / 2.5. Biases on q, k, v; NeoX-style RoPE (rotate halves).
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  load_llama_family(ld, h, w);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.bq = ld.vec(p + "attn_q.bias", h.n_q());
    L.bk = ld.vec(p + "attn_k.bias", h.n_kv_k());
    L.bv = ld.vec(p + "attn_v.bias", h.n_kv_v());
  });
}

}  // namespace

const ArchSpec& arch_qwen2() {
  static const ArchSpec s{"qwen2", /*rope_neox=*/true, /*qkv_bias=*/true, /*qk_norm=*/false, load};
  return s;
}

}  // namespace ridge
