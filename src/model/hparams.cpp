#include "model/hparams.h"

#include <algorithm>
#include <cmath>

#include <tuple>

#include "core/error.h"
#include "model/arch.h"

namespace ridge {
namespace {

int32_t as_i32(const gguf::File& f, const std::string& key, uint64_t v, uint64_t max = 1u << 24) {
  if (v == 0 || v > max) fail("{}: metadata '{}' = {} is out of range (1..{})", f.name(), key, v, max);
  return int32_t(v);
}

}  // namespace

HParams read_hparams(const gguf::File& f) {
  HParams h;
  h.arch = std::string(f.require_str("general.architecture"));
  const std::string a = h.arch + ".";
  auto req = [&](const char* k) { return as_i32(f, a + k, f.require_uint(a + k)); };
  auto opt = [&](const char* k, int32_t dflt) {
    auto v = f.get_uint(a + k);
    return v ? as_i32(f, a + k, *v) : dflt;
  };
  h.n_ctx_train = req("context_length");
  h.n_embd = req("embedding_length");
  h.n_layer = as_i32(f, a + "block_count", f.require_uint(a + "block_count"), 4096);
  h.n_ff = req("feed_forward_length");
  h.n_head = req("attention.head_count");
  h.n_head_kv = opt("attention.head_count_kv", h.n_head);
  if (h.n_head % h.n_head_kv != 0)
    fail("{}: attention.head_count {} is not a multiple of head_count_kv {}", f.name(), h.n_head, h.n_head_kv);
  if (!f.find(a + "attention.key_length") && h.n_embd % h.n_head != 0)
    fail("{}: embedding_length {} is not a multiple of head_count {}", f.name(), h.n_embd, h.n_head);
  h.head_dim_k = opt("attention.key_length", h.n_embd / h.n_head);
  h.head_dim_v = opt("attention.value_length", h.head_dim_k);
  // Widths derived from products must stay far from int32 overflow (a hostile file could
  // make them wrap and pass the tensor shape checks).
  for (const auto& [heads, dim, what] : {std::tuple{h.n_head, h.head_dim_k, "head_count x key_length"},
                                         std::tuple{h.n_head, h.head_dim_v, "head_count x value_length"},
                                         std::tuple{h.n_head_kv, h.head_dim_k, "head_count_kv x key_length"}})
    if (int64_t(heads) * dim > (int64_t(1) << 24))
      fail("{}: attention {} = {} x {} is out of range (at most 2^24)", f.name(), what, heads, dim);
  h.rope_dim = opt("rope.dimension_count", h.head_dim_k);
  if (h.rope_dim > h.head_dim_k || h.rope_dim % 2 != 0)
    fail("{}: rope.dimension_count {} must be even and at most the head size {}", f.name(), h.rope_dim, h.head_dim_k);
  h.rope_freq_base = float(f.get_float(a + "rope.freq_base").value_or(10000.0));
  if (!(h.rope_freq_base > 0)) fail("{}: {}rope.freq_base must be positive", f.name(), a);
  h.norm_eps = float(f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(h.norm_eps >= 0)) fail("{}: {}attention.layer_norm_rms_epsilon must not be negative", f.name(), a);

  if (auto ne = f.get_uint(a + "expert_count"); ne && *ne > 0) {
    // llama.cpp's bounds (LLAMA_MAX_EXPERTS); the routing is O(k x experts) per token.
    h.n_expert = as_i32(f, a + "expert_count", *ne, 512);
    h.n_expert_used = as_i32(f, a + "expert_used_count", f.require_uint(a + "expert_used_count"), 64);
    if (h.n_expert_used > h.n_expert)
      fail("{}: {}expert_used_count {} is above expert_count {}", f.name(), a, h.n_expert_used, h.n_expert);
    h.n_ff_exp = opt("expert_feed_forward_length", h.n_ff);
  }

  if (auto type = f.get_str(a + "rope.scaling.type")) {
    const double factor = f.get_float(a + "rope.scaling.factor").value_or(1.0);
    if (*type == "linear") {
      if (!(factor > 0)) fail("{}: {}rope.scaling.factor must be positive", f.name(), a);
      h.rope_freq_scale = float(1.0 / factor);
    } else if (*type == "yarn" && factor != 1.0) {
      if (const ArchSpec* arch = find_arch(h.arch); !(arch && arch->yarn))
        fail("{}: rope scaling type 'yarn' is not supported for {} (deepseek2 and gpt-oss only)", f.name(), h.arch);
      if (!(factor > 0 && factor <= 1024)) fail("{}: {}rope.scaling.factor {} is out of range (0, 1024]", f.name(), a, factor);
      h.yarn_factor = float(factor);
      h.yarn_orig_ctx = as_i32(f, a + "rope.scaling.original_context_length",
                               f.require_uint(a + "rope.scaling.original_context_length"));
      h.yarn_log_mul = float(f.get_float(a + "rope.scaling.yarn_log_multiplier").value_or(0.0));
      if (!std::isfinite(h.yarn_log_mul)) fail("{}: {}rope.scaling.yarn_log_multiplier is not finite", f.name(), a);
    } else if (*type != "none" && *type != "yarn") {
      fail("{}: rope scaling type '{}' is not supported (none, linear, yarn; Llama 3 scaling comes from rope_freqs.weight)",
           f.name(), *type);
    }
  } else if (auto fs = f.get_float(a + "rope.scale_linear")) {
    if (!(*fs > 0)) fail("{}: {}rope.scale_linear must be positive", f.name(), a);
    h.rope_freq_scale = float(1.0 / *fs);
  }

  // What only some architectures read (arch_*.cpp); an unknown one is refused at load.
  const ArchSpec* arch = find_arch(h.arch);
  if (arch && arch->embd_scale_sqrt) h.embd_scale = std::sqrt(float(h.n_embd));
  if (arch && arch->read_hparams) arch->read_hparams(f, h);
  return h;
}

float HParams::attn_scale() const { return kq_scale > 0 ? kq_scale : 1.0f / std::sqrt(float(head_dim_k)); }

std::vector<float> yarn_rope_factors(int32_t rope_dim, float base, float factor, int32_t orig_ctx, float beta_fast,
                                     float beta_slow) {
  // The pair index where a wavelength fits n_rot times into the original context.
  auto corr_dim = [&](float n_rot) {
    return float(rope_dim) * std::log(float(orig_ctx) / (n_rot * 2.f * float(M_PI))) / (2.f * std::log(base));
  };
  const float low = std::max(0.f, std::floor(corr_dim(beta_fast)));
  const float high = std::min(float(rope_dim - 1), std::ceil(corr_dim(beta_slow)));
  const float fs = 1.f / factor;
  std::vector<float> out;
  for (int32_t i = 0; i < rope_dim / 2; ++i) {
    const float y = (float(i) - low) / std::max(0.001f, high - low);
    const float mix = 1.f - std::min(1.f, std::max(0.f, y));  // 1: extrapolate (high frequencies)
    out.push_back(1.f / (fs * (1.f - mix) + mix));
  }
  return out;
}

std::vector<float> llama3_rope_factors(int32_t head_dim, float base, float factor, float low, float high, float orig_ctx) {
  const float low_wavelen = orig_ctx / low, high_wavelen = orig_ctx / high;
  std::vector<float> out;
  for (int32_t i = 0; i < head_dim; i += 2) {
    const float freq = 1.f / std::pow(base, float(i) / float(head_dim));
    const float wavelen = float(2 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.f);
    } else if (wavelen > low_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (orig_ctx / wavelen - low) / (high - low);
      out.push_back(1.f / ((1.f - smooth) / factor + smooth));
    }
  }
  return out;
}

}  // namespace ridge
