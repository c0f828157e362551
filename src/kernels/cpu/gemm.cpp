#include "kernels/cpu/gemm.h"

#include <atomic>
#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/packed.h"
#include "quant/quant.h"

namespace ridge::kernels {

void quantize_act_gemm(const float* x, ActQ8* y, int64_t n) {
  RIDGE_CHECK(n % 32 == 0, "activation row of {} elements is not a multiple of 32", n);
  if (active_isa() == Isa::Avx512) return detail::quantize_act_gemm_avx512(x, y, n);
  if (active_isa() == Isa::Avx2) return detail::quantize_act_gemm_avx2(x, y, n);
  // The scalar path is the dot kernels' quantizer (one rounding rule in one place) plus
  // the integer half-sums the GEMM's offset correction needs.
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    quant::BlockQ8A b;
    quant::quantize_act_q8a(x, &b, 32);
    y[i].d = b.d;
    std::memcpy(y[i].qs, b.qs, 32);
    int32_t sum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) sum[j / 16] += b.qs[j];
    y[i].sum16[0] = int16_t(sum[0]);
    y[i].sum16[1] = int16_t(sum[1]);
  }
}

namespace {

// Which kernels run a type: the AVX-512 ones on the AVX-512 path (which core/cpu.h takes
// only with VNNI, so a CPU with AVX-512 but no VNNI runs the AVX2 path), else the AVX2
// ones for the types they have, else none.
enum class GemmPath { None, Avx512, Avx2 };

GemmPath gemm_path(DType t) {
  if (!can_pack(t)) return GemmPath::None;
  const Isa isa = active_isa();
  if (isa == Isa::Avx512) return GemmPath::Avx512;
  if (isa >= Isa::Avx2 && detail::gemm_avx2_has(t)) return GemmPath::Avx2;
  return GemmPath::None;
}

// A test's override of amx_min_rows (0: none).
std::atomic<int64_t> g_amx_min_rows{0};

}  // namespace

// Below these rows the AVX-512 kernels were as fast or faster where measured
// (docs/BENCHMARKS.md, issue 22 session 31): a decode batch is a DRAM stream that their
// 4 panels in flight keep up with, while each tile block waits on its stored C before
// the epilogue can read it. Q8_0, whose AVX-512 kernel needs no unpacking, gains later.
int64_t amx_min_rows(DType t) {
  const int64_t forced = g_amx_min_rows.load(std::memory_order_relaxed);
  return forced > 0 ? forced : t == DType::Q8_0 ? 48 : 32;
}
void set_amx_min_rows(int64_t rows) { g_amx_min_rows.store(rows <= 0 ? 0 : rows < 2 ? 2 : rows, std::memory_order_relaxed); }

bool gemm_on_amx(DType t, int64_t rows) {
  return rows >= amx_min_rows(t) && amx_active() && detail::gemm_amx_has(t);
}

bool gemm_available(DType t) { return gemm_path(t) != GemmPath::None; }
bool gemm_on_avx2(DType t) { return gemm_path(t) == GemmPath::Avx2; }

void gemm_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  switch (gemm_path(g.type)) {
    case GemmPath::Avx512:
      if (gemm_on_amx(g.type, m1 - m0)) return detail::gemm_panels_amx(g, m0, m1, p0, p1);
      return detail::gemm_panels_avx512(g, m0, m1, p0, p1);
    case GemmPath::Avx2: return detail::gemm_panels_avx2(g, m0, m1, p0, p1);
    case GemmPath::None: fail("no packed GEMM for {} on this CPU path", dtype_name(g.type));
  }
}

}  // namespace ridge::kernels
