#include "model/quantize_model.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/mkmodel.h"
#include "quant/quant.h"

namespace ridge {
namespace {

// llama_ftype values of llama.cpp (include/llama.h) for the K mixes.
constexpr uint32_t kFtypeQ4_K_S = 14, kFtypeQ4_K_M = 15, kFtypeQ5_K_S = 16, kFtypeQ5_K_M = 17, kFtypeQ6_K = 18;

struct MixName {
  const char* name;
  DType base;
  QuantMix mix;
  uint32_t file_type;
};
constexpr MixName kMixes[] = {
    {"q4_k_s", DType::Q4_K, QuantMix::Q4_K_S, kFtypeQ4_K_S},
    {"q4_k_m", DType::Q4_K, QuantMix::Q4_K_M, kFtypeQ4_K_M},
    {"q5_k_s", DType::Q5_K, QuantMix::Q5_K_S, kFtypeQ5_K_S},
    {"q5_k_m", DType::Q5_K, QuantMix::Q5_K_M, kFtypeQ5_K_M},
    {"q6_k", DType::Q6_K, QuantMix::Q6_K, kFtypeQ6_K},
};
// Plain targets in the order usage lists them (q6_k is a mix, see the header).
constexpr DType kPlain[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                            DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::MXFP4,
                            DType::F8_E4M3_B128};

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// llama-quantize's test for "quantize this tensor" (the names our architectures use).
bool is_quantizable(std::string_view name, int n_dims) {
  return n_dims >= 2 && name.size() >= 6 && name.substr(name.size() - 6) == "weight" &&
         !contains(name, "_norm.weight") && !contains(name, "ffn_gate_inp.weight") && name != "position_embd.weight" &&
         name != "token_types.weight";
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third in
// between get more bits for the tensors whose error hurts most (attn_v, ffn_down).
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// blk.N.* -> N; -1 for tensors outside the blocks.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int v = 0;
  size_t i = 4;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) v = v * 10 + (name[i] - '0');
  return (i > 4 && i < name.size() && name[i] == '.') ? v : -1;
}

bool fits(DType t, int64_t ne0) { return ne0 % dtype_info(t).block_size == 0; }

// The type before the row-length check: llama_tensor_get_type's rules for the K mixes.
DType mix_choice(const QuantTarget& tg, std::string_view name, int64_t ne0, int layer, int n_layer, bool has_output) {
  const QuantMix m = tg.mix;
  if (name == "output.weight" || (!has_output && name == "token_embd.weight"))
    return fits(tg.base, ne0) ? DType::Q6_K : DType::Q8_0;
  if (name == "token_embd.weight") return tg.base;
  const bool more = layer >= 0 && use_more_bits(layer, n_layer);
  if (contains(name, "attn_v.weight")) {
    if ((m == QuantMix::Q4_K_M || m == QuantMix::Q5_K_M) && more) return DType::Q6_K;
    if (m == QuantMix::Q4_K_S && layer >= 0 && layer < 4) return DType::Q5_K;
    return tg.base;
  }
  if (contains(name, "attn_k.weight") || contains(name, "attn_q.weight")) return tg.base;
  if (contains(name, "ffn_down")) {
    if ((m == QuantMix::Q4_K_M || m == QuantMix::Q5_K_M) && more) return DType::Q6_K;
    if (m == QuantMix::Q4_K_S && layer >= 0 && layer < n_layer / 8) return DType::Q5_K;
    return tg.base;
  }
  if (contains(name, "attn_qkv.weight")) {
    if (m == QuantMix::Q4_K_M) return DType::Q5_K;
    if (m == QuantMix::Q5_K_M) return DType::Q6_K;
  }
  return tg.base;
}

struct Choice {
  DType type;
  bool fell_back;
};

Choice choose(const QuantTarget& tg, std::string_view name, DType type, int n_dims, int64_t ne0, int layer,
              int n_layer, bool has_output) {
  if (!is_quantizable(name, n_dims)) return {type, false};
  const DType want = tg.mix == QuantMix::None ? tg.base : mix_choice(tg, name, ne0, layer, n_layer, has_output);
  if (fits(want, ne0)) return {want, false};
  DType alt = DType::F16;  // the legacy types: no smaller block to fall back to
  switch (want) {
    case DType::Q4_K: alt = DType::Q5_0; break;
    case DType::Q5_K: alt = DType::Q5_1; break;
    case DType::Q6_K:
    case DType::F8_E4M3_B128: alt = DType::Q8_0; break;
    default: break;
  }
  return {fits(alt, ne0) ? alt : DType::F16, true};
}

bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;  // false when b does not exist yet
}

}  // namespace

std::optional<QuantTarget> quant_target_from_name(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& m : kMixes)
    if (lower == m.name) return QuantTarget{m.name, m.base, m.mix, m.file_type};
  for (DType t : kPlain) {
    if (lower != dtype_name(t)) continue;
    // Pure K files: llama-quantize writes no ftype of their own; the _S mix is the closest.
    const uint32_t ft = t == DType::Q4_K ? kFtypeQ4_K_S : t == DType::Q5_K ? kFtypeQ5_K_S : gguf_file_type(t);
    return QuantTarget{lower, t, QuantMix::None, ft};
  }
  return std::nullopt;
}

std::string quant_target_names() {
  std::string s;
  for (DType t : kPlain) s += std::string(s.empty() ? "" : ", ") + std::string(dtype_name(t));
  for (const auto& m : kMixes) s += std::string(", ") + m.name;
  return s;
}

DType quant_tensor_type(const QuantTarget& target, std::string_view name, DType type, int n_dims, int64_t ne0,
                        int layer, int n_layer, bool has_output) {
  return choose(target, name, type, n_dims, ne0, layer, n_layer, has_output).type;
}

QuantizeReport quantize_model(const std::string& in_path, const std::string& out_path, DType target, int threads) {
  if (!quant::can_quantize(target)) fail("cannot quantize to {} ({})", dtype_name(target), quant_target_names());
  auto tg = quant_target_from_name(dtype_name(target));
  RIDGE_CHECK(tg.has_value(), "cannot quantize to {} ({})", dtype_name(target), quant_target_names());
  return quantize_model(in_path, out_path, *tg, threads);
}

QuantizeReport quantize_model(const std::string& in_path, const std::string& out_path, const QuantTarget& target,
                              int threads, int keep_layers) {
  if (same_file(in_path, out_path)) fail("input and output are the same file ({})", out_path);
  auto in = gguf::File::open(in_path);

  // The layer count the mix rules divide: the architecture's block_count, else the
  // highest blk.N in the file.
  const std::string arch(in->get_str("general.architecture").value_or(""));
  int n_layer = int(in->get_uint(arch + ".block_count").value_or(0));
  bool has_output = false;
  for (const auto& t : in->tensors()) {
    n_layer = std::max(n_layer, layer_of(t.name) + 1);
    has_output = has_output || t.name == "output.weight";
  }

  if (keep_layers > 0) {
    if (keep_layers > n_layer) fail("--layers {}: {} has {} layers", keep_layers, in_path, n_layer);
    n_layer = keep_layers;  // the mixes' rules see the model as written
  }
  gguf::Writer w;
  for (const auto& [k, v] : in->kv())
    if (k != "general.alignment") w.set_value(k, v);
  w.set_u32("general.file_type", target.file_type);
  if (keep_layers > 0) w.set_u32(arch + ".block_count", uint32_t(keep_layers));
  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  QuantizeReport rep;
  for (const auto& t : in->tensors()) {
    if (keep_layers > 0 && layer_of(t.name) >= keep_layers) continue;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const gguf::TensorInfo* src = &t;
    const Choice c = choose(target, t.name, t.type, t.n_dims, t.ne[0], layer_of(t.name), n_layer, has_output);
    ++rep.types[c.type];
    if (c.type == t.type) {
      ++rep.kept;
      w.add_tensor(t.name, t.type, ne, [src](uint8_t* dst) { std::memcpy(dst, src->data, src->nbytes); });
      continue;
    }
    if (!dtype_info(t.type).supported)
      fail("{}: tensor '{}' has type {}, which ridge cannot convert", in_path, t.name, dtype_name(t.type));
    ++(c.fell_back ? rep.fallback : rep.converted);
    const DType to = c.type;
    w.add_tensor(t.name, to, ne, [src, to, &pool](uint8_t* dst) {
      const int64_t k = src->ne[0], rows = src->n_elements() / k;
      const int64_t in_rb = row_bytes(src->type, k), out_rb = row_bytes(to, k);
      // K rows cost far more than a legacy row to quantize (the scale search): smaller grains.
      pool.parallel_for(rows, dtype_info(to).block_size == 256 ? 8 : 64, [&](int64_t lo, int64_t hi, int) {
        std::vector<float> row(static_cast<size_t>(k));
        for (int64_t r = lo; r < hi; ++r) {
          quant::dequantize_row(src->type, src->data + r * in_rb, row.data(), k);
          quant::quantize_row(to, row.data(), dst + r * out_rb, k);
        }
      });
    });
  }
  w.write(out_path);
  return rep;
}

}  // namespace ridge
