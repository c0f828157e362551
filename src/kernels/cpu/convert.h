// Row conversions between f32 and the KV cache's stored dtypes (f32, f16, bf16, and the
// 8-bit codes of the scaled ones: i8, fp8_e4m3, fp8_e5m2).
// Conversions are exact functions of their input (IEEE round-to-nearest-even), so the
// SIMD and scalar paths give identical bits.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace ridge::kernels {

void to_f32(DType t, const void* src, float* dst, int64_t n);
void from_f32(DType t, const float* src, void* dst, int64_t n);
// The 8-bit KV dtypes' codes of values already divided by their scale (kv_view.h):
// I8 rounds to nearest even and clamps to [-127, 127], FP8 as quant/fp8.h.
void codes_from_f32(DType t, const float* src, uint8_t* dst, int64_t n);

// An FP8 KV dtype's scale for x[0, n) (kv_view.h): of the kFp8ScaleSteps scales
// amax / max_code x (1 + k / kFp8ScaleSteps), the one whose codes give x back with the
// least squared error (ties: the smallest). A float grid is the same at every power of
// two, so these steps cover every placement of the values on it; which of them is best
// depends on all the values, not on the largest alone (amax / max_code, k = 0, puts the
// largest exactly on a code and the rest where they fall). With few values per scale
// (a head of 8 dimensions) the best of 32 has half the squared error of k = 0.
// Every ISA path picks the same scale: the errors are exact roundings summed in one order.
inline constexpr int kFp8ScaleSteps = 32;
float fp8_kv_scale(DType t, const float* x, int64_t n, float amax);

namespace detail {
// Squared errors sum_i (round(|x_i| inv_k) - |x_i| inv_k)^2 for each of k < steps, in
// the order fp8_kv_scale defines (16 lanes, element i in lane i % 16, then a fixed tree).
void fp8_sq_errors_avx512(DType t, const float* x, int64_t n, const float* inv, int steps, float* err);
void fp8_sq_errors_scalar(DType t, const float* x, int64_t n, const float* inv, int steps, float* err);
}  // namespace detail

namespace detail {
void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n);
}  // namespace detail

}  // namespace ridge::kernels
