#include "model/hf_checkpoint.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "kernels/cpu/gemm.h"
#include "quant/quant.h"
#include "model/hparams.h"

namespace ridge {
namespace {

using nlohmann::json;
using safetensors::Dtype;
using safetensors::Tensor;

struct ArchMap {
  const char* hf;    // config.json architectures[0]
  const char* gguf;  // general.architecture
  bool permute_qk;   // llama.cpp interleaves the rotary halves of Q and K (its llama rope)
};
constexpr ArchMap kArchs[] = {{"LlamaForCausalLM", "llama", true},
                              {"MistralForCausalLM", "llama", true},
                              {"Qwen2ForCausalLM", "qwen2", false},
                              {"Qwen3ForCausalLM", "qwen3", false}};

// config.json, the parts a GGUF needs; each checked against the tensors later.
struct Config {
  const ArchMap* arch = nullptr;
  int64_t n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0, n_ctx = 0;
  double norm_eps = 1e-6, rope_theta = 10000;
  bool tied = false;
  bool fp8 = false;               // quantization_config names FP8 weights
  int64_t fp8_block[2] = {0, 0};  // their scale tiles (weight_block_size, block_structure); 0: per channel or tensor
  // rope_scaling: Llama 3.1's frequency factors, or a linear scale (0: none).
  bool rope_llama3 = false;
  double rope_factor = 8, rope_low = 1, rope_high = 4, rope_orig_ctx = 8192, rope_linear = 0;
};



// The FP8 quantization_configs of the checkpoints that ship FP8 weights: "fp8" (Hugging
// Face's: weight_block_size for 128 x 128 tiles as DeepSeek-V3 and Qwen3-FP8 ship them, or
// none for one scale per tensor), "fbgemm_fp8" (per channel), "compressed-tensors" with
// float 8-bit weights (strategy tensor, channel or block). Which scale a tensor has is
// read from its scale tensor's shape (Plan); the activation side (dynamic or static
// input_scale) is not needed: ridge multiplies f32 activations.
void read_fp8_config(const std::string& path, const json& q, Config& c) {
  const std::string method = q.value("quant_method", "");
  auto block = [&](const json& bs) {
    if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() || !bs[1].is_number_integer() ||
        bs[0].get<int64_t>() <= 0 || bs[1].get<int64_t>() <= 0)
      fail("{}: quantization_config: block size {} is not two positive integers", path, bs.dump());
    if (c.fp8_block[0] && (c.fp8_block[0] != bs[0].get<int64_t>() || c.fp8_block[1] != bs[1].get<int64_t>()))
      fail("{}: quantization_config: groups with different block sizes ({} x {} and {})", path, c.fp8_block[0],
           c.fp8_block[1], bs.dump());
    c.fp8_block[0] = bs[0].get<int64_t>();
    c.fp8_block[1] = bs[1].get<int64_t>();
  };
  c.fp8 = true;
  if (method == "fp8") {
    if (const auto bs = q.find("weight_block_size"); bs != q.end() && !bs->is_null()) block(*bs);
    return;
  }
  if (method == "fbgemm_fp8") return;
  if (method == "compressed-tensors" && q.contains("config_groups") && q["config_groups"].is_object()) {
    for (const auto& [name, g] : q["config_groups"].items()) {
      const json w = g.is_object() ? g.value("weights", json()) : json();
      if (!w.is_object() || w.value("type", "") != "float" || w.value("num_bits", 0) != 8)
        fail("{}: quantization_config group '{}' is not 8-bit float weights (ridge reads FP8 checkpoints)", path, name);
      const std::string strategy = w.value("strategy", "");
      if (strategy == "block") block(w.value("block_structure", json()));
      else if (strategy != "channel" && strategy != "tensor")
        fail("{}: quantization_config group '{}': weight strategy '{}' is not supported (tensor, channel, block)", path,
             name, strategy);
    }
    return;
  }
  fail("{}: quantization_config {} is not supported (FP8 weights: fp8, fbgemm_fp8, compressed-tensors)", path, q.dump());
}

Config read_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", path);
  Config c;
  const auto archs = j.find("architectures");
  if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail("{}: no architectures list", path);
  const std::string a = (*archs)[0].get<std::string>();
  for (const ArchMap& m : kArchs)
    if (a == m.hf) c.arch = &m;
  if (!c.arch) fail("{}: architecture '{}' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)", path, a);
  auto num = [&](const char* key, std::optional<int64_t> dflt = std::nullopt) -> int64_t {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (!dflt) fail("{}: '{}' is missing", path, key);
      return *dflt;
    }
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (int64_t(1) << 31))
      fail("{}: '{}' is not a positive integer", path, key);
    return it->get<int64_t>();
  };
  auto real = [&](const char* key, double dflt) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_number() || !(it->get<double>() > 0)) fail("{}: '{}' is not a positive number", path, key);
    return it->get<double>();
  };
  c.n_embd = num("hidden_size");
  c.n_ff = num("intermediate_size");
  c.n_layer = num("num_hidden_layers");
  c.n_head = num("num_attention_heads");
  c.n_head_kv = num("num_key_value_heads", c.n_head);
  c.n_vocab = num("vocab_size");
  c.n_ctx = num("max_position_embeddings", 4096);
  if (c.n_embd % c.n_head != 0 && j.find("head_dim") == j.end())
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {} and there is no head_dim", path, c.n_embd, c.n_head);
  c.head_dim = num("head_dim", c.n_embd / c.n_head);
  if (c.n_head % c.n_head_kv != 0) fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path, c.n_head, c.n_head_kv);
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} is odd (rotary pairs)", path, c.head_dim);
  c.norm_eps = real("rms_norm_eps", 1e-6);
  c.rope_theta = real("rope_theta", 10000);
  if (const auto t = j.find("tie_word_embeddings"); t != j.end() && !t->is_null()) {
    if (!t->is_boolean()) fail("{}: 'tie_word_embeddings' is not a boolean", path);
    c.tied = t->get<bool>();
  }
  if (const auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    const std::string type = rs->is_object() ? rs->value("rope_type", rs->value("type", "")) : "";
    auto factor = [&](const char* key, double dflt) {
      const auto it = rs->find(key);
      if (it == rs->end() || it->is_null()) return dflt;
      if (!it->is_number() || !(it->get<double>() > 0)) fail("{}: rope_scaling.{} is not a positive number", path, key);
      return it->get<double>();
    };
    if (type == "llama3") {
      c.rope_llama3 = true;
      c.rope_factor = factor("factor", 8.0);
      c.rope_low = factor("low_freq_factor", 1.0);
      c.rope_high = factor("high_freq_factor", 4.0);
      c.rope_orig_ctx = factor("original_max_position_embeddings", double(j.value("original_max_position_embeddings", 8192)));
      if (c.rope_low == c.rope_high) fail("{}: rope_scaling's low_freq_factor equals its high_freq_factor", path);
    } else if (type == "linear") {
      c.rope_linear = factor("factor", 1.0);
    } else if (type != "default") {
      fail("{}: rope_scaling {} is not supported yet (llama3 and linear are)", path, rs->dump());
    }
  }
  // A sliding window is on where it is set, unless use_sliding_window says otherwise
  // (Qwen2's default is off).
  const bool llama = c.arch->gguf == std::string_view("llama");
  if (const auto sw = j.find("sliding_window"); sw != j.end() && !sw->is_null()) {
    const auto use = j.find("use_sliding_window");
    if (use != j.end() && !use->is_null() ? use->is_boolean() && use->get<bool>() : llama)
      fail("{}: sliding_window attention is not supported yet", path);
  }
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (llama && j.value(key, false)) fail("{}: {} = true: a llama with biases is not supported yet", path, key);
  if (c.rope_llama3 && !llama) fail("{}: rope_scaling llama3 on a {} model is not supported", path, a);
  if (const auto q = j.find("quantization_config"); q != j.end() && !q->is_null()) read_fp8_config(path, *q, c);
  return c;
}

// One GGUF tensor from one checkpoint tensor: its shape checked against config.json, rows
// reordered (llama Q/K) and converted as it is written.
struct Plan {
  const Tensor* src = nullptr;
  // FP8: weight_scale_inv or weight_scale, by its shape one per tensor ([] or [1]), per
  // row ([rows] or [rows, 1]) or per tile ([ceil(rows / b0)][ceil(cols / b1)]).
  const Tensor* scale = nullptr;
  enum class Scale { Tensor, Row, Tile } scale_kind = Scale::Tensor;
  int64_t block[2] = {0, 0};  // the tiles
  int64_t rows = 1, cols = 0;
  int64_t permute_heads = 0;  // llama Q/K: heads whose rotary halves interleave
  DType out = DType::F32;
};

float scale_at(const Tensor& s, int64_t i) {
  switch (s.dtype) {
    case Dtype::F32: { float f; std::memcpy(&f, s.data + 4 * i, 4); return f; }
    case Dtype::BF16: { uint16_t b; std::memcpy(&b, s.data + 2 * i, 2); return bf16_to_f32(b); }
    default: { uint16_t h; std::memcpy(&h, s.data + 2 * i, 2); return f16_to_f32(h); }
  }
}

// The FP8 scale of source row r, column c.
float scale_of(const Plan& p, int64_t r, int64_t c) {
  switch (p.scale_kind) {
    case Plan::Scale::Tensor: return scale_at(*p.scale, 0);
    case Plan::Scale::Row: return scale_at(*p.scale, r);
    case Plan::Scale::Tile: return scale_at(*p.scale, (r / p.block[0]) * ((p.cols + p.block[1] - 1) / p.block[1]) + c / p.block[1]);
  }
  return 0;
}

// Row r of the source in f32 (FP8: times its scale).
void source_row(const Plan& p, int64_t r, float* dst) {
  const Tensor& t = *p.src;
  const uint8_t* row = t.data + r * p.cols * safetensors::dtype_size(t.dtype);
  switch (t.dtype) {
    case Dtype::F32: std::memcpy(dst, row, size_t(p.cols) * 4); return;
    case Dtype::F16: case Dtype::BF16: {
      // safetensors does not align its tensors: the 16-bit elements go through a copy.
      std::vector<uint16_t> h(size_t(p.cols));
      std::memcpy(h.data(), row, size_t(p.cols) * 2);
      return quant::dequantize_row(t.dtype == Dtype::F16 ? DType::F16 : DType::BF16, h.data(), dst, p.cols);
    }
    case Dtype::F8_E4M3: case Dtype::F8_E5M2:
      for (int64_t c = 0; c < p.cols; ++c) {
        const float v = t.dtype == Dtype::F8_E4M3 ? quant::fp8_e4m3_to_f32(row[c]) : quant::fp8_e5m2_to_f32(row[c]);
        dst[c] = v * scale_of(p, r, c);
      }
      return;
    default: fail("tensor '{}': dtype {} is not a weight type", t.name, safetensors::dtype_name(t.dtype));
  }
}

DType same_type(Dtype d) { return d == Dtype::F32 ? DType::F32 : d == Dtype::F16 ? DType::F16 : DType::BF16; }

// What an FP8 matrix becomes when no type is asked for: `want` (ridge's FP8, or q8_0 for
// llama.cpp) where its rows fit the blocks and, for FP8, the CPU multiplies it in panels
// (the per-row fallback has no SIMD FP8 dot); else q8_0, as quantize falls back; else
// bf16.
DType fp8_default(DType want, int64_t cols) {
  if (want == DType::F8_E4M3_B128 && cols % quant::kQF8 == 0 && kernels::gemm_available(want)) return want;
  return cols % quant::kQK == 0 ? DType::Q8_0 : DType::BF16;
}

// An FP8 tensor's scale: X.weight_scale_inv (Hugging Face's fp8) or X.weight_scale
// (compressed-tensors, fbgemm), its kind from its shape.
void find_fp8_scale(const safetensors::Checkpoint& ck, const Config& c, const std::string& name, Plan& p) {
  const Tensor* inv = ck.find(name + "_scale_inv");
  const Tensor* plain = ck.find(name + "_scale");
  if (inv && plain) fail("{}: tensor '{}' has both a _scale_inv and a _scale", ck.dir(), name);
  if (!inv && !plain) fail("{}: FP8 tensor '{}' has no {}_scale_inv or {}_scale", ck.dir(), name, name, name);
  p.scale = inv ? inv : plain;
  const Tensor& s = *p.scale;
  if (s.dtype != Dtype::F32 && s.dtype != Dtype::BF16 && s.dtype != Dtype::F16)
    fail("{}: tensor '{}' is {}, scales must be f32, bf16 or f16", ck.dir(), s.name, safetensors::dtype_name(s.dtype));
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  const std::vector<int64_t> tiles{c.fp8_block[0] ? (p.rows + c.fp8_block[0] - 1) / c.fp8_block[0] : 0,
                                   c.fp8_block[1] ? (p.cols + c.fp8_block[1] - 1) / c.fp8_block[1] : 0};
  if (c.fp8_block[0] > 0 && s.shape == tiles) {
    p.scale_kind = Plan::Scale::Tile;
    p.block[0] = c.fp8_block[0], p.block[1] = c.fp8_block[1];
  } else if (n == 1 && s.shape.size() <= 1) {
    p.scale_kind = Plan::Scale::Tensor;
  } else if (s.shape == std::vector<int64_t>{p.rows} || s.shape == std::vector<int64_t>{p.rows, 1}) {
    p.scale_kind = Plan::Scale::Row;
  } else {
    fail("{}: tensor '{}' is {}: not one scale, one per row of {}{}", ck.dir(), s.name, s.shape_str(),
         p.src->shape_str(), c.fp8_block[0] ? fmt::format(" or one per {} x {} tile", c.fp8_block[0], c.fp8_block[1]) : "");
  }
}

// E4M3 source rows whose scales are constant over each 128-block (per tensor, per row,
// or tiles 128k wide) become ridge's FP8 blocks exactly: the codes copied, the scale as
// the block's d.
bool fp8_exact(const Plan& p) {
  return p.out == DType::F8_E4M3_B128 && p.src->dtype == Dtype::F8_E4M3 &&
         (p.scale_kind != Plan::Scale::Tile || p.block[1] % quant::kQF8 == 0);
}

// Refused as the loader refuses them (model/arch.cpp), so that convert writes no file
// that does not load.
void fp8_row(const Plan& p, int64_t r, uint8_t* dst) {
  const uint8_t* row = p.src->data + r * p.cols;
  for (int64_t b = 0; b < p.cols / quant::kQF8; ++b) {
    quant::BlockFp8 blk;
    blk.d = scale_of(p, r, b * quant::kQF8);
    std::memcpy(blk.qs, row + b * quant::kQF8, quant::kQF8);
    if (!quant::fp8_scale_ok(blk.d))
      fail("tensor '{}': scale {} of row {} is not a usable FP8 scale (finite, below 2^119)", p.src->name, blk.d, r);
    if (const int64_t j = quant::find_fp8_e4m3_nan(blk.qs, quant::kQF8); j >= 0)
      fail("tensor '{}' holds an FP8 NaN code (0x{:02x}) at row {}, column {}", p.src->name, blk.qs[j], r,
           b * quant::kQF8 + j);
    std::memcpy(dst + b * int64_t(sizeof blk), &blk, sizeof blk);
  }
}

// The source row that lands in GGUF row r: llama.cpp's order keeps, per head, the
// rotary pairs (i, i + half) of Hugging Face's layout side by side.
int64_t source_row_index(const Plan& p, int64_t r) {
  if (!p.permute_heads) return r;
  const int64_t hd = p.rows / p.permute_heads, half = hd / 2, h = r / hd, i = r % hd;
  return h * hd + (i % 2) * half + i / 2;
}

}  // namespace

bool is_hf_checkpoint_dir(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

std::unique_ptr<gguf::Writer> hf_to_gguf(const safetensors::Checkpoint& ck, const HfConvertOptions& o) {
  const Config c = read_config(ck.dir());
  auto w = std::make_unique<gguf::Writer>();
  const std::string a = std::string(c.arch->gguf) + ".";
  w->set_str("general.architecture", c.arch->gguf);
  w->set_str("general.name", std::filesystem::path(ck.dir()).filename().string());
  w->set_u32(a + "context_length", uint32_t(c.n_ctx));
  w->set_u32(a + "embedding_length", uint32_t(c.n_embd));
  w->set_u32(a + "block_count", uint32_t(c.n_layer));
  w->set_u32(a + "feed_forward_length", uint32_t(c.n_ff));
  w->set_u32(a + "attention.head_count", uint32_t(c.n_head));
  w->set_u32(a + "attention.head_count_kv", uint32_t(c.n_head_kv));
  w->set_u32(a + "attention.key_length", uint32_t(c.head_dim));
  w->set_u32(a + "attention.value_length", uint32_t(c.head_dim));
  w->set_u32(a + "rope.dimension_count", uint32_t(c.head_dim));
  w->set_f32(a + "rope.freq_base", float(c.rope_theta));
  w->set_f32(a + "attention.layer_norm_rms_epsilon", float(c.norm_eps));
  w->set_u32(a + "vocab_size", uint32_t(c.n_vocab));
  if (c.rope_linear > 0) {
    w->set_str(a + "rope.scaling.type", "linear");
    w->set_f32(a + "rope.scaling.factor", float(c.rope_linear));
  }
  if (c.rope_llama3) {
    const std::vector<float> f = llama3_rope_factors(int32_t(c.head_dim), float(c.rope_theta), float(c.rope_factor),
                                                     float(c.rope_low), float(c.rope_high), float(c.rope_orig_ctx));
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w->add_tensor("rope_freqs.weight", DType::F32, {int64_t(f.size())}, std::move(bytes));
  }

  std::set<std::string> used;  // every checkpoint tensor must find its place
  auto add = [&](const std::string& gguf_name, const std::string& hf_name, std::vector<int64_t> shape, bool matrix,
                 int64_t permute_heads = 0) {
    const Tensor& t = ck.require(hf_name);
    used.insert(hf_name);
    if (t.shape != shape) {
      std::string want = "[";
      for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
      fail("{}: tensor '{}' has shape {}, config.json makes it {}]", ck.dir(), hf_name, t.shape_str(), want);
    }
    auto p = std::make_shared<Plan>();
    p->src = &t;
    p->rows = shape.size() == 2 ? shape[0] : 1;
    p->cols = shape.back();
    p->permute_heads = permute_heads;
    const bool is_fp8 = t.dtype == Dtype::F8_E4M3 || t.dtype == Dtype::F8_E5M2;
    if (is_fp8) {
      if (!c.fp8) fail("{}: tensor '{}' is {} but config.json has no FP8 quantization_config", ck.dir(), hf_name,
                       safetensors::dtype_name(t.dtype));
      find_fp8_scale(ck, c, hf_name, *p);
      // A static activation scale is the checkpoint's simulation of FP8 activations;
      // ridge's activations stay f32 (or bf16).
      if (hf_name.ends_with(".weight")) {
        const std::string input_scale = hf_name.substr(0, hf_name.size() - 6) + "input_scale";
        if (ck.find(input_scale)) used.insert(input_scale);
      }
      used.insert(p->scale->name);
    } else if (t.dtype != Dtype::F32 && t.dtype != Dtype::F16 && t.dtype != Dtype::BF16) {
      fail("{}: tensor '{}' has dtype {} (f32, f16, bf16 or fp8 weights)", ck.dir(), hf_name, safetensors::dtype_name(t.dtype));
    }
    p->out = !matrix ? DType::F32 : o.type ? *o.type : is_fp8 ? fp8_default(o.fp8_type, p->cols) : same_type(t.dtype);
    if (p->cols % dtype_info(p->out).block_size != 0)
      fail("{}: tensor '{}' has rows of {}, not a whole number of {} blocks", ck.dir(), hf_name, p->cols, dtype_name(p->out));
    const safetensors::Checkpoint* ckp = &ck;
    w->add_tensor(gguf_name, p->out, shape.size() == 2 ? std::vector<int64_t>{p->cols, p->rows} : std::vector<int64_t>{p->cols},
                  [p, ckp](uint8_t* dst) {
                    const int64_t rb = row_bytes(p->out, p->cols), es = safetensors::dtype_size(p->src->dtype);
                    const bool fp8 = p->src->dtype == Dtype::F8_E4M3 || p->src->dtype == Dtype::F8_E5M2;
                    const bool copy = !fp8 && same_type(p->src->dtype) == p->out, exact = fp8 && fp8_exact(*p);
                    std::vector<float> row(size_t(p->cols));
                    for (int64_t r = 0; r < p->rows; ++r) {
                      const int64_t s = source_row_index(*p, r);
                      if (copy) {
                        std::memcpy(dst + r * rb, p->src->data + s * p->cols * es, size_t(rb));
                        continue;
                      }
                      if (exact) {
                        fp8_row(*p, s, dst + r * rb);
                        continue;
                      }
                      source_row(*p, s, row.data());
                      if (p->out == DType::F32) std::memcpy(dst + r * rb, row.data(), size_t(rb));
                      else quant::quantize_row(p->out, row.data(), dst + r * rb, p->cols);
                    }
                    ckp->release(*p->src);  // copied: its pages are not needed again
                  });
  };
  const int64_t nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim;
  const int64_t perm_q = c.arch->permute_qk ? c.n_head : 0, perm_k = c.arch->permute_qk ? c.n_head_kv : 0;
  add("token_embd.weight", "model.embed_tokens.weight", {c.n_vocab, c.n_embd}, true);
  add("output_norm.weight", "model.norm.weight", {c.n_embd}, false);
  if (ck.find("lm_head.weight")) add("output.weight", "lm_head.weight", {c.n_vocab, c.n_embd}, true);
  else if (!c.tied) fail("{}: no lm_head.weight, and config.json's tie_word_embeddings is not true", ck.dir());
  const bool qwen2 = c.arch->gguf == std::string_view("qwen2"), qwen3 = c.arch->gguf == std::string_view("qwen3");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string g = fmt::format("blk.{}.", l), h = fmt::format("model.layers.{}.", l);
    add(g + "attn_norm.weight", h + "input_layernorm.weight", {c.n_embd}, false);
    add(g + "attn_q.weight", h + "self_attn.q_proj.weight", {nq, c.n_embd}, true, perm_q);
    add(g + "attn_k.weight", h + "self_attn.k_proj.weight", {nkv, c.n_embd}, true, perm_k);
    add(g + "attn_v.weight", h + "self_attn.v_proj.weight", {nkv, c.n_embd}, true);
    add(g + "attn_output.weight", h + "self_attn.o_proj.weight", {c.n_embd, nq}, true);
    if (qwen2) {
      add(g + "attn_q.bias", h + "self_attn.q_proj.bias", {nq}, false);
      add(g + "attn_k.bias", h + "self_attn.k_proj.bias", {nkv}, false);
      add(g + "attn_v.bias", h + "self_attn.v_proj.bias", {nkv}, false);
    }
    if (qwen3) {
      add(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", {c.head_dim}, false);
      add(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", {c.head_dim}, false);
    }
    add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {c.n_embd}, false);
    add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {c.n_ff, c.n_embd}, true);
    add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {c.n_ff, c.n_embd}, true);
    add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {c.n_embd, c.n_ff}, true);
  }
  // A tensor left over means a variant this mapping does not know (biases, extra norms):
  // converting without it would give another model. Old checkpoints' cached rotary
  // frequencies are derived data.
  for (const Tensor* t : ck.tensors())
    if (!used.count(t->name) && !t->name.ends_with("rotary_emb.inv_freq"))
      fail("{}: tensor '{}' has no place in a {} model (a variant ridge does not convert yet)", ck.dir(), t->name,
           c.arch->hf);
  return w;
}

void convert_hf_checkpoint(const std::string& dir, const std::string& out, const HfConvertOptions& o) {
  const safetensors::Checkpoint ck(dir);
  hf_to_gguf(ck, o)->write(out);
}

std::unique_ptr<gguf::File> open_hf_checkpoint(const std::string& dir, const HfConvertOptions& o) {
  const safetensors::Checkpoint ck(dir);
  const auto w = hf_to_gguf(ck, o);
  const int fd = memfd_create("ridge-hf-checkpoint", MFD_CLOEXEC);
  if (fd < 0) fail("{}: cannot make an in-memory file for the converted model: {}", dir, std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  w->write_fd(fd, dir + " (converted in memory)");
  // The mapping keeps the anonymous file alive after its descriptor closes.
  return gguf::File::open("/proc/self/fd/" + std::to_string(fd));
}

}  // namespace ridge
