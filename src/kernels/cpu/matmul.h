// y = x · W^T for a weight matrix in any supported GGUF format.
//   W: [n_out rows][k] in its stored format (row stride = row_bytes(type, k))
//   x: [m][k] f32, y: [m][n_out] f32 (row stride ldy)
// With packed panels on the AVX-512 path the GEMM of gemm.h runs; otherwise activation
// rows are converted to the form the weight's dot consumes (f32 or 8-bit blocks) and
// every output element is one dot of a weight row with an activation row. Either way
// work is split over output rows (and activation rows), never over k, so a value never
// depends on m, on the thread count, or on which thread ran it (batch invariance).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/tensors.h"

namespace ridge::kernels {

// The activation rows of a matmul made on the fly: fn(ctx, i, out) writes row i (k
// floats) to out. An op whose only reader is one matmul (a norm, SwiGLU) runs this way
// inside the matmul's activation quantization, row by row into a per-thread buffer: no
// pass over a full activation matrix and no pool round of its own.
struct RowSource {
  void* ctx = nullptr;
  void (*fn)(void* ctx, int64_t i, float* out) = nullptr;
  template <class F>  // f(int64_t i, float* out); must outlive the call that reads it
  static RowSource of(F& f) {
    return {&f, [](void* c, int64_t i, float* out) { (*static_cast<F*>(c))(i, out); }};
  }
};

// Panels per task of a call's streaming (decode) matmuls over np_all panels: whole panel
// groups, up to the tuned most (TypeTuning::task_panels, batch_task_panels), while every
// thread still gets 4 tasks or more. (The tuner reads it too: sizes that give its matrices
// the same tasks on this many threads are one candidate there.)
int64_t decode_panels_per_task(int64_t np_all, int threads, int64_t task_panels);

class Matmul {
 public:
  // Reuses its activation scratch across calls (one per forward pass).
  void run(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y, int64_t ldy);
  void run(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, float* y) {
    run(pool, w, x, m, y, w.n_out);
  }

  // Fused matrices (Model's wqkv, w_gate_up): the packed panels of several matrices back
  // to back, each n_out a multiple of 16 but the last; outs split w.n_out in order. One
  // activation quantization and one pass over the thread pool for all of them.
  void run_fused(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, std::initializer_list<MatmulOut> outs);

  // run / run_fused with the activation rows from a RowSource: the same bits as making
  // the rows first and passing them. Only where takes_rows(w): packed weights whose
  // activations the GEMM quantizes per row (the int8 formats).
  static bool takes_rows(const WeightView& w);
  // Many matmuls of one packed int8 type and width (GroupedMatmul: a mixture of experts'
  // active experts) in two rounds of the pool in all, one quantizing every item's
  // activation rows and one running every item's panels, instead of two rounds per item:
  // the same bits as run / run_fused per item. Only where takes_rows of each weight.
  void run_grouped(ThreadPool& pool, std::span<const GroupedMatmul> items);
  void run(ThreadPool& pool, const WeightView& w, RowSource x, int64_t m, float* y);
  void run_fused(ThreadPool& pool, const WeightView& w, RowSource x, int64_t m, std::initializer_list<MatmulOut> outs);

 private:
  static void check_outs(const WeightView& w, std::initializer_list<MatmulOut> outs);
  // x's rows as the packed GEMM reads them (lda: floats or blocks between rows): ActQ8
  // rows in act_ for the int8 formats, else x itself. src, if set, makes the rows.
  const void* gemm_act(ThreadPool& pool, const WeightView& w, const float* x, const RowSource* src, int64_t m,
                       int64_t& lda);
  void run_packed(ThreadPool& pool, const WeightView& w, const float* x, const RowSource* src, int64_t m,
                  const MatmulOut* outs, size_t n_outs, int64_t ldy);

  std::vector<uint8_t> act_;     // [m][act_row_bytes]
  std::vector<int32_t> owner_;   // run_grouped: [rows] the item of each activation row
  std::vector<int64_t> first_;   // run_grouped: [items] its first activation row
  std::vector<float> src_rows_;  // [threads][k]: a RowSource's row before quantization
};

}  // namespace ridge::kernels
