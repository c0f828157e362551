// ridge peaks --device cuda: the ceilings the roofline of a GPU run is drawn against,
// measured here rather than read off a datasheet.
#include "kernels/cuda/cuda_backend.h"

#include "core/error.h"

#if RIDGE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ridge::kernels {
namespace {

// The median time of `reps` runs of f, in seconds, after two warm-up runs.
template <typename F>
double median_seconds(cudaStream_t s, int reps, F&& f) {
  cudaEvent_t a, b;
  RIDGE_CU(cudaEventCreate(&a));
  RIDGE_CU(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    RIDGE_CU(cudaEventRecord(a, s));
    f();
    RIDGE_CU(cudaEventRecord(b, s));
    RIDGE_CU(cudaEventSynchronize(b));
    float ms = 0;
    RIDGE_CU(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

CudaPeaks cuda_peaks() {
  std::string why;
  if (!cuda_available(&why)) fail("ridge peaks --device cuda: no CUDA device ({})", why);
  CudaPeaks p;
  cudaDeviceProp prop{};
  RIDGE_CU(cudaGetDeviceProperties(&prop, 0));
  p.device = fmt::format("{}, {} SMs, {:.1f} GiB, L2 {} MiB", prop.name, prop.multiProcessorCount,
                         double(prop.totalGlobalMem) / double(1 << 30), prop.l2CacheSize >> 20);
  cudaStream_t s;
  RIDGE_CU(cudaStreamCreate(&s));
  // A copy of 4 GiB (far past the L2): bytes read plus bytes written.
  const size_t bytes = size_t(4) << 30;
  void *a = nullptr, *b = nullptr;
  RIDGE_CU(cudaMalloc(&a, bytes));
  RIDGE_CU(cudaMalloc(&b, bytes));
  RIDGE_CU(cudaMemset(a, 1, bytes));
  const double tc = median_seconds(s, 10, [&] { RIDGE_CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  p.hbm_gbs = 2.0 * double(bytes) / tc / 1e9;
  RIDGE_CU(cudaFree(b));
  RIDGE_CU(cudaFree(a));

  // 8192^3 GEMMs through the backend's cuBLAS entry, on random-ish (non-zero) data.
  const int64_t n = 8192;
  void *w = nullptr, *x = nullptr;
  float* y = nullptr;
  RIDGE_CU(cudaMalloc(&w, size_t(n * n) * 4));
  RIDGE_CU(cudaMalloc(&x, size_t(n * n) * 4));
  RIDGE_CU(cudaMalloc(&y, size_t(n * n) * 4));
  {
    std::vector<float> h(size_t(n * n));
    uint32_t r = 12345;
    for (auto& v : h) r = r * 1664525u + 1013904223u, v = float(int32_t(r >> 9) - (1 << 22)) / float(1 << 22);
    RIDGE_CU(cudaMemcpy(w, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    RIDGE_CU(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  }
  cuda::Cublas cb(s);
  const double flops = 2.0 * double(n) * double(n) * double(n);
  p.fp32_tflops = flops / median_seconds(s, 5, [&] { cb.gemm(CUDA_R_32F, w, x, y, n, n, n); }) / 1e12;
  // bf16 operands made from the same values, in the first half of each buffer.
  uint16_t* wb = static_cast<uint16_t*>(w);
  uint16_t* xb = static_cast<uint16_t*>(x);
  void* wf = nullptr;
  RIDGE_CU(cudaMalloc(&wf, size_t(n * n) * 2));
  cuda::f32_to_bf16(static_cast<const float*>(w), n * n, static_cast<uint16_t*>(wf), s);
  RIDGE_CU(cudaMemcpyAsync(wb, wf, size_t(n * n) * 2, cudaMemcpyDeviceToDevice, s));
  cuda::f32_to_bf16(static_cast<const float*>(x), n * n, static_cast<uint16_t*>(wf), s);
  RIDGE_CU(cudaMemcpyAsync(xb, wf, size_t(n * n) * 2, cudaMemcpyDeviceToDevice, s));
  RIDGE_CU(cudaStreamSynchronize(s));
  p.bf16_tflops = flops / median_seconds(s, 10, [&] { cb.gemm(CUDA_R_16BF, wb, xb, y, n, n, n); }) / 1e12;
  cudaFree(wf);
  cudaFree(y);
  cudaFree(x);
  cudaFree(w);
  cudaStreamDestroy(s);
  return p;
}

}  // namespace ridge::kernels

#else

namespace ridge::kernels {
CudaPeaks cuda_peaks() { fail("ridge peaks --device cuda: this ridge was built without CUDA"); }
}  // namespace ridge::kernels

#endif
