// The tensor loader every architecture reads through, the llama family's tensor set, and
// the list of architectures.
#include "model/arch.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/model.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace ridge {

namespace {
const std::array<const ArchSpec*, 9>& all_archs() {
  static const std::array<const ArchSpec*, 9> a{&arch_llama(),     &arch_qwen2(), &arch_qwen3(), &arch_qwen3moe(),
                                                &arch_deepseek2(), &arch_phi3(),  &arch_gpt2(),  &arch_gemma3(),
                                                &arch_gpt_oss()};
  return a;
}
}  // namespace

const ArchSpec* find_arch(std::string_view name) {
  for (const ArchSpec* a : all_archs())
    if (name == a->name) return a;
  return nullptr;
}

std::string arch_names() {
  std::string s;
  for (const ArchSpec* a : all_archs()) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

const gguf::TensorInfo& TensorLoader::need(const std::string& name, std::initializer_list<int64_t> shape) {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (!t) fail("{}: required tensor '{}' is missing", f_.name(), name);
  bool ok = true;
  auto it = shape.begin();
  for (int d = 0; d < 4; ++d) ok = ok && t->ne[d] == (it != shape.end() ? *it++ : 1);
  if (!ok) {
    std::string want = "[";
    int i = 0;
    for (int64_t s : shape) want += fmt::format("{}{}", i++ ? ", " : "", s);
    fail("{}: tensor '{}' has shape {}, expected {}]", f_.name(), t->name, t->shape_str(), want);
  }
  if (!dtype_info(t->type).supported)
    fail("{}: tensor '{}' has type {}, which ridge cannot compute with (supported: f32, f16, bf16, q4_0, q4_1, "
         "q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, mxfp4, fp8)",
         f_.name(), name, dtype_name(t->type));
  if (t->type == DType::F8_E4M3_B128) check_fp8(*t);
  if (t->type == DType::MXFP4) check_mxfp4(*t);
  bytes_ += int64_t(t->nbytes);
  return *t;
}

// FP8 weights are read as their kernels read them (quant/fp8.h): NaN codes would not be
// NaN there, and a non-finite scale is no weight either. One pass over the tensor.
void TensorLoader::check_fp8(const gguf::TensorInfo& t) const {
  const int64_t nb = int64_t(t.nbytes / sizeof(quant::BlockFp8));
  for (int64_t i = 0; i < nb; ++i) {
    quant::BlockFp8 b;
    std::memcpy(&b, t.data + i * int64_t(sizeof b), sizeof b);
    if (!quant::fp8_scale_ok(b.d))
      fail("{}: tensor '{}' has an FP8 block scale of {} in block {} (finite and below 2^119 only)", f_.name(),
           t.name, b.d, i);
    if (const int64_t j = quant::find_fp8_e4m3_nan(b.qs, quant::kQF8); j >= 0)
      fail("{}: tensor '{}' holds an FP8 NaN code (0x{:02x}) at element {}: not a weight", f_.name(), t.name,
           b.qs[j], i * quant::kQF8 + j);
  }
}

// An MXFP4 scale of 0xFF is the OCP format's NaN (ggml would read it as 2^127): no weight.
void TensorLoader::check_mxfp4(const gguf::TensorInfo& t) const {
  const int64_t nb = int64_t(t.nbytes / sizeof(quant::BlockMxfp4));
  for (int64_t i = 0; i < nb; ++i)
    if (t.data[i * int64_t(sizeof(quant::BlockMxfp4))] == quant::kMxfp4NanScale)
      fail("{}: tensor '{}' has an MXFP4 block scale of 0xff (the format's NaN) in block {}", f_.name(), t.name, i);
}

kernels::WeightView TensorLoader::matrix(const std::string& name, int64_t k, int64_t n_out) {
  const auto& t = need(name, {k, n_out});
  return {t.type, k, n_out, t.data};
}

std::vector<kernels::WeightView> TensorLoader::experts(const std::string& name, int64_t k, int64_t n_out,
                                                       int64_t n_expert) {
  const auto& t = need(name, {k, n_out, n_expert});
  const int64_t slice = row_bytes(t.type, k) * n_out;
  std::vector<kernels::WeightView> v;
  for (int64_t e = 0; e < n_expert; ++e) v.push_back({t.type, k, n_out, t.data + e * slice});
  return v;
}

std::vector<kernels::WeightView> TensorLoader::row_parts(const std::string& name, int64_t k,
                                                         std::initializer_list<int64_t> parts) {
  int64_t n_out = 0;
  for (int64_t p : parts) n_out += p;
  const auto& t = need(name, {k, n_out});
  std::vector<kernels::WeightView> v;
  int64_t r0 = 0;
  for (int64_t p : parts) {
    v.push_back({t.type, k, p, t.data + r0 * row_bytes(t.type, k)});
    r0 += p;
  }
  return v;
}

std::vector<float> TensorLoader::vec(const std::string& name, int64_t n) {
  const auto& t = need(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  quant::dequantize_row(t.type, t.data, out.data(), n);
  f_.release_pages(t.data, t.nbytes);  // converted: the file's copy is not read again
  vec_bytes_ += n * int64_t(sizeof(float));
  return out;
}

std::vector<float> TensorLoader::table(const std::string& name, int64_t k, int64_t rows) {
  const auto& t = need(name, {k, rows});
  std::vector<float> out(static_cast<size_t>(k * rows));
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + r * row_bytes(t.type, k), out.data() + r * k, k);
  f_.release_pages(t.data, t.nbytes);
  vec_bytes_ += k * rows * int64_t(sizeof(float));
  return out;
}

void load_embeddings(TensorLoader& ld, const HParams& h, Weights& w) {
  w.tok_embd = ld.matrix("token_embd.weight", h.n_embd, h.n_vocab);
  w.output_norm = ld.vec("output_norm.weight", h.n_embd);
  if (ld.find("output.weight")) {
    w.output = ld.matrix("output.weight", h.n_embd, h.n_vocab);
  } else {
    w.output = w.tok_embd;
    w.tied_output = true;
  }
  w.layers.resize(size_t(h.n_layer));
}

void load_dense_ffn(TensorLoader& ld, const HParams& h, LayerWeights& L, const std::string& p) {
  L.w_gate = ld.matrix(p + "ffn_gate.weight", h.n_embd, h.n_ff);
  L.w_up = ld.matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
  L.w_down = ld.matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
}

void load_experts(TensorLoader& ld, const HParams& h, LayerWeights& L, const std::string& p) {
  L.router = ld.matrix(p + "ffn_gate_inp.weight", h.n_embd, h.n_expert);
  L.gate_exps = ld.experts(p + "ffn_gate_exps.weight", h.n_embd, h.n_ff_exp, h.n_expert);
  L.up_exps = ld.experts(p + "ffn_up_exps.weight", h.n_embd, h.n_ff_exp, h.n_expert);
  L.down_exps = ld.experts(p + "ffn_down_exps.weight", h.n_ff_exp, h.n_embd, h.n_expert);
}

void load_llama_family(TensorLoader& ld, const HParams& h, Weights& w, bool dense_ffn) {
  load_embeddings(ld, h, w);
  for_each_layer(h, w, [&](LayerWeights& L, const std::string& p) {
    L.attn_norm = ld.vec(p + "attn_norm.weight", h.n_embd);
    L.wq = ld.matrix(p + "attn_q.weight", h.n_embd, h.n_q());
    L.wk = ld.matrix(p + "attn_k.weight", h.n_embd, h.n_kv_k());
    L.wv = ld.matrix(p + "attn_v.weight", h.n_embd, h.n_kv_v());
    L.wo = ld.matrix(p + "attn_output.weight", h.n_attn_out(), h.n_embd);
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", h.n_embd);
    if (dense_ffn) {
      // The forward runs experts wherever the metadata counts them: an architecture that
      // reads none must not be given any.
      if (h.moe())
        fail("{}: {}.expert_count is {}, but {} has no mixture of experts", ld.file().name(), h.arch, h.n_expert,
             h.arch);
      load_dense_ffn(ld, h, L, p);
      return;
    }
    if (h.n_expert <= 0) fail("{}: {}.expert_count is missing: a mixture of experts needs it", ld.file().name(), h.arch);
    load_experts(ld, h, L, p);
  });
}

void for_each_layer(const HParams& h, Weights& w, const std::function<void(LayerWeights&, const std::string&)>& fn) {
  RIDGE_CHECK(int64_t(w.layers.size()) == h.n_layer, "weights hold {} layers, the model {}", w.layers.size(), h.n_layer);
  for (int32_t il = 0; il < h.n_layer; ++il) fn(w.layers[size_t(il)], fmt::format("blk.{}.", il));
}

}  // namespace ridge
