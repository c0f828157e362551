// AVX2 kernels of `ridge peaks`, for CPUs (or RIDGE_ISA=avx2 runs) without AVX-512: the
// streaming read, fp32 FMA on ymm, and AVX-VNNI (VEX vpdpbusd) where CPUID reports it.
// The AVX-VNNI kernel carries its own target attribute: the file's flags lack it.
#include <immintrin.h>

#include "perf/peaks.h"

// 12 chains: covers FMA latency on two ports and, with the two operands, fits in the 16
// ymm registers AVX2 code can name, so nothing spills.
#define RIDGE_CHAINS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

namespace ridge::peaks_detail {

uint64_t read_avx2(const void* p, int64_t bytes) {
  const __m256i* v = static_cast<const __m256i*>(p);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0, n = bytes / 32; i < n; i += 8) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(v + i + 0));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(v + i + 1));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256(v + i + 2));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256(v + i + 3));
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(v + i + 4));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(v + i + 5));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256(v + i + 6));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256(v + i + 7));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t read_streams_avx2(const char* const* p, int n, int64_t bytes, int64_t ahead) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t off = 0; off < bytes; off += 128)
    for (int k = 0; k < n; ++k) {
      const char* q = p[k] + off;
      if (ahead > 0) {
        _mm_prefetch(q + ahead, _MM_HINT_T0);
        _mm_prefetch(q + ahead + 64, _MM_HINT_T0);
      }
      s0 = _mm256_add_epi64(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(q)));
      s1 = _mm256_add_epi64(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32)));
      s2 = _mm256_add_epi64(s2, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64)));
      s3 = _mm256_add_epi64(s3, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 96)));
    }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

namespace {
float hsum(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
}  // namespace

double fp32_fma_avx2(int64_t iters, float seed) {
  // acc = acc * a + b with a < 1 converges: no overflow, no denormals.
  const __m256 a = _mm256_set1_ps(seed), b = _mm256_set1_ps(1.0f - seed);
#define RIDGE_INIT(i) __m256 c##i = _mm256_set1_ps(float(i) * seed);
#define RIDGE_STEP(i) c##i = _mm256_fmadd_ps(c##i, a, b);
#define RIDGE_SUM(i) s = _mm256_add_ps(s, c##i);
  RIDGE_CHAINS12(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    RIDGE_CHAINS12(RIDGE_STEP)
  }
  __m256 s = _mm256_setzero_ps();
  RIDGE_CHAINS12(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_STEP
#undef RIDGE_SUM
  return double(hsum(s));
}

// Without VNNI the int8 product is vpmaddubsw (32 u8 x s8 products into 16 int16 pair
// sums), and the AVX2 GEMM adds those up in int16 (gemm_avx2.cpp): a step of a chain is
// maddubs + paddw, fed by the chain itself so nothing is loop-invariant (the values
// saturate and wrap harmlessly).
double int8_maddubs_avx2(int64_t iters, float seed) {
  const int k = 1 + int(seed * 100.0f) % 100;
  const __m256i s8 = _mm256_set1_epi8(char(k / 2));
#define RIDGE_INIT(i) __m256i c##i = _mm256_set1_epi16(int16_t(i + k));
#define RIDGE_STEP(i) c##i = _mm256_add_epi16(_mm256_maddubs_epi16(c##i, s8), s8);
#define RIDGE_SUM(i) s = _mm256_add_epi16(s, c##i);
  RIDGE_CHAINS12(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    RIDGE_CHAINS12(RIDGE_STEP)
  }
  __m256i s = _mm256_setzero_si256();
  RIDGE_CHAINS12(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_STEP
#undef RIDGE_SUM
  alignas(32) int16_t l[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), s);
  double t = 0;
  for (int16_t v : l) t += v;
  return t;
}

__attribute__((target("avxvnni"))) double int8_vnni_avxvnni(int64_t iters, float seed) {
  const int k = 1 + int(seed * 100.0f) % 100;
  const __m256i u = _mm256_set1_epi8(char(k)), s8 = _mm256_set1_epi8(char(k / 2));
#define RIDGE_INIT(i) __m256i c##i = _mm256_set1_epi32(i);
#define RIDGE_STEP(i) c##i = _mm256_dpbusd_avx_epi32(c##i, u, s8);
#define RIDGE_SUM(i) s = _mm256_add_epi32(s, c##i);
  RIDGE_CHAINS12(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    RIDGE_CHAINS12(RIDGE_STEP)
  }
  __m256i s = _mm256_setzero_si256();
  RIDGE_CHAINS12(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_STEP
#undef RIDGE_SUM
  alignas(32) int32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), s);
  return double(l[0]) + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

}  // namespace ridge::peaks_detail
