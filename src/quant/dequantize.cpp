// dequantize_row: GGUF weight rows to f32, with ggml's exact arithmetic (same operations in
// the same order), so that a dequantized tensor matches llama.cpp bit for bit.
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/kscales.h"
#include "quant/quant.h"

namespace ridge::quant {
namespace {

void deq_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void deq_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit value of element j (0..31) of a Q5 block: nibble | (qh bit j) << 4.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
  const int nib = j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4);
  return nib | int((qh >> j) & 1u) << 4;
}

void deq_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK; ++j) y[j] = float(q5_value(x[i].qs, qh, j) - 16) * d;
  }
}

void deq_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK; ++j) y[j] = float(q5_value(x[i].qs, qh, j)) * d + m;
  }
}

void deq_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

void deq_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {  // 4 chunks of 64 = 2 sub-blocks of 32
      uint8_t sc, m;
      k_scale_min(2 * c, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(2 * c + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void deq_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      k_scale_min(2 * c, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(2 * c + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = uint8_t(1u << (2 * c)), u2 = uint8_t(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void deq_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

}  // namespace

float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const auto& info = dtype_info(t);
  RIDGE_CHECK(info.supported, "tensor type {} is not supported", info.name);
  const int64_t nb = whole_blocks(t, n);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::Q4_0: return deq_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::Q4_1: return deq_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::Q5_0: return deq_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::Q5_1: return deq_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::Q8_0: return deq_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::Q4_K: return deq_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::Q5_K: return deq_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::Q6_K: return deq_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    case DType::MXFP4: {
      const auto* b = static_cast<const BlockMxfp4*>(src);
      for (int64_t i = 0; i < nb; ++i, dst += kQK) {
        const float d = mxfp4_scale(b[i].e);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[j] = float(kMxfp4Values[b[i].qs[j] & 0x0F]) * d;
          dst[j + kQK / 2] = float(kMxfp4Values[b[i].qs[j] >> 4]) * d;
        }
      }
      return;
    }
    case DType::F8_E4M3_B128: {
      const auto* b = static_cast<const BlockFp8*>(src);
      for (int64_t i = 0; i < nb; ++i, dst += kQF8)
        for (int j = 0; j < kQF8; ++j) dst[j] = fp8_e4m3_to_f32(b[i].qs[j]) * b[i].d;
      return;
    }
    default: break;
  }
  fail("tensor type {} is not supported", info.name);
}

}  // namespace ridge::quant
