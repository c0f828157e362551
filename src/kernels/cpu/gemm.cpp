#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/packed.h"

namespace ridge::kernels {

void quantize_act_gemm(const float* x, ActQ8* y, int64_t n) {
  RIDGE_CHECK(n % 32 == 0, "activation row of {} elements is not a multiple of 32", n);
  if (active_isa() == Isa::Avx512) return detail::quantize_act_gemm_avx512(x, y, n);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      const long v = std::lrintf(x[j] * id);
      const int q = int(std::clamp(v, -127L, 127L));
      y[i].qs[j] = int8_t(q);
      sum[j / 16] += q;
    }
    y[i].d = d;
    y[i].sum16[0] = int16_t(sum[0]);
    y[i].sum16[1] = int16_t(sum[1]);
  }
}

bool gemm_available(DType t) {
  if (!can_pack(t) || active_isa() != Isa::Avx512) return false;
  const bool int8 = t != DType::F32 && t != DType::F16 && t != DType::BF16;
  return !int8 || cpu_features().avx512vnni;
}

void gemm_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  RIDGE_CHECK(gemm_available(g.type), "no packed GEMM for {} on this CPU path", dtype_name(g.type));
  detail::gemm_panels_avx512(g, m0, m1, p0, p1);
}

}  // namespace ridge::kernels
