// ridge info: what a GGUF holds (metadata, tensors), and whether ridge can run it.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ridge::cli {
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
      // The roofline's per-token figures: bytes a decode step streams (every weight but
      // the gathered token_embd) and multiply-adds of the layer matrices and of the head.
      const int64_t layer_macs = int64_t(h.n_layer) * h.n_embd * (h.n_q() + h.n_kv_k() + h.n_kv_v() + 3 * int64_t(h.n_ff)) +
                                 int64_t(h.n_layer) * h.n_attn_out() * h.n_embd;
      std::printf("per token: %lld weight bytes streamed, %lld layer multiply-adds, %lld head multiply-adds\n",
                  (long long)m->streamed_weight_bytes(), (long long)layer_macs, (long long)(int64_t(h.n_embd) * h.n_vocab));
    } catch (const Error& e) {
      std::printf("not runnable by ridge: %s\n", e.what());
    }
  }
  return 0;
}

}  // namespace ridge::cli
