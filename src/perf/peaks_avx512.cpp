// AVX-512 kernels of `ridge peaks`: a streaming read and the multiply-add throughput of
// each instruction ridge's kernels are built on. The bf16 and fp16 kernels carry their
// own target attribute (the file's flags stop at AVX512-VNNI), so only they may use
// those instructions, and peaks.cpp calls them only when CPUID reports them.
#include <immintrin.h>

#include "perf/peaks.h"

// 16 independent chains: enough to cover a 4-6 cycle latency on two ports, and with the
// two operands they still fit in the 32 zmm registers, so nothing spills to memory.
#define RIDGE_CHAINS16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

namespace ridge::peaks_detail {
namespace {

// Lane sums in unsigned arithmetic: the sums wrap by design, and _mm512_reduce_add_*
// adds as signed integers, where wrapping is undefined behaviour.
uint64_t sum_u64(__m512i v) {
  alignas(64) uint64_t l[8];
  _mm512_store_si512(l, v);
  uint64_t s = 0;
  for (uint64_t x : l) s += x;
  return s;
}

uint32_t sum_u32(__m512i v) {
  alignas(64) uint32_t l[16];
  _mm512_store_si512(l, v);
  uint32_t s = 0;
  for (uint32_t x : l) s += x;
  return s;
}

}  // namespace

uint64_t read_avx512(const void* p, int64_t bytes) {
  const __m512i* v = static_cast<const __m512i*>(p);
  // Eight loads per iteration into four accumulators: integer adds have one-cycle
  // latency, so the loop is bound by the loads (the memory system), never by the adds.
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0, n = bytes / 64; i < n; i += 8) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(v + i + 0));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(v + i + 1));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(v + i + 2));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(v + i + 3));
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(v + i + 4));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(v + i + 5));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(v + i + 6));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(v + i + 7));
  }
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3));
  return sum_u64(s);
}

uint64_t read_streams_avx512(const char* const* p, int n, int64_t bytes, int64_t ahead) {
  // Four lines of each stream in turn, as a decode kernel walks its panels side by side,
  // each optionally prefetched `ahead` bytes before it is loaded.
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t off = 0; off < bytes; off += 256)
    for (int k = 0; k < n; ++k) {
      const char* q = p[k] + off;
      if (ahead > 0) {
        _mm_prefetch(q + ahead, _MM_HINT_T0);
        _mm_prefetch(q + ahead + 64, _MM_HINT_T0);
        _mm_prefetch(q + ahead + 128, _MM_HINT_T0);
        _mm_prefetch(q + ahead + 192, _MM_HINT_T0);
      }
      s0 = _mm512_add_epi64(s0, _mm512_load_si512(q));
      s1 = _mm512_add_epi64(s1, _mm512_load_si512(q + 64));
      s2 = _mm512_add_epi64(s2, _mm512_load_si512(q + 128));
      s3 = _mm512_add_epi64(s3, _mm512_load_si512(q + 192));
    }
  return sum_u64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}

double fp32_fma_avx512(int64_t iters, float seed) {
  // acc = acc * a + b with a < 1 converges to b / (1 - a): no overflow, no denormals.
  const __m512 a = _mm512_set1_ps(seed), b = _mm512_set1_ps(1.0f - seed);
#define RIDGE_INIT(i) __m512 c##i = _mm512_set1_ps(float(i) * seed);
#define RIDGE_STEP(i) c##i = _mm512_fmadd_ps(c##i, a, b);
#define RIDGE_SUM(i) s = _mm512_add_ps(s, c##i);
  RIDGE_CHAINS16(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    RIDGE_CHAINS16(RIDGE_STEP)
  }
  __m512 s = _mm512_setzero_ps();
  RIDGE_CHAINS16(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_STEP
#undef RIDGE_SUM
  return double(_mm512_reduce_add_ps(s));
}

__attribute__((target("avx512bf16"))) double bf16_dot_avx512(int64_t iters, float seed) {
  // Each vdpbf16ps adds two bf16 products per fp32 lane: 32 products per instruction.
  // Small operands keep the growing sums far from overflow for any run length here.
  const __m512 small = _mm512_set1_ps(seed * 1e-3f);
  const __m512bh x = _mm512_cvtne2ps_pbh(small, small), y = x;
#define RIDGE_INIT(i) __m512 c##i = _mm512_set1_ps(float(i));
#define RIDGE_STEP(i) c##i = _mm512_dpbf16_ps(c##i, x, y);
#define RIDGE_SUM(i) s = _mm512_add_ps(s, c##i);
  RIDGE_CHAINS16(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    RIDGE_CHAINS16(RIDGE_STEP)
  }
  __m512 s = _mm512_setzero_ps();
  RIDGE_CHAINS16(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_STEP
#undef RIDGE_SUM
  return double(_mm512_reduce_add_ps(s));
}

double int8_vnni_avx512(int64_t iters, float seed) {
  // vpdpbusd: u8 x s8, four products summed into each int32 lane (64 per instruction);
  // the int32 sums wrap on overflow, which costs nothing and is never read as a value.
  const int k = 1 + int(seed * 100.0f) % 100;
  const __m512i u = _mm512_set1_epi8(char(k)), s8 = _mm512_set1_epi8(char(k / 2));
#define RIDGE_INIT(i) __m512i c##i = _mm512_set1_epi32(i);
#define RIDGE_STEP(i) c##i = _mm512_dpbusd_epi32(c##i, u, s8);
#define RIDGE_SUM(i) s = _mm512_add_epi32(s, c##i);
  RIDGE_CHAINS16(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    RIDGE_CHAINS16(RIDGE_STEP)
  }
  __m512i s = _mm512_setzero_si512();
  RIDGE_CHAINS16(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_STEP
#undef RIDGE_SUM
  return double(sum_u32(s));
}

double fp16_fma_avx512(int64_t iters, float seed) {
  // Inline asm: clang declares the AVX512-FP16 intrinsics only under -mavx512fp16, and
  // the file must build without it. Operands are fp16 bit patterns made with F16C.
  // c = a * c + b with a < 1 converges: no overflow, no denormals.
  const __m128i ab = _mm_cvtps_ph(_mm_setr_ps(seed, 1.0f - seed, 0.5f, 0.0f), _MM_FROUND_TO_NEAREST_INT);
  const __m512i a = _mm512_set1_epi16(short(_mm_extract_epi16(ab, 0)));
  const __m512i b = _mm512_set1_epi16(short(_mm_extract_epi16(ab, 1)));
  const __m512i half = _mm512_set1_epi16(short(_mm_extract_epi16(ab, 2)));
#define RIDGE_INIT(i) __m512i c##i = half;
#define RIDGE_PH(n) "vfmadd213ph %[b], %[a], %" #n "\n\t"
#define RIDGE_PH8 RIDGE_PH(0) RIDGE_PH(1) RIDGE_PH(2) RIDGE_PH(3) RIDGE_PH(4) RIDGE_PH(5) RIDGE_PH(6) RIDGE_PH(7)
#define RIDGE_SUM(i) s = _mm512_add_ps(s, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(c##i, 0)));
  RIDGE_CHAINS16(RIDGE_INIT)
  for (int64_t it = 0; it < iters; ++it) {
    // Two statements of eight chains: an asm takes at most 30 operands ("+v" counts two).
    __asm__(RIDGE_PH8 : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7)
            : [a] "v"(a), [b] "v"(b));
    __asm__(RIDGE_PH8 : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11), "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15)
            : [a] "v"(a), [b] "v"(b));
  }
  __m512 s = _mm512_setzero_ps();
  RIDGE_CHAINS16(RIDGE_SUM)
#undef RIDGE_INIT
#undef RIDGE_PH
#undef RIDGE_PH8
#undef RIDGE_SUM
  return double(_mm512_reduce_add_ps(s));
}

}  // namespace ridge::peaks_detail
