#include "kernels/cpu/convert.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"
#include "quant/fp8.h"

namespace ridge::kernels {

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      if (active_isa() == Isa::Avx512) return detail::f16_to_f32_avx512(static_cast<const uint16_t*>(src), dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::I8:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(static_cast<const int8_t*>(src)[i]);
      return;
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = quant::fp8_e4m3_to_f32(static_cast<const uint8_t*>(src)[i]);
      return;
    case DType::F8_E5M2:
      for (int64_t i = 0; i < n; ++i) dst[i] = quant::fp8_e5m2_to_f32(static_cast<const uint8_t*>(src)[i]);
      return;
    default: fail("KV cache dtype {} is not supported (f32, f16, bf16, i8, fp8_e4m3, fp8_e5m2)", dtype_name(t));
  }
}

void codes_from_f32(DType t, const float* src, uint8_t* dst, int64_t n) {
  switch (t) {
    case DType::I8:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = uint8_t(int8_t(std::clamp<long>(std::lrintf(src[i]), -127, 127)));
      return;
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) dst[i] = quant::f32_to_fp8_e4m3(src[i]);
      return;
    case DType::F8_E5M2:
      for (int64_t i = 0; i < n; ++i) dst[i] = quant::f32_to_fp8_e5m2(src[i]);
      return;
    default: fail("{} is not an 8-bit KV cache dtype", dtype_name(t));
  }
}

namespace {

struct Fp8Grid {
  int man;                       // mantissa bits
  float min_normal;              // below it the grid is evenly spaced by sub_step
  float sub_step, inv_sub_step;  // min_normal x 2^-man, and its inverse
  float max;                     // the largest finite value (quantize saturates there)
};
Fp8Grid fp8_grid(DType t) {
  if (t == DType::F8_E4M3) return {3, 0x1p-6f, 0x1p-9f, 0x1p9f, quant::kFp8E4M3Max};
  RIDGE_CHECK(t == DType::F8_E5M2, "{} is not an FP8 KV dtype", dtype_name(t));
  return {2, 0x1p-14f, 0x1p-16f, 0x1p16f, quant::kFp8E5M2Max};
}

// The value of the code nearest y in [0, max] (ties to even): quant/fp8.h's rounding. A
// normal rounds f32's mantissa at bit 23 - man (a carry moves to the next binade, as it
// should); below the smallest normal the grid is a multiple of its even step (y / step
// and back are exact: powers of two).
float grid_round(const Fp8Grid& g, float y) {
  if (y < g.min_normal) return std::nearbyint(y * g.inv_sub_step) * g.sub_step;
  const int drop = 23 - g.man;
  const uint32_t u = std::bit_cast<uint32_t>(y);
  const uint32_t r = (u + ((1u << (drop - 1)) - 1) + ((u >> drop) & 1)) & ~((1u << drop) - 1);
  return std::min(std::bit_cast<float>(r), g.max);
}

// 16 lane sums in the tree order the AVX-512 path reduces them: halves added (lane j +
// lane j + 8), then again down to one.
float reduce16(float (&a)[16]) {
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) a[j] += a[j + w];
  return a[0];
}

}  // namespace

void detail::fp8_sq_errors_scalar(DType t, const float* x, int64_t n, const float* inv, int steps, float* err) {
  const Fp8Grid g = fp8_grid(t);
  for (int k = 0; k < steps; ++k) {
    float lanes[16] = {};
    for (int64_t i = 0; i < n; ++i) {
      const float y = std::min(std::fabs(x[i]) * inv[k], g.max), d = grid_round(g, y) - y;
      lanes[i % 16] = std::fma(d, d, lanes[i % 16]);
    }
    err[k] = reduce16(lanes);
  }
}

float fp8_kv_scale(DType t, const float* x, int64_t n, float amax) {
  const Fp8Grid g = fp8_grid(t);
  const float base = amax / g.max;
  float inv[kFp8ScaleSteps], err[kFp8ScaleSteps];
  for (int k = 0; k < kFp8ScaleSteps; ++k) inv[k] = 1.f / (base * (1.f + float(k) / kFp8ScaleSteps));
  if (active_isa() == Isa::Avx512) detail::fp8_sq_errors_avx512(t, x, n, inv, kFp8ScaleSteps, err);
  else detail::fp8_sq_errors_scalar(t, x, n, inv, kFp8ScaleSteps, err);
  // The errors are in units of each candidate's scale: compare err x s^2.
  int best = 0;
  float best_err = err[0] / (inv[0] * inv[0]);
  for (int k = 1; k < kFp8ScaleSteps; ++k) {
    const float e = err[k] / (inv[k] * inv[k]);
    if (e < best_err) best = k, best_err = e;
  }
  return base * (1.f + float(best) / kFp8ScaleSteps);
}

void from_f32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      if (active_isa() == Isa::Avx512) return detail::f32_to_f16_avx512(src, static_cast<uint16_t*>(dst), n);
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    default: fail("KV cache dtype {} is not supported (f32, f16, bf16)", dtype_name(t));
  }
}

}  // namespace ridge::kernels
