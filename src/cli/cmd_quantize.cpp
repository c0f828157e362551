// ridge quantize: rewrite a GGUF with its matrices in another format. Vectors (norms,
// biases) stay as they are; a matrix whose rows do not fit the target's block size falls
// back to f16, as llama-quantize falls back to a type that fits.
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/mkmodel.h"
#include "quant/quant.h"

namespace ridge::cli {

int cmd_quantize(Args& a) {
  const std::string ts = a.str({"--type"}, "");
  const int threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  auto pos = a.positional();
  a.finish();
  if (pos.size() != 2) fail("usage: ridge quantize IN.gguf OUT.gguf --type TYPE");
  auto target = dtype_from_name(ts);
  if (!target || !quant::can_quantize(*target))
    fail("--type '{}' is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1", ts);
  if (pos[0] == pos[1]) fail("input and output are the same file");

  auto in = gguf::File::open(pos[0]);
  gguf::Writer w;
  for (const auto& [k, v] : in->kv())
    if (k != "general.alignment") w.set_value(k, v);
  w.set_u32("general.file_type", gguf_file_type(*target));
  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  int converted = 0, kept = 0;
  for (const auto& t : in->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.n_dims < 2 || t.type == *target) {
      ++kept;
      const gguf::TensorInfo* src = &t;
      w.add_tensor(t.name, t.type, ne, [src](uint8_t* dst) { std::memcpy(dst, src->data, src->nbytes); });
      continue;
    }
    if (!dtype_info(t.type).supported)
      fail("{}: tensor '{}' has type {}, which ridge cannot convert", pos[0], t.name, dtype_name(t.type));
    const DType to = t.ne[0] % dtype_info(*target).block_size == 0 ? *target : DType::F16;
    ++converted;
    const gguf::TensorInfo* src = &t;
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
  w.write(pos[1]);
  std::fprintf(stderr, "wrote %s: %d tensors converted to %s, %d kept\n", pos[1].c_str(), converted,
               std::string(dtype_name(*target)).c_str(), kept);
  return 0;
}

}  // namespace ridge::cli
