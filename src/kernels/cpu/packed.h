// Weights repacked at load time into 16-row panels, the layout the AVX-512 GEMM reads.
//
// Why: a row-at-a-time dot reduces each 32-element block horizontally and pays per-block
// scale work per (row, activation row) pair. In a panel, the 16 rows of a block sit side
// by side so that one zmm holds the same 4 (int8) or 1 (float) columns of 16 rows: every
// vector lane is one output row, no horizontal reduction is ever needed, and one weight
// load feeds every activation row of the tile. A lane's arithmetic is the same whatever
// the number of activation rows or panels in the call, which keeps batch invariance.
//
// Panel layouts (panel p covers rows 16p .. 16p+15; rows past n_out are zero):
//   F32:  [k][16] f32                     (64 B per column)
//   F16:  [k][16] f16 bits                (32 B per column)
//   BF16: [k][16] bf16 bits               (32 B per column)
//   Q8_0: per block b: d[16] f16, then 8 groups g of [16 rows][4 bytes] holding
//         (q + 128) for elements 4g .. 4g+3 (u8, the unsigned side of vpdpbusd)
//         -> 32 + 512 = 544 B per block = 16 x 34, the GGUF size
//   Q4_0: per block b: d[16] f16, then 4 groups g of [16 rows][4 bytes] holding the GGUF
//         bytes qs[4g .. 4g+3]: low nibbles are elements 4g.., high nibbles 16+4g..
//         -> 32 + 256 = 288 B per block = 16 x 18, the GGUF size
//   Q4_1, Q5_0, Q5_1: Q4_0's, with m[16] f16 after d (the _1 types) and a vector of
//         fifth bits after the nibbles (the Q5 types; packed.cpp): the GGUF sizes
//   Q4_K, Q5_K, Q6_K: super-blocks of 16 rows, see packed_kquant.cpp (Q6_K: the GGUF
//         size; Q4_K, Q5_K: +4 bytes per 144 / 176 for unpacked sub-block scales)
//   FP8 (F8_E4M3_B128): per 128-block b: d[16] f32, then the E4M3 codes of its 128
//         columns x 16 rows -> 64 + 2048 = 2112 B per block = 16 x 132, the row size.
//         The codes' order is the FP8 path's (core/cpu.h fp8_path): f16c [column][row]; bf16 per
//         4 columns 4c.. a 64-byte group, byte 16 L + t = row 4 L + (t % 8) / 2, column
//         4c + t % 2 + 2 (t / 8), which two byte unpacks turn into vdpbf16ps's
//         [row][column pair] words (gemm_avx512.cpp)
//   MXFP4: per block b: e[16] (the rows' E8M0 scale bytes), then Q4_0's nibble groups
//         -> 16 + 256 = 272 B per block = 16 x 17, the GGUF size (AVX-512 only)
// Same bytes as the file (but Q4_K's +2.8%), so decode streams the GGUF's weight bytes.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"

namespace ridge::kernels {

inline constexpr int kPanelRows = 16;

// Types with a panel layout (the others run through the per-row dots).
bool can_pack(DType t);
// Bytes of one panel (16 rows x k) and of the whole packed matrix.
int64_t panel_bytes(DType t, int64_t k);
int64_t packed_bytes(DType t, int64_t k, int64_t n_out);
// src: n_out GGUF rows of k elements -> dst: packed_bytes(t, k, n_out) bytes.
// Panels [p0, p1) only, so that packing can be split over threads. fp8_bf16: FP8 in the
// bf16 path's layout; the WeightView of the panels must say the same (its fp8_bf16), as
// the GEMM reads them by it.
void pack_panels(DType t, int64_t k, int64_t n_out, const uint8_t* src, uint8_t* dst, int64_t p0, int64_t p1,
                 bool fp8_bf16 = false);

}  // namespace ridge::kernels
