#include "kernels/cpu/packed.h"

#include <algorithm>

#include <cstring>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/packed_detail.h"
#include "quant/blocks.h"

namespace ridge::kernels {

using quant::BlockQ4_0;
using quant::BlockQ8_0;
using quant::kQK;

bool can_pack(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::F8_E4M3_B128:
    case DType::MXFP4: return true;
    default: return false;
  }
}

int64_t panel_bytes(DType t, int64_t k) {
  switch (t) {
    case DType::F32: return k * kPanelRows * 4;
    case DType::F16:
    case DType::BF16: return k * kPanelRows * 2;
    case DType::Q8_0: return k / kQK * kPanelRows * int64_t(sizeof(BlockQ8_0));
    case DType::Q4_0: return k / kQK * kPanelRows * int64_t(sizeof(BlockQ4_0));
    case DType::Q4_1: return k / kQK * kPanelRows * int64_t(sizeof(quant::BlockQ4_1));
    case DType::Q5_0: return k / kQK * kPanelRows * int64_t(sizeof(quant::BlockQ5_0));
    case DType::Q5_1: return k / kQK * kPanelRows * int64_t(sizeof(quant::BlockQ5_1));
    case DType::Q4_K: return k / quant::kQKK * kPanelRows * 148;  // 144 + 4 unpacked scale bytes
    case DType::Q5_K: return k / quant::kQKK * kPanelRows * 180;  // 176 + 4
    case DType::Q6_K: return k / quant::kQKK * kPanelRows * 210;
    case DType::F8_E4M3_B128: return k / quant::kQF8 * kPanelRows * int64_t(sizeof(quant::BlockFp8));
    case DType::MXFP4: return k / kQK * kPanelRows * int64_t(sizeof(quant::BlockMxfp4));
    default: fail("no panel layout for {}", dtype_name(t));
  }
}

int64_t packed_bytes(DType t, int64_t k, int64_t n_out) {
  return (n_out + kPanelRows - 1) / kPanelRows * panel_bytes(t, k);
}

namespace {

// Element-wise types: column c of row r -> panel[c][r].
template <typename E>
void pack_plain(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  auto* out = reinterpret_cast<E*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = reinterpret_cast<const E*>(src + r * k * int64_t(sizeof(E)));
    for (int64_t c = 0; c < k; ++c) out[c * kPanelRows + r] = in[c];
  }
}

void pack_q8_0(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  const int64_t nb = k / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = dst + b * kPanelRows * int64_t(sizeof(BlockQ8_0));  // [d 16 x f16][8 g][16 r][4]
    auto* d = reinterpret_cast<uint16_t*>(blk);
    uint8_t* qs = blk + kPanelRows * 2;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& x = reinterpret_cast<const BlockQ8_0*>(src + r * nb * int64_t(sizeof(BlockQ8_0)))[b];
      d[r] = x.d;
      for (int g = 0; g < 8; ++g)
        for (int j = 0; j < 4; ++j) qs[(g * kPanelRows + r) * 4 + j] = uint8_t(x.qs[4 * g + j] + 128);
    }
    // Zero rows: d = 0 keeps them exactly zero, and q + 128 = 128 keeps the int sums in range.
    for (int64_t r = rows; r < kPanelRows; ++r)
      for (int g = 0; g < 8; ++g) std::memset(qs + (g * kPanelRows + r) * 4, 128, 4);
  }
}

// Q4_0, Q4_1, Q5_0, Q5_1: [d 16 x f16] [m 16 x f16 (_1 only)] [4 g][16 r][4] nibbles
// [h: 16 r][4] (Q5 only): bit g of byte j is the fifth bit of element 4g + j, bit 4 + g
// that of element 16 + 4g + j (the Q5_K panel's h vector).
template <typename Block, bool kMin, bool kHigh>
void pack_legacy(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  const int64_t nb = k / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = dst + b * kPanelRows * int64_t(sizeof(Block));
    auto* d = reinterpret_cast<uint16_t*>(blk);
    auto* m = d + kPanelRows;
    uint8_t* qs = blk + kPanelRows * (kMin ? 4 : 2);
    uint8_t* h = qs + 4 * kPanelRows * 4;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& x = reinterpret_cast<const Block*>(src + r * nb * int64_t(sizeof(Block)))[b];
      d[r] = x.d;
      if constexpr (kMin) m[r] = x.m;
      for (int g = 0; g < 4; ++g) std::memcpy(qs + (g * kPanelRows + r) * 4, x.qs + 4 * g, 4);
      if constexpr (kHigh) {
        uint32_t qh;
        std::memcpy(&qh, x.qh, 4);  // bit e: element e's fifth bit
        for (int j = 0; j < 4; ++j) {
          uint32_t v = 0;
          for (int g = 0; g < 4; ++g) v |= ((qh >> (4 * g + j)) & 1) << g | ((qh >> (16 + 4 * g + j)) & 1) << (4 + g);
          h[r * 4 + j] = uint8_t(v);
        }
      }
    }
  }
}

// MXFP4: per block, the rows' scale bytes e[16], then Q4_0's nibble groups.
void pack_mxfp4(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  const int64_t nb = k / kQK;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = dst + b * kPanelRows * int64_t(sizeof(quant::BlockMxfp4));
    uint8_t* qs = blk + kPanelRows;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& x = reinterpret_cast<const quant::BlockMxfp4*>(src + r * nb * int64_t(sizeof(quant::BlockMxfp4)))[b];
      blk[r] = x.e;
      for (int g = 0; g < 4; ++g) std::memcpy(qs + (g * kPanelRows + r) * 4, x.qs + 4 * g, 4);
    }
  }
}

// FP8: per 128-block, the rows' scales d[16] f32, then the codes in the path's order
// (packed.h).
void pack_fp8(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst, bool bf16) {
  const int64_t nb = k / quant::kQF8;
  constexpr int64_t kBlock = kPanelRows * int64_t(sizeof(quant::BlockFp8));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* in = reinterpret_cast<const quant::BlockFp8*>(src + r * row_bytes(DType::F8_E4M3_B128, k));
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = dst + b * kBlock;
      std::memcpy(out + r * 4, &in[b].d, 4);
      uint8_t* codes = out + kPanelRows * 4;
      for (int c = 0; c < quant::kQF8; ++c) {
        // bf16: group c / 4, lane L = r / 4, byte t from (row, column) as packed.h says.
        const int g = c / 4, j = c % 4, t = (j / 2) * 8 + (r % 4) * 2 + j % 2;
        codes[bf16 ? g * 64 + (r / 4) * 16 + t : c * kPanelRows + r] = in[b].qs[c];
      }
    }
  }
}

}  // namespace

void pack_panels(DType t, int64_t k, int64_t n_out, const uint8_t* src, uint8_t* dst, int64_t p0, int64_t p1,
                 bool fp8_bf16) {
  const int64_t pb = panel_bytes(t, k), rb = row_bytes(t, k);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t r0 = p * kPanelRows, rows = std::min<int64_t>(kPanelRows, n_out - r0);
    uint8_t* out = dst + p * pb;
    const uint8_t* in = src + r0 * rb;
    std::memset(out, 0, size_t(pb));
    switch (t) {
      case DType::F32: pack_plain<uint32_t>(k, rows, in, out); break;
      case DType::F16:
      case DType::BF16: pack_plain<uint16_t>(k, rows, in, out); break;
      case DType::Q8_0: pack_q8_0(k, rows, in, out); break;
      case DType::Q4_0: pack_legacy<BlockQ4_0, false, false>(k, rows, in, out); break;
      case DType::Q4_1: pack_legacy<quant::BlockQ4_1, true, false>(k, rows, in, out); break;
      case DType::Q5_0: pack_legacy<quant::BlockQ5_0, false, true>(k, rows, in, out); break;
      case DType::Q5_1: pack_legacy<quant::BlockQ5_1, true, true>(k, rows, in, out); break;
      case DType::Q4_K: detail::pack_q4_k(k, rows, in, out); break;
      case DType::Q5_K: detail::pack_q5_k(k, rows, in, out); break;
      case DType::Q6_K: detail::pack_q6_k(k, rows, in, out); break;
      case DType::F8_E4M3_B128: pack_fp8(k, rows, in, out, fp8_bf16); break;
      case DType::MXFP4: pack_mxfp4(k, rows, in, out); break;
      default: fail("no panel layout for {}", dtype_name(t));
    }
  }
}

}  // namespace ridge::kernels
