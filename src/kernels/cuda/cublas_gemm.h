// cuBLAS, opened at run time (dlopen): the binary starts on machines without it (every
// CI machine), and a GEMM that needs it says what is missing. Only the few entry points
// the backend calls are looked up.
#pragma once
#if RIDGE_CUDA
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>
#include <string>

namespace ridge::kernels::cuda {

class Cublas {
 public:
  // Throws ridge::Error when libcublas.so.13 cannot be opened (RIDGE_CUBLAS names
  // another file) or a handle cannot be made.
  explicit Cublas(cudaStream_t s);
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // y[m][n_out] (f32) = x[m][k] . W^T, W [n_out][k] row-major and x row-major, both of
  // type ab (CUDA_R_16BF, CUDA_R_16F or CUDA_R_32F); f32 accumulation.
  void gemm(cudaDataType ab, const void* w, const void* x, float* y, int64_t n_out, int64_t m, int64_t k);
  std::string library() const { return path_; }

 private:
  void* lib_ = nullptr;
  void* handle_ = nullptr;
  std::string path_;
  using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, cudaDataType, int, const void*,
                         cudaDataType, int, const void*, void*, cudaDataType, int, int, int);
  GemmEx gemm_ex_ = nullptr;
  int (*destroy_)(void*) = nullptr;
};

}  // namespace ridge::kernels::cuda
#endif
