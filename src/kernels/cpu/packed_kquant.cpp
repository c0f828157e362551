// K-quant panels (Q4_K, Q5_K, Q6_K): the 256-element super-blocks of 16 rows side by side, codes
// re-encoded per 32-element block in the Q4_0 panel order so that one kernel shape
// serves every format; sub-block scales unpacked to one byte each (Q4_K: 12 -> 16 bytes
// per row, +2.8% of the row) so the kernel never decodes 6-bit fields.
//
//   Q4_K super-block of 16 rows (2368 B = 16 x 148):
//     d[16] f16 | dmin[16] f16 | sc[8][16] u8 | m[8][16] u8 |
//     8 blocks x 4 groups g x [16 rows][4 bytes]: low nibble = element 4g + j of the
//     block, high nibble = element 16 + 4g + j
//   Q5_K super-block of 16 rows (2880 B = 16 x 180): Q4_K's, each block's nibble groups
//     followed by a vector h of [16 rows][4 bytes] with the fifth bits: bit g of byte j
//     belongs to element 4g + j, bit 4 + g to element 16 + 4g + j
//   Q6_K super-block of 16 rows (3360 B = 16 x 210, the GGUF size):
//     d[16] f16 | sc[16][16] i8 |
//     8 blocks x (4 groups of nibbles as above (the low 4 bits of the 6-bit code), then
//     2 vectors h of [16 rows][4 bytes] with the top 2 bits: bits 2t..2t+1 of byte j
//     belong to element 16h + 4t + j)
#include <cstring>

#include "kernels/cpu/packed.h"
#include "kernels/cpu/packed_detail.h"
#include "quant/blocks.h"
#include "quant/kscales.h"

namespace ridge::kernels::detail {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::kQKK;

namespace {

// Unsigned codes of one super-block in element order.
void q4k_codes(const BlockQ4_K& x, uint8_t* q /*[256]*/) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = x.qs[32 * c + l] & 0xF;
      q[64 * c + 32 + l] = x.qs[32 * c + l] >> 4;
    }
}

void q5k_codes(const BlockQ5_K& x, uint8_t* q /*[256]*/) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = uint8_t((x.qs[32 * c + l] & 0xF) | (((x.qh[l] >> (2 * c)) & 1) << 4));
      q[64 * c + 32 + l] = uint8_t((x.qs[32 * c + l] >> 4) | (((x.qh[l] >> (2 * c + 1)) & 1) << 4));
    }
}

void q6k_codes(const BlockQ6_K& x, uint8_t* q /*[256]*/) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = x.ql + 64 * h;
    const uint8_t* qh = x.qh + 32 * h;
    uint8_t* o = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      o[l] = uint8_t((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
      o[l + 32] = uint8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      o[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      o[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

// Low 4 bits of block b's codes of row r into the 4 nibble groups at `out`.
void put_nibbles(const uint8_t* q /*[32]*/, int r, uint8_t* out /*[4][16][4]*/) {
  for (int g = 0; g < 4; ++g)
    for (int j = 0; j < 4; ++j)
      out[(g * kPanelRows + r) * 4 + j] = uint8_t((q[4 * g + j] & 0xF) | ((q[16 + 4 * g + j] & 0xF) << 4));
}

// Q4_K and Q5_K share the layout up to Q5_K's fifth-bit vector after each block.
template <typename Block, bool kQ5>
void pack_q45_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  constexpr int64_t kBlock = kQ5 ? 256 + 64 : 256;  // one 32-block of 16 rows
  const int64_t nsb = k / kQKK;
  uint8_t q[kQKK];
  for (int64_t s = 0; s < nsb; ++s) {
    uint8_t* sb = dst + s * kPanelRows * (kQ5 ? 180 : 148);
    auto* d = reinterpret_cast<uint16_t*>(sb);
    auto* dmin = d + kPanelRows;
    uint8_t* sc = sb + 64;
    uint8_t* mn = sc + 8 * kPanelRows;
    uint8_t* qs = mn + 8 * kPanelRows;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& x = reinterpret_cast<const Block*>(src + r * nsb * int64_t(sizeof(Block)))[s];
      d[r] = x.d;
      dmin[r] = x.dmin;
      for (int j = 0; j < 8; ++j) quant::k_scale_min(j, x.scales, sc[j * kPanelRows + r], mn[j * kPanelRows + r]);
      if constexpr (kQ5) q5k_codes(x, q);
      else q4k_codes(x, q);
      for (int b = 0; b < 8; ++b) {
        uint8_t* blk = qs + b * kBlock;
        put_nibbles(q + 32 * b, int(r), blk);
        if constexpr (kQ5)
          for (int j = 0; j < 4; ++j) {
            uint8_t v = 0;
            for (int g = 0; g < 4; ++g)
              v = uint8_t(v | ((q[32 * b + 4 * g + j] >> 4) << g) | ((q[32 * b + 16 + 4 * g + j] >> 4) << (4 + g)));
            blk[256 + r * 4 + j] = v;
          }
      }
    }
  }
}

}  // namespace

void pack_q4_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  pack_q45_k<BlockQ4_K, false>(k, rows, src, dst);
}
void pack_q5_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  pack_q45_k<BlockQ5_K, true>(k, rows, src, dst);
}

void pack_q6_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst) {
  const int64_t nsb = k / kQKK;
  uint8_t q[kQKK];
  for (int64_t s = 0; s < nsb; ++s) {
    uint8_t* sb = dst + s * kPanelRows * 210;
    auto* d = reinterpret_cast<uint16_t*>(sb);
    auto* sc = reinterpret_cast<int8_t*>(sb + 32);
    uint8_t* blocks = sb + 32 + 16 * kPanelRows;
    for (int64_t r = 0; r < rows; ++r) {
      const auto& x = reinterpret_cast<const BlockQ6_K*>(src + r * nsb * int64_t(sizeof(BlockQ6_K)))[s];
      d[r] = x.d;
      for (int j = 0; j < 16; ++j) sc[j * kPanelRows + r] = x.scales[j];
      q6k_codes(x, q);
      for (int b = 0; b < 8; ++b) {
        uint8_t* blk = blocks + b * 384;
        put_nibbles(q + 32 * b, int(r), blk);
        for (int h = 0; h < 2; ++h)
          for (int j = 0; j < 4; ++j) {
            uint8_t v = 0;
            for (int t = 0; t < 4; ++t) v = uint8_t(v | ((q[32 * b + 16 * h + 4 * t + j] >> 4) << (2 * t)));
            blk[256 + (h * kPanelRows + r) * 4 + j] = v;
          }
      }
    }
  }
}

}  // namespace ridge::kernels::detail
