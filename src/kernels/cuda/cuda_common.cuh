// What the CUDA kernels share: warp reductions, the KV cache's element conversions, and
// one 32-element unit of each weight format dequantized into registers, with the CPU's
// arithmetic (quant/dequantize.cpp: the same operations in the same order, so a unit's
// values equal the CPU's bit for bit).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace ridge::kernels::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum of v over a block of blockDim.x threads (a multiple of 32, at most 1024);
// every thread gets it. red: 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read from a previous call
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.f;
  return warp_sum(v);
}

__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// KV cache elements.
template <typename KT>
__device__ __forceinline__ float kv_load(const KT* p);
template <>
__device__ __forceinline__ float kv_load<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float kv_load<__half>(const __half* p) { return __half2float(*p); }
template <>
__device__ __forceinline__ float kv_load<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }
template <typename KT>
__device__ __forceinline__ KT kv_store(float x);
template <>
__device__ __forceinline__ float kv_store<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half kv_store<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 kv_store<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Bytes of a block of each weight format and its elements (core/dtype.h's table, for the
// device).
template <DType T>
struct Fmt;
template <> struct Fmt<DType::F32> { static constexpr int kElems = 1, kBytes = 4; };
template <> struct Fmt<DType::F16> { static constexpr int kElems = 1, kBytes = 2; };
template <> struct Fmt<DType::BF16> { static constexpr int kElems = 1, kBytes = 2; };
template <> struct Fmt<DType::Q4_0> { static constexpr int kElems = 32, kBytes = 18; };
template <> struct Fmt<DType::Q8_0> { static constexpr int kElems = 32, kBytes = 34; };
template <> struct Fmt<DType::Q4_K> { static constexpr int kElems = 256, kBytes = 144; };
template <> struct Fmt<DType::Q6_K> { static constexpr int kElems = 256, kBytes = 210; };
template <> struct Fmt<DType::F8_E4M3_B128> { static constexpr int kElems = 128, kBytes = 132; };

__device__ __forceinline__ uint16_t ld16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// Unit u (32 elements, u = element / 32) of a row in format T, into v[32].
template <DType T>
__device__ __forceinline__ void unit(const uint8_t* row, int64_t u, float* v);

template <>
__device__ __forceinline__ void unit<DType::F32>(const uint8_t* row, int64_t u, float* v) {
  const float4* p = reinterpret_cast<const float4*>(row) + u * 8;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 f = p[i];
    v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
  }
}

template <bool kBf16>
__device__ __forceinline__ void unit_half(const uint8_t* row, int64_t u, float* v) {
  const uint4* p = reinterpret_cast<const uint4*>(row) + u * 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 w = p[i];
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t lo = uint16_t(ws[j] & 0xffffu), hi = uint16_t(ws[j] >> 16);
      v[8 * i + 2 * j] = kBf16 ? bf16f(lo) : f16f(lo);
      v[8 * i + 2 * j + 1] = kBf16 ? bf16f(hi) : f16f(hi);
    }
  }
}
template <>
__device__ __forceinline__ void unit<DType::F16>(const uint8_t* row, int64_t u, float* v) { unit_half<false>(row, u, v); }
template <>
__device__ __forceinline__ void unit<DType::BF16>(const uint8_t* row, int64_t u, float* v) { unit_half<true>(row, u, v); }

template <>
__device__ __forceinline__ void unit<DType::Q4_0>(const uint8_t* row, int64_t u, float* v) {
  const uint8_t* b = row + u * 18;
  const float d = f16f(ld16(b));
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int q = b[2 + j];
    v[j] = float((q & 0x0F) - 8) * d;
    v[j + 16] = float((q >> 4) - 8) * d;
  }
}

template <>
__device__ __forceinline__ void unit<DType::Q8_0>(const uint8_t* row, int64_t u, float* v) {
  const uint8_t* b = row + u * 34;
  const float d = f16f(ld16(b));
#pragma unroll
  for (int j = 0; j < 32; ++j) v[j] = float(int8_t(b[2 + j])) * d;
}

// quant/kscales.h k_scale_min.
__device__ __forceinline__ void k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <>
__device__ __forceinline__ void unit<DType::Q4_K>(const uint8_t* row, int64_t u, float* v) {
  const uint8_t* b = row + (u >> 3) * 144;
  const int j = int(u & 7), c = j >> 1;
  const uint32_t dd = *reinterpret_cast<const uint32_t*>(b);
  const float d = f16f(uint16_t(dd & 0xffffu)), dmin = f16f(uint16_t(dd >> 16));
  int sc, m;
  k_scale_min(j, b + 4, sc, m);
  const float d1 = d * float(sc), m1 = dmin * float(m);
  const uint4* q4 = reinterpret_cast<const uint4*>(b + 16 + 32 * c);
  const uint4 qa = q4[0], qb = q4[1];
  const uint32_t qs[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
  const int shift = (j & 1) * 4;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k)  // rounded twice, as the CPU's (no FMA contraction)
      v[4 * i + k] = __fsub_rn(__fmul_rn(d1, float((qs[i] >> (8 * k + shift)) & 0xF)), m1);
}

template <>
__device__ __forceinline__ void unit<DType::Q6_K>(const uint8_t* row, int64_t u, float* v) {
  const uint8_t* b = row + (u >> 3) * 210;
  const int j = int(u & 7), h = j >> 2, qq = j & 3;
  const uint8_t* ql = b + h * 64 + (qq & 1) * 32;
  const uint8_t* qh = b + 128 + h * 32;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + h * 8);
  const float d = f16f(ld16(b + 208));
  const int lshift = (qq >> 1) * 4, hshift = 2 * qq;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const int q = ((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4);
    v[l] = d * float(sc[l / 16 + 2 * qq]) * float(q - 32);
  }
}

template <>
__device__ __forceinline__ void unit<DType::F8_E4M3_B128>(const uint8_t* row, int64_t u, float* v) {
  const uint8_t* b = row + (u >> 2) * 132;
  const float d = *reinterpret_cast<const float*>(b);
  const uint8_t* q = b + 4 + (u & 3) * 32;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const __half_raw hr = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(q[l]), __NV_E4M3);
    v[l] = d * __half2float(__half(hr));
  }
}

// Calls f.template operator()<T>() for the run-time type t; false where t has no kernel.
template <typename F>
bool dispatch_weight(DType t, F&& f) {
  switch (t) {
    case DType::F32: f.template operator()<DType::F32>(); return true;
    case DType::F16: f.template operator()<DType::F16>(); return true;
    case DType::BF16: f.template operator()<DType::BF16>(); return true;
    case DType::Q4_0: f.template operator()<DType::Q4_0>(); return true;
    case DType::Q8_0: f.template operator()<DType::Q8_0>(); return true;
    case DType::Q4_K: f.template operator()<DType::Q4_K>(); return true;
    case DType::Q6_K: f.template operator()<DType::Q6_K>(); return true;
    case DType::F8_E4M3_B128: f.template operator()<DType::F8_E4M3_B128>(); return true;
    default: return false;
  }
}

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace ridge::kernels::cuda
