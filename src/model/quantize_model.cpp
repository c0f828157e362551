#include "model/quantize_model.h"

#include <cstring>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/mkmodel.h"
#include "quant/quant.h"

namespace ridge {

QuantizeReport quantize_model(const std::string& in_path, const std::string& out_path, DType target, int threads) {
  if (!quant::can_quantize(target))
    fail("cannot quantize to {} (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1)", dtype_name(target));
  if (in_path == out_path) fail("input and output are the same file");
  auto in = gguf::File::open(in_path);
  gguf::Writer w;
  for (const auto& [k, v] : in->kv())
    if (k != "general.alignment") w.set_value(k, v);
  w.set_u32("general.file_type", gguf_file_type(target));
  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  QuantizeReport rep;
  for (const auto& t : in->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const gguf::TensorInfo* src = &t;
    if (t.n_dims < 2 || t.type == target) {
      ++rep.kept;
      w.add_tensor(t.name, t.type, ne, [src](uint8_t* dst) { std::memcpy(dst, src->data, src->nbytes); });
      continue;
    }
    if (!dtype_info(t.type).supported)
      fail("{}: tensor '{}' has type {}, which ridge cannot convert", in_path, t.name, dtype_name(t.type));
    const bool fits = t.ne[0] % dtype_info(target).block_size == 0;
    const DType to = fits ? target : DType::F16;
    ++(fits ? rep.converted : rep.fallback);
    w.add_tensor(t.name, to, ne, [src, to, &pool](uint8_t* dst) {
      const int64_t k = src->ne[0], rows = src->n_elements() / k;
      const int64_t in_rb = row_bytes(src->type, k), out_rb = row_bytes(to, k);
      pool.parallel_for(rows, 64, [&](int64_t lo, int64_t hi, int) {
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
