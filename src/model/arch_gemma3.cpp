// gemma3: Gemma 3 (text), as llama.cpp's converter writes it. Five sliding-window layers
// to one global (attention.sliding_window; layer il global when il % 6 == 5), the window
// layers with RoPE of base rope.freq_base_swa (10000 where absent) and no scaling, the
// global ones with rope.freq_base and rope.scaling (linear: Gemma 3 4B and up); q/k
// RMSNorm per head before NeoX RoPE; a sandwich of RMSNorms around attention and the
// FFN (post_attention_norm, post_ffw_norm before each residual add); a GeGLU FFN; the
// token embeddings scaled by sqrt(n_embd); the output tied to them unless output.weight
// is there. The converter stores every norm weight as 1 + w, so the norms are plain
// RMSNorms here. Scores are scaled by 1/sqrt(head_dim) (the 27B's 62 layers: by
// 1/sqrt(n_embd / n_head)), as llama.cpp sets it.
#include <cmath>

#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"

namespace ridge {
namespace {

void read_hparams(const gguf::File& f, HParams& h) {
  const std::string a = h.arch + ".";
  if (auto w = f.get_uint(a + "attention.sliding_window"); w && *w > 0) {
    if (*w > (1u << 24)) fail("{}: {}attention.sliding_window {} is out of range (1..2^24)", f.name(), a, *w);
    h.n_swa = int32_t(*w);
    h.swa_period = 6;
    if (const gguf::Value* v = f.find(a + "attention.sliding_window_pattern"); v && v->type == gguf::ValueType::ARRAY)
      fail("{}: {}attention.sliding_window_pattern as a per-layer array is not supported (a period is)", f.name(), a);
    if (auto period = f.get_uint(a + "attention.sliding_window_pattern")) {
      if (*period == 0 || *period > 4096)
        fail("{}: {}attention.sliding_window_pattern {} is out of range (1..4096)", f.name(), a, *period);
      h.swa_period = int32_t(*period);
    }
    h.rope_freq_base_swa = float(f.get_float(a + "rope.freq_base_swa").value_or(10000.0));
    if (!(h.rope_freq_base_swa > 0)) fail("{}: {}rope.freq_base_swa must be positive", f.name(), a);
  }
  if (auto cap = f.get_float(a + "final_logit_softcapping"); cap && *cap != 0) {
    if (!(*cap > 0 && std::isfinite(*cap))) fail("{}: {}final_logit_softcapping {} must be positive", f.name(), a, *cap);
    h.final_softcap = float(*cap);
  }
  h.kq_scale = h.n_layer == 62 ? 1.f / std::sqrt(float(h.n_embd / h.n_head)) : 1.f / std::sqrt(float(h.head_dim_k));
}

void load(TensorLoader& ld, const HParams& h, Weights& w) {
  load_llama_family(ld, h, w);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.q_norm = ld.vec(p + "attn_q_norm.weight", h.head_dim_k);
    L.k_norm = ld.vec(p + "attn_k_norm.weight", h.head_dim_k);
    L.post_attn_norm = ld.vec(p + "post_attention_norm.weight", h.n_embd);
    L.post_ffn_norm = ld.vec(p + "post_ffw_norm.weight", h.n_embd);
  });
}

}  // namespace

const ArchSpec& arch_gemma3() {
  static const ArchSpec s{.name = "gemma3",
                          .rope_neox = true,
                          .qkv_bias = false,
                          .qk_norm = true,
                          .load = load,
                          .read_hparams = read_hparams,
                          .ffn = Ffn::GeGlu,
                          .post_norms = true,
                          .embd_scale_sqrt = true};
  return s;
}

}  // namespace ridge
