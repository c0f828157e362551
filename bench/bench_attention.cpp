// Decode attention: 16 sequences x 4096 cached tokens, TinyLlama's heads (32 query heads
// over 4 KV heads, head_dim 64), f16 KV, one layer. One decode step reads every cached
// K/V byte once: 16 * 4096 * 4 * 64 * 2 (K and V) * 2 bytes = 128 MiB, reported as
// bytes/s. Cached256 reads each sequence's first 256 positions only (in cache). Tasks are (sequence, KV head), 64 of them, over the ThreadPool (forward.cpp
// now gives a task a run of KV heads: `ridge bench kernels` measures that split);
// PerHead is the split before GQA grouping (one task per query head, each reading its
// K/V again), for comparison.
//   ridge_bench --benchmark_filter=Attention
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "kernels/cpu/attention.h"
#include "model/kv_cache.h"

namespace ridge::kernels {
namespace {

constexpr int32_t kSeqs = 16, kCtx = 4096, kHeads = 32, kKvHeads = 4, kDim = 64, kBlock = 16;
constexpr int32_t kGroup = kHeads / kKvHeads;

struct Data {
  KVLayout l;
  std::unique_ptr<KVCache> kv;
  std::vector<std::vector<int32_t>> tables;  // [seqs][kCtx / kBlock], shuffled block ids
  std::vector<float> q;                      // [seqs][heads][dim]

  Data() {
    l.n_layer = 1;
    l.n_kv_head = kKvHeads;
    l.head_dim_k = l.head_dim_v = kDim;
    l.block_size = kBlock;
    l.n_blocks = kSeqs * kCtx / kBlock;
    l.dtype = DType::F16;
    kv = std::make_unique<KVCache>(l);
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<uint16_t> pool(1 << 16);
    for (auto& h : pool) h = f32_to_f16(g(rng));
    // One layer: the whole cache is its K and V tiles.
    auto* h = reinterpret_cast<uint16_t*>(kv->k_tile(0, 0, 0));
    for (int64_t i = 0; i < kv->total_bytes() / 2; ++i) h[i] = pool[size_t((i * 7 + (i >> 16)) & 0xFFFF)];
    std::vector<int32_t> ids(size_t(l.n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int32_t per = kCtx / kBlock;
    for (int32_t s = 0; s < kSeqs; ++s) tables.emplace_back(ids.begin() + s * per, ids.begin() + (s + 1) * per);
    q.resize(size_t(kSeqs * kHeads * kDim));
    for (auto& x : q) x = g(rng);
  }
};

const Data& data() {
  static const Data d;
  return d;
}

void BM_Attention(benchmark::State& state, Isa isa, int threads, bool per_head, int32_t ctx) {
  if (int(isa) > int(best_isa())) {
    state.SkipWithError("path not available on this CPU");
    return;
  }
  const Data& d = data();
  const Isa saved = active_isa();
  set_isa(isa);
  ThreadPool pool(threads);
  const int32_t n_q = per_head ? 1 : kGroup;
  const int64_t per = attention_scratch_floats(d.l, n_q);
  std::vector<float> scratch(size_t(per * threads));
  std::vector<float> out(d.q.size());
  const int64_t tasks = int64_t(kSeqs) * (per_head ? kHeads : kKvHeads);
  const int64_t heads_per_task = per_head ? 1 : kGroup;
  for (auto _ : state) {
    pool.run(tasks, [&](int64_t task, int thread) {
      const int32_t s = int32_t(task / (kHeads / heads_per_task));
      const int32_t h0 = int32_t(task % (kHeads / heads_per_task)) * int32_t(heads_per_task);
      const AttnArgs a{d.kv.get(), 0, d.tables[size_t(s)], ctx, 0.125f};
      const int64_t off = (int64_t(s) * kHeads + h0) * kDim;
      attention_group(a, h0 / kGroup, n_q, d.q.data() + off, kDim, out.data() + off, kDim,
                      scratch.data() + thread * per);
    });
    benchmark::DoNotOptimize(out.data());
  }
  set_isa(saved);
  // Bytes of K/V one decode step must read (the per-head split reads them 8 times).
  state.SetBytesProcessed(int64_t(state.iterations()) * kSeqs * ctx * kKvHeads * kDim * 2 * 2);
}

void register_all() {
  for (bool per_head : {false, true})
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark((std::string(per_head ? "AttentionDecode/PerHead/" : "AttentionDecode/Grouped/") +
                                      std::string(isa_name(isa)) + "/threads:" + std::to_string(threads))
                                         .c_str(),
                                     BM_Attention, isa, threads, per_head, kCtx)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
  // The first 256 positions of each sequence (4 MiB, in the last-level cache): the
  // kernel's arithmetic without the DRAM stream.
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    benchmark::RegisterBenchmark(("AttentionDecode/Cached256/" + std::string(isa_name(isa)) + "/threads:1").c_str(),
                                 BM_Attention, isa, 1, false, 256)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
}

const int kRegistered = (register_all(), 0);

}  // namespace
}  // namespace ridge::kernels
