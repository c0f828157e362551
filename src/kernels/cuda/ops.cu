// Row and elementwise operations: norms (a block per row, sums in double as the CPU's
// reference keeps them), residual adds, biases, activations, copies.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace ridge::kernels::cuda {
namespace {

constexpr int kNormThreads = 256;

__device__ __forceinline__ double block_sum_d(double v, double* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void rms_norm_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                const float* __restrict__ w, float* __restrict__ y, int64_t n, float eps) {
  __shared__ double red[32];
  const int64_t i = blockIdx.x, src = rows ? rows[i] : i;
  const float* xr = x + src * n;
  float* yr = y + i * n;
  double ss = 0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) ss += double(xr[e]) * xr[e];
  ss = block_sum_d(ss, red);
  const float scale = float(1.0 / sqrt(ss / double(n) + double(eps)));
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) yr[e] = w ? xr[e] * scale * w[e] : xr[e] * scale;
}

__global__ void layer_norm_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                  const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
                                  int64_t n, float eps) {
  __shared__ double red[32];
  const int64_t i = blockIdx.x, src = rows ? rows[i] : i;
  const float* xr = x + src * n;
  float* yr = y + i * n;
  double sum = 0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) sum += xr[e];
  const double mean = block_sum_d(sum, red) / double(n);
  double ss = 0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) ss += (double(xr[e]) - mean) * (double(xr[e]) - mean);
  ss = block_sum_d(ss, red);
  const float scale = float(1.0 / sqrt(ss / double(n) + double(eps))), m = float(mean);
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) yr[e] = (xr[e] - m) * scale * w[e] + b[e];
}

#define RIDGE_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  RIDGE_GRID_STRIDE(i, n) x[i] += y[i];
}
__global__ void add_bias_kernel(float* x, const float* b, int64_t m, int64_t n) {
  RIDGE_GRID_STRIDE(i, m * n) x[i] += b[i % n];
}
__global__ void scale_kernel(float* x, float f, int64_t n) {
  RIDGE_GRID_STRIDE(i, n) x[i] *= f;
}
__global__ void softcap_kernel(float* x, float c, int64_t n) {
  RIDGE_GRID_STRIDE(i, n) x[i] = c * tanhf(x[i] / c);
}

constexpr float kOaiAlpha = 1.702f, kOaiLimit = 7.f;  // kernels/cpu/ops.h

__device__ __forceinline__ float gelu_tanh(float v) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCubic = 0.044715f;
  return 0.5f * v * (1.f + tanhf(kSqrt2OverPi * v * (1.f + kCubic * v * v)));
}

__global__ void act_kernel(Act act, const float* a, const float* b, float* out, int64_t n) {
  RIDGE_GRID_STRIDE(i, n) {
    const float g = a[i];
    switch (act) {
      case Act::SwiGlu: out[i] = g / (1.f + expf(-g)) * b[i]; break;
      case Act::SwiGluOai: {
        const float x = fminf(g, kOaiLimit), y = fminf(fmaxf(b[i], -kOaiLimit), kOaiLimit);
        out[i] = x / (1.f + expf(-kOaiAlpha * x)) * (y + 1.f);
        break;
      }
      case Act::Gelu: out[i] = gelu_tanh(g); break;
      case Act::GeGlu: out[i] = gelu_tanh(g) * b[i]; break;
    }
  }
}

__global__ void copy_rows_kernel(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t m, int64_t n) {
  RIDGE_GRID_STRIDE(i, m * n) {
    const int64_t r = i / n, c = i - r * n;
    y[r * ldy + c] = x[r * ldx + c];
  }
}
__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t m, int64_t n, float* y) {
  RIDGE_GRID_STRIDE(i, m * n) {
    const int64_t r = i / n, c = i - r * n;
    y[i] = x[int64_t(rows[r]) * n + c];
  }
}

// out[t][c] = sum over j < k, in order, of w[t][j] * y[idx[t][j]][c].
__global__ void moe_combine_kernel(const float* y, const int32_t* idx, const float* w, int64_t m, int32_t k, int64_t n,
                                   float* out) {
  RIDGE_GRID_STRIDE(i, m * n) {
    const int64_t t = i / n, c = i - t * n;
    float o = 0.f;
    for (int32_t j = 0; j < k; ++j) o += w[t * k + j] * y[int64_t(idx[t * k + j]) * n + c];
    out[i] = o;
  }
}

unsigned grid(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return unsigned(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace

void rms_norm(const float* x, const int32_t* rows, const float* w, float* y, int64_t m, int64_t n, float eps,
              cudaStream_t s) {
  if (m > 0) rms_norm_kernel<<<unsigned(m), kNormThreads, 0, s>>>(x, rows, w, y, n, eps);
}
void layer_norm(const float* x, const int32_t* rows, const float* w, const float* b, float* y, int64_t m, int64_t n,
                float eps, cudaStream_t s) {
  if (m > 0) layer_norm_kernel<<<unsigned(m), kNormThreads, 0, s>>>(x, rows, w, b, y, n, eps);
}
void add(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n > 0) add_kernel<<<grid(n), 256, 0, s>>>(x, y, n);
}
void add_bias(float* x, const float* b, int64_t m, int64_t n, cudaStream_t s) {
  if (m * n > 0) add_bias_kernel<<<grid(m * n), 256, 0, s>>>(x, b, m, n);
}
void activation(Act act, const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {
  if (n > 0) act_kernel<<<grid(n), 256, 0, s>>>(act, a, b, out, n);
}
void scale(float* x, float f, int64_t n, cudaStream_t s) {
  if (n > 0) scale_kernel<<<grid(n), 256, 0, s>>>(x, f, n);
}
void softcap(float* x, float c, int64_t n, cudaStream_t s) {
  if (n > 0) softcap_kernel<<<grid(n), 256, 0, s>>>(x, c, n);
}
void copy_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t m, int64_t n, cudaStream_t s) {
  if (m * n > 0) copy_rows_kernel<<<grid(m * n), 256, 0, s>>>(x, ldx, y, ldy, m, n);
}
void gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t n, float* y, cudaStream_t s) {
  if (m * n > 0) gather_rows_kernel<<<grid(m * n), 256, 0, s>>>(x, rows, m, n, y);
}

void moe_combine(const float* y, const int32_t* idx, const float* w, int64_t m, int32_t k, int64_t n, float* out,
                 cudaStream_t s) {
  if (m * n > 0) moe_combine_kernel<<<grid(m * n), 256, 0, s>>>(y, idx, w, m, k, n, out);
}

}  // namespace ridge::kernels::cuda
