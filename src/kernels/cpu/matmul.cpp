#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed.h"
#include "quant/quant.h"

namespace ridge::kernels {

void Matmul::run(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y, int64_t ldy) {
  if (m <= 0 || w.n_out <= 0) return;
  if (w.packed && gemm_available(w.type)) return run_packed(pool, w, x, m, y, ldy);
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

void Matmul::run_packed(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y, int64_t ldy) {
  GemmArgs g{w.type, w.packed, w.k, w.n_out, x, w.k, y, ldy};
  if (w.type != DType::F32 && w.type != DType::F16 && w.type != DType::BF16) {
    const int64_t nb = w.k / 32;
    act_.resize(size_t(m * nb) * sizeof(ActQ8));
    auto* a = reinterpret_cast<ActQ8*>(act_.data());
    pool.parallel_for(m, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) quantize_act_gemm(x + i * w.k, a + i * nb, w.k);
    });
    g.act = a;
    g.lda = nb;
  }
  // Tasks: groups of 4 panels (64 output rows) x chunks of up to 48 activation rows.
  // Consecutive tasks share a panel group, so its weights stay in L2 while the row
  // chunks pass; 4 panels keep 4 weight streams in flight for decode.
  const int64_t n_panels = (w.n_out + kPanelRows - 1) / kPanelRows;
  const int64_t pg = 4, mc = 48;
  const int64_t n_pg = (n_panels + pg - 1) / pg, n_mc = (m + mc - 1) / mc;
  pool.run(n_pg * n_mc, [&](int64_t t, int) {
    const int64_t p0 = (t / n_mc) * pg, m0 = (t % n_mc) * mc;
    gemm_panels(g, m0, std::min(m, m0 + mc), p0, std::min(n_panels, p0 + pg));
  });
}

}  // namespace ridge::kernels
