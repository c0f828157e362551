#include "kernels/cuda/cublas_gemm.h"

#if RIDGE_CUDA
#include <cublas_v2.h>
#include <dlfcn.h>

#include <cstdlib>

#include "core/error.h"

namespace ridge::kernels::cuda {
namespace {

// cublasGemmEx's C signature (the C++ header overloads the name).
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

template <typename F>
F symbol(void* lib, const char* name) {
  void* p = ::dlsym(lib, name);
  if (!p) fail("cuBLAS: {} is missing from the library", name);
  return reinterpret_cast<F>(p);
}

}  // namespace

Cublas::Cublas(cudaStream_t s) {
  const char* env = std::getenv("RIDGE_CUBLAS");
  const char* names[] = {"libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.13", "libcublas.so"};
  if (env && *env) {
    lib_ = ::dlopen(env, RTLD_NOW | RTLD_LOCAL);
    path_ = env;
  } else {
    for (const char* n : names)
      if ((lib_ = ::dlopen(n, RTLD_NOW | RTLD_LOCAL))) {
        path_ = n;
        break;
      }
  }
  if (!lib_)
    fail("the CUDA backend needs cuBLAS for batches of more than a few rows: cannot open {} ({}); put its folder "
         "on LD_LIBRARY_PATH or name the file in RIDGE_CUBLAS",
         env && *env ? env : "libcublas.so.13", ::dlerror());
  auto create = symbol<decltype(&cublasCreate_v2)>(lib_, "cublasCreate_v2");
  auto set_stream = symbol<decltype(&cublasSetStream_v2)>(lib_, "cublasSetStream_v2");
  destroy_ = reinterpret_cast<int (*)(void*)>(symbol<decltype(&cublasDestroy_v2)>(lib_, "cublasDestroy_v2"));
  gemm_ex_ = reinterpret_cast<GemmEx>(symbol<GemmExFn>(lib_, "cublasGemmEx"));
  cublasHandle_t h = nullptr;
  if (create(&h) != CUBLAS_STATUS_SUCCESS) fail("cuBLAS: cannot create a handle");
  handle_ = h;
  if (set_stream(h, s) != CUBLAS_STATUS_SUCCESS) fail("cuBLAS: cannot set the stream");
}

Cublas::~Cublas() {
  if (handle_ && destroy_) destroy_(handle_);
  if (lib_) ::dlclose(lib_);
}

void Cublas::gemm(cudaDataType ab, const void* w, const void* x, float* y, int64_t n_out, int64_t m, int64_t k) {
  RIDGE_CHECK(n_out < (int64_t(1) << 31) && m < (int64_t(1) << 31) && k < (int64_t(1) << 31),
              "cuBLAS GEMM of {} x {} x {} is too large", n_out, m, k);
  const float alpha = 1.f, beta = 0.f;
  // Column-major: y^T [n_out][m] = W^T' ... i.e. C (n_out x m) = op(A) B with A = W seen as
  // k x n_out (transposed), B = x seen as k x m.
  auto f = reinterpret_cast<GemmExFn>(gemm_ex_);
  const cublasStatus_t st = f(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, int(n_out), int(m),
                              int(k), &alpha, w, ab, int(k), x, ab, int(k), &beta, y, CUDA_R_32F, int(n_out),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS GEMM ({} x {} x {}) failed: status {}", n_out, m, k, int(st));
}

}  // namespace ridge::kernels::cuda
#endif
