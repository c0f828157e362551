// GGUF block layouts, byte for byte as ggml writes them (ggml-common.h), so that a tensor
// read from a file can be cast to an array of these. f16 fields are raw IEEE half bits
// (uint16_t) so that the structs stay trivially copyable and no half type is needed.
//
// This header holds only data: no inline functions. It is included by the *_avx2.cpp /
// *_avx512.cpp files, and an inline function compiled there with ISA flags could be the
// copy the linker keeps for baseline callers too.
#pragma once
#include <cstdint>

namespace ridge::quant {

inline constexpr int kQK = 32;    // elements per block of the legacy formats (and of Q8A)
inline constexpr int kQKK = 256;  // elements per K-quant super-block
inline constexpr int kKScaleBytes = 12;  // 8 x (6-bit scale, 6-bit min) packed

// value = d * (q - 8); element j < 16 is the low nibble of qs[j], element j + 16 the high.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// OCP MX FP4 (ggml's block_mxfp4, gpt-oss's expert weights): value = kMxfp4Values[code] x
// 2^(e - 128), codes as Q4_0's nibbles (element j < 16 the low nibble of qs[j], j + 16 the
// high). The table holds E2M1's values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives, times 2) so that they are integers; the scale is halved to match: an E8M0
// byte e is 2^(e - 127), halved 2^(e - 128). e = 0xFF is NaN in the OCP format: ridge
// refuses a file that holds one (model/arch.cpp).
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockMxfp4) == 17);
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr uint8_t kMxfp4NanScale = 0xFF;

// value = d * q + m, nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// value = d * (q - 16), q = nibble | (bit j of qh (little-endian u32) << 4) for element j.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// value = d * q + m, 5-bit q as in Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// value = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

// ridge's FP8 weights (DType::F8_E4M3_B128): value = d * e4m3(qs[j]) (quant/fp8.h), one
// block per 128 elements of a row. 128 is the block of the FP8 checkpoints (their
// 128 x 128 scale tiles repeat per row here; per-channel and per-tensor scales repeat per
// block), so each loads exactly; the f32 d keeps the checkpoints' f32 scales exact.
inline constexpr int kQF8 = 128;
struct BlockFp8 {
  float d;
  uint8_t qs[kQF8];
};
static_assert(sizeof(BlockFp8) == 132);

// 8 sub-blocks of 32: value = d * sc[j] * q - dmin * m[j], sc/m 6-bit (get_scale_min_k4).
// Element e: chunk c = e / 64 holds qs[32c .. 32c+31]; low nibbles are elements
// 64c .. 64c+31, high nibbles 64c+32 .. 64c+63; sub-block j = e / 32.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// As Q4_K plus a 5th bit: element e's bit is bit (e / 32) of qh[e % 32].
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 sub-blocks of 16: value = d * scales[e / 16] * (q - 32), q 6-bit: 4 low bits in ql,
// 2 high bits in qh. Each half h (128 elements) uses ql[64h ..], qh[32h ..]; within a half,
// element r = 32g + l takes ql[l + 32 * (g & 1)] (low nibble for g < 2, high otherwise)
// and bits 2g, 2g+1 of qh[l].
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace ridge::quant
