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

namespace detail {
void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n);
}  // namespace detail

}  // namespace ridge::kernels
