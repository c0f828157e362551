// A CUDA runtime call's error as a ridge::Error naming the call (RIDGE_CU(cudaMalloc(...))).
#pragma once
#if RIDGE_CUDA
#include <cuda_runtime.h>

#include "core/error.h"

namespace ridge::kernels::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA: {} failed: {}", what, cudaGetErrorString(e));
}

}  // namespace ridge::kernels::cuda

#define RIDGE_CU(call) ::ridge::kernels::cuda::check((call), #call)
#endif
