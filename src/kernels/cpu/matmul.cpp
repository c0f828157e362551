#include "kernels/cpu/matmul.h"

#include "core/error.h"
#include "quant/quant.h"

namespace ridge::kernels {

void Matmul::run(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y, int64_t ldy) {
  if (m <= 0 || w.n_out <= 0) return;
  const auto dot = quant::dot_fn(w.type);
  const int64_t wrow = row_bytes(w.type, w.k);

  const void* act = x;
  int64_t arow = w.k * int64_t(sizeof(float));
  if (quant::act_kind(w.type) != quant::ActKind::F32) {
    arow = quant::act_row_bytes(w.type, w.k);
    act_.resize(size_t(m * arow));
    pool.parallel_for(m, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) quant::prepare_act(w.type, x + i * w.k, act_.data() + i * arow, w.k);
    });
    act = act_.data();
  }
  const auto* a = static_cast<const uint8_t*>(act);

  // Chunks of output rows: a weight row is read once from memory and reused for all m
  // activation rows while it sits in L1; several chunks per thread keep both cores busy
  // to the end.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(64, w.n_out / (pool.size() * 8)));
  pool.parallel_for(w.n_out, chunk, [&](int64_t b, int64_t e, int) {
    for (int64_t j = b; j < e; ++j) {
      const uint8_t* wr = w.data + j * wrow;
      for (int64_t i = 0; i < m; ++i) y[i * ldy + j] = dot(wr, a + i * arow, w.k);
    }
  });
}

}  // namespace ridge::kernels
