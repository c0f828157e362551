#include "model/model.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"
#include "core/progress.h"
#include "core/threadpool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed.h"
#include "quant/quant.h"

namespace ridge {

const ArchSpec* find_arch(std::string_view name) {
  for (const ArchSpec* a : {&arch_llama(), &arch_qwen2(), &arch_qwen3()})
    if (name == a->name) return a;
  return nullptr;
}

namespace {

class Loader {
 public:
  Loader(const gguf::File& f, int64_t& bytes, int64_t& vec_bytes) : f_(f), bytes_(bytes), vec_bytes_(vec_bytes) {}

  const gguf::TensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }

  const gguf::TensorInfo& need(const std::string& name, std::initializer_list<int64_t> shape) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) fail("{}: required tensor '{}' is missing", f_.name(), name);
    check_shape(*t, shape);
    if (!dtype_info(t->type).supported)
      fail("{}: tensor '{}' has type {}, which ridge cannot compute with (supported: f32, f16, bf16, q4_0, q4_1, "
           "q5_0, q5_1, q8_0, q4_k, q5_k, q6_k)",
           f_.name(), name, dtype_name(t->type));
    bytes_ += int64_t(t->nbytes);
    return *t;
  }

  kernels::WeightView matrix(const std::string& name, int64_t k, int64_t n_out) {
    const auto& t = need(name, {k, n_out});
    return {t.type, k, n_out, t.data};
  }

  std::vector<float> vec(const std::string& name, int64_t n) {
    const auto& t = need(name, {n});
    std::vector<float> out(static_cast<size_t>(n));
    quant::dequantize_row(t.type, t.data, out.data(), n);
    f_.release_pages(t.data, t.nbytes);  // converted: the file's copy is not read again
    vec_bytes_ += n * int64_t(sizeof(float));
    return out;
  }

 private:
  void check_shape(const gguf::TensorInfo& t, std::initializer_list<int64_t> shape) const {
    bool ok = true;
    auto it = shape.begin();
    for (int d = 0; d < 4; ++d) ok = ok && t.ne[d] == (it != shape.end() ? *it++ : 1);
    if (!ok) {
      std::string want = "[";
      int i = 0;
      for (int64_t s : shape) want += fmt::format("{}{}", i++ ? ", " : "", s);
      fail("{}: tensor '{}' has shape {}, expected {}]", f_.name(), t.name, t.shape_str(), want);
    }
  }

  const gguf::File& f_;
  int64_t& bytes_;
  int64_t& vec_bytes_;
};

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, bool pack) { return from_file(gguf::File::open(path), pack); }

std::unique_ptr<Model> Model::from_file(std::unique_ptr<gguf::File> file, bool pack) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  const gguf::File& f = *m->file_;
  m->hp_ = read_hparams(f);
  HParams& h = m->hp_;
  m->arch_ = find_arch(h.arch);
  if (!m->arch_) fail("{}: architecture '{}' is not supported (llama, qwen2, qwen3)", f.name(), h.arch);
  const ArchSpec& arch = *m->arch_;

  Loader ld(f, m->weight_bytes_, m->vector_bytes_);
  const gguf::TensorInfo* emb = ld.find("token_embd.weight");
  if (!emb) fail("{}: required tensor 'token_embd.weight' is missing", f.name());
  h.n_vocab = int32_t(emb->ne[1]);
  if (auto nv = f.get_uint(h.arch + ".vocab_size"); nv && *nv != uint64_t(h.n_vocab))
    fail("{}: {}.vocab_size = {} but token_embd.weight has {} rows", f.name(), h.arch, *nv, h.n_vocab);
  Weights& w = m->w_;
  w.tok_embd = ld.matrix("token_embd.weight", h.n_embd, h.n_vocab);
  w.output_norm = ld.vec("output_norm.weight", h.n_embd);
  if (ld.find("output.weight")) {
    w.output = ld.matrix("output.weight", h.n_embd, h.n_vocab);
  } else {
    w.output = w.tok_embd;
    w.tied_output = true;
  }
  if (ld.find("rope_freqs.weight")) w.rope_freqs = ld.vec("rope_freqs.weight", h.rope_dim / 2);

  w.layers.resize(size_t(h.n_layer));
  for (int32_t il = 0; il < h.n_layer; ++il) {
    LayerWeights& L = w.layers[size_t(il)];
    const std::string p = fmt::format("blk.{}.", il);
    L.attn_norm = ld.vec(p + "attn_norm.weight", h.n_embd);
    L.wq = ld.matrix(p + "attn_q.weight", h.n_embd, h.n_q());
    L.wk = ld.matrix(p + "attn_k.weight", h.n_embd, h.n_kv_k());
    L.wv = ld.matrix(p + "attn_v.weight", h.n_embd, h.n_kv_v());
    L.wo = ld.matrix(p + "attn_output.weight", h.n_attn_out(), h.n_embd);
    if (arch.qkv_bias) {
      L.bq = ld.vec(p + "attn_q.bias", h.n_q());
      L.bk = ld.vec(p + "attn_k.bias", h.n_kv_k());
      L.bv = ld.vec(p + "attn_v.bias", h.n_kv_v());
    }
    if (arch.qk_norm) {
      L.q_norm = ld.vec(p + "attn_q_norm.weight", h.head_dim_k);
      L.k_norm = ld.vec(p + "attn_k_norm.weight", h.head_dim_k);
    }
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", h.n_embd);
    L.w_gate = ld.matrix(p + "ffn_gate.weight", h.n_embd, h.n_ff);
    L.w_up = ld.matrix(p + "ffn_up.weight", h.n_embd, h.n_ff);
    L.w_down = ld.matrix(p + "ffn_down.weight", h.n_ff, h.n_embd);
  }
  m->streamed_bytes_ = m->weight_bytes_ - (w.tied_output ? 0 : row_bytes(w.tok_embd.type, h.n_embd) * h.n_vocab);
  const char* env = std::getenv("RIDGE_REPACK");
  if (pack && !(env && std::string_view(env) == "0")) m->pack_weights();
  m->note_live_ranges();
  return m;
}

void Model::note_live_ranges() {
  // token_embd is gathered from the file by the forward whatever else is packed; any
  // matrix without panels is multiplied from the file.
  std::vector<const kernels::WeightView*> views{&w_.tok_embd};
  if (!w_.tied_output) views.push_back(&w_.output);
  for (const auto& L : w_.layers)
    for (const auto* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) views.push_back(v);
  live_.clear();
  mapped_bytes_ = 0;
  for (const auto* v : views) {
    const bool read = v == &w_.tok_embd || !v->packed;
    if (!read || !v->data) continue;
    const size_t n = size_t(row_bytes(v->type, v->k) * v->n_out);
    live_.emplace_back(v->data, n);
    mapped_bytes_ += int64_t(n);
  }
}

void Model::pack_weights() {
  // Every matrix the forward multiplies by (token_embd is gathered, not multiplied, unless
  // it doubles as the output head, in which case `output` is its view), in groups whose
  // panels go back to back so that Q/K/V and gate/up can run as one matmul each.
  struct Group {
    std::vector<kernels::WeightView*> parts;
    kernels::WeightView* fused;
  };
  std::vector<Group> groups{{{&w_.output}, nullptr}};
  for (auto& L : w_.layers) {
    groups.push_back({{&L.wq, &L.wk, &L.wv}, &L.wqkv});
    groups.push_back({{&L.wo}, nullptr});
    groups.push_back({{&L.w_gate, &L.w_up}, &L.w_gate_up});
    groups.push_back({{&L.w_down}, nullptr});
  }
  auto align = [](int64_t n) { return (n + 63) / 64 * 64; };
  auto bytes = [](const kernels::WeightView* v) { return kernels::packed_bytes(v->type, v->k, v->n_out); };
  int64_t total = 0;
  for (const auto& g : groups)
    for (auto* v : g.parts)
      if (kernels::gemm_available(v->type)) total += align(bytes(v));
  if (total == 0) return;
  packed_ = Arena(size_t(total));
  ThreadPool pool(default_thread_count());
  int64_t file_total = 0;
  for (const auto& g : groups)
    for (auto* v : g.parts)
      if (kernels::gemm_available(v->type)) file_total += row_bytes(v->type, v->k) * v->n_out;
  Progress progress("loading " + file_->name() + ": repacking weights", file_total, "B");
  int64_t off = 0;
  for (const auto& g : groups) {
    bool fusable = g.fused != nullptr;
    for (size_t i = 0; i < g.parts.size(); ++i) {
      kernels::WeightView* v = g.parts[i];
      fusable = fusable && v->type == g.parts[0]->type && v->k == g.parts[0]->k &&
                (i + 1 == g.parts.size() || v->n_out % kernels::kPanelRows == 0);
      if (!kernels::gemm_available(v->type)) {
        fusable = false;
        continue;
      }
      uint8_t* dst = packed_.data() + off;
      const int64_t n_panels = (v->n_out + kernels::kPanelRows - 1) / kernels::kPanelRows;
      pool.parallel_for(n_panels, 16, [&](int64_t p0, int64_t p1, int) {
        kernels::pack_panels(v->type, v->k, v->n_out, v->data, dst, p0, p1);
      });
      v->packed = dst;
      // The panels replace the file's copy: give its pages back now, tensor by tensor, so
      // the load never holds the file and the panels at once. (A tied head's rows stay:
      // the embedding gather reads them.) Tests that switch to the unpacked kernels
      // later fault them in again from the file.
      if (v->data != w_.tok_embd.data) file_->release_pages(v->data, size_t(row_bytes(v->type, v->k) * v->n_out));
      progress.add(row_bytes(v->type, v->k) * v->n_out);
      off += bytes(v);  // parts of a group back to back
    }
    off = align(off);
    if (fusable) {
      int64_t n = 0;
      for (auto* v : g.parts) n += v->n_out;
      *g.fused = {g.parts[0]->type, g.parts[0]->k, n, nullptr, g.parts[0]->packed};
    }
  }
}

void Model::lock_in_memory() const {
  for (const auto& [p, n] : live_) file_->lock_pages(p, n);
  packed_.lock();
}

}  // namespace ridge
