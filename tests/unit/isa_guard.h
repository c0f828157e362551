// Restores the CPU paths a test started with (core/cpu.h: the ISA, AMX, the FP8 and BF16
// way, the F16 cache's attention way), however the test ends, so a test may switch any of them.
#pragma once
#include "core/cpu.h"
#include "kernels/cpu/attention.h"

namespace ridge::test {

struct IsaGuard {
  Isa saved = active_isa();
  bool amx = amx_active();
  Fp8Path fp8 = fp8_path();
  bool f16 = kernels::detail::attention_f16_arith();
  ~IsaGuard() { set_isa(saved), set_amx(amx), set_fp8_path(fp8), kernels::detail::set_attention_f16_arith(f16); }
};

// Whether an F16 cache's attention can take the half-arithmetic way here (the CPU has
// AVX512-FP16, runs the AVX-512 kernels, and the compiler built the way).
inline bool f16_here() {
  return cpu_features().avx512fp16 && best_isa() == Isa::Avx512 && kernels::detail::attention_f16_built();
}

}  // namespace ridge::test
