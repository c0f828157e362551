// ridge info: what a GGUF holds (metadata, tensors), and whether ridge can run it.
#include <cstdio>
#include <utility>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace ridge::cli {
namespace {

// What one decode token reads of the weights: every matrix of every layer (experts: the
// active share of them) and the head; bytes, and the layers' multiply-adds.
std::pair<int64_t, int64_t> decode_weight_reads(const Model& m) {
  const HParams& h = m.hparams();
  double bytes = 0, macs = 0;
  auto add = [&](const kernels::WeightView& v, double share) {
    if (v.n_out == 0) return;
    bytes += share * double(row_bytes(v.type, v.k) * v.n_out);
    macs += share * double(v.k * v.n_out);
  };
  for (const LayerWeights& L : m.weights().layers) {
    for (const auto* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_a, &L.wq_b, &L.wkv_c, &L.wk_pe, &L.w_gate, &L.w_up,
                          &L.w_down, &L.router, &L.gate_shexp, &L.up_shexp, &L.down_shexp})
      add(*v, 1.0);
    for (const auto* heads : {&L.wk_b, &L.wv_b})
      for (const auto& v : *heads) add(v, 1.0);
    const double active = h.moe() ? double(h.n_expert_used) / double(h.n_expert) : 0.0;
    for (const auto* e : {&L.gate_exps, &L.up_exps, &L.down_exps})
      for (const auto& v : *e) add(v, active);
  }
  const int64_t layer_macs = int64_t(macs);
  add(m.weights().output, 1.0);
  return {int64_t(bytes), layer_macs};
}

}  // namespace

namespace {

std::string show(const gguf::Value& v) {
  using T = gguf::ValueType;
  switch (v.type) {
    case T::STRING: return v.str.size() > 80 ? fmt::format("\"{}...\" ({} bytes)", v.str.substr(0, 77), v.str.size())
                                             : fmt::format("\"{}\"", v.str);
    case T::ARRAY: return fmt::format("[{} x {}]", v.count, gguf::value_type_name(v.elem_type));
    case T::F32: case T::F64: return fmt::format("{}", v.f);
    case T::BOOL: return v.u ? "true" : "false";
    case T::I8: case T::I16: case T::I32: case T::I64: return fmt::format("{}", v.i);
    default: return fmt::format("{}", v.u);
  }
}

}  // namespace

int cmd_info(Args& a) {
  const std::string path = resolve_model(a);
  a.finish();
  auto f = gguf::File::open(path);
  std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors, data at byte %llu\n", path.c_str(), f->version(),
              f->kv().size(), f->tensors().size(), (unsigned long long)f->data_offset());
  for (const auto& [k, v] : f->kv()) std::printf("  %-48.*s %s\n", int(k.size()), k.data(), show(v).c_str());
  for (const auto& t : f->tensors())
    std::printf("  %-40.*s %-6s %s\n", int(t.name.size()), t.name.data(), std::string(dtype_name(t.type)).c_str(),
                t.shape_str().c_str());
  if (!f->tensors().empty()) {
    try {
      auto m = Model::from_file(std::move(f), /*pack=*/false);
      const HParams& h = m->hparams();
      std::printf("model: %s, %d layers, n_embd %d, heads %d/%d, head_dim %d, n_ff %d, vocab %d, %.1f MiB\n",
                  h.arch.c_str(), h.n_layer, h.n_embd, h.n_head, h.n_head_kv, h.head_dim_k, h.n_ff, h.n_vocab,
                  double(m->weight_bytes()) / 1048576.0);
      if (h.moe())
        std::printf("experts: %d of %d active, %d wide, %d shared, first %d layers dense\n", h.n_expert_used, h.n_expert,
                    h.n_ff_exp, h.n_expert_shared, h.n_layer_dense_lead);
      if (h.mla())
        std::printf("latent attention: rank %d (q rank %d), heads' key %d value %d, rope %d; KV cache %lld bytes per "
                    "token (f16; int8 %lld) against %lld with full K/V (f16)\n",
                    h.n_lora_kv, h.n_lora_q, h.head_dim_qk_mla, h.head_dim_v_mla, h.rope_dim,
                    (long long)kv_layout_for(h, 16, 0, DType::F16).bytes_per_token(),
                    (long long)kv_layout_for(h, 16, 0, DType::I8).bytes_per_token(),
                    (long long)(int64_t(h.n_layer) * h.n_head * (h.head_dim_qk_mla + h.head_dim_v_mla) * 2));
      if (h.mla())
        std::printf("latent attention's expanded form (prompts, --mla-prefill): attn_k_b transposed at load, %.1f MiB\n",
                    double(m->derived_bytes()) / 1048576.0);
      // The roofline's per-token figures at batch 1: the weight bytes a decode step reads
      // (the gathered token_embd aside; of the experts, the active ones' share) and the
      // multiply-adds of the layer matrices and of the head.
      const auto [bytes, macs] = decode_weight_reads(*m);
      std::printf("per token: %lld weight bytes read, %lld layer multiply-adds, %lld head multiply-adds\n",
                  (long long)bytes, (long long)macs, (long long)(int64_t(h.n_embd) * h.n_vocab));
    } catch (const Error& e) {
      std::printf("not runnable by ridge: %s\n", e.what());
    }
  }
  return 0;
}

}  // namespace ridge::cli
