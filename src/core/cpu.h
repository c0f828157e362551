// Run-time choice of the SIMD path. RIDGE_ISA=scalar|avx2|avx512 forces a path (never
// one the CPU lacks) so that the tests exercise every path on an AVX-512 machine.
#pragma once
#include <string_view>

namespace ridge {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512fp16 = false, avxvnni = false, avx512vbmi = false;
};

const CpuFeatures& cpu_features();
Isa best_isa();           // what the CPU supports
Isa active_isa();         // best_isa() capped by RIDGE_ISA / set_isa()
void set_isa(Isa isa);    // for tests; capped at best_isa()
std::string_view isa_name(Isa isa);

}  // namespace ridge
