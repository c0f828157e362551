// The next step for decode attention (issue 6): P.V, 44% of an attention tile, in
// AVX512-FP16. A tile here is 8 query rows (a GQA group) x 64 keys of f16 V [key][64]
// into fp32 outputs, from L2 (64 tiles, 512 KiB of V), two ways:
//   F32:       what attention_avx512.cpp does: V converted to f32, one fma per row and
//              16 columns, fp32 accumulators;
//   F16Block:  vfmadd231ph, 32 columns per instruction, the probabilities rounded to
//              fp16 and each 16-key block summed in fp16, then converted and added into
//              the fp32 outputs (llama.cpp's CPU path keeps the whole sum in f16).
// Reported: tiles per second (items), and rel_err = max |out - exact| / max |exact| over
// 4096 keys (the error of rounding p to fp16 dominates F16Block's). On the dev VM
// (session 7, medians of 5): F32 400 ns per tile, F16Block 243 ns (1.65x); rel_err
// 1.9e-6 against 5.6e-4 (the same order as storing K/V in bf16, 2^-9 per value).
//   ridge_bench --benchmark_filter=PvTile --benchmark_repetitions=5
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace ridge {
namespace {

constexpr int kRows = 8, kDv = 64, kKeys = 64, kTiles = 64;

#define PV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512fp16,f16c,fma"), noinline))

PV_TARGET void pv_f32(const _Float16* v, const float* p, float* o) {
  for (int d0 = 0; d0 < kDv; d0 += 32) {
    __m512 acc[kRows][2];
    for (int r = 0; r < kRows; ++r)
      acc[r][0] = _mm512_loadu_ps(o + r * kDv + d0), acc[r][1] = _mm512_loadu_ps(o + r * kDv + d0 + 16);
    for (int j = 0; j < kKeys; ++j) {
      const __m512 v0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j * kDv + d0)));
      const __m512 v1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j * kDv + d0 + 16)));
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512 w = _mm512_set1_ps(p[r * kKeys + j]);
        acc[r][0] = _mm512_fmadd_ps(w, v0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(w, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      _mm512_storeu_ps(o + r * kDv + d0, acc[r][0]), _mm512_storeu_ps(o + r * kDv + d0 + 16, acc[r][1]);
  }
}

PV_TARGET void pv_f16_block(const _Float16* v, const _Float16* ph, float* o) {
  for (int b = 0; b < kKeys; b += 16) {
    __m512h acc[kRows][2];
    for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ph();
    for (int j = b; j < b + 16; ++j) {
      const __m512h v0 = _mm512_loadu_ph(v + j * kDv), v1 = _mm512_loadu_ph(v + j * kDv + 32);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512h w = _mm512_set1_ph(ph[r * kKeys + j]);
        acc[r][0] = _mm512_fmadd_ph(w, v0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ph(w, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < 2; ++h) {
        const __m512i a = _mm512_castph_si512(acc[r][h]);
        float* q = o + r * kDv + 32 * h;
        _mm512_storeu_ps(q, _mm512_add_ps(_mm512_loadu_ps(q), _mm512_cvtph_ps(_mm512_castsi512_si256(a))));
        _mm512_storeu_ps(q + 16, _mm512_add_ps(_mm512_loadu_ps(q + 16), _mm512_cvtph_ps(_mm512_extracti64x4_epi64(a, 1))));
      }
  }
}

struct Data {
  std::vector<_Float16> v = std::vector<_Float16>(size_t(kTiles) * kKeys * kDv);
  std::vector<float> p = std::vector<float>(size_t(kTiles) * kRows * kKeys);
  std::vector<_Float16> ph = std::vector<_Float16>(p.size());
  std::vector<double> exact = std::vector<double>(kRows * kDv, 0.0);
  Data() {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(0.f, 1.f);
    for (auto& x : v) x = static_cast<_Float16>(nd(rng));
    for (size_t i = 0; i < p.size(); ++i) p[i] = ud(rng) * ud(rng), ph[i] = static_cast<_Float16>(p[i]);
    for (int t = 0; t < kTiles; ++t)
      for (int r = 0; r < kRows; ++r)
        for (int j = 0; j < kKeys; ++j)
          for (int d = 0; d < kDv; ++d)
            exact[size_t(r * kDv + d)] += double(p[size_t((t * kRows + r) * kKeys + j)]) *
                                          double(v[(size_t(t) * kKeys + j) * kDv + size_t(d)]);
  }
  double rel_err(const std::vector<float>& o) const {
    double e = 0, mag = 0;
    for (double x : exact) mag = std::max(mag, std::fabs(x));
    for (size_t i = 0; i < o.size(); ++i) e = std::max(e, std::fabs(double(o[i]) - exact[i]));
    return e / mag;
  }
};

template <bool kF16>
void run(benchmark::State& st) {
  if (!__builtin_cpu_supports("avx512fp16")) return st.SkipWithError("needs AVX512-FP16");
  static const Data d;
  std::vector<float> o(kRows * kDv);
  auto pass = [&] {
    std::fill(o.begin(), o.end(), 0.f);
    for (int t = 0; t < kTiles; ++t) {
      const _Float16* v = d.v.data() + size_t(t) * kKeys * kDv;
      if constexpr (kF16) pv_f16_block(v, d.ph.data() + t * kRows * kKeys, o.data());
      else pv_f32(v, d.p.data() + t * kRows * kKeys, o.data());
    }
  };
  pass();
  st.counters["rel_err"] = d.rel_err(o);
  for (auto _ : st) {
    pass();
    benchmark::DoNotOptimize(o.data());
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * kTiles);  // items: tiles
}

void BM_PvTileF32(benchmark::State& st) { run<false>(st); }
void BM_PvTileF16Block(benchmark::State& st) { run<true>(st); }
BENCHMARK(BM_PvTileF32);
BENCHMARK(BM_PvTileF16Block);

}  // namespace
}  // namespace ridge
