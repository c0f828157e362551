#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "kernels/cpu/ops.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/tuning.h"
#include "quant/quant.h"

namespace ridge::kernels {

void Matmul::run(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y, int64_t ldy) {
  if (m <= 0 || w.n_out <= 0) return;
  if (w.packed && gemm_available(w.type)) {
    const MatmulOut out{w.n_out, y};
    return run_packed(pool, w, x, nullptr, m, &out, 1, ldy);
  }
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

// A fused matmul's outputs split w's rows in order, each starting on a panel.
void Matmul::check_outs(const WeightView& w, std::initializer_list<MatmulOut> outs) {
  int64_t total = 0;
  for (const auto& o : outs) {
    RIDGE_CHECK(total % kPanelRows == 0, "fused matmul: an output starts inside a panel");
    total += o.n_out;
  }
  RIDGE_CHECK(total == w.n_out, "fused matmul: outputs cover {} of {} features", total, w.n_out);
}

void Matmul::run_fused(ThreadPool& pool, const WeightView& w, const float* x, int64_t m,
                       std::initializer_list<MatmulOut> outs) {
  RIDGE_CHECK(w.packed && gemm_available(w.type), "a fused matmul needs packed weights and the packed GEMM");
  check_outs(w, outs);
  if (m > 0) run_packed(pool, w, x, nullptr, m, outs.begin(), outs.size(), 0);
}

bool Matmul::takes_rows(const WeightView& w) {
  return w.packed && gemm_available(w.type) && quant::act_kind(w.type) == quant::ActKind::Q8A;
}

void Matmul::run(ThreadPool& pool, const WeightView& w, RowSource x, int64_t m, float* y) {
  RIDGE_CHECK(takes_rows(w), "a matmul from a row source needs packed int8 weights");
  if (m <= 0 || w.n_out <= 0) return;
  const MatmulOut out{w.n_out, y};
  run_packed(pool, w, nullptr, &x, m, &out, 1, w.n_out);
}

void Matmul::run_fused(ThreadPool& pool, const WeightView& w, RowSource x, int64_t m,
                       std::initializer_list<MatmulOut> outs) {
  RIDGE_CHECK(takes_rows(w), "a matmul from a row source needs packed int8 weights");
  check_outs(w, outs);
  if (m > 0) run_packed(pool, w, nullptr, &x, m, outs.begin(), outs.size(), 0);
}

const void* Matmul::gemm_act(ThreadPool& pool, const WeightView& w, const float* x, const RowSource* src, int64_t m,
                             int64_t& lda) {
  lda = w.k;
  if (w.type == DType::F8_E4M3_B128 && w.fp8_bf16) {
    RIDGE_CHECK(fp8_bf16_available(), "FP8 weights packed for the bf16 path, which this CPU path lacks");
    act_.resize(size_t(m * w.k) * sizeof(uint16_t));
    auto* a = reinterpret_cast<uint16_t*>(act_.data());
    pool.parallel_for(m, 8, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) detail::round_bf16_avx512(x + i * w.k, a + i * w.k, w.k);
    });
    return a;
  }
  if (quant::act_kind(w.type) != quant::ActKind::Q8A) return x;
  const int64_t nb = w.k / 32;
  act_.resize(size_t(m * nb) * sizeof(ActQ8));
  auto* a = reinterpret_cast<ActQ8*>(act_.data());
  if (src) src_rows_.resize(size_t(pool.size() * w.k));
  pool.parallel_for(m, 8, [&](int64_t b, int64_t e, int thread) {
    float* row = src ? src_rows_.data() + thread * w.k : nullptr;
    for (int64_t i = b; i < e; ++i) {
      if (src) src->fn(src->ctx, i, row);
      quantize_act_gemm(src ? row : x + i * w.k, a + i * nb, w.k);
    }
  });
  lda = nb;
  return a;
}

int64_t decode_panels_per_task(int64_t np_all, int threads, int64_t task_panels) {
  return std::clamp<int64_t>(np_all / (int64_t(threads) * 4) / 4 * 4, 4, std::max<int64_t>(4, task_panels));
}

void Matmul::run_packed(ThreadPool& pool, const WeightView& w, const float* x, const RowSource* src, int64_t m,
                        const MatmulOut* outs, size_t n_outs, int64_t ldy) {
  int64_t lda = 0;
  const void* act = gemm_act(pool, w, x, src, m, lda);
  // Tasks: groups of pg panels x chunks of up to 48 activation rows, per output.
  // Consecutive tasks share a panel group, so its weights stay in L2 while the row chunks
  // pass (prefill). Decode (one chunk: m = 1 runs 4 weight streams in flight, a decode
  // batch 4 panels at a time) takes long runs of panels per task (TypeTuning::task_panels,
  // batch_task_panels), still 4 tasks per thread or more over all the call's outputs (a
  // fused q/k/v's small k and v take as long tasks as q): panels lie back to back, so a
  // thread that walks several groups in a row keeps one of its streams warm from group to
  // group, where with 4 per task it jumped past the other thread's group at every task
  // (docs/BENCHMARKS.md, issue 6 sessions 4 and 7, issues 22 and 25 session 39).
  // The panels per task, the prefetch distance, the weight streams per decode task, the
  // row tiles and where prefill converts float weights are tuned per CPU (tuning.h);
  // none changes a bit of y.
  constexpr int64_t mc = kGemmRowChunk;
  const TypeTuning& tn = kernel_tuning().of(w.type);
  int64_t np_all = 0;
  for (size_t i = 0; i < n_outs; ++i) np_all += (outs[i].n_out + kPanelRows - 1) / kPanelRows;
  const int64_t pg =
      m > mc ? 4 : decode_panels_per_task(np_all, pool.size(), m == 1 ? tn.task_panels : tn.batch_task_panels);
  struct Seg {
    GemmArgs g;
    int64_t n_panels, first_task, pg;
  };
  Seg segs[4];
  RIDGE_CHECK(n_outs <= 4, "fused matmul of more than 4 outputs");
  const int64_t n_mc = (m + mc - 1) / mc;
  int64_t tasks = 0;
  const uint8_t* packed = w.packed;
  const int64_t pbytes = panel_bytes(w.type, w.k);
  for (size_t i = 0; i < n_outs; ++i) {
    const int64_t np = (outs[i].n_out + kPanelRows - 1) / kPanelRows;
    segs[i] = {{w.type, packed, w.k, outs[i].n_out, act, lda, outs[i].y, ldy > 0 ? ldy : outs[i].n_out, n_mc == 1,
                w.type == DType::F8_E4M3_B128 && w.fp8_bf16, m == 1 ? tn.decode_ahead : tn.batch_ahead,
                m == 1 ? tn.decode_streams : tn.batch_streams, tn.batch_even != 0, tn.tile_rows, tn.convert_once != 0},
               np, tasks, pg};
    tasks += (np + pg - 1) / pg * n_mc;
    packed += np * pbytes;
  }
  pool.run(tasks, [&](int64_t t, int) {
    size_t i = 0;
    while (i + 1 < n_outs && t >= segs[i + 1].first_task) ++i;
    const Seg& s = segs[i];
    const int64_t lt = t - s.first_task;
    const int64_t p0 = (lt / n_mc) * s.pg, m0 = (lt % n_mc) * mc;
    gemm_panels(s.g, m0, std::min(m, m0 + mc), p0, std::min(s.n_panels, p0 + s.pg));
  });
}

void Matmul::run_grouped(ThreadPool& pool, std::span<const GroupedMatmul> items) {
  if (items.empty()) return;
  const WeightView& w0 = *items[0].w;
  const int64_t k = w0.k, nb = k / 32;
  int64_t rows = 0;
  for (const GroupedMatmul& it : items) {
    RIDGE_CHECK(takes_rows(*it.w) && it.w->type == w0.type && it.w->k == k,
                "a grouped matmul needs packed int8 weights of one type and width");
    rows += it.m;
  }
  if (rows == 0) return;
  // Every item's activation rows, quantized in one round: row r belongs to item owner[r].
  owner_.resize(size_t(rows));
  first_.resize(items.size());
  for (int64_t i = 0, r = 0; i < int64_t(items.size()); ++i) {
    first_[size_t(i)] = r;
    for (int64_t j = 0; j < items[size_t(i)].m; ++j) owner_[size_t(r++)] = int32_t(i);
  }
  act_.resize(size_t(rows * nb) * sizeof(ActQ8));
  auto* a = reinterpret_cast<ActQ8*>(act_.data());
  src_rows_.resize(size_t(pool.size() * k));
  pool.parallel_for(rows, 8, [&](int64_t b, int64_t e, int thread) {
    float* row = src_rows_.data() + thread * k;
    for (int64_t r = b; r < e; ++r) {
      const GroupedMatmul& it = items[size_t(owner_[size_t(r)])];
      const int64_t j = r - first_[size_t(owner_[size_t(r)])];
      const float* x = it.x + j * k;
      if (it.gate) {
        swiglu(it.gate + j * k, it.up + j * k, row, k);
        x = row;
      }
      quantize_act_gemm(x, a + r * nb, k);
    }
  });
  // Every item's panels in one round: tasks as run_packed makes them per item.
  constexpr int64_t mc = kGemmRowChunk;
  const TypeTuning& tn = kernel_tuning().of(w0.type);
  const int64_t pbytes = panel_bytes(w0.type, k);
  struct Seg {
    GemmArgs g;
    int64_t n_panels, first_task, pg, m, n_mc;
  };
  std::vector<Seg> segs;
  int64_t tasks = 0;
  // The panels per task of the items that stream (m <= mc), sized over all of them
  // together: the threads share one round of every item's tasks, so an expert of few
  // panels still gets whole runs of them (with 4 per task a thread jumped past the other
  // thread's group at every task, as run_packed's comment has it).
  int64_t np_all = 0;
  for (const GroupedMatmul& it : items)
    for (int32_t o = 0; o < it.n_outs && it.m > 0 && it.m <= mc; ++o)
      np_all += (it.outs[o].n_out + kPanelRows - 1) / kPanelRows;
  const int64_t pg_one = decode_panels_per_task(np_all, pool.size(), tn.task_panels);
  const int64_t pg_batch = decode_panels_per_task(np_all, pool.size(), tn.batch_task_panels);
  for (size_t i = 0; i < items.size(); ++i) {
    const GroupedMatmul& it = items[i];
    if (it.m == 0) continue;
    const int64_t m = it.m, n_mc = (m + mc - 1) / mc;
    const uint8_t* packed = it.w->packed;
    int64_t n_total = 0;
    for (int32_t o = 0; o < it.n_outs; ++o) n_total += it.outs[o].n_out;
    RIDGE_CHECK(n_total == it.w->n_out, "grouped matmul: outputs cover {} of {} features", n_total, it.w->n_out);
    RIDGE_CHECK(it.n_outs == 1 || it.outs[0].n_out % kPanelRows == 0, "grouped matmul: an output starts inside a panel");
    for (int32_t o = 0; o < it.n_outs; ++o) {
      const MatmulOut& out = it.outs[o];
      const int64_t np = (out.n_out + kPanelRows - 1) / kPanelRows;
      const int64_t pg = m > mc ? 4 : m == 1 ? pg_one : pg_batch;
      segs.push_back({{w0.type, packed, k, out.n_out, a + first_[i] * nb, nb, out.y, out.n_out, n_mc == 1, false,
                       m == 1 ? tn.decode_ahead : tn.batch_ahead, m == 1 ? tn.decode_streams : tn.batch_streams,
                       tn.batch_even != 0, tn.tile_rows, tn.convert_once != 0},
                      np, tasks, pg, m, n_mc});
      tasks += (np + pg - 1) / pg * n_mc;
      packed += np * pbytes;
    }
  }
  pool.run(tasks, [&](int64_t t, int) {
    const auto it = std::upper_bound(segs.begin(), segs.end(), t, [](int64_t v, const Seg& s) { return v < s.first_task; });
    const Seg& s = *(it - 1);
    const int64_t lt = t - s.first_task;
    const int64_t p0 = (lt / s.n_mc) * s.pg, m0 = (lt % s.n_mc) * mc;
    gemm_panels(s.g, m0, std::min(s.m, m0 + mc), p0, std::min(s.n_panels, p0 + s.pg));
  });
}

}  // namespace ridge::kernels
