// `ridge bench kernels --device cuda`: a device backend's matmuls on a model's shapes,
// through the Backend interface alone (what the forward calls), timed back to back as a
// decode step issues them: the GEMV's achieved bandwidth against the measured HBM copy
// rate, the GEMM's rate against the measured bf16 peak.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "tools/bench_kernels.h"

namespace ridge {

struct BackendKernelResult {
  std::string shape;
  DType type;
  int64_t m, k, n_out;
  double us;     // per call, median of rounds
  double gbs;    // weight bytes (and x, y) per second
  double tflops;
};

// Each shape x type x m: a ring of weight copies over ring_bytes (none found in the L2),
// called back to back for `seconds`, synchronized at the end.
std::vector<BackendKernelResult> bench_backend_matmul(kernels::Backend& be, const std::vector<KernelShape>& shapes,
                                                      const std::vector<DType>& types, const std::vector<int64_t>& ms,
                                                      int64_t ring_bytes, double seconds);

}  // namespace ridge
