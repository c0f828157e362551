// The CUDA backend: the forward's operations on one NVIDIA GPU (`--device cuda`). The
// engine above is unchanged: the same Forward, scheduler and block manager; what moves
// to the device is the weights (uploaded once, on first use, in their GGUF blocks), the
// paged KV pool (Backend::alloc_kv) and the activations.
//
// Kernels (cuda_kernels.h, the *.cu files beside this): a GEMV per weight format for
// decode rows (a warp per output row, 16-byte loads, every row of the step's x against
// each weight byte once); cuBLAS GEMMs in bf16 (weights dequantized to bf16 first where
// they are quantized) past kGemvMaxRows rows; paged attention with an online softmax
// over whole KV blocks, split over the context when few (token, head) pairs would leave
// the multiprocessors idle; norms, RoPE with the K/V write, activations.
//
// Built only where nvcc is (CMakeLists.txt); without it, or without a device, asking
// for this backend is a clear error.
#pragma once
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace ridge::kernels {

// Whether this build has the CUDA backend and a device can run it; why not in *why.
bool cuda_available(std::string* why = nullptr);
// Throws ridge::Error when !cuda_available().
std::unique_ptr<Backend> make_cuda_backend();

// The device's ceilings, measured (ridge peaks --device cuda): a device-to-device copy's
// bandwidth (bytes read plus written) and a large bf16 GEMM's rate through cuBLAS.
struct CudaPeaks {
  std::string device;   // name, SMs, memory
  double hbm_gbs = 0;   // GB/s
  double bf16_tflops = 0;
  double fp32_tflops = 0;  // cuBLAS SGEMM (no tensor cores)
};
CudaPeaks cuda_peaks();

}  // namespace ridge::kernels
