#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "core/cpu.h"

namespace ridge::kernels {

namespace detail {
void rms_norm_avx512(const float* x, const float* w, float* y, int64_t n, float eps);
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void swiglu_oai_avx512(const float* gate, const float* up, float* out, int64_t n);
void add_inplace_avx512(float* x, const float* y, int64_t n);
void rope_apply_avx512(const float* cs, float* x, int32_t rope_dim, bool neox);
void gelu_avx512(const float* x, float* out, int64_t n);
void gelu_avx2(const float* x, float* out, int64_t n);
}  // namespace detail

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (active_isa() == Isa::Avx512) return detail::rms_norm_avx512(x, w, y, n, eps);
  // Sum in double: one rounding for the whole row, and the reference test can be tight.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  if (w)
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  else
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double ss = 0;  // the variance around the mean, not E[x^2] - mean^2 (no cancellation)
  for (int64_t i = 0; i < n; ++i) ss += (double(x[i]) - mean) * (double(x[i]) - mean);
  const float scale = float(1.0 / std::sqrt(ss / double(n) + double(eps))), m = float(mean);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) * scale * w[i] + b[i];
}

void rope_cache(const RopeParams& p, int32_t pos, float* cs) {
  // theta_i = pos * base^(-2i/d) / factor_i, computed directly in double (no running
  // product, whose rounding would drift with i).
  const int32_t half = p.rope_dim / 2;
  for (int32_t i = 0; i < half; ++i) {
    double theta = double(pos) * double(p.freq_scale) * std::pow(double(p.freq_base), -2.0 * i / p.rope_dim);
    if (p.freq_factors) theta /= double(p.freq_factors[i]);
    cs[2 * i] = float(std::cos(theta));
    cs[2 * i + 1] = float(std::sin(theta));
    if (p.attn_factor != 1.f) cs[2 * i] *= p.attn_factor, cs[2 * i + 1] *= p.attn_factor;
  }
}

void rope_apply(const RopeParams& p, const float* cs, float* x) {
  if (active_isa() == Isa::Avx512) return detail::rope_apply_avx512(cs, x, p.rope_dim, p.neox);
  const int32_t half = p.rope_dim / 2;
  if (p.neox) {
    for (int32_t i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float a = x[i], b = x[i + half];
      x[i] = a * c - b * s;
      x[i + half] = a * s + b * c;
    }
  } else {
    for (int32_t i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * c - b * s;
      x[2 * i + 1] = a * s + b * c;
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (active_isa() == Isa::Avx512) return detail::swiglu_avx512(gate, up, out, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  if (active_isa() == Isa::Avx512) return detail::swiglu_oai_avx512(gate, up, out, n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kOaiLimit), y = std::clamp(up[i], -kOaiLimit, kOaiLimit);
    out[i] = x / (1.f + std::exp(-kOaiAlpha * x)) * (y + 1.f);
  }
}

void gelu(const float* x, float* out, int64_t n) {
  if (active_isa() == Isa::Avx512) return detail::gelu_avx512(x, out, n);
  if (active_isa() == Isa::Avx2) return detail::gelu_avx2(x, out, n);
  constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCubic = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.f + std::tanh(kSqrt2OverPi * v * (1.f + kCubic * v * v)));
  }
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  gelu(gate, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] *= up[i];
}

void add_inplace(float* x, const float* y, int64_t n) {
  if (active_isa() == Isa::Avx512) return detail::add_inplace_avx512(x, y, n);
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void axpy_inplace(float* x, const float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += a * y[i];
}

void moe_route_row(const float* logits, const MoeRouting& r, int32_t* ids, float* weights) {
  const int32_t ne = r.n_expert;
  double p[kMaxRouteExperts], s[kMaxRouteExperts];  // probabilities; the choice's scores
  if (r.sigmoid) {
    for (int32_t e = 0; e < ne; ++e) p[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
  } else {
    double mx = -INFINITY, z = 0;
    for (int32_t e = 0; e < ne; ++e) mx = std::max(mx, double(logits[e]));
    for (int32_t e = 0; e < ne; ++e) z += (p[e] = std::exp(double(logits[e]) - mx));
    for (int32_t e = 0; e < ne; ++e) p[e] /= z;
  }
  for (int32_t e = 0; e < ne; ++e) s[e] = p[e] + (r.bias ? double(r.bias[e]) : 0.0);
  if (r.n_groups > 1) {
    // A group's score is the sum of its two best; all but the n_groups_used best groups
    // are out of the choice.
    const int32_t gs = ne / r.n_groups;
    double score[kMaxRouteExperts];
    bool keep[kMaxRouteExperts] = {};
    for (int32_t g = 0; g < r.n_groups; ++g) {
      double b0 = -INFINITY, b1 = -INFINITY;
      for (int32_t e = g * gs; e < (g + 1) * gs; ++e) {
        if (s[e] > b0) b1 = b0, b0 = s[e];
        else if (s[e] > b1) b1 = s[e];
      }
      score[g] = gs > 1 ? b0 + b1 : b0;
    }
    for (int32_t j = 0; j < r.n_groups_used; ++j) {
      int32_t best = -1;
      for (int32_t g = 0; g < r.n_groups; ++g)
        if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
      keep[best] = true;
    }
    for (int32_t e = 0; e < ne; ++e)
      if (!keep[e / gs]) s[e] = -INFINITY;
  }
  // The k best, lower id first on ties: k small passes.
  double sum = 0;
  for (int32_t j = 0; j < r.k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < ne; ++e) {
      bool taken = false;
      for (int32_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || s[e] > s[best])) best = e;
    }
    ids[j] = best;
    weights[j] = float(p[best]);
    sum += weights[j];
  }
  const double norm = r.norm ? std::max(sum, 6.103515625e-5) : 1.0;  // llama.cpp's clamp
  const double scale = r.scale != 0.f ? double(r.scale) : 1.0;
  for (int32_t j = 0; j < r.k; ++j) weights[j] = float(double(weights[j]) / norm * scale);
}

}  // namespace ridge::kernels
