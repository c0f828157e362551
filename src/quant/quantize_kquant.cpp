// Q4_K / Q5_K / Q6_K weight quantizers. The byte layout is GGUF's (quant/blocks.h), so
// the output dequantizes with dequantize_row and loads in llama.cpp. The search for each
// sub-block's scale (and min) follows the method of ggml's reference quantizers: the
// weighted least-squares fit over a few candidate step sizes, keeping the lowest error;
// the code here is ridge's own.
//
// Super-block of 256 = 8 sub-blocks of 32 (Q4_K, Q5_K: value = d*sc*q - dmin*m, sc and m
// 6-bit, d and dmin f16) or 16 sub-blocks of 16 (Q6_K: value = d*sc*(q - 32), sc int8).
// The sub-block fits are done in f32, then their scales are themselves quantized against
// the super-block's f16 d (and dmin), and the codes are recomputed against those rounded
// scales so that the rounding of d does not bias every code of the block. One departure
// from ggml: d is rounded away from zero and the sub-block scales are divided by the d
// as stored (ggml multiplies by the unrounded 63/max), which changes nothing where d is
// a normal half but keeps rows with tiny values (d subnormal or below) from collapsing.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace ridge::quant {
namespace {

// Below this a group is treated as all zero: its scale would be a denormal f32 at best,
// and 1/scale would overflow.
constexpr float kZeroGroup = 1e-15f;

// Nearest integer, ties to even (the default rounding mode; ggml's nearest_int rounds the
// same way for the magnitudes that occur here, |v| < 2^22).
inline int nearest(float v) { return int(std::lrintf(v)); }

void check_finite_superblock(const float* x, int64_t block) {
  for (int j = 0; j < kQKK; ++j)
    RIDGE_CHECK(std::isfinite(x[j]), "cannot quantize a non-finite value ({}) in super-block {}",
                x[j], block);
}

// The f16 super-block scale for a wanted value v: the nearest half, moved one step away
// from zero if that rounded |v| down. Sub-block scales are then computed against the
// stored value, and never need more than their largest code (63, or -128 for Q6_K); and a
// v below the smallest subnormal still gets one, so that tiny rows keep their shape
// instead of losing the scale part while the min part survives.
uint16_t stored_scale(float v, int64_t block) {
  uint16_t h = f32_to_f16(v);
  if (std::fabs(f16_to_f32(h)) < std::fabs(v)) ++h;  // |h| + 1 ulp, sign bit untouched
  RIDGE_CHECK(std::isfinite(f16_to_f32(h)),
              "super-block {} has values too large for an f16 scale ({})", block, v);
  return h;
}

// Affine fit of one sub-block of n <= 32 values: x[i] ~ scale * q[i] - min_out, q in
// [0, nmax], min_out >= 0. w[i] weights the squared error of element i. The first guess
// spreads [lo, hi] over the codes; then nstep more step sizes (nmax + rmin + k*rdelta
// codes over the same range) each get their codes, then scale and min from the 2x2
// normal equations of the weighted least-squares problem; the lowest error wins.
// q receives the winning codes. Returns the scale (>= 0 for nonnegative weights).
float fit_affine(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                 uint8_t* q, float& min_out) {
  float lo = x[0], hi = x[0], sw = 0, swx = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sw += w[i];
    swx += w[i] * x[i];
  }
  // The min term is only ever subtracted: a group of positive values keeps 0 as its floor
  // so that small values stay representable exactly.
  lo = std::min(lo, 0.0f);
  if (hi - lo < kZeroGroup) {  // constant (<= 0) group, or all zero: the min alone represents it
    std::fill(q, q + n, uint8_t(0));
    min_out = -lo;
    return 0.0f;
  }
  const auto codes = [&](float iscale, uint8_t* out) {
    for (int i = 0; i < n; ++i) out[i] = uint8_t(std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax));
  };
  const auto error = [&](float scale, float mn, const uint8_t* c) {
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * float(c[i]) + mn - x[i];
      e += w[i] * diff * diff;
    }
    return e;
  };
  float best_scale = (hi - lo) / float(nmax), best_min = lo;  // best_min <= 0: value = s*q + min
  codes(float(nmax) / (hi - lo), q);
  float best_err = error(best_scale, best_min, q);
  uint8_t trial[32];
  for (int k = 0; k <= nstep; ++k) {
    codes((rmin + rdelta * float(k) + float(nmax)) / (hi - lo), trial);
    float sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const float l = float(trial[i]);
      sl += w[i] * l;
      sl2 += w[i] * l * l;
      sxl += w[i] * l * x[i];
    }
    const float det = sw * sl2 - sl * sl;
    if (det <= 0) continue;  // every code equal: scale and min are not separable
    float scale = (sw * sxl - swx * sl) / det;
    float mn = (sl2 * swx - sl * sxl) / det;
    if (mn > 0) {  // the format cannot add: refit the scale alone with min = 0
      mn = 0;
      scale = sxl / sl2;
    }
    const float err = error(scale, mn, trial);
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
      best_min = mn;
      std::memcpy(q, trial, size_t(n));
    }
  }
  min_out = -best_min;
  return best_scale;
}

// Symmetric fit of one sub-block: x[i] ~ scale * (q[i] - nmax), q in [0, 2*nmax - 1],
// error weighted by x^2 (large values matter most to a dot product). The signed extreme
// maps to -nmax (the side with one more code), then 18 nearby step sizes are tried; for
// fixed codes the best scale is sum(w x l) / sum(w l^2), and its error is minimal where
// sum(w x l)^2 / sum(w l^2) is maximal. Returns the signed scale.
float fit_symmetric(const float* x, int n, int nmax, uint8_t* q) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kZeroGroup) {
    std::fill(q, q + n, uint8_t(nmax));
    return 0.0f;
  }
  float best = -1, best_scale = 0;  // best: sum(w x l)^2 / sum(w l^2) of the kept codes
  const auto trial = [&](float iscale) {
    float sxl = 0, sl2 = 0;
    int l[32];
    for (int i = 0; i < n; ++i) {
      l[i] = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sxl += w * x[i] * float(l[i]);
      sl2 += w * float(l[i]) * float(l[i]);
    }
    if (sl2 <= 0) return;
    const float scale = sxl / sl2;
    if (scale * sxl > best) {  // as a product of scale-sized terms: no overflow of sxl^2 * sl2
      best = scale * sxl;
      best_scale = scale;
      for (int i = 0; i < n; ++i) q[i] = uint8_t(l[i] + nmax);
    }
  };
  std::fill(q, q + n, uint8_t(nmax));
  trial(-float(nmax) / max);
  for (int k = -9; k <= 9; ++k)
    if (k != 0) trial(-(float(nmax) + 0.1f * float(k)) / max);
  return best_scale;
}

// The 12-byte scale/min packing that k_scale_min (quant/kscales.h) reads back.
void pack_scales_mins(const uint8_t* sc, const uint8_t* m, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// One Q4_K / Q5_K super-block: fills d, dmin, the packed scales and codes[256] (0..nmax).
void quant_affine_superblock(const float* x, int nmax, float rmin, float rdelta, int nstep, int64_t block,
                             uint16_t& d_out, uint16_t& dmin_out, uint8_t* scales_out, uint8_t* codes) {
  float scale[8], mn[8], mean[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    // Weight |x| plus the group's RMS: big values count more, but small ones are not
    // ignored (with |x| alone a near-zero value could get any code).
    float ss = 0, sum = 0;
    for (int i = 0; i < 32; ++i) {
      ss += xs[i] * xs[i];
      sum += xs[i];
    }
    mean[j] = sum / 32;
    const float rms = std::sqrt(ss / 32);
    for (int i = 0; i < 32; ++i) w[i] = rms + std::fabs(xs[i]);
    scale[j] = fit_affine(xs, w, 32, nmax, rmin, rdelta, nstep, codes + 32 * j, mn[j]);
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, mn[j]);
  }
  // 6-bit sub-block scales against the largest: d ~ max/63, sc = round(scale/d).
  uint8_t sc[8] = {}, m[8] = {};
  d_out = dmin_out = 0;
  if (max_scale >= kZeroGroup) {
    d_out = stored_scale(max_scale / 63.0f, block);
    const float d = f16_to_f32(d_out);
    for (int j = 0; j < 8; ++j) sc[j] = uint8_t(std::clamp(nearest(scale[j] / d), 0, 63));
  }
  if (max_min >= kZeroGroup) {
    dmin_out = stored_scale(max_min / 63.0f, block);
    const float dmin = f16_to_f32(dmin_out);
    // A sub-block whose scale rounded to 0 is the constant -dmin*m: make it its mean (so
    // that its error never exceeds its own magnitude).
    for (int j = 0; j < 8; ++j)
      m[j] = uint8_t(std::clamp(nearest((sc[j] ? mn[j] : -mean[j]) / dmin), 0, 63));
  }
  pack_scales_mins(sc, m, scales_out);
  // Recompute the codes against the scales as stored; a sub-block whose stored scale is 0
  // keeps the fit's codes (they multiply 0).
  const float d = f16_to_f32(d_out), dmin = f16_to_f32(dmin_out);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * float(sc[j]);
    if (ds == 0.0f) continue;
    const float dm = dmin * float(m[j]);
    for (int i = 0; i < 32; ++i)
      codes[32 * j + i] = uint8_t(std::clamp(nearest((x[32 * j + i] + dm) / ds), 0, nmax));
  }
}

void quant_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t codes[kQKK];  // [256] 0..15
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    check_finite_superblock(x, i);
    quant_affine_superblock(x, 15, -1.0f, 0.1f, 20, i, y[i].d, y[i].dmin, y[i].scales, codes);
    // Chunk c (64 elements): low nibbles are elements 64c..64c+31, high 64c+32..64c+63.
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        y[i].qs[32 * c + l] = uint8_t(codes[64 * c + l] | (codes[64 * c + 32 + l] << 4));
  }
}

void quant_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t codes[kQKK];  // [256] 0..31
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    check_finite_superblock(x, i);
    quant_affine_superblock(x, 31, -0.5f, 0.1f, 15, i, y[i].d, y[i].dmin, y[i].scales, codes);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = codes[64 * c + l], hi = codes[64 * c + 32 + l];
        y[i].qs[32 * c + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
        // The 5th bit of element e is bit e/32 of qh[e % 32]: sub-blocks 2c and 2c+1.
        y[i].qh[l] = uint8_t(y[i].qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  uint8_t codes[kQKK];  // [256] 0..63, value = d * sc * (code - 32)
  float scale[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    check_finite_superblock(x, i);
    float max_scale = 0, amax_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scale[j] = fit_symmetric(x + 16 * j, 16, 32, codes + 16 * j);
      if (std::fabs(scale[j]) > amax_scale) {
        amax_scale = std::fabs(scale[j]);
        max_scale = scale[j];
      }
    }
    if (amax_scale < kZeroGroup) {
      std::memset(&y[i], 0, sizeof(y[i]));  // d = 0; every code is then irrelevant
      continue;
    }
    // 8-bit signed sub-block scales; the largest maps to -128, as the codes' extreme did.
    y[i].d = stored_scale(max_scale / -128.0f, i);
    const float d = f16_to_f32(y[i].d);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = int8_t(std::clamp(nearest(scale[j] / d), -128, 127));
    for (int j = 0; j < 16; ++j) {
      const float ds = d * float(y[i].scales[j]);
      if (ds == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        codes[16 * j + l] = uint8_t(std::clamp(nearest(x[16 * j + l] / ds), -32, 31) + 32);
    }
    // Half h (128 elements), element r = 32g + l: low 4 bits in ql[64h + l + 32(g&1)]
    // (low nibble for g < 2, high otherwise), top 2 bits at bits 2g of qh[32h + l].
    for (int h = 0; h < 2; ++h) {
      const uint8_t* c = codes + 128 * h;
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((c[l] & 0xF) | ((c[l + 64] & 0xF) << 4));
        ql[l + 32] = uint8_t((c[l + 32] & 0xF) | ((c[l + 96] & 0xF) << 4));
        qh[l] = uint8_t((c[l] >> 4) | ((c[l + 32] >> 4) << 2) | ((c[l + 64] >> 4) << 4) | ((c[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void quantize_row_k(DType t, const float* src, void* dst, int64_t nb) {
  switch (t) {
    case DType::Q4_K: return quant_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case DType::Q5_K: return quant_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case DType::Q6_K: return quant_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    default: break;
  }
  fail("quantizing to tensor type {} is not supported", dtype_name(t));
}

}  // namespace ridge::quant
