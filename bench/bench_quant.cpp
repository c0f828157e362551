// Dot kernels: weight GB/s per type and path, for a gemv-shaped sweep (rows of 4096
// against one activation row, 1024 rows = one pass over a 4096 x 1024 weight). The
// activation stays in L1; the weights stream, as in decode.
//   ridge_bench --benchmark_filter=QuantDot
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/fp16.h"
#include "quant/quant.h"

namespace ridge::quant {
namespace {

constexpr int64_t kN = 4096, kRows = 1024;

void BM_QuantDot(benchmark::State& state, DType t, Isa isa) {
  if (int(isa) > int(best_isa())) {
    state.SkipWithError("path not available on this CPU");
    return;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kN * kRows)), a(static_cast<size_t>(kN));
  for (auto& v : x) v = g(rng);
  for (auto& v : a) v = g(rng);
  const DType qt = can_quantize(t) ? t : DType::Q8_0;  // K-quants: random bytes below
  const int64_t rb = row_bytes(t, kN);
  std::vector<uint8_t> w(static_cast<size_t>(rb * kRows));
  if (qt == t) {
    for (int64_t r = 0; r < kRows; ++r) quantize_row(t, &x[size_t(r * kN)], &w[size_t(r * rb)], kN);
  } else {
    // & 0x3F: every f16 scale field becomes a normal number (no NaN or subnormal
    // slow paths in the timing).
    for (auto& c : w) c = uint8_t(rng() & 0x3F);
  }
  std::vector<uint8_t> act(static_cast<size_t>(act_row_bytes(t, kN)));
  prepare_act(t, a.data(), act.data(), kN);
  const DotFn f = dot_fn(t, isa);
  for (auto _ : state) {
    float s = 0;
    for (int64_t r = 0; r < kRows; ++r) s += f(&w[size_t(r * rb)], act.data(), kN);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * rb * kRows);
}

void register_all() {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
      benchmark::RegisterBenchmark(
          ("QuantDot/" + std::string(dtype_name(t)) + "/" + std::string(isa_name(isa))).c_str(),
          BM_QuantDot, t, isa);
}

const int kRegistered = (register_all(), 0);

}  // namespace
}  // namespace ridge::quant

// The one main of ridge_bench (CMake links benchmark::benchmark, not benchmark_main):
// other bench/*.cpp files register their benchmarks and must not define another.
BENCHMARK_MAIN();
