// dot_fn: the run-time choice of a dot kernel. The requested path is capped at what the
// CPU has (an AVX-512 kernel on an AVX2 machine would fault), then the best path <= it
// that has a kernel for the type wins.
#include "core/error.h"
#include "quant/dot_paths.h"

namespace ridge::quant {

DotFn dot_fn(DType t, Isa isa) {
  const auto& info = dtype_info(t);
  RIDGE_CHECK(info.supported, "tensor type {} is not supported", info.name);
  if (int(isa) > int(best_isa())) isa = best_isa();
  if (isa == Isa::Avx512)
    if (DotFn f = detail::avx512_dot(t)) return f;
  if (int(isa) >= int(Isa::Avx2))
    if (DotFn f = detail::avx2_dot(t)) return f;
  if (DotFn f = detail::scalar_dot(t)) return f;
  fail("tensor type {} is not supported", info.name);
}

}  // namespace ridge::quant
