// Scalar reference dots: the definition every SIMD path is tested against, and the path
// of a CPU without AVX2. Quantized weights meet BlockQ8A activations: within a 32-element
// block the products are summed exactly in integers, and only the per-block scale
// products are float, so the result depends on the rows alone.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/dot_paths.h"
#include "quant/fp8.h"
#include "quant/kscales.h"

namespace ridge::quant::detail {
namespace {

// Plain-float weights: 8 independent accumulators (shorter dependency chains, and the
// error grows with n/8 rather than n), combined pairwise at the end.
template <typename Load>
float dot_plain(const void* w, const float* a, int64_t n, Load load) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += load(w, i + k) * a[i + k];
  for (int k = 0; i < n; ++i, ++k) acc[k] += load(w, i) * a[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

float dot_f32(const void* w, const void* act, int64_t n) {
  return dot_plain(w, static_cast<const float*>(act), n,
                   [](const void* p, int64_t i) { return static_cast<const float*>(p)[i]; });
}
float dot_f16(const void* w, const void* act, int64_t n) {
  return dot_plain(w, static_cast<const float*>(act), n, [](const void* p, int64_t i) {
    return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  });
}
float dot_bf16(const void* w, const void* act, int64_t n) {
  return dot_plain(w, static_cast<const float*>(act), n, [](const void* p, int64_t i) {
    return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  });
}

// FP8 weights, in the packed GEMM's order (kernels/cpu/gemm.h), so that the two agree
// bit for bit: per 128-block a sequential FMA chain of the codes' kernel form (x 2^-8,
// quant/fp8.h) with the activations from 0, then y = fma(chain, d x 2^8, y), blocks in
// order.
float dot_fp8(const void* w, const void* act, int64_t n) {
  const auto* b = static_cast<const BlockFp8*>(w);
  const auto* a = static_cast<const float*>(act);
  float y = 0.0f;
  for (int64_t i = 0; i < n / kQF8; ++i, a += kQF8) {
    float s = 0.0f;
    for (int j = 0; j < kQF8; ++j) s = std::fma(fp8_e4m3_unit(b[i].qs[j]), a[j], s);
    y = std::fma(s, b[i].d * 256.0f, y);
  }
  return y;
}

// sum over 32 (or `len`) elements of q[j] * a[j], exact.
inline int idot(const int8_t* q, const int8_t* a, int len) {
  int s = 0;
  for (int j = 0; j < len; ++j) s += int(q[j]) * int(a[j]);
  return s;
}

// Nibble codes of a Q4 block in element order, minus `offset`.
inline void unpack_q4(const uint8_t* qs, int offset, int8_t* q /*[32]*/) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t((qs[j] & 0x0F) - offset);
    q[j + kQK / 2] = int8_t((qs[j] >> 4) - offset);
  }
}

inline void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int offset, int8_t* q /*[32]*/) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = int8_t(((qs[j] & 0x0F) | ((qh >> j) & 1u) << 4) - offset);
    q[j + kQK / 2] = int8_t(((qs[j] >> 4) | ((qh >> (j + kQK / 2)) & 1u) << 4) - offset);
  }
}

float dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  int8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_q4(x[i].qs, 8, q);
    acc += f16_to_f32(x[i].d) * y[i].d * float(idot(q, y[i].qs, kQK));
  }
  return acc;
}

// Affine blocks: sum (d q + m) a_d a_q = d a_d sum(q a_q) + m (a_d sum a_q) = ... + m s.
float dot_q4_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  int8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_q4(x[i].qs, 0, q);
    acc += f16_to_f32(x[i].d) * y[i].d * float(idot(q, y[i].qs, kQK)) +
           f16_to_f32(x[i].m) * y[i].s;
  }
  return acc;
}

float dot_q5_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  int8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_q5(x[i].qs, x[i].qh, 16, q);
    acc += f16_to_f32(x[i].d) * y[i].d * float(idot(q, y[i].qs, kQK));
  }
  return acc;
}

float dot_q5_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  int8_t q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_q5(x[i].qs, x[i].qh, 0, q);
    acc += f16_to_f32(x[i].d) * y[i].d * float(idot(q, y[i].qs, kQK)) +
           f16_to_f32(x[i].m) * y[i].s;
  }
  return acc;
}

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i)
    acc += f16_to_f32(x[i].d) * y[i].d * float(idot(x[i].qs, y[i].qs, kQK));
  return acc;
}

// MXFP4: the doubled E2M1 values are integers, so a block is one integer dot times its
// scale and the activation's.
float dot_mxfp4(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j)
      s += kMxfp4Values[x[i].qs[j] & 0x0F] * y[i].qs[j] + kMxfp4Values[x[i].qs[j] >> 4] * y[i].qs[j + kQK / 2];
    acc += mxfp4_scale(x[i].e) * y[i].d * float(s);
  }
  return acc;
}

// K-quants with 8 sub-blocks of 32: sub-block j lines up with activation block j, so
// value = d sc_j q - dmin m_j gives d sc_j a_d sum(q a_q) - dmin m_j s per sub-block.
template <typename Block, typename Unpack>
float dot_k_sub32(const void* w, const void* act, int64_t n, Unpack unpack) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  int8_t q[kQKK];  // [256] codes 0..15 or 0..31 of one super-block
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK / kQK) {
    unpack(x[i], q);
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    for (int j = 0; j < kQKK / kQK; ++j) {
      uint8_t sc, m;
      k_scale_min(j, x[i].scales, sc, m);
      acc += d * y[j].d * float(int(sc) * idot(q + kQK * j, y[j].qs, kQK)) -
             dmin * float(m) * y[j].s;
    }
  }
  return acc;
}

void unpack_q4_k(const BlockQ4_K& b, int8_t* q /*[256]*/) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = int8_t(b.qs[32 * c + l] & 0xF);
      q[64 * c + 32 + l] = int8_t(b.qs[32 * c + l] >> 4);
    }
}

void unpack_q5_k(const BlockQ5_K& b, int8_t* q /*[256]*/) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = int8_t((b.qs[32 * c + l] & 0xF) | ((b.qh[l] >> (2 * c)) & 1) << 4);
      q[64 * c + 32 + l] = int8_t((b.qs[32 * c + l] >> 4) | ((b.qh[l] >> (2 * c + 1)) & 1) << 4);
    }
}

float dot_q4_k(const void* w, const void* act, int64_t n) {
  return dot_k_sub32<BlockQ4_K>(w, act, n, unpack_q4_k);
}
float dot_q5_k(const void* w, const void* act, int64_t n) {
  return dot_k_sub32<BlockQ5_K>(w, act, n, unpack_q5_k);
}

// Q6_K: 16 sub-blocks of 16, int8 scales; activation block j covers sub-blocks 2j, 2j+1.
float dot_q6_k(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8A*>(act);
  float acc = 0.0f;
  int8_t q[kQKK];  // [256] codes - 32, in -32..31
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK / kQK) {
    const BlockQ6_K& b = x[i];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      int8_t* o = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = int8_t(((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32);
        o[l + 32] = int8_t(((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32);
        o[l + 64] = int8_t(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
        o[l + 96] = int8_t(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
      }
    }
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQKK / kQK; ++j) {
      const int s = int(b.scales[2 * j]) * idot(q + kQK * j, y[j].qs, 16) +
                    int(b.scales[2 * j + 1]) * idot(q + kQK * j + 16, y[j].qs + 16, 16);
      acc += d * y[j].d * float(s);
    }
  }
  return acc;
}

}  // namespace

DotFn scalar_dot(DType t) {
  switch (t) {
    case DType::F32: return dot_f32;
    case DType::F16: return dot_f16;
    case DType::BF16: return dot_bf16;
    case DType::Q4_0: return dot_q4_0;
    case DType::Q4_1: return dot_q4_1;
    case DType::Q5_0: return dot_q5_0;
    case DType::Q5_1: return dot_q5_1;
    case DType::Q8_0: return dot_q8_0;
    case DType::Q4_K: return dot_q4_k;
    case DType::Q5_K: return dot_q5_k;
    case DType::Q6_K: return dot_q6_k;
    case DType::F8_E4M3_B128: return dot_fp8;
    case DType::MXFP4: return dot_mxfp4;
    default: return nullptr;
  }
}

}  // namespace ridge::quant::detail
