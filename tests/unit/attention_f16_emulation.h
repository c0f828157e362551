// The F16 way's arithmetic (kernels/cpu/attention_f16_avx512.h, AttnDots::F16) emulated
// one operation at a time, for the attention tests: a loose error bound would pass a
// wrong kernel, an emulation of each half rounding does not. (An E4M3 cache's: see
// halves_way_emulation.)
//
// The kernel, per row: q scaled by 2^e (its largest magnitude in [1, 2)) and rounded to
// halves, q'; per key, each chunk of kF16ScoreDims dimensions one chain of half fused
// multiply-adds from 0 (each rounded once to a half), the chunks' halves summed in f32,
// the sum times (2^-e x scale in f32): the score. Then per tile (its positions from its
// first, tiles of attention_tile_blocks blocks) the online softmax, the probabilities
// exp(s - running max) rounded to halves, and per output element each chunk of
// kF16ValueKeys positions one chain of half fused multiply-adds, the chunks summed.
// The scores here are the kernel's bits (a half FMA is exact in double, then rounded
// once: double rounding needs an exact sum wider than 53 bits, which no test data
// reaches); the softmax, and the sums of the outputs' chunks, are in double (the
// kernel's in f32: 2^-24 of them), so the probabilities can differ from the
// kernel's f32 exp by an ulp of f32, which flips a probability's half rounding now and
// then (one step of 2^-11 of that probability, and the chain's later roundings; the
// largest seen in test_attention.cpp's cases, 1.3e-5 of max |v|, most under 2e-7): the
// tests allow kTolF16Emulation of max |v| for that, 20 times under what score chunks of
// half the length or no half sums at all give, and 1e4 under a wrong row
// (test_attention_f16.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ridge::test {

constexpr double kTolF16Emulation = 5e-5;

// q's largest magnitude in [1, 2) after 2^e (0: all zeros), as the kernel chooses e.
inline int f16_query_exponent(const float* q, int32_t dk) {
  float a = 0.f;
  for (int32_t d = 0; d < dk; ++d) a = std::fmax(a, std::fabs(q[d]));
  if (!(a > 0.f) || !std::isfinite(a)) return 0;
  int x;
  std::frexp(a, &x);
  return std::max(-126, std::min(126, 1 - x));
}

inline double half_fma(double a, double b, double c) { return double(_Float16(std::fma(a, b, c))); }

// A weight's exponent as fp8_weights_halves chooses it: 2^e puts u in [1, 2) (0: u = 0).
inline int f16_weight_exponent(float u) {
  if (!(u > 0.f) || !std::isfinite(u)) return 0;
  int x;
  std::frexp(u, &x);
  return std::max(-126, std::min(126, 1 - x));
}

// softmax(q K^T scale) V as the kernel computes it, for output elements [0, dv). K(p) and
// V(p) give position p's stored rows as the kernel's halves; [lo, n_ctx) the attended
// positions; tile the kernel's tile positions (attention_tile_blocks x block size).
// Scaled (an E4M3 cache): K(p), V(p) the codes' values x 2^-8 (e4m3_halves), KS(p), VS(p)
// their scales x 256 (kCodeUnit); a score is the chunks' f32 sum times KS(p), then times
// 2^-e scale; a probability in f32 times VS(p) is the weight u, which per tile and row is
// scaled by 2^e' (the tile's largest u in [1, 2)) and rounded to a half, and each chunk's
// half sum is multiplied back by 2^-e'.
template <class KRows, class VRows, class KScale, class VScale>
std::vector<double> halves_way_emulation(const KRows& K, const VRows& V, const KScale& KS, const VScale& VS, bool scaled,
                                         int32_t lo, int32_t n_ctx, const float* q, int32_t dk, int32_t dv, float scale,
                                         int32_t score_dims, int32_t value_keys, int32_t tile, double sink = -INFINITY) {
  const int e = f16_query_exponent(q, dk);
  std::vector<double> qh(static_cast<size_t>(dk));
  for (int32_t d = 0; d < dk; ++d) qh[size_t(d)] = double(_Float16(std::ldexp(q[d], e)));
  const float qf = std::ldexp(1.f, -e) * scale;
  std::vector<double> s(static_cast<size_t>(n_ctx), -INFINITY);
  for (int32_t p = lo; p < n_ctx; ++p) {
    const std::vector<float> k = K(p);
    float acc = 0.f;
    for (int32_t d0 = 0; d0 < dk; d0 += score_dims) {
      double h = 0;
      for (int32_t d = d0; d < d0 + score_dims && d < dk; ++d) h = half_fma(qh[size_t(d)], k[size_t(d)], h);
      acc += float(h);
    }
    s[size_t(p)] = scaled ? double((acc * KS(p)) * qf) : double(acc * qf);
  }
  std::vector<double> o(static_cast<size_t>(dv), 0.0), h(static_cast<size_t>(dv)), part(static_cast<size_t>(dv));
  double m = -INFINITY, l = 0;
  for (int32_t t0 = lo / tile * tile; t0 < n_ctx; t0 += tile) {
    const int32_t t1 = std::min(n_ctx, t0 + tile), p0 = std::max(lo, t0);
    double mt = m;
    for (int32_t p = p0; p < t1; ++p) mt = std::max(mt, s[size_t(p)]);
    const double c = std::exp(m - mt);  // 0 on the first tile
    l *= c;
    for (double& x : o) x *= c;
    std::fill(part.begin(), part.end(), 0.0);
    std::fill(h.begin(), h.end(), 0.0);
    // Scaled: the weights and their tile's exponent first.
    std::vector<float> u(static_cast<size_t>(t1 - p0));
    float umax = 0.f;
    for (int32_t p = p0; p < t1 && scaled; ++p)
      umax = std::max(umax, u[size_t(p - p0)] = float(std::exp(s[size_t(p)] - mt)) * VS(p));
    const int eu = f16_weight_exponent(umax);
    const double back = std::ldexp(1.0, -eu);
    for (int32_t p = p0; p < t1; ++p) {
      const double w = std::exp(s[size_t(p)] - mt);
      const double wh = scaled ? double(_Float16(std::ldexp(u[size_t(p - p0)], eu))) : double(_Float16(float(w)));
      l += w;
      const std::vector<float> v = V(p);
      for (int32_t d = 0; d < dv; ++d) h[size_t(d)] = half_fma(wh, v[size_t(d)], h[size_t(d)]);
      if ((p - t0 + 1) % value_keys == 0 || p + 1 == t1)
        for (int32_t d = 0; d < dv; ++d) part[size_t(d)] += scaled ? h[size_t(d)] * back : h[size_t(d)], h[size_t(d)] = 0;
    }
    for (int32_t d = 0; d < dv; ++d) o[size_t(d)] += part[size_t(d)];
    m = mt;
  }
  const double den = l + std::exp(sink - m);
  for (double& x : o) x /= den;
  return o;
}

// An F16 cache's way: K(p), V(p) its stored halves.
template <class KRows, class VRows>
std::vector<double> f16_way_emulation(const KRows& K, const VRows& V, int32_t lo, int32_t n_ctx, const float* q,
                                      int32_t dk, int32_t dv, float scale, int32_t score_dims, int32_t value_keys,
                                      int32_t tile, double sink = -INFINITY) {
  const auto one = [](int32_t) { return 1.f; };
  return halves_way_emulation(K, V, one, one, false, lo, n_ctx, q, dk, dv, scale, score_dims, value_keys, tile, sink);
}

}  // namespace ridge::test
