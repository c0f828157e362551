// Constants the row ops' SIMD paths (ops_avx2.cpp, ops_avx512.cpp) share: plain values
// only, no functions (the files are compiled for different CPUs).
#pragma once

namespace ridge::kernels::detail {

// GELU's tanh form as a sigmoid: 0.5 x (1 + tanh(u)) = x sigmoid(2u), with
// 2u = x (kGeluA + kGeluB x^2), kGeluA = 2 sqrt(2/pi), kGeluB = kGeluA x 0.044715.
inline constexpr float kGeluA = float(2.0 * 0.79788456080286535588);
inline constexpr float kGeluB = float(2.0 * 0.79788456080286535588 * 0.044715);

}  // namespace ridge::kernels::detail
