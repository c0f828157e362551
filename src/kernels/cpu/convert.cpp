#include "kernels/cpu/convert.h"

#include <algorithm>
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
