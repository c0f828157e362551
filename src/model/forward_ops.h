// The definitions of Forward's op() and norm_matmul() templates, for the files that
// define Forward's blocks (forward.cpp, forward_mla.cpp); nothing else includes this.
#pragma once
#include <chrono>
#include <utility>

#include "core/error.h"
#include "model/forward.h"
#include "perf/tracer.h"

namespace ridge {

template <typename F>
void Forward::op(perf::Op o, perf::ComputeClass cls, int32_t layer, const perf::OpCost& c, F&& fn) {
  const bool trace = perf::trace_on();
  if (!profile_.timing && !trace) {
    fn();
    profile_.add(o, cls, c.flops, c.bytes, 0.0);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const double s = be_.timed(fn);
  const auto t1 = Clock::now();
  profile_.add(o, cls, c.flops, c.bytes, profile_.timing ? s : 0.0);
  if (trace) {
    auto ns = [](Clock::time_point t) {
      return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    perf::trace_op(perf::op_name(o), ns(t0), ns(t1), layer, T_, c.flops, c.bytes);
  }
}

template <typename Split>
void Forward::norm_matmul(int32_t il, perf::Op norm_op, perf::Op mm_op, perf::OpCost cost, DType type,
                          const std::vector<float>& nw, const std::vector<float>& nb,
                          const kernels::WeightView& w, std::initializer_list<kernels::MatmulOut> outs,
                          kernels::Activations& buf, Split&& split) {
  const int64_t T = T_, E = h_.n_embd;
  const float* res = std::exchange(residual_, nullptr);
  const perf::ComputeClass cls = perf::matmul_class(type);
  if (nb.empty() && norm_in_matmul(w)) {
    // The norm (and the residual add left to it) runs row by row inside the matmul; its
    // FLOPs, and x's row read and written by the add, are the matmul op's.
    cost.flops += perf::rms_norm_cost(T, E).flops;
    if (res) cost.flops += perf::residual_cost(T, E).flops, cost.bytes += 8.0 * double(T) * double(E);
    op(mm_op, cls, il, cost, [&] { be_.add_norm_matmul(w, x_.data(), res, nw.data(), h_.norm_eps, T, outs); });
    return;
  }
  RIDGE_CHECK(!res, "a residual add was left to a norm that runs on its own");
  float* xn = buf.reserve(T * E);
  if (nb.empty()) {
    op(norm_op, perf::ComputeClass::Fp32Fma, il, perf::rms_norm_cost(T, E),
       [&] { be_.rms_norm(x_.data(), nw.data(), xn, T, E, h_.norm_eps); });
  } else {
    op(norm_op, perf::ComputeClass::Fp32Fma, il, perf::layer_norm_cost(T, E),
       [&] { be_.layer_norm(x_.data(), nw.data(), nb.data(), xn, T, E, h_.norm_eps); });
  }
  op(mm_op, cls, il, cost, [&] {
    if (be_.fuses(w)) be_.matmul_fused(w, xn, T, outs);
    else split(xn);
  });
}

}  // namespace ridge
