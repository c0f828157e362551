// src/kernels/cpu/attention: every ISA path against a double-precision softmax(q K^T s) V
// over random paged K/V, and the grouping contract (a row's bits do not depend on which
// rows share its call).
//
// Tolerance kTol = 2e-5, of max |v| over the attended V (the output is a convex
// combination of V rows, so that is its scale). The reference reads the cache's stored
// values back exactly, so f16/bf16 rounding is common to both sides and the error is the
// kernels' f32 arithmetic alone: dots over <= 128 terms, the running sum and p.V over
// <= 300 positions (a few 1e-7 typical, n * 6e-8 ~ 2e-5 at worst), exp within a few ulp.
// A wrong lane, block, mask or rescale is off by O(1e-2) or more (on the f32 paths).
//
// Int8 keys on AVX-512 score in integer arithmetic with each query row quantized to int8
// (attention_avx512.cpp: codes round(q x 127 / amax), scale amax / 127). Against a
// reference fed those quantized rows, kTol holds as above; against the f32 paths the
// query's rounding shows: a score moves by at most scale x sum_d |k_d| x amax / 254, which
// in the tests' first 8 rows (|q| up to 4.5 sigma, a peaked softmax) is a few 1e-3 of
// max |v|: kTolQ8 = 2e-2 bounds that difference (with the weights' rounding below), and
// the quantized reference checks the rest. Int8 values there run P.V in integers too: a
// row's weights (probability times the value's scale) in each chunk of 128 score lanes
// are rounded to 8 bits against their largest, which moves the output by at most
// i8_weight_bound (half a step per key, times its codes, all with one sign: a loose
// bound); the quantized reference checks within that bound plus kTol, and a case with
// every weight exact (equal scores, equal value scales) checks the integer path's
// positions, blocks, chunks and dimensions within kTol alone.
//
// FP8 caches on AMX-BF16 tiles (attention_avx512.cpp, where the CPU has them) multiply
// bf16 parts of the f32 operands: a query row in three (exact), the probabilities in
// two (each within 2^-17 of itself), by the codes' exact bf16 values, summing in f32:
// kTol holds as for the f32 paths. On AVX512-BF16 vectors (AttnDots::Bf16) the query and
// the weights (probability x value scale) are each rounded to bf16 once: against a
// reference fed the query rounded as the kernel rounds it, kTol holds past the weights'
// rounding, which moves output element d by at most 2^-8 x sum_j p_j |v_jd| / sum_j p_j
// (bf16_weight_bound); against the f32 paths the query's rounding shows as int8's does
// (kTolQ8). Those cases run on every FP8 way the CPU has, and on the f32 one. A BF16
// cache on AVX512-BF16 vectors rounds the same two operands (its weights are the
// probabilities) and is checked the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "model/kv_cache.h"
#include "attention_f16_emulation.h"
#include "isa_guard.h"

namespace ridge::kernels {
namespace {

constexpr double kTol = 2e-5;
constexpr double kTolQ8 = 2e-2;
constexpr int32_t kLayer = 1, kKvHead = 2;  // neither first: exercises both offsets

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(best_isa()); ++i) v.push_back(Isa(i));
  return v;
}

using test::IsaGuard;

bool is_fp8(DType t) { return t == DType::F8_E4M3 || t == DType::F8_E5M2; }

// The paths one case runs: every ISA, and on AVX-512 each way of an FP8 cache's
// arithmetic the CPU has (attention_dots): f32, AMX-BF16 tiles, AVX512-BF16 vectors.
using detail::AttnDots;
// An FP8 cache's f32 path runs with its codes' half conversion (lookup false) and, where
// the CPU has VBMI, with the byte lookups (attention_fp8_f32_avx512.h) that must give its
// bits.
struct Path {
  Isa isa;
  AttnDots dots = AttnDots::F32;
  bool lookup = false;
  std::string name() const {
    return std::string(isa_name(isa)) +
           (dots == AttnDots::Amx ? "+tiles" : dots == AttnDots::Bf16 ? "+bf16" : dots == AttnDots::F16 ? "+f16" : "") +
           (lookup ? "+lookup" : "");
  }
};
// The CPU has what attention_dots asks for each bf16 way (core/cpu.h amx_bf16_active
// and fp8_bf16_available, whatever RIDGE_AMX and RIDGE_FP8_PATH say).
bool fp8_tiles_here() {
  const CpuFeatures& f = cpu_features();
  return f.amx_bf16 && f.avx512bf16 && f.avx512vbmi && amx_supported() && best_isa() == Isa::Avx512;
}
bool fp8_bf16_here() {
  const CpuFeatures& f = cpu_features();
  return f.avx512bf16 && f.avx512vbmi && best_isa() == Isa::Avx512;
}
std::vector<Path> paths(DType t) {
  std::vector<Path> v;
  for (Isa isa : isas()) {
    v.push_back({isa, AttnDots::F32});
    if (isa == Isa::Avx512 && (t == DType::F16 || t == DType::F8_E4M3) && test::f16_here())
      v.push_back({isa, AttnDots::F16});
    if (isa != Isa::Avx512 || !(is_fp8(t) || t == DType::BF16)) continue;
    if (is_fp8(t) && cpu_features().avx512vbmi) v.push_back({isa, AttnDots::F32, true});
    if (fp8_tiles_here() && is_fp8(t)) v.push_back({isa, AttnDots::Amx});
    if (fp8_bf16_here()) v.push_back({isa, AttnDots::Bf16});
  }
  return v;
}
// Selects p; with a bf16 way, checks that the case's layout takes it (else the case would
// test the f32 path twice).
void use_path(const Path& p, const KVLayout& l) {
  set_isa(p.isa);
  set_amx(p.dots == AttnDots::Amx);
  set_fp8_path(p.dots == AttnDots::Bf16 ? Fp8Path::Bf16 : Fp8Path::F16c);
  detail::set_fp8_lookup_f32(p.lookup);
  detail::set_attention_f16_arith(p.dots == AttnDots::F16);
  const bool shape = l.block_size % 16 == 0 && l.head_dim_k % 32 == 0 && l.head_dim_v % 32 == 0 &&
                     (p.dots == AttnDots::Amx || l.block_size <= detail::kMaxTileKeys) &&
                     !(p.dots == AttnDots::F16 && l.v_in_k);
  ASSERT_EQ(detail::attention_dots(l), shape ? p.dots : AttnDots::F32) << p.name();
}

struct LookupGuard {
  bool saved = detail::fp8_lookup_f32();
  ~LookupGuard() { detail::set_fp8_lookup_f32(saved); }
};

// x rounded to bf16 (nearest, ties to even), as vcvtne2ps2bf16 rounds a finite x.
float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// A cache of 2 layers x 3 KV heads with random K/V at the positions a sequence of n_ctx
// tokens owns, through a shuffled (non-contiguous) block table, and NaN everywhere else:
// a kernel that reads a slot past n_ctx, another block or another head shows NaN.
struct Cache {
  KVLayout l;
  std::unique_ptr<KVCache> kv;
  std::vector<int32_t> table;
  int32_t n_ctx = 0;

  Cache(DType t, int32_t dk, int32_t dv, int32_t bs, int32_t n_ctx_, uint32_t seed) : n_ctx(n_ctx_) {
    const int32_t need = (n_ctx + bs - 1) / bs;
    l.n_layer = 2;
    l.n_kv_head = 3;
    l.head_dim_k = dk;
    l.head_dim_v = dv;
    l.block_size = bs;
    l.n_blocks = 2 * need + 3;
    l.dtype = t;
    kv = std::make_unique<KVCache>(l);
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(size_t(l.n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(ids.begin(), ids.begin() + need);

    std::normal_distribution<float> g(0.f, 1.f);
    const std::vector<float> nan_k(size_t(dk), std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> nan_v(size_t(dv), std::numeric_limits<float>::quiet_NaN());
    for (int32_t layer = 0; layer < l.n_layer; ++layer)
      for (int32_t b = 0; b < l.n_blocks; ++b)
        for (int32_t h = 0; h < l.n_kv_head; ++h)
          for (int32_t s = 0; s < bs; ++s) {
            kv->write_k(layer, b, h, s, nan_k.data());
            kv->write_v(layer, b, h, s, nan_v.data());
          }
    std::vector<float> x(size_t(dk > dv ? dk : dv));
    for (int32_t p = 0; p < n_ctx; ++p) {
      const int32_t b = table[size_t(p / bs)], s = p % bs;
      for (auto& e : x) e = g(rng);
      kv->write_k(kLayer, b, kKvHead, s, x.data());
      for (auto& e : x) e = g(rng);
      kv->write_v(kLayer, b, kKvHead, s, x.data());
    }
  }

  // Random K/V for head h too (the constructor fills kKvHead only).
  void fill_head(int32_t h, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.f, 1.f);
    std::vector<float> x(size_t(std::max(l.head_dim_k, l.head_dim_v)));
    for (int32_t p = 0; p < n_ctx; ++p) {
      const int32_t b = table[size_t(p / l.block_size)], s = p % l.block_size;
      for (auto& e : x) e = g(rng);
      kv->write_k(kLayer, b, h, s, x.data());
      for (auto& e : x) e = g(rng);
      kv->write_v(kLayer, b, h, s, x.data());
    }
  }

  // A sliding window of w positions: rows attend to [lo(), n_ctx). Every position before
  // lo() (or nan_before, when >= 0) is made NaN: a kernel must not read the whole blocks
  // before lo()'s, nor let the keys and values of lo()'s own block before it reach the
  // output.
  int32_t window = 0;
  int32_t lo() const { return window > 0 ? std::max(0, n_ctx - window) : 0; }
  void set_window(int32_t w, int32_t nan_before = -1) {
    window = w;
    if (nan_before < 0) nan_before = lo();
    const std::vector<float> nan_k(size_t(l.head_dim_k), std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> nan_v(size_t(l.head_dim_v), std::numeric_limits<float>::quiet_NaN());
    for (int32_t p = 0; p < nan_before; ++p) {
      kv->write_k(kLayer, table[size_t(p / l.block_size)], kKvHead, p % l.block_size, nan_k.data());
      kv->write_v(kLayer, table[size_t(p / l.block_size)], kKvHead, p % l.block_size, nan_v.data());
    }
  }

  // Attention sinks, one per query row of a call (empty: none).
  std::vector<float> sinks;

  AttnArgs args(float scale, int32_t row0 = 0) const {
    return {kv.get(), kLayer, table, n_ctx, scale, {}, window, sinks.empty() ? nullptr : sinks.data() + row0};
  }

  // An E4M3 cache's position p: its K or V codes as the F16 way's halves (their values x
  // 2^-8, exact), and its scale x 256 (kCodeUnit).
  std::vector<float> code_halves(bool is_k, int32_t p) const {
    const int32_t b = table[size_t(p / l.block_size)], s = p % l.block_size, d = is_k ? l.head_dim_k : l.head_dim_v;
    const uint8_t* tile = is_k ? kv->k_tile(kLayer, b, kKvHead) : kv->v_tile(kLayer, b, kKvHead);
    std::vector<float> r(static_cast<size_t>(d));
    for (int32_t i = 0; i < d; ++i) {
      const uint8_t c = tile[is_k ? l.k_element(i, s) : l.v_element(s, i)];
      to_f32(DType::F8_E4M3, &c, &r[size_t(i)], 1);
      r[size_t(i)] = std::ldexp(r[size_t(i)], -8);
    }
    return r;
  }
  float unit_scale(bool is_k, int32_t p) const {
    const int32_t b = table[size_t(p / l.block_size)], s = p % l.block_size;
    return (is_k ? kv->k_scales(kLayer, b, kKvHead) : kv->v_scales(kLayer, b, kKvHead))[s] * 256.f;
  }

  // Stored K or V of position p, exactly (f16/bf16 -> f32 is exact).
  std::vector<float> row(bool is_k, int32_t p) const {
    const int32_t b = table[size_t(p / l.block_size)], s = p % l.block_size, d = is_k ? l.head_dim_k : l.head_dim_v;
    std::vector<float> r(static_cast<size_t>(d));
    if (is_k) kv->read_k(kLayer, b, kKvHead, s, r.data());
    else kv->read_v(kLayer, b, kKvHead, s, r.data());
    return r;
  }
};

// softmax(q K^T scale) V in double, one row.
// A row's scores q.k x scale over the context, in double, and their max.
std::vector<double> scores_of(const Cache& st, const float* q, float scale, double* mx) {
  std::vector<double> s(size_t(st.n_ctx), -INFINITY);
  *mx = -INFINITY;
  for (int32_t p = st.lo(); p < st.n_ctx; ++p) {
    const std::vector<float> k = st.row(true, p);
    double dot = 0;
    for (int32_t d = 0; d < st.l.head_dim_k; ++d) dot += double(q[d]) * k[size_t(d)];
    s[size_t(p)] = dot * scale;
    *mx = std::max(*mx, s[size_t(p)]);
  }
  return s;
}

std::vector<double> reference(const Cache& st, const float* q, float scale, double sink = -INFINITY) {
  const int32_t dv = st.l.head_dim_v;
  std::vector<double> out(size_t(dv), 0.0);
  double mx = 0;
  const std::vector<double> s = scores_of(st, q, scale, &mx);
  mx = std::max(mx, sink);
  double sum = std::exp(sink - mx);  // a sink: a key without a value (0 without one)
  for (int32_t p = st.lo(); p < st.n_ctx; ++p) {
    const double e = std::exp(s[size_t(p)] - mx);
    sum += e;
    const std::vector<float> v = st.row(false, p);
    for (int32_t d = 0; d < dv; ++d) out[size_t(d)] += e * v[size_t(d)];
  }
  for (auto& o : out) o /= sum;
  return out;
}

// The int8-value path's rounding of a row's weights (attention_avx512.cpp, weights_i8):
// a tile's score lanes (block b's key j in lane b x lpb + j, lpb = its slots rounded up
// to 16) go in chunks of 128, and in each chunk w_j = p_j x sv_j is rounded to a step of
// max w / 255, so output element d moves by at most sum over chunks of step / 2 x
// sum_j |code_jd|, over the sum of the p_j (all taken relative to the row's final max
// score, which scales every term alike). Per element, for a row q as the kernel scores it.
std::vector<double> i8_weight_bound(const Cache& st, const float* q, float scale, double sink = -INFINITY) {
  const int32_t dv = st.l.head_dim_v, bs = st.l.block_size;
  const int32_t tile = detail::attention_tile_blocks(bs) * bs, lpb = (bs + 15) / 16 * 16;
  const auto chunk_of = [&](int32_t p) {  // (tile, chunk) as one number
    return int64_t(p / tile) * 1024 + ((p % tile) / bs * lpb + p % bs) / 128;
  };
  std::vector<double> bound(size_t(dv), 0.0);
  double mx = 0, sum = 0;
  const std::vector<double> s = scores_of(st, q, scale, &mx);
  for (int32_t p = st.lo(); p < st.n_ctx; ++p) sum += std::exp(s[size_t(p)] - mx);
  sum += std::exp(sink - mx);  // the sink's share of the denominator (0 without one)
  for (int32_t p0 = st.lo(); p0 < st.n_ctx;) {  // positions of one chunk are consecutive
    int32_t p1 = p0;
    while (p1 < st.n_ctx && chunk_of(p1) == chunk_of(p0)) ++p1;
    double wmax = 0;
    std::vector<double> codes(size_t(dv), 0.0);  // sum_j |code_jd| over the chunk
    for (int32_t p = p0; p < p1; ++p) {
      const double sv = st.kv->v_scales(kLayer, st.table[size_t(p / bs)], kKvHead)[p % bs];
      wmax = std::max(wmax, std::exp(s[size_t(p)] - mx) * sv);
      if (sv == 0) continue;
      const std::vector<float> v = st.row(false, p);
      for (int32_t d = 0; d < dv; ++d) codes[size_t(d)] += std::fabs(v[size_t(d)]) / sv;
    }
    for (int32_t d = 0; d < dv; ++d) bound[size_t(d)] += wmax / 510 * codes[size_t(d)] / sum;
    p0 = p1;
  }
  return bound;
}

// The bf16 way's rounding of a row's weights (AttnDots::Bf16): each w_j = p_j x sv_j to
// bf16, within 2^-8 of itself, so output element d moves by at most 2^-8 x sum_j p_j
// |v_jd| over the sum of the p_j. Per element, for a row q as the kernel scores it.
std::vector<double> bf16_weight_bound(const Cache& st, const float* q, float scale, double sink = -INFINITY) {
  const int32_t dv = st.l.head_dim_v;
  std::vector<double> bound(size_t(dv), 0.0);
  double mx = 0, sum = 0;
  const std::vector<double> s = scores_of(st, q, scale, &mx);
  mx = std::max(mx, sink);
  sum = std::exp(sink - mx);
  for (int32_t p = st.lo(); p < st.n_ctx; ++p) {
    const double e = std::exp(s[size_t(p)] - mx);
    sum += e;
    const std::vector<float> v = st.row(false, p);
    for (int32_t d = 0; d < dv; ++d) bound[size_t(d)] += e * std::fabs(v[size_t(d)]) / 256;
  }
  for (auto& b : bound) b /= sum;
  return bound;
}

double v_scale(const Cache& st) {
  double m = 0;
  for (int32_t p = st.lo(); p < st.n_ctx; ++p)
    for (float v : st.row(false, p)) m = std::max(m, double(std::fabs(v)));
  return m;
}

struct Result {
  std::vector<float> out;  // [n_q][ldo]
  int64_t ldo = 0;
};

// All n_q rows in one call, with padded row strides on both sides.
Result run_group(const Cache& st, const std::vector<float>& q, int64_t ldq, int32_t n_q, float scale) {
  Result r;
  r.ldo = st.l.head_dim_v + 3;
  r.out.assign(size_t(n_q * r.ldo), -7.f);  // padding must survive
  std::vector<float> scratch(size_t(attention_scratch_floats(st.l, n_q)), std::numeric_limits<float>::quiet_NaN());
  attention_group(st.args(scale), kKvHead, n_q, q.data(), ldq, r.out.data(), r.ldo, scratch.data());
  return r;
}

// Each row alone.
Result run_rows(const Cache& st, const std::vector<float>& q, int64_t ldq, int32_t n_q, float scale) {
  Result r;
  r.ldo = st.l.head_dim_v;
  r.out.assign(size_t(n_q * r.ldo), 0.f);
  std::vector<float> scratch(size_t(attention_scratch_floats(st.l, 1)), std::numeric_limits<float>::quiet_NaN());
  for (int32_t i = 0; i < n_q; ++i)
    attention_row(st.args(scale, i), kKvHead, q.data() + i * ldq, r.out.data() + i * r.ldo, scratch.data());
  return r;
}

std::string case_name(DType t, int32_t dk, int32_t dv, int32_t bs, int32_t n_ctx, int32_t n_q) {
  return std::string(dtype_name(t)) + " dk=" + std::to_string(dk) + " dv=" + std::to_string(dv) +
         " bs=" + std::to_string(bs) + " n_ctx=" + std::to_string(n_ctx) + " n_q=" + std::to_string(n_q);
}

// One shape on every ISA: within kTol of the reference, grouped bits == per-row bits,
// padding untouched, and the ISAs within kTol of the scalar path.
void check_case(DType t, int32_t dk, int32_t dv, int32_t bs, int32_t n_ctx, int32_t n_q, double* worst,
                int32_t window = 0, bool sinks = false) {
  const std::string name = case_name(t, dk, dv, bs, n_ctx, n_q) + (window ? " window=" + std::to_string(window) : "") +
                           (sinks ? " sinks" : "");
  Cache st(t, dk, dv, bs, n_ctx, uint32_t(dk * 7919 + n_ctx * 31 + n_q));
  st.set_window(window);
  // Sinks below, around and far above the scores (the last row's takes nearly all weight).
  for (int32_t i = 0; sinks && i < n_q; ++i) st.sinks.push_back(i + 1 == n_q && n_q > 1 ? 30.f : float(i % 3) * 2.f - 2.f);
  const float scale = 1.f / std::sqrt(float(dk));
  // Rows of growing magnitude: the last ones give peaked softmaxes (large score range).
  const int64_t ldq = dk + 5;
  std::vector<float> q(size_t(n_q * ldq), std::numeric_limits<float>::quiet_NaN());  // padding never read
  std::mt19937 rng(uint32_t(n_ctx * 131 + dk));
  std::normal_distribution<float> g(0.f, 1.f);
  for (int32_t i = 0; i < n_q; ++i)
    for (int32_t d = 0; d < dk; ++d) q[size_t(i * ldq + d)] = g(rng) * (1.f + 0.5f * float(i));

  std::vector<std::vector<double>> ref, ref_q8, bound_q8, ref_b16, bound_b16, ref_h16;
  for (int32_t i = 0; i < n_q; ++i)
    ref.push_back(reference(st, q.data() + i * ldq, scale, st.sinks.empty() ? -INFINITY : double(st.sinks[size_t(i)])));
  // The rows as the AVX-512 int8-key path quantizes them.
  for (int32_t i = 0; i < n_q && t == DType::I8; ++i) {
    const float* x = q.data() + i * ldq;
    float amax = 0.f;
    for (int32_t d = 0; d < dk; ++d) amax = std::max(amax, std::fabs(x[d]));
    const float inv = 127.f / amax, sq = amax / 127.f;
    std::vector<float> xq(static_cast<size_t>(dk));
    for (int32_t d = 0; d < dk; ++d) xq[size_t(d)] = std::nearbyint(x[d] * inv) * sq;
    const double sink = st.sinks.empty() ? -INFINITY : double(st.sinks[size_t(i)]);
    ref_q8.push_back(reference(st, xq.data(), scale, sink));
    bound_q8.push_back(i8_weight_bound(st, xq.data(), scale, sink));
  }
  // The rows as the AVX512-BF16 way (FP8 and BF16 caches) rounds them.
  for (int32_t i = 0; i < n_q && (is_fp8(t) || t == DType::BF16) && fp8_bf16_here(); ++i) {
    std::vector<float> xb(static_cast<size_t>(dk));
    for (int32_t d = 0; d < dk; ++d) xb[size_t(d)] = bf16_round(q[size_t(i * ldq + d)]);
    const double sink = st.sinks.empty() ? -INFINITY : double(st.sinks[size_t(i)]);
    ref_b16.push_back(reference(st, xb.data(), scale, sink));
    bound_b16.push_back(bf16_weight_bound(st, xb.data(), scale, sink));
  }
  // The rows as the F16 way computes them, each half rounding emulated.
  for (int32_t i = 0; i < n_q && (t == DType::F16 || t == DType::F8_E4M3) && test::f16_here(); ++i) {
    const double sink = st.sinks.empty() ? -INFINITY : double(st.sinks[size_t(i)]);
    const bool e4m3 = t == DType::F8_E4M3;
    const auto K = [&](int32_t p) { return e4m3 ? st.code_halves(true, p) : st.row(true, p); };
    const auto V = [&](int32_t p) { return e4m3 ? st.code_halves(false, p) : st.row(false, p); };
    const auto KS = [&](int32_t p) { return e4m3 ? st.unit_scale(true, p) : 1.f; };
    const auto VS = [&](int32_t p) { return e4m3 ? st.unit_scale(false, p) : 1.f; };
    ref_h16.push_back(test::halves_way_emulation(K, V, KS, VS, e4m3, st.lo(), st.n_ctx, q.data() + i * ldq, dk, dv,
                                                 scale, detail::kF16ScoreDims, detail::kF16ValueKeys,
                                                 detail::attention_tile_blocks(bs) * bs, sink));
  }
  const double vs = v_scale(st);

  IsaGuard guard;
  LookupGuard lookup_guard;
  std::vector<float> scalar_out, half_out;  // the scalar path's rows alone; AVX-512 f32's, codes as halves
  for (const Path& path : paths(t)) {
    const Isa isa = path.isa;
    use_path(path, st.l);
    const std::string where = name + " isa=" + path.name();
    const Result grp = run_group(st, q, ldq, n_q, scale);
    const Result one = run_rows(st, q, ldq, n_q, scale);
    const bool b16 = path.dots == AttnDots::Bf16 && detail::attention_dots(st.l) == AttnDots::Bf16;
    const bool h16 = path.dots == AttnDots::F16 && detail::attention_dots(st.l) == AttnDots::F16;
    const bool q8 = (t == DType::I8 && isa == Isa::Avx512) || b16;  // the query rounded
    const auto& want = h16 ? ref_h16 : b16 ? ref_b16 : q8 ? ref_q8 : ref;
    const auto& bound = b16 ? bound_b16 : bound_q8;
    double err = 0;
    for (int32_t i = 0; i < n_q; ++i) {
      for (int32_t d = 0; d < dv; ++d) {
        const float a = grp.out[size_t(i * grp.ldo + d)], b = one.out[size_t(i * one.ldo + d)];
        ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << where << ": row " << i << " col " << d
                                              << " differs between the grouped call and the row alone: " << a
                                              << " vs " << b;
        // The int8 path's error past its weights' rounding (1.01: f32 against double).
        const double rounding = q8 ? 1.01 * bound[size_t(i)][size_t(d)] : 0.0;
        const double e = std::max(0.0, std::fabs(double(a) - want[size_t(i)][size_t(d)]) - rounding) / vs;
        ASSERT_FALSE(std::isnan(a)) << where << ": row " << i << " col " << d << " is NaN";
        err = std::max(err, e);
      }
      for (int64_t d = dv; d < grp.ldo; ++d) ASSERT_EQ(grp.out[size_t(i * grp.ldo + d)], -7.f) << where << ": wrote past dv";
    }
    EXPECT_LE(err, h16 ? test::kTolF16Emulation : kTol) << where;
    if (!h16) *worst = std::max(*worst, err);
    if (is_fp8(t) && isa == Isa::Avx512 && path.dots == AttnDots::F32) {
      if (!path.lookup) half_out = one.out;
      else
        for (size_t x = 0; x < one.out.size(); ++x)
          ASSERT_EQ(std::memcmp(&one.out[x], &half_out[x], 4), 0)
              << where << ": element " << x << " differs from the half conversion's: " << one.out[x] << " vs "
              << half_out[x];
    }
    if (isa == Isa::Scalar) {
      scalar_out = one.out;
    } else {
      // The int8 path's rows past the eighth (|q| past 4.5 sigma, in the large-group
      // cases) move their scores by more than kTolQ8 allows: the quantized reference alone
      // checks those.
      double diff = 0;
      for (size_t x = 0; x < one.out.size(); ++x) {
        const double e = std::fabs(double(one.out[x]) - scalar_out[x]) / vs;
        ASSERT_FALSE(std::isnan(e)) << where << ": element " << x << " is NaN on one side";
        if (!(q8 || h16) || int64_t(x) < 8 * one.ldo) diff = std::max(diff, e);
      }
      EXPECT_LE(diff, q8 || h16 ? kTolQ8 : kTol) << where << " vs scalar";
    }
  }
}

TEST(Attention, EveryIsaMatchesDoubleReferenceAndGroupingIsBitwiseInvisible) {
  double worst = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (int32_t hd : {8, 48, 64, 128})
      for (int32_t n_ctx : {1, 15, 16, 17, 100, 300})
        for (int32_t n_q : {1, 4, 8}) check_case(t, hd, hd, 16, n_ctx, n_q, &worst);
  std::printf("[Attention] max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// A sliding window: each row attends to its last `window` positions only, against the
// double reference over those, on every ISA and dtype; the blocks wholly before the window
// hold NaN, so a kernel that read them would show it. Windows inside one block, across
// blocks, wider than the context, and of one position.
TEST(Attention, SlidingWindowsMatchTheReference) {
  double worst = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (auto [bs, n_ctx, window] : {std::tuple{16, 100, 40}, std::tuple{16, 100, 1}, std::tuple{16, 100, 16},
                                     std::tuple{16, 300, 128}, std::tuple{16, 30, 64}, std::tuple{7, 97, 20},
                                     std::tuple{32, 200, 33}})
      for (int32_t n_q : {1, 4}) check_case(t, 64, 64, bs, n_ctx, n_q, &worst, window);
  std::printf("[Attention] windows: max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// Attention sinks (gpt-oss): a per-row logit in the softmax's denominator, with and
// without a window, on every ISA and dtype, against the double reference.
TEST(Attention, SinksMatchTheReference) {
  double worst = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (auto [bs, n_ctx, window] : {std::tuple{16, 1, 0}, std::tuple{16, 100, 0}, std::tuple{16, 100, 40},
                                     std::tuple{7, 97, 20}})
      for (int32_t n_q : {1, 4}) check_case(t, 64, 64, bs, n_ctx, n_q, &worst, window, true);
  std::printf("[Attention] sinks: max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// A query row with an infinite or NaN element gives a non-finite output row on every ISA
// (never a finite, wrong one: the int8-key path's quantization of such a row would have
// zero codes and a zero scale), and the other rows of the call keep their bits.
TEST(Attention, NonFiniteQueryRowsAreNotFinite) {
  for (DType t : {DType::F16, DType::I8}) {
    const int32_t dk = 64, n_q = 3;
    const Cache st(t, dk, dk, 16, 40, 5);
    std::vector<float> q(size_t(n_q * dk));
    std::mt19937 rng(2);
    std::normal_distribution<float> g(0.f, 1.f);
    for (float& x : q) x = g(rng);
    q[size_t(dk + 7)] = std::numeric_limits<float>::infinity();
    q[size_t(2 * dk + 9)] = std::numeric_limits<float>::quiet_NaN();
    IsaGuard guard;
    for (Isa isa : isas()) {
      set_isa(isa);
      const Result grp = run_group(st, q, dk, n_q, 0.125f);
      const Result one = run_rows(st, q, dk, 1, 0.125f);  // row 0 alone
      for (int32_t d = 0; d < dk; ++d) {
        EXPECT_TRUE(std::isfinite(grp.out[size_t(d)])) << dtype_name(t) << " " << isa_name(isa);
        EXPECT_EQ(grp.out[size_t(d)], one.out[size_t(d)]) << dtype_name(t) << " " << isa_name(isa);
        for (int32_t r = 1; r < n_q; ++r)
          EXPECT_FALSE(std::isfinite(grp.out[size_t(r * grp.ldo + d)])) << dtype_name(t) << " " << isa_name(isa) << " row " << r;
      }
    }
  }
}

// Int8 values with every weight exact: one key at every position (equal scores, so the
// probabilities are all 1) and values of one scale (each position's largest element
// +-3), so a row's 8-bit weights are all 255 and the integer P.V is the mean of the
// values within kTol, on every ISA: a position missed or counted twice, a wrong block,
// chunk, dimension or pass shows (an exchange of two positions would not: the peaked
// rows of check_case see those).
TEST(Attention, Int8ValuesWithExactWeightsMatchTheReference) {
  for (auto [bs, dv, n_ctx] :
       {std::tuple{16, 64, 100}, std::tuple{5, 40, 97}, std::tuple{48, 200, 130}, std::tuple{200, 64, 330}}) {
    const int32_t dk = 32, n_q = 9;
    Cache st(DType::I8, dk, dv, bs, n_ctx, 11);
    std::mt19937 rng(uint32_t(bs + dv));
    std::uniform_real_distribution<float> u(-2.9f, 2.9f);
    std::vector<float> key(static_cast<size_t>(dk)), v(static_cast<size_t>(dv));
    for (auto& x : key) x = u(rng);
    for (int32_t p = 0; p < n_ctx; ++p) {
      const int32_t b = st.table[size_t(p / bs)], slot = p % bs;
      st.kv->write_k(kLayer, b, kKvHead, slot, key.data());
      for (auto& x : v) x = u(rng);
      v[size_t(p % dv)] = p % 2 ? 3.f : -3.f;
      st.kv->write_v(kLayer, b, kKvHead, slot, v.data());
    }
    std::vector<float> q(size_t(n_q * dk));
    for (auto& x : q) x = u(rng);
    const double vs = v_scale(st);
    IsaGuard guard;
    for (Isa isa : isas()) {
      set_isa(isa);
      const Result grp = run_group(st, q, dk, n_q, 0.2f);
      for (int32_t i = 0; i < n_q; ++i) {
        const std::vector<double> want = reference(st, q.data() + i * dk, 0.2f);
        for (int32_t d = 0; d < dv; ++d)
          ASSERT_LE(std::fabs(grp.out[size_t(i * grp.ldo + d)] - want[size_t(d)]) / vs, kTol)
              << "bs=" << bs << " dv=" << dv << " isa=" << isa_name(isa) << " row " << i << " col " << d;
      }
    }
  }
}

// A value vector with a NaN at an attended position gives every row a non-finite output
// on every ISA (its scale is NaN: never a finite, wrong row), whichever dtype, and so
// does a key or value vector with a NaN or an Inf on the F16 way (F16 and E4M3 caches:
// its rows go to the f32 path, the E4M3 codes' NaN read there).
// At a position in the first or the second 128-lane chunk of the int8 weights (blocks of
// 256 keys: a tile of one block, two chunks; a chunk before the NaN keeps its step, the
// output is NaN either way), or a tile's last key.
TEST(Attention, NanValueVectorIsNotFinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::F16, DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (auto [bs, pos] : {std::pair{16, 37}, std::pair{16, 127}, std::pair{256, 37}, std::pair{256, 200}, std::pair{256, 255}})
      for (int bad = 0; bad < 4; ++bad) {  // a NaN value; the F16 way: an Inf value, a NaN key, an Inf key
        const bool halves = (t == DType::F16 || t == DType::F8_E4M3) && test::f16_here() && bs <= detail::kMaxTileKeys;
        if (bad > 0 && !halves) continue;
        Cache st(t, 32, 32, bs, 300, 3);
        std::vector<float> v(32, 0.5f);
        v[7] = bad == 1 || bad == 3 ? inf : nan;
        if (bad < 2) st.kv->write_v(kLayer, st.table[size_t(pos / bs)], kKvHead, pos % bs, v.data());
        else st.kv->write_k(kLayer, st.table[size_t(pos / bs)], kKvHead, pos % bs, v.data());
        std::vector<float> q(size_t(4 * 32), 0.1f);
        IsaGuard guard;
        for (Isa isa : isas())
          for (bool h : {false, true}) {
            if (h && !(halves && isa == Isa::Avx512)) continue;
            set_isa(isa);
            detail::set_attention_f16_arith(h);
            if (h) set_amx(false);  // (E4M3: the way is taken where the tiles are not)
            ASSERT_EQ(detail::attention_dots(st.l) == AttnDots::F16, h);
            const Result grp = run_group(st, q, 32, 4, 0.2f);
            for (int32_t r = 0; r < 4; ++r)
              EXPECT_FALSE(std::isfinite(grp.out[size_t(r * grp.ldo + 7)]))
                  << dtype_name(t) << " " << isa_name(isa) << (h ? "+f16" : "") << " block size " << bs << " position "
                  << pos << " case " << bad << " row " << r;
          }
      }
}

// An E4M3 cache on the F16 way: values of any magnitude. A row's weights (probability x
// value scale) are scaled into [1, 2) by its own power of two per tile before they are
// rounded to halves; without it, values near 1e4 overflow the half sums (the row would go
// to the f32 path, off the emulation) and values near 1e-6 fall into the halves'
// subnormals (bits lost). Per-key magnitudes from 1e-4 to 1e4 in one context, too; each
// row grouped or alone, its bits the same.
TEST(Attention, E4M3WeightsOfAnyMagnitudeOnTheF16Way) {
  if (!test::f16_here()) GTEST_SKIP() << "no AVX512-FP16 on this CPU: the F16 way is not taken here";
  const int32_t dk = 64, dv = 64, bs = 16, n_ctx = 300, n_q = 8;
  const float scale = 0.125f;
  for (int mag = 0; mag < 3; ++mag) {
    Cache st(DType::F8_E4M3, dk, dv, bs, n_ctx, uint32_t(91 + mag));
    for (int32_t p = 0; p < n_ctx; ++p) {  // the values rescaled: 1e4, 1e-6, or by key
      std::vector<float> v = st.row(false, p);
      const float f = mag == 0 ? 1e4f : mag == 1 ? 1e-6f : std::pow(10.f, float(p % 9) - 4.f);
      for (float& x : v) x *= f;
      st.kv->write_v(kLayer, st.table[size_t(p / bs)], kKvHead, p % bs, v.data());
    }
    std::mt19937 rng(7u + uint32_t(mag));
    std::normal_distribution<float> u(0.f, 1.f);
    std::vector<float> q(size_t(n_q * dk));
    for (int32_t i = 0; i < n_q; ++i)
      for (int32_t d = 0; d < dk; ++d) q[size_t(i * dk + d)] = u(rng) * float(1 + i);  // later rows: peaked
    IsaGuard guard;
    set_isa(Isa::Avx512);
    set_amx(false);
    detail::set_attention_f16_arith(true);
    ASSERT_EQ(detail::attention_dots(st.l), AttnDots::F16);
    const Result grp = run_group(st, q, dk, n_q, scale);
    const Result one = run_rows(st, q, dk, n_q, scale);
    const double vs = v_scale(st);
    double err = 0;
    for (int32_t i = 0; i < n_q; ++i) {
      const auto K = [&](int32_t p) { return st.code_halves(true, p); };
      const auto V = [&](int32_t p) { return st.code_halves(false, p); };
      const auto KS = [&](int32_t p) { return st.unit_scale(true, p); };
      const auto VS = [&](int32_t p) { return st.unit_scale(false, p); };
      const std::vector<double> want =
          test::halves_way_emulation(K, V, KS, VS, true, 0, n_ctx, q.data() + i * dk, dk, dv, scale,
                                     detail::kF16ScoreDims, detail::kF16ValueKeys, detail::attention_tile_blocks(bs) * bs);
      for (int32_t d = 0; d < dv; ++d) {
        const float a = grp.out[size_t(i * grp.ldo + d)], b = one.out[size_t(i * one.ldo + d)];
        ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "magnitude case " << mag << " row " << i << " col " << d;
        err = std::max(err, std::fabs(double(a) - want[size_t(d)]) / vs);
      }
    }
    EXPECT_LE(err, test::kTolF16Emulation) << "magnitude case " << mag;
    std::printf("[Attention] E4M3 on the F16 way, values x %s: largest difference from the emulation %.2e of max|v|\n",
                mag == 0 ? "1e4" : mag == 1 ? "1e-6" : "1e-4..1e4 by key", err);
  }
}

// Shapes the models above do not have: other block sizes (groups of keys that straddle or
// underfill a tile), head sizes off every vector width, dk != dv, odd group sizes.
TEST(Attention, OddBlockSizesAndHeadDims) {
  double worst = 0;
  for (DType t : {DType::F32, DType::F16, DType::I8, DType::F8_E4M3, DType::F8_E5M2})
    for (int32_t bs : {1, 5, 20, 24, 32, 48, 100, 200})
      for (auto [dk, dv] : {std::pair{20, 20}, std::pair{3, 9}, std::pair{192, 128}, std::pair{64, 40}})
        for (int32_t n_ctx : {1, 23, 97, bs > 97 ? bs + 40 : 97}) check_case(t, dk, dv, bs, n_ctx, 3, &worst);
  std::printf("[Attention] odd shapes: max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// The bf16 ways' own shapes (FP8 on tiles and vectors, BF16 on vectors): blocks of 16 to
// 128 slots (a tile of one block with 8 groups of keys: two units of 4 C tiles; K rows
// of 32 bytes, one load per dimension pair, and longer), dk != dv, values of 32
// dimensions and of 160 (units of 4 dimension groups and a part), row units past 16,
// windows (a first key at an odd position) and sinks; BF16 blocks of 256 slots keep the
// f32 path.
TEST(Attention, Bf16WaysShapes) {
  if (!fp8_tiles_here() && !fp8_bf16_here())
    GTEST_SKIP() << "this CPU has neither AMX-BF16 nor AVX512-BF16 with VBMI: the bf16 ways are not exercised here (the f32 path is, above)";
  double worst = 0;
  for (DType t : {DType::F8_E4M3, DType::F8_E5M2, DType::BF16}) {
    if (t == DType::BF16) check_case(t, 64, 64, 256, 300, 3, &worst);
    for (int32_t bs : {16, 32, 64, 128})
      for (auto [dk, dv] : {std::pair{64, 64}, std::pair{128, 32}, std::pair{32, 160}})
        for (int32_t n_ctx : {1, 33, 130}) check_case(t, dk, dv, bs, n_ctx, 3, &worst);
    for (int32_t n_q : {16, 17, 40}) check_case(t, 64, 64, 16, 90, n_q, &worst);
    check_case(t, 64, 64, 16, 100, 4, &worst, 40, true);
    check_case(t, 128, 128, 64, 300, 8, &worst, 70);
    check_case(t, 64, 64, 32, 201, 5, &worst, 37);
  }
  std::printf("[Attention] bf16 ways: max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// Every candidate of the online softmax's tile (attention_tile_keys): the reference, the
// grouping contract, the int8 weights' chunks (two in a tile of 128 lanes), windows and
// sinks at each; a value that is not a candidate is refused.
TEST(Attention, EveryTileKeysCandidate) {
  struct Restore {
    int32_t keys = attention_tile_keys();
    ~Restore() { set_attention_tile_keys(keys); }
  } restore;
  double worst = 0;
  KVLayout l;
  l.n_layer = 1, l.n_kv_head = 2, l.head_dim_k = l.head_dim_v = 64, l.block_size = 16, l.n_blocks = 4;
  for (DType t : {DType::F16, DType::I8, DType::F8_E4M3}) {  // scratch sized for any candidate
    l.dtype = t;
    l.block_size = t == DType::I8 ? 5 : 16;
    set_attention_tile_keys(64);
    const int64_t at64 = attention_scratch_floats(l, 16), vk64 = values_from_keys_floats(l, 16);
    set_attention_tile_keys(128);
    EXPECT_EQ(attention_scratch_floats(l, 16), at64) << dtype_name(t);
    EXPECT_EQ(values_from_keys_floats(l, 16), vk64) << dtype_name(t);
  }
  for (int32_t keys : kAttnTileKeys) {
    set_attention_tile_keys(keys);
    ASSERT_EQ(attention_tile_keys(), keys);
    ASSERT_EQ(detail::attention_tile_blocks(16), keys / 16);
    for (DType t : {DType::F16, DType::I8, DType::F8_E4M3})
      for (auto [bs, n_ctx] : {std::pair{16, 300}, std::pair{5, 97}, std::pair{64, 200}})
        check_case(t, 64, 64, bs, n_ctx, 4, &worst);
    check_case(DType::F16, 64, 64, 16, 300, 4, &worst, 70, true);
    check_case(DType::F8_E5M2, 64, 64, 32, 260, 9, &worst, 100);
  }
  EXPECT_THROW(set_attention_tile_keys(100), Error);
  EXPECT_THROW(set_attention_tile_keys(0), Error);
  std::printf("[Attention] tile keys: max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// Group sizes past what one SIMD kernel takes at once (8 rows of scores and of P.V, 16
// rows of softmax state: rows 16.. go to a second block), and dv over several passes of
// 32 columns with a partial last vector: the grouped call still gives each row alone's bits.
TEST(Attention, LargeGroupsAndWideHeads) {
  double worst = 0;
  for (DType t : {DType::F16, DType::BF16, DType::F8_E5M2, DType::I8})
    for (auto [dk, dv] : {std::pair{64, 64}, std::pair{20, 80}, std::pair{128, 200}})
      for (int32_t n_ctx : {17, 100})
        for (int32_t n_q : {2, 5, 12, 16, 17, 33}) check_case(t, dk, dv, 16, n_ctx, n_q, &worst);
  for (int32_t n_q : {9, 20}) check_case(DType::F32, 64, 72, 32, 77, n_q, &worst);
  std::printf("[Attention] large groups: max error %.3e of max|v| (tol %.0e)\n", worst, kTol);
}

// The engine relies on a decode row computing what the prefill row at its position did:
// the grouped call with a longer block table and a different set of rows changes nothing.
TEST(Attention, RowBitsIgnoreSiblingsAndTableLength) {
  const Cache st(DType::F16, 64, 64, 16, 77, 5);
  const float scale = 0.125f;
  std::vector<float> q(size_t(8 * 64));
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.f, 2.f);
  for (auto& x : q) x = g(rng);
  IsaGuard guard;
  for (Isa isa : isas()) {
    set_isa(isa);
    const Result all = run_group(st, q, 64, 8, scale);
    // Rows 3..5 alone in one call, from a table with blocks past n_ctx.
    Cache longer(DType::F16, 64, 64, 16, 77, 5);
    longer.table.push_back(longer.table.front());
    const std::vector<float> sub(q.begin() + 3 * 64, q.begin() + 6 * 64);
    const Result part = run_group(longer, sub, 64, 3, scale);
    for (int32_t i = 0; i < 3; ++i)
      EXPECT_EQ(std::memcmp(&all.out[size_t((i + 3) * all.ldo)], &part.out[size_t(i * part.ldo)], 64 * 4), 0)
          << isa_name(isa) << " row " << i + 3;
  }
}

// A block of consecutive positions in one call (AttnArgs::row_ctx: each row its own
// causal end, the tiles read once for all) gives each row the bits of a lone call with its
// own n_ctx, on every ISA, for every unscaled dtype (and the 8-bit ones, which run row by
// row): rows that end before a tile, inside a block, on a tile boundary, and block sizes
// whose slots do not fill 16 lanes.
TEST(Attention, PositionBlockRowsHaveTheirLoneBits) {
  struct Shape {
    DType t;
    int32_t dk, dv, bs, n_ctx, rows;
  };
  const Shape shapes[] = {{DType::F32, 192, 128, 16, 70, 16}, {DType::F16, 64, 64, 16, 129, 16},
                          {DType::BF16, 48, 32, 8, 40, 12},   {DType::F32, 32, 48, 1, 23, 9},
                          {DType::F16, 80, 80, 32, 64, 16},   {DType::I8, 64, 64, 16, 50, 7}};
  IsaGuard guard;
  for (Isa isa : isas()) {
    set_isa(isa);
    for (const Shape& sh : shapes)
      // Windows: none, shorter than the rows' spread (rows start in different tiles and
      // blocks), one position, and wider than a tile; with and without sinks.
      for (int32_t window : {0, 5, 1, 70})
        for (bool sinks : {false, true}) {
          Cache c(sh.t, sh.dk, sh.dv, sh.bs, sh.n_ctx, 11);
          std::vector<float> q(size_t(sh.rows * sh.dk)), block(size_t(sh.rows * sh.dv)), lone(size_t(sh.dv));
          std::mt19937 rng(13);
          std::normal_distribution<float> g(0.f, 2.f);
          for (auto& x : q) x = g(rng);
          std::vector<int32_t> ctx;
          for (int32_t i = 0; i < sh.rows; ++i) ctx.push_back(sh.n_ctx - sh.rows + 1 + i);
          // NaN before the first row's window: no row may read there.
          c.set_window(window, window > 0 ? std::max(0, ctx[0] - window) : 0);
          for (int32_t i = 0; sinks && i < sh.rows; ++i) c.sinks.push_back(float(i % 5) - 2.f);
          std::vector<float> scratch(size_t(attention_scratch_floats(c.l, sh.rows)));
          AttnArgs a = c.args(0.125f);
          a.row_ctx = ctx;
          attention_heads(a, kKvHead, 1, sh.rows, q.data(), sh.dk, block.data(), sh.dv, scratch.data());
          for (int32_t i = 0; i < sh.rows; ++i) {
            AttnArgs one = c.args(0.125f, i);
            one.n_ctx = ctx[size_t(i)];
            attention_row(one, kKvHead, q.data() + i * sh.dk, lone.data(), scratch.data());
            for (int32_t d = 0; d < sh.dv; ++d) ASSERT_TRUE(std::isfinite(lone[size_t(d)])) << isa_name(isa) << " row " << i;
            EXPECT_EQ(std::memcmp(lone.data(), block.data() + i * sh.dv, size_t(sh.dv) * 4), 0)
                << isa_name(isa) << " " << dtype_name(sh.t) << " bs " << sh.bs << " window " << window
                << (sinks ? " sinks" : "") << " row " << i << " (n_ctx " << ctx[size_t(i)] << ")";
          }
        }
  }
}

// A task over a run of KV heads (one piece of each block read for them all) gives every
// row the bits of its head's own call, on every ISA.
TEST(Attention, HeadRunsGiveEachHeadsOwnBits) {
  IsaGuard guard;
  // Block sizes: one-block tiles of 16 (4 per tile), several blocks per tile with short
  // and straddling 16-lane groups (5, 17), one block of several groups per tile (48); 83
  // positions make two tiles or more with a short last block. dv = 40 ends in a partial
  // vector; 16 rows a head make 48 rows, three 16-row softmax blocks.
  for (DType t : {DType::F16, DType::BF16, DType::F32})
    for (int32_t bs : {16, 5, 17, 48})
      for (int32_t group : {1, 3, 8, 16}) {
        Cache st(t, 64, 40, bs, 83, uint32_t(bs * 10 + group));
        st.fill_head(0, 11);
        st.fill_head(1, 12);
        const int32_t rows = 3 * group, ldq = 64, ldo = 40;
        std::vector<float> q(size_t(rows * ldq));
        std::mt19937 rng{uint32_t(group)};
        std::normal_distribution<float> g(0.f, 1.5f);
        for (auto& x : q) x = g(rng);
        for (Isa isa : isas()) {
          set_isa(isa);
          const std::string where = case_name(t, 64, 40, bs, 83, group) + " isa=" + std::string(isa_name(isa));
          std::vector<float> each(size_t(rows * ldo)), run(size_t(rows * ldo)), tail(size_t(2 * group * ldo));
          std::vector<float> scratch(size_t(attention_scratch_floats(st.l, rows)), std::numeric_limits<float>::quiet_NaN());
          for (int32_t h = 0; h < 3; ++h)
            attention_group(st.args(0.125f), h, group, q.data() + h * group * ldq, ldq, each.data() + h * group * ldo, ldo,
                            scratch.data());
          attention_heads(st.args(0.125f), 0, 3, group, q.data(), ldq, run.data(), ldo, scratch.data());
          attention_heads(st.args(0.125f), 1, 2, group, q.data() + group * ldq, ldq, tail.data(), ldo, scratch.data());
          ASSERT_EQ(std::memcmp(each.data(), run.data(), each.size() * 4), 0) << where << ": heads [0, 3)";
          ASSERT_EQ(std::memcmp(each.data() + group * ldo, tail.data(), tail.size() * 4), 0) << where << ": heads [1, 3)";
        }
      }
}

// The next call's keys, asked for during a call's last tile (AttnNext), are a hint: the
// call's bits are those without it, whatever the next call is (another cache and
// dtype, a window that leaves its first blocks out of the table, an empty context, a
// table shorter than its context says).
TEST(Attention, NextCallsKeysChangeNoBit) {
  IsaGuard guard;
  Cache other(DType::I8, 64, 64, 16, 300, 7);
  std::vector<int32_t> holes = other.table;  // a window past the first blocks: those dropped
  for (size_t i = 0; i + 4 < holes.size(); ++i) holes[i] = -1;
  const AttnArgs far{other.kv.get(), kLayer, holes, other.n_ctx, 0.125f, {}, 40};
  const AttnArgs empty{other.kv.get(), kLayer, {}, 0, 0.125f, {}};
  const AttnArgs short_table{other.kv.get(), kLayer, std::span<const int32_t>(other.table).first(2), other.n_ctx, 0.125f, {}};
  const AttnNext nexts[] = {{&far, 0, 3}, {&empty, 1, 1}, {&short_table, 2, 1}, {&far, kKvHead, 1}};
  for (DType t : {DType::F16, DType::I8, DType::F8_E4M3})
    for (int32_t n_ctx : {1, 130, 517}) {
      Cache st(t, 64, 64, 16, n_ctx, uint32_t(n_ctx));
      const int32_t group = 8;
      std::vector<float> q(size_t(group * 64));
      std::mt19937 rng{uint32_t(n_ctx)};
      std::normal_distribution<float> g(0.f, 1.5f);
      for (auto& x : q) x = g(rng);
      for (Isa isa : isas()) {
        set_isa(isa);
        std::vector<float> alone(size_t(group * 64)), hinted(alone.size());
        std::vector<float> scratch(size_t(attention_scratch_floats(st.l, group)));
        attention_heads(st.args(0.125f), kKvHead, 1, group, q.data(), 64, alone.data(), 64, scratch.data());
        for (const AttnNext& next : nexts) {
          std::fill(hinted.begin(), hinted.end(), -1.f);
          attention_heads(st.args(0.125f), kKvHead, 1, group, q.data(), 64, hinted.data(), 64, scratch.data(), next);
          ASSERT_EQ(std::memcmp(alone.data(), hinted.data(), alone.size() * 4), 0)
              << case_name(t, 64, 64, 16, n_ctx, group) << " isa=" << isa_name(isa) << " next ctx " << next.args->n_ctx;
        }
      }
    }
}

// Task splits: every run of ceil(n / splits) heads is non-empty; one sequence on 2
// threads takes 2 runs, 16 sequences one run each.
TEST(Attention, HeadSplitsCoverEveryHeadWithNoEmptyRun) {
  for (int32_t nkv = 1; nkv <= 9; ++nkv)
    for (int32_t threads = 1; threads <= 5; ++threads)
      for (int64_t tokens = 1; tokens <= 20; ++tokens) {
        const AttnHeadRuns hr = attention_head_runs(tokens, nkv, threads);
        const int32_t s = hr.splits, run = hr.run;
        ASSERT_GE(s, 1);
        ASSERT_LE(s, nkv);
        ASSERT_EQ(run, (nkv + s - 1) / s);
        EXPECT_EQ((nkv + run - 1) / run, s) << nkv << " heads, " << threads << " threads, " << tokens << " tokens";
      }
  EXPECT_EQ(attention_head_runs(1, 4, 2).splits, 2);
  EXPECT_EQ(attention_head_runs(16, 4, 2).splits, 1);
  EXPECT_EQ(attention_head_runs(512, 8, 16).splits, 1);
}

// Query splits: the parts cover the group with none empty, and only where the (token,
// head run) tasks are fewer than the threads and a run is one KV head.
TEST(Attention, QuerySplitsCoverTheGroupWithNoEmptyPart) {
  for (int32_t nkv = 1; nkv <= 4; ++nkv)
    for (int32_t group = 1; group <= 17; ++group)
      for (int32_t threads = 1; threads <= 16; ++threads)
        for (int64_t tokens = 1; tokens <= 5; ++tokens) {
          const AttnHeadRuns hr = attention_head_runs(tokens, nkv, threads);
          const AttnQuerySplit qs = attention_query_split(hr, tokens, group, threads);
          ASSERT_GE(qs.parts, 1);
          ASSERT_GE(qs.rows, 1);
          ASSERT_GE(int64_t(qs.parts) * qs.rows, group);
          ASSERT_LT(int64_t(qs.parts - 1) * qs.rows, group) << "an empty last part";
          if (hr.run > 1 || tokens * hr.splits >= threads || group == 1) {
            ASSERT_EQ(qs.parts, 1);
          }
        }
  // Latent attention's decode: 16 query heads of its one KV head over 2 or 16 threads.
  const AttnHeadRuns one = attention_head_runs(1, 1, 2);
  EXPECT_EQ(attention_query_split(one, 1, 16, 2).parts, 2);
  EXPECT_EQ(attention_query_split(one, 1, 16, 2).rows, 8);
  EXPECT_EQ(attention_query_split(attention_head_runs(1, 1, 16), 1, 16, 16).rows, 1);
  EXPECT_EQ(attention_query_split(attention_head_runs(4, 1, 2), 4, 16, 2).parts, 1);
}

// A step's tasks: every (token, KV head, query row) once, in calls of at most
// rows_per_call() rows of KV heads [h0, h0 + n) that exist.
TEST(Attention, StepTasksCoverEveryRowOnce) {
  for (int32_t nkv = 1; nkv <= 5; ++nkv)
    for (int32_t group : {1, 2, 7, 8, 16})
      for (int32_t threads = 1; threads <= 9; ++threads)
        for (int64_t tokens : {1, 2, 3, 17}) {
          const AttnTasks tasks(tokens, nkv, group, threads);
          std::vector<int32_t> seen(size_t(tokens * nkv * group), 0);
          for (int64_t i = 0; i < tasks.count(); ++i) {
            const AttnTasks::Task k = tasks[i];
            if (k.rows <= 0) continue;
            ASSERT_GE(k.token, 0);
            ASSERT_LT(k.token, tokens);
            ASSERT_GE(k.h0, 0);
            ASSERT_GE(k.n, 1);
            ASSERT_LE(k.h0 + k.n, nkv);
            ASSERT_GE(k.r0, 0);
            ASSERT_LE(k.r0 + k.rows, group);
            ASSERT_LE(k.n * k.rows, tasks.rows_per_call());
            for (int32_t h = k.h0; h < k.h0 + k.n; ++h)
              for (int32_t r = k.r0; r < k.r0 + k.rows; ++r) ++seen[size_t((k.token * nkv + h) * group + r)];
          }
          for (size_t x = 0; x < seen.size(); ++x)
            ASSERT_EQ(seen[x], 1) << "tokens " << tokens << " kv heads " << nkv << " group " << group << " threads "
                                  << threads << ": row " << x;
        }
}

TEST(Attention, EmptyContextGivesZeros) {
  const Cache st(DType::F32, 16, 16, 16, 0, 1);
  const std::vector<float> q(16, 1.f);
  IsaGuard guard;
  for (Isa isa : isas()) {
    set_isa(isa);
    const Result r = run_group(st, q, 16, 1, 0.25f);
    for (int32_t d = 0; d < 16; ++d) EXPECT_EQ(r.out[size_t(d)], 0.f) << isa_name(isa);
  }
}

// The SIMD paths' exp: within 4 ulp-ish (5e-7 relative) of exp over the softmax's domain
// [-87, 0], exactly 0 at -inf and far below, exactly 1 at 0, NaN for NaN.
TEST(Attention, VectorExpAccuracy) {
  std::vector<float> x;
  for (float v = -87.f; v <= 0.f; v += 0.000731f) x.push_back(v);
  x.push_back(0.f);
  x.push_back(-0.f);
  x.push_back(-1e-30f);
  std::vector<float> y(x.size());
  using Fn = void (*)(const float*, float*, int64_t);
  std::vector<std::pair<const char*, Fn>> fns;
  if (int(best_isa()) >= int(Isa::Avx2)) fns.push_back({"avx2", detail::exp_avx2});
  if (best_isa() == Isa::Avx512) fns.push_back({"avx512", detail::exp_avx512});
  for (auto [name, fn] : fns) {
    fn(x.data(), y.data(), int64_t(x.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(double(x[i]));
      worst = std::max(worst, std::fabs(double(y[i]) - e) / e);
    }
    std::printf("[Attention] exp %s: max rel error %.3e over [-87, 0]\n", name, worst);
    EXPECT_LE(worst, 5e-7) << name;
    EXPECT_EQ(y[y.size() - 3], 1.f) << name;
    const float special[] = {-INFINITY, -200.f, -110.f, std::numeric_limits<float>::quiet_NaN()};
    float out[4];
    fn(special, out, 4);
    EXPECT_EQ(out[0], 0.f) << name;
    EXPECT_EQ(out[1], 0.f) << name;
    EXPECT_EQ(out[2], 0.f) << name;
    EXPECT_TRUE(std::isnan(out[3])) << name;
  }
}

}  // namespace
}  // namespace ridge::kernels
