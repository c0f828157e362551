#include "kernels/cpu/convert.h"

#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "core/fp16.h"

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
    default: fail("KV cache dtype {} is not supported (f32, f16, bf16)", dtype_name(t));
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
