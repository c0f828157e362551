// Why decode's m = 1 kernels prefetch ahead in software (gemm_avx512.cpp, stream_ahead):
// two threads each read half of a 1 GiB buffer the way tile<1, 4> does, 4 panels of
// 18 KiB (a q4_0 panel at k = 2048) side by side, group after group, and do per line
//   Plain:      one add (a pure read);
//   Q4Work:     the q4_0 kernel's arithmetic (nibble split, 2 vpdpbusd);
//   Q4Ahead/D:  the same with a T0 prefetch D bytes ahead in every stream.
// Reported as bytes/s (Google Benchmark's G is 2^30). On the 2-core dev VM (session 6,
// medians of 5): Plain 28.8 GiB/s, Q4Work 25.6, Q4Ahead 27.4 / 28.6 / 30.0 at 512 / 1024 /
// 2048: the arithmetic alone costs 11% of the read rate, and the prefetch wins it back.
//   ridge_bench --benchmark_filter=Stream
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "core/cpu.h"

namespace ridge {
namespace {

constexpr size_t kBytes = size_t(1) << 30, kPanel = 18432, kGroup = 4 * kPanel;

struct Free {
  void operator()(char* q) const { std::free(q); }
};
struct Buffer {
  std::unique_ptr<char, Free> p{static_cast<char*>(std::aligned_alloc(4096, kBytes))};
  Buffer() {
    if (p) std::memset(p.get(), 1, kBytes);
  }
};
Buffer& buffer() {
  static Buffer b;
  return b;
}

enum class Work { Plain, Q4 };

// One thread's half: groups of 4 panels, each panel's lines in order, the 4 in lockstep.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t read_half(const char* base, Work work,
                                                                         size_t ahead) {
  __m512i acc[4][2];
  for (auto& a : acc) a[0] = a[1] = _mm512_setzero_si512();
  const __m512i m4 = _mm512_set1_epi8(15), b = _mm512_set1_epi32(0x01020304);
  for (size_t g = 0; g + kGroup <= kBytes / 2; g += kGroup)
    for (size_t o = 0; o < kPanel; o += 64)
      for (int s = 0; s < 4; ++s) {
        const char* line = base + g + s * kPanel + o;
        if (ahead) _mm_prefetch(line + ahead, _MM_HINT_T0);
        const __m512i v = _mm512_load_si512(line);
        if (work == Work::Plain) {
          acc[s][0] = _mm512_add_epi32(acc[s][0], v);
        } else {
          const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          acc[s][0] = _mm512_dpbusd_epi32(acc[s][0], lo, b);
          acc[s][1] = _mm512_dpbusd_epi32(acc[s][1], hi, b);
        }
      }
  __m512i t = _mm512_setzero_si512();
  for (auto& a : acc) t = _mm512_add_epi32(t, _mm512_add_epi32(a[0], a[1]));
  return _mm512_reduce_add_epi32(t);
}

void run(benchmark::State& st, Work work, size_t ahead) {
  if (!cpu_features().avx512vnni) return st.SkipWithError("needs AVX-512 VNNI");
  const char* base = buffer().p.get();
  if (!base) return st.SkipWithError("could not allocate the 1 GiB buffer");
  int32_t sink[2] = {0, 0};
  for (auto _ : st) {
    std::thread other([&] { sink[1] = read_half(base + kBytes / 2, work, ahead); });
    sink[0] = read_half(base, work, ahead);
    other.join();
    benchmark::DoNotOptimize(sink);
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(kBytes));
}

void BM_StreamPlain(benchmark::State& st) { run(st, Work::Plain, 0); }
void BM_StreamQ4Work(benchmark::State& st) { run(st, Work::Q4, 0); }
void BM_StreamQ4Ahead(benchmark::State& st) { run(st, Work::Q4, size_t(st.range(0))); }

BENCHMARK(BM_StreamPlain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StreamQ4Work)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StreamQ4Ahead)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ridge
