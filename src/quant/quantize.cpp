// quantize_row (weights, ggml's reference quantizers quantize_row_*_ref, same rounding so
// that files ridge writes are what llama.cpp would write; the K types are in
// quantize_kquant.cpp) and the activation side: act_kind / act_row_bytes /
// quantize_act_q8a / prepare_act.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace ridge::quant {
namespace {

// A NaN or inf weight would make every other value of its block meaningless (and the
// float -> int casts below undefined): refuse it with a message instead.
void check_finite(const float* x, int64_t block) {
  for (int j = 0; j < kQK; ++j)
    RIDGE_CHECK(std::isfinite(x[j]), "cannot quantize a non-finite value ({}) in block {}",
                x[j], block);
}

// Signed-max blocks (Q4_0, Q5_0): the value with the largest magnitude, sign kept, maps
// to the most negative code, so it is exact and the other side gets one more step.
float signed_max(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, float& mn, float& mx) {
  mn = FLT_MAX;
  mx = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
}

void quant_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    check_finite(x, i);
    const float d = signed_max(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // x*id is in [-8, 8]; +8.5 and truncation = round half up into 0..16, 16 -> 15.
      const int q0 = std::min(15, int(x[j] * id + 8.5f));
      const int q1 = std::min(15, int(x[j + kQK / 2] * id + 8.5f));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quant_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    check_finite(x, i);
    float mn, mx;
    min_max(x, mn, mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, int((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, int((x[j + kQK / 2] - mn) * id + 0.5f));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

// Packs 32 five-bit codes: low nibbles in qs (elements j and j+16 share byte j), the
// 5th bit of element j in bit j of the little-endian qh.
void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = uint8_t((q[j] & 0x0F) | ((q[j + kQK / 2] & 0x0F) << 4));
    qh |= uint32_t((q[j] & 0x10) >> 4) << j;
    qh |= uint32_t((q[j + kQK / 2] & 0x10) >> 4) << (j + kQK / 2);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

void quant_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  int q[kQK];  // [32] codes 0..31
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    check_finite(x, i);
    const float d = signed_max(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, int(x[j] * id + 16.5f));
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void quant_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  int q[kQK];  // [32] codes 0..31
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    check_finite(x, i);
    float mn, mx;
    min_max(x, mn, mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    // ggml has no clamp here ((uint8_t)(x + 0.5f)); (x - mn) * id <= 31 + rounding, so
    // truncation of +0.5 never exceeds 31 for finite input; the & 31 keeps it a code.
    for (int j = 0; j < kQK; ++j) q[j] = int((x[j] - mn) * id + 0.5f) & 31;
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void quant_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    check_finite(x, i);
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    // roundf: halves away from zero, as ggml.
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = int8_t(std::roundf(x[j] * id));
  }
}

// FP8 weights: d = amax / 448 (the block's largest magnitude is E4M3's largest finite
// value), codes the nearest E4M3 of x / d (ties to even, saturating: quant/fp8.h).
void quant_fp8(const float* x, BlockFp8* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQF8) {
    for (int j = 0; j < kQF8; j += kQK) check_finite(x + j, i);
    float amax = 0.0f;
    for (int j = 0; j < kQF8; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / kFp8E4M3Max;
    y[i].d = d;
    for (int j = 0; j < kQF8; ++j) y[i].qs[j] = d != 0.0f ? f32_to_fp8_e4m3(x[j] / d) : 0;
  }
}

// ggml's quantize_row_mxfp4_ref: e from the block's largest magnitude, floor(log2 amax) +
// 125, so the top code 12 x 2^(e-128) is 1.5 x 2^floor(log2 amax) (larger magnitudes clip
// to it, as in ggml); each element to the nearest of the 16 codes (the first of equals). A block of magnitudes below 2^-125 (where ggml's cast of a negative
// exponent is undefined) takes e = 0.
void quant_mxfp4(const float* x, BlockMxfp4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    check_finite(x, i);
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float ef = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    const uint8_t e = uint8_t(std::clamp(ef, 0.0f, 254.0f));
    const float d = mxfp4_scale(e);
    auto best = [&](float v) {
      int bi = 0;
      float be = std::fabs(float(kMxfp4Values[0]) * d - v);
      for (int c = 1; c < 16; ++c) {
        const float err = std::fabs(float(kMxfp4Values[c]) * d - v);
        if (err < be) bi = c, be = err;
      }
      return uint8_t(bi);
    };
    y[i].e = e;
    for (int j = 0; j < kQK / 2; ++j) y[i].qs[j] = uint8_t(best(x[j]) | best(x[j + kQK / 2]) << 4);
  }
}

}  // namespace

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0:
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::F8_E4M3_B128: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

int64_t whole_blocks(DType t, int64_t n) {
  const auto& info = dtype_info(t);
  RIDGE_CHECK(n >= 0 && n % info.block_size == 0,
              "row of {} elements is not a whole number of {} blocks ({} elements each)", n,
              info.name, info.block_size);
  return n / info.block_size;
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const auto& info = dtype_info(t);
  RIDGE_CHECK(can_quantize(t), "quantizing to tensor type {} is not supported", info.name);
  const int64_t nb = whole_blocks(t, n);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0: return quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1: return quant_q4_1(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0: return quant_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1: return quant_q5_1(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q8_0: return quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return quantize_row_k(t, src, dst, nb);
    case DType::F8_E4M3_B128: return quant_fp8(src, static_cast<BlockFp8*>(dst), nb);
    case DType::MXFP4: return quant_mxfp4(src, static_cast<BlockMxfp4*>(dst), nb);
    default: break;
  }
  fail("quantizing to tensor type {} is not supported", info.name);
}

ActKind act_kind(DType t) {
  const auto& info = dtype_info(t);
  RIDGE_CHECK(info.supported, "tensor type {} is not supported", info.name);
  // FP8 codes times f32 activations are exact products; only the sums round.
  return (t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8_E4M3_B128) ? ActKind::F32
                                                                                             : ActKind::Q8A;
}

int64_t act_row_bytes(DType weight_type, int64_t n) {
  if (act_kind(weight_type) == ActKind::F32) return n * int64_t(sizeof(float));
  RIDGE_CHECK(n % kQK == 0, "activation row of {} elements is not a multiple of {}", n, kQK);
  return n / kQK * int64_t(sizeof(BlockQ8A));
}

// d = amax / 127, q = nearest integer to x * (1/d) with ties to even (lrintf in the
// default rounding mode: one cvtss2si, and what _mm*_cvtps_epi32 does, so a SIMD version
// can match bit for bit). |q| <= 127 always: -128 never appears, which the SIMD dots
// rely on (they negate activations). A zero block gives d = 0, q = 0.
void quantize_act_q8a(const float* x, BlockQ8A* y, int64_t n) {
  RIDGE_CHECK(n % kQK == 0, "activation row of {} elements is not a multiple of {}", n, kQK);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const long v = std::lrintf(x[j] * id);
      const int q = int(std::clamp(v, -127L, 127L));
      y[i].qs[j] = int8_t(q);
      sum += q;
    }
    y[i].d = d;
    y[i].s = d * float(sum);
  }
}

void prepare_act(DType t, const float* x, void* act, int64_t n) {
  if (act_kind(t) == ActKind::F32) {
    if (act != x) std::memcpy(act, x, size_t(n) * sizeof(float));
    return;
  }
  quantize_act_q8a(x, static_cast<BlockQ8A*>(act), n);
}

}  // namespace ridge::quant
