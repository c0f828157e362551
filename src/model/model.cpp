#include "model/model.h"

#include <algorithm>

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"
#include "core/progress.h"
#include "core/threadpool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed.h"
#include "model/hf_checkpoint.h"
#include "quant/quant.h"

namespace ridge {

std::unique_ptr<Model> Model::load(const std::string& path, bool pack, TpShard shard, PpStage pp) {
  std::unique_ptr<Model> m = is_hf_checkpoint_dir(path) ? from_file(open_hf_checkpoint(path), pack, shard, pp)
                                                         : from_file(gguf::File::open(path), pack, shard, pp);
  m->path_ = path;
  return m;
}

std::unique_ptr<Model> Model::from_file(std::unique_ptr<gguf::File> file, bool pack, TpShard shard, PpStage pp) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  const gguf::File& f = *m->file_;
  m->hp_ = read_hparams(f);
  HParams& h = m->hp_;
  m->arch_ = find_arch(h.arch);
  if (!m->arch_) fail("{}: architecture '{}' is not supported ({})", f.name(), h.arch, arch_names());
  const ArchSpec& arch = *m->arch_;

  TensorLoader ld(f, m->weight_bytes_, m->vector_bytes_);
  const gguf::TensorInfo* emb = ld.find("token_embd.weight");
  if (!emb) fail("{}: required tensor 'token_embd.weight' is missing", f.name());
  h.n_vocab = int32_t(emb->ne[1]);
  if (auto nv = f.get_uint(h.arch + ".vocab_size"); nv && *nv != uint64_t(h.n_vocab))
    fail("{}: {}.vocab_size = {} but token_embd.weight has {} rows", f.name(), h.arch, *nv, h.n_vocab);
  Weights& w = m->w_;
  arch.load(ld, h, w);
  // The stage's layers first: the shard then copies only their columns.
  cut_layers(pp, f.name(), h, w);
  m->pp_ = pp;
  m->shard_ = shard;
  m->split_ = shard_weights(shard, f.name(), h, w, m->sliced_);
  m->derive_weights();
  // The embedding tables are gathered a row per token, not streamed.
  m->streamed_bytes_ = m->weight_bytes_ - (w.tied_output ? 0 : row_bytes(w.tok_embd.type, h.n_embd) * h.n_vocab);
  if (const gguf::TensorInfo* pos = arch.learned_pos ? ld.find("position_embd.weight") : nullptr)
    m->streamed_bytes_ -= int64_t(pos->nbytes);
  const char* env = std::getenv("RIDGE_REPACK");
  if (pack && !(env && std::string_view(env) == "0")) m->pack_weights();
  m->note_live_ranges();
  return m;
}

void Model::derive_weights() {
  if (!hp_.mla()) return;
  // Each head's wk_b [C][nope] transposed to [nope][C]. f32, f16 and bf16 files keep
  // their type (a transpose is exact); a quantized file's values go to q8_0 (blocks of 32
  // along the rank: a second rounding, at 8 bits well below a 4- to 6-bit file's own), so
  // the decompression runs in the int8 GEMM as the file's other matrices do. Ranks that
  // are no multiple of 32 take f16.
  const int64_t C = hp_.n_lora_kv, nope = hp_.head_dim_qk_mla - hp_.rope_dim;
  // (A pipeline stage holds its own layers only: the others have no heads.)
  const auto first = std::find_if(w_.layers.begin(), w_.layers.end(), [](const LayerWeights& L) { return !L.wk_b.empty(); });
  if (first == w_.layers.end()) return;
  const DType src = first->wk_b[0].type;
  const DType t = src == DType::F32 || src == DType::F16 || src == DType::BF16 ? src
                  : C % 32 == 0                                              ? DType::Q8_0
                                                                              : DType::F16;
  const int64_t head_bytes = row_bytes(t, C) * nope;
  int64_t heads = 0;
  for (const auto& L : w_.layers) heads += int64_t(L.wk_b.size());
  derived_ = Arena(size_t(head_bytes * heads));
  // The views first (and the checks, on this thread), then every head's transpose over the
  // pool: a V3 file has 7,808 heads of 64K values, seconds of load on one core.
  std::vector<std::pair<const kernels::WeightView*, uint8_t*>> work;
  uint8_t* dst = derived_.data();
  for (auto& L : w_.layers) {
    L.wk_b_t.clear();
    for (const kernels::WeightView& v : L.wk_b) {
      RIDGE_CHECK(v.type == src && v.k == nope && v.n_out == C, "attn_k_b heads differ in type or shape");
      L.wk_b_t.push_back({t, C, nope, dst, nullptr, false});
      work.emplace_back(&v, dst);
      dst += head_bytes;
    }
  }
  ThreadPool pool(default_thread_count());
  const int64_t per_thread = C * nope + C;
  std::vector<float> buf(static_cast<size_t>(per_thread * pool.size()));
  pool.parallel_for(int64_t(work.size()), 1, [&](int64_t b, int64_t e, int thread) {
    float* a = buf.data() + thread * per_thread;  // [C][nope] the head's values
    float* col = a + C * nope;                    // [C] one column of them
    for (int64_t i = b; i < e; ++i) {
      const auto [v, out] = work[size_t(i)];
      for (int64_t r = 0; r < C; ++r) quant::dequantize_row(v->type, v->data + r * row_bytes(v->type, nope), a + r * nope, nope);
      for (int64_t n = 0; n < nope; ++n) {
        for (int64_t r = 0; r < C; ++r) col[r] = a[r * nope + n];
        quant::quantize_row(t, col, out + n * row_bytes(t, C), C);
      }
    }
  });
}

void Model::note_live_ranges() {
  // token_embd is gathered from the file by the forward whatever else is packed; any
  // matrix without panels is multiplied from the file.
  std::vector<const kernels::WeightView*> views{&w_.tok_embd};
  if (!w_.tied_output) views.push_back(&w_.output);
  for (const auto& L : w_.layers) {
    for (const auto* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.wq_a, &L.wq_b,
                          &L.wkv_c, &L.wk_pe, &L.gate_shexp, &L.up_shexp, &L.down_shexp})
      views.push_back(v);
    for (const auto* e : {&L.gate_exps, &L.up_exps, &L.down_exps, &L.wk_b, &L.wv_b})
      for (const auto& v : *e) views.push_back(&v);
  }
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
  std::vector<Group> groups;
  if (w_.output.data) groups.push_back({{&w_.output}, nullptr});  // none on a pipeline's earlier stages
  for (auto& L : w_.layers) {
    if (!L.wo.data) continue;  // a layer another pipeline stage runs
    if (L.wkv_c.data) {  // latent attention: q (or q_a), the latent and the rope key read one input
      groups.push_back({{L.wq_a.data ? &L.wq_a : &L.wq, &L.wkv_c, &L.wk_pe}, &L.wqkv});
      if (L.wq_b.data) groups.push_back({{&L.wq_b}, nullptr});
      for (auto& v : L.wk_b) groups.push_back({{&v}, nullptr});
      for (auto [heads, all] : {std::pair{&L.wv_b, &L.wv_b_all}, std::pair{&L.wk_b_t, &L.wk_b_t_all}}) {
        Group g{{}, all};
        for (auto& v : *heads) g.parts.push_back(&v);
        groups.push_back(g);
      }
    } else {
      groups.push_back({{&L.wq, &L.wk, &L.wv}, &L.wqkv});
    }
    groups.push_back({{&L.wo}, nullptr});
    if (L.w_gate.data) groups.push_back({{&L.w_gate, &L.w_up}, &L.w_gate_up});
    else if (L.w_up.data) groups.push_back({{&L.w_up}, nullptr});  // an ungated FFN
    if (L.w_down.data) groups.push_back({{&L.w_down}, nullptr});
    if (L.router.data) groups.push_back({{&L.router}, nullptr});
    if (L.down_shexp.data) {
      groups.push_back({{&L.gate_shexp, &L.up_shexp}, &L.gate_up_shexp});
      groups.push_back({{&L.down_shexp}, nullptr});
    }
    L.gate_up_exps.assign(L.gate_exps.size(), {});
    for (size_t e = 0; e < L.gate_exps.size(); ++e) {
      if (!L.down_exps[e].data) continue;  // another rank's expert (expert parallel)
      groups.push_back({{&L.gate_exps[e], &L.up_exps[e]}, &L.gate_up_exps[e]});
      groups.push_back({{&L.down_exps[e]}, nullptr});
    }
  }
  auto align = [](int64_t n) { return (n + 63) / 64 * 64; };
  auto bytes = [](const kernels::WeightView* v) { return kernels::packed_bytes(v->type, v->k, v->n_out); };
  int64_t total = 0;
  for (const auto& g : groups)
    for (auto* v : g.parts)
      if (kernels::gemm_available(v->type)) total += align(bytes(v));
  if (total == 0) return;
  packed_ = Arena(size_t(total));
  // Chosen here, on this thread (a bad RIDGE_FP8_PATH is an error, not a worker's throw),
  // once for every FP8 matrix: the views carry it to the GEMM.
  const bool fp8_bf16 = fp8_path() == Fp8Path::Bf16;
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
        kernels::pack_panels(v->type, v->k, v->n_out, v->data, dst, p0, p1, fp8_bf16);
      });
      v->packed = dst;
      v->fp8_bf16 = v->type == DType::F8_E4M3_B128 && fp8_bf16;
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
      *g.fused = {g.parts[0]->type, g.parts[0]->k, n, nullptr, g.parts[0]->packed, g.parts[0]->fp8_bf16};
    }
  }
}

void Model::lock_in_memory() const {
  for (const auto& [p, n] : live_) file_->lock_pages(p, n);
  packed_.lock();
  // The derived matrices are read from derived_ only where they were not packed.
  const auto first = std::find_if(w_.layers.begin(), w_.layers.end(), [](const LayerWeights& L) { return !L.wk_b_t.empty(); });
  if (derived_.size() && first != w_.layers.end() && !first->wk_b_t[0].packed) derived_.lock();
}

}  // namespace ridge
