// A mixture of experts' decode: the 8 active experts of Qwen3-30B-A3B for one token,
// their gate+up (each [2 x 768][2048], q4_0, packed, gate's and up's rows two outputs;
// Arg 0) or down ([2048][768]; Arg 1), run as one grouped matmul (what the forward does) against one matrix of the same
// bytes ([8 x rows][k]) and against the same 8 experts one matmul each. Both read every byte once from DRAM: a ring of
// copies larger than the last-level cache, one copy per call. If grouped runs below the
// single matrix, the experts' structure (separate regions, short streams, task
// boundaries) costs bandwidth; if they match, the experts stream as well as any matrix
// and what is left is the GEMV's own distance to DRAM.
//   ridge_bench --benchmark_filter=Experts --benchmark_repetitions=5
// Interleave the cases across runs (the DRAM ceiling drifts on shared machines).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/arena.h"
#include "core/threadpool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed.h"

namespace ridge::kernels {
namespace {

constexpr int64_t kExperts = 8;
constexpr int64_t kRing = int64_t(768) << 20;  // > any LLC here

struct Data {
  int64_t kK, kRows;
  int64_t expert_bytes = 0, copies = 0;
  Arena ring;
  std::vector<float> x, y;
  Data(int64_t k, int64_t n) : kK(k), kRows(n) {
    const DType t = DType::Q4_0;
    if (!gemm_available(t)) return;
    std::vector<uint8_t> rows(static_cast<size_t>(row_bytes(t, kK) * kRows));
    std::mt19937_64 rng(5);
    for (auto& b : rows) b = uint8_t(rng());
    for (int64_t r = 0; r < int64_t(rows.size()) / 18; ++r) rows[size_t(r * 18)] = 0, rows[size_t(r * 18 + 1)] = 0x20;
    expert_bytes = packed_bytes(t, kK, kRows);
    std::vector<uint8_t> one(static_cast<size_t>(expert_bytes));
    pack_panels(t, kK, kRows, rows.data(), one.data(), 0, kRows / kPanelRows, false);
    copies = kRing / (expert_bytes * kExperts);
    ring = Arena(size_t(copies * kExperts * expert_bytes));
    for (int64_t e = 0; e < copies * kExperts; ++e)
      std::memcpy(ring.data() + e * expert_bytes, one.data(), size_t(expert_bytes));
    x.assign(size_t(kK), 0.5f);
    y.assign(size_t(kRows * kExperts), 0.f);
  }
  const uint8_t* set(int64_t c) const { return ring.data() + c * kExperts * expert_bytes; }
};
Data& data(int64_t shape) {
  static Data gate_up(2048, 1536), down(768, 2048);
  return shape == 0 ? gate_up : down;
}

enum class Mode { Grouped, OneMatrix, OneByOne };

void run(benchmark::State& st, Mode mode) {
  Data& d = data(st.range(0));
  const int64_t kK = d.kK, kRows = d.kRows;
  if (d.copies == 0) return st.SkipWithError("no packed q4_0 GEMM on this CPU");
  ThreadPool pool(2);
  Matmul mm;
  std::vector<WeightView> w(static_cast<size_t>(kExperts));
  std::vector<GroupedMatmul> items(static_cast<size_t>(kExperts));
  int64_t c = 0;
  for (auto _ : st) {
    const uint8_t* base = d.set(c);
    c = (c + 1) % d.copies;
    if (mode == Mode::OneMatrix) {
      const WeightView all{DType::Q4_0, kK, kRows * kExperts, nullptr, base, false};
      mm.run(pool, all, d.x.data(), 1, d.y.data());
      continue;
    }
    for (int64_t e = 0; e < kExperts; ++e) {
      w[size_t(e)] = {DType::Q4_0, kK, kRows, nullptr, base + e * d.expert_bytes, false};
      items[size_t(e)] = GroupedMatmul{};
      items[size_t(e)].w = &w[size_t(e)], items[size_t(e)].x = d.x.data(), items[size_t(e)].m = 1;
      // gate+up as the forward runs it: two outputs, gate's rows and up's (the down
      // projection one).
      if (st.range(0) == 0) {
        items[size_t(e)].n_outs = 2;
        items[size_t(e)].outs[0] = {kRows / 2, d.y.data() + e * kRows};
        items[size_t(e)].outs[1] = {kRows / 2, d.y.data() + e * kRows + kRows / 2};
      } else {
        items[size_t(e)].outs[0] = {kRows, d.y.data() + e * kRows};
      }
    }
    if (mode == Mode::Grouped) mm.run_grouped(pool, items);
    else
      for (int64_t e = 0; e < kExperts; ++e) mm.run(pool, w[size_t(e)], d.x.data(), 1, d.y.data() + e * kRows);
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * kExperts * d.expert_bytes);
}

void BM_ExpertsGrouped(benchmark::State& st) { run(st, Mode::Grouped); }
void BM_ExpertsOneMatrix(benchmark::State& st) { run(st, Mode::OneMatrix); }
void BM_ExpertsOneByOne(benchmark::State& st) { run(st, Mode::OneByOne); }

BENCHMARK(BM_ExpertsGrouped)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ExpertsOneMatrix)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ExpertsOneByOne)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace ridge
