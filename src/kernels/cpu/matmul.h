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
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"

namespace ridge::kernels {

struct WeightView {
  DType type = DType::F32;
  int64_t k = 0;       // row length (input features)
  int64_t n_out = 0;   // rows (output features)
  const uint8_t* data = nullptr;    // GGUF rows
  const uint8_t* packed = nullptr;  // 16-row panels (packed.h), or null: per-row dots
};

// One output of a fused matmul: `n_out` consecutive output features into y[m][n_out].
struct MatmulOut {
  int64_t n_out;
  float* y;
};

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

 private:
  void run_packed(ThreadPool& pool, const WeightView& w, const float* x, int64_t m, const MatmulOut* outs,
                  size_t n_outs, int64_t ldy);

  std::vector<uint8_t> act_;  // [m][act_row_bytes]
};

}  // namespace ridge::kernels
