// Kernels that read weights in their GGUF blocks: the decode GEMV, the dequantization to
// bf16 that feeds cuBLAS, the embedding rows.
//
// The GEMV runs a warp per output row and every row of x (m <= kGemvMaxRows) against
// each weight byte once, so a decode step reads the weights once whatever its batch.
// bf16/f16/f32 rows stream in 16-byte loads, four in flight per lane before the first is
// used (the bytes in flight are what keeps HBM busy); quantized rows go a 32-element
// unit per lane (cuda_common.cuh).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace ridge::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, a row each
constexpr int kThreads = 32 * kRowsPerBlock;

template <DType T>
__device__ __forceinline__ float elem(const uint8_t* row, int64_t e) {
  if constexpr (T == DType::F32) return reinterpret_cast<const float*>(row)[e];
  else if constexpr (T == DType::F16) return f16f(reinterpret_cast<const uint16_t*>(row)[e]);
  else return bf16f(reinterpret_cast<const uint16_t*>(row)[e]);
}

// acc[r] += the 16 bytes a (elements e.. of the row) . x[r][e..].
template <DType T, int M>
__device__ __forceinline__ void fma16(const uint4 a, const float* __restrict__ x, int64_t k, int64_t e, float* acc) {
  if constexpr (T == DType::F32) {
    const float w[4] = {__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z), __uint_as_float(a.w)};
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float4 xv = __ldg(reinterpret_cast<const float4*>(x + r * k + e));
      acc[r] = fmaf(w[0], xv.x, fmaf(w[1], xv.y, fmaf(w[2], xv.z, fmaf(w[3], xv.w, acc[r]))));
    }
  } else {
    const uint32_t ws[4] = {a.x, a.y, a.z, a.w};
    float w[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t lo = uint16_t(ws[j] & 0xffffu), hi = uint16_t(ws[j] >> 16);
      w[2 * j] = T == DType::BF16 ? bf16f(lo) : f16f(lo);
      w[2 * j + 1] = T == DType::BF16 ? bf16f(hi) : f16f(hi);
    }
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float4 x0 = __ldg(reinterpret_cast<const float4*>(x + r * k + e));
      const float4 x1 = __ldg(reinterpret_cast<const float4*>(x + r * k + e + 4));
      float s = acc[r];
      s = fmaf(w[0], x0.x, s), s = fmaf(w[1], x0.y, s), s = fmaf(w[2], x0.z, s), s = fmaf(w[3], x0.w, s);
      s = fmaf(w[4], x1.x, s), s = fmaf(w[5], x1.y, s), s = fmaf(w[6], x1.z, s), s = fmaf(w[7], x1.w, s);
      acc[r] = s;
    }
  }
}

template <int M>
__device__ __forceinline__ void store_rows(float* acc, float* y, int64_t n_out, int64_t row) {
#pragma unroll
  for (int r = 0; r < M; ++r) acc[r] = warp_sum(acc[r]);
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int r = 0; r < M; ++r) y[r * n_out + row] = acc[r];
}

// Dense rows, 16-byte aligned (row_bytes % 16 == 0, x 16-byte aligned, k % E == 0): R
// rows (warps) per block, U 16-byte loads in flight per lane before the first is used.
template <DType T, int M, int R, int U>
__global__ void __launch_bounds__(32 * R) gemv_dense(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_out,
                                                     int64_t k, const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * R + (threadIdx.x >> 5);
  if (row >= n_out) return;
  constexpr int E = T == DType::F32 ? 4 : 8;  // elements per 16 bytes
  const uint4* wr = reinterpret_cast<const uint4*>(w + row * row_bytes);
  const int64_t nv = k / E;
  float acc[M] = {};
  int64_t i = lane;
  for (; i + 32 * (U - 1) < nv; i += 32 * U) {
    uint4 a[U];
#pragma unroll
    for (int u = 0; u < U; ++u) a[u] = __ldg(wr + i + 32 * u);
#pragma unroll
    for (int u = 0; u < U; ++u) fma16<T, M>(a[u], x, k, (i + 32 * u) * E, acc);
  }
  for (; i < nv; i += 32) fma16<T, M>(__ldg(wr + i), x, k, i * E, acc);
  store_rows<M>(acc, y, n_out, row);
}

// Dense rows, any alignment: element by element.
template <DType T, int M>
__global__ void __launch_bounds__(kThreads) gemv_scalar(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_out,
                                                        int64_t k, const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= n_out) return;
  const uint8_t* wr = w + row * row_bytes;
  float acc[M] = {};
  for (int64_t e = lane; e < k; e += 32) {
    const float wv = elem<T>(wr, e);
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = fmaf(wv, x[r * k + e], acc[r]);
  }
  store_rows<M>(acc, y, n_out, row);
}

// Quantized rows: a 32-element unit per lane, two in flight.
template <DType T, int M>
__global__ void __launch_bounds__(kThreads) gemv_units(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_out,
                                                       int64_t k, const float* __restrict__ x, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= n_out) return;
  const uint8_t* wr = w + row * row_bytes;
  const int64_t nu = k / 32;
  float acc[M] = {};
  for (int64_t u = lane; u < nu; u += 32) {
    float v[32];
    unit<T>(wr, u, v);
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float* xr = x + r * k + u * 32;
      float s = acc[r];
#pragma unroll
      for (int j = 0; j < 32; ++j) s = fmaf(v[j], __ldg(xr + j), s);
      acc[r] = s;
    }
  }
  store_rows<M>(acc, y, n_out, row);
}

template <DType T>
constexpr bool kDense = T == DType::F32 || T == DType::F16 || T == DType::BF16;

template <DType T, int M, int R, int U>
void launch_dense(const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, const float* x, float* y,
                  cudaStream_t s) {
  gemv_dense<T, M, R, U><<<blocks_for(n_out, R), 32 * R, 0, s>>>(w, row_bytes, n_out, k, x, y);
}

template <DType T, int M>
void launch_gemv(const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, const float* x, float* y,
                 GemvShape g, cudaStream_t s) {
  const unsigned grid = blocks_for(n_out, kRowsPerBlock);
  if constexpr (kDense<T>) {
    constexpr int E = T == DType::F32 ? 4 : 8;
    const bool aligned = row_bytes % 16 == 0 && k % E == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(w) % 16 == 0;
    if (!aligned) {
      gemv_scalar<T, M><<<grid, kThreads, 0, s>>>(w, row_bytes, n_out, k, x, y);
      return;
    }
    // The shapes GemvShape names; anything else runs the default.
    if (g.rows == 4 && g.unroll == 4) launch_dense<T, M, 4, 4>(w, row_bytes, n_out, k, x, y, s);
    else if (g.rows == 4 && g.unroll == 8) launch_dense<T, M, 4, 8>(w, row_bytes, n_out, k, x, y, s);
    else if (g.rows == 8 && g.unroll == 8) launch_dense<T, M, 8, 8>(w, row_bytes, n_out, k, x, y, s);
    else if (g.rows == 2 && g.unroll == 8) launch_dense<T, M, 2, 8>(w, row_bytes, n_out, k, x, y, s);
    else launch_dense<T, M, 8, 4>(w, row_bytes, n_out, k, x, y, s);
  } else {
    gemv_units<T, M><<<grid, kThreads, 0, s>>>(w, row_bytes, n_out, k, x, y);
  }
}

template <DType T>
void gemv_m(const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, const float* x, int64_t m, float* y,
            GemvShape g, cudaStream_t s) {
  // Rows in chunks the templates know: 8, 4, 2, 1.
  while (m > 0) {
    const int64_t c = m >= 8 ? 8 : m >= 4 ? 4 : m >= 2 ? 2 : 1;
    switch (c) {
      case 8: launch_gemv<T, 8>(w, row_bytes, n_out, k, x, y, g, s); break;
      case 4: launch_gemv<T, 4>(w, row_bytes, n_out, k, x, y, g, s); break;
      case 2: launch_gemv<T, 2>(w, row_bytes, n_out, k, x, y, g, s); break;
      default: launch_gemv<T, 1>(w, row_bytes, n_out, k, x, y, g, s); break;
    }
    x += c * k, y += c * n_out, m -= c;
  }
}

template <DType T>
__global__ void dequant_bf16_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_out, int64_t k,
                                    __nv_bfloat16* __restrict__ out) {
  if constexpr (kDense<T>) {
    const int64_t n = n_out * k;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
      const int64_t r = i / k, e = i % k;
      out[i] = __float2bfloat16_rn(elem<T>(w + r * row_bytes, e));
    }
  } else {
    const int64_t nu = k / 32, n = n_out * nu;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
      const int64_t r = i / nu, u = i % nu;
      float v[32];
      unit<T>(w + r * row_bytes, u, v);
      __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + r * k + u * 32);
#pragma unroll
      for (int j = 0; j < 16; ++j) o[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    }
  }
}

template <DType T>
__global__ void embed_kernel(const uint8_t* __restrict__ table, int64_t row_bytes, int64_t n,
                             const int32_t* __restrict__ tokens, float* __restrict__ x) {
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + int64_t(tokens[t]) * row_bytes;
  float* xr = x + t * n;
  if constexpr (kDense<T>) {
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) xr[e] = elem<T>(row, e);
  } else {
    for (int64_t u = threadIdx.x; u < n / 32; u += blockDim.x) {
      float v[32];
      unit<T>(row, u, v);
#pragma unroll
      for (int j = 0; j < 32; ++j) xr[u * 32 + j] = v[j];
    }
  }
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

__global__ void f32_to_f16_kernel(const float* __restrict__ x, int64_t n, __half* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(x[i]);
}

unsigned grid_stride_blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace

bool weight_type_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q8_0: case DType::Q4_K:
    case DType::Q6_K: case DType::F8_E4M3_B128: return true;
    default: return false;
  }
}

void gemv(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, const float* x, int64_t m, float* y,
          GemvShape g, cudaStream_t s) {
  dispatch_weight(t, [&]<DType T>() { gemv_m<T>(w, row_bytes, n_out, k, x, m, y, g, s); });
}

void dequant_bf16(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, uint16_t* out,
                  cudaStream_t s) {
  dispatch_weight(t, [&]<DType T>() {
    const int64_t work = kDense<T> ? n_out * k : n_out * (k / 32);
    dequant_bf16_kernel<T><<<grid_stride_blocks(work, 256), 256, 0, s>>>(w, row_bytes, n_out, k,
                                                                         reinterpret_cast<__nv_bfloat16*>(out));
  });
}

void f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  f32_to_bf16_kernel<<<grid_stride_blocks(n, 256), 256, 0, s>>>(x, n, reinterpret_cast<__nv_bfloat16*>(out));
}

void f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  f32_to_f16_kernel<<<grid_stride_blocks(n, 256), 256, 0, s>>>(x, n, reinterpret_cast<__half*>(out));
}

void embed(DType t, const uint8_t* table, int64_t row_bytes, int64_t n, const int32_t* tokens, int64_t T, float* x,
           cudaStream_t s) {
  if (T == 0) return;
  dispatch_weight(t, [&]<DType D>() { embed_kernel<D><<<unsigned(T), 128, 0, s>>>(table, row_bytes, n, tokens, x); });
}

}  // namespace ridge::kernels::cuda
