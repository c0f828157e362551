// Restores the CPU paths a test started with (core/cpu.h: the ISA, AMX, the FP8 and BF16
// way), however the test ends, so a test may switch any of them.
#pragma once
#include "core/cpu.h"

namespace ridge::test {

struct IsaGuard {
  Isa saved = active_isa();
  bool amx = amx_active();
  Fp8Path fp8 = fp8_path();
  ~IsaGuard() { set_isa(saved), set_amx(amx), set_fp8_path(fp8); }
};

}  // namespace ridge::test
