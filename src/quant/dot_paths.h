// Internal: the dot kernels each ISA file provides. A lookup returns nullptr for a type
// that path has no kernel for; dot_fn (dot_dispatch.cpp) then falls back one level.
// Call avx2_dot / avx512_dot only after checking best_isa(): they live in files compiled
// with those ISA flags.
#pragma once
#include "core/dtype.h"
#include "quant/quant.h"

namespace ridge::quant::detail {

DotFn scalar_dot(DType t);  // every supported type
DotFn avx2_dot(DType t);    // f32, f16, bf16, fp8 and every quantized type
DotFn avx2_kquant_dot(DType t);  // q4_k, q5_k, q6_k (dot_kquant_avx2.cpp)
DotFn avx512_dot(DType t);  // f32, f16, bf16, q8_0, q4_0

}  // namespace ridge::quant::detail
