// GEMM over packed panels (packed.h): y = x · W^T for any number of activation rows m.
//
// One micro-kernel shape serves decode and prefill: a tile of MR activation rows x NP
// panels (16 output rows each) keeps MR x NP accumulators in registers, every lane one
// (activation row, output row) pair. Small m streams the weights once with NP panels in
// flight; large m reuses each loaded weight vector for MR rows. Because a lane's sequence
// of operations never depends on MR, NP, m or the thread that ran it, a row's result is
// bit for bit the same in a batch of 1 and of 512 (the engine's batch invariance).
//
// Summation order per output element (fixed, documented because tests pin it):
//   float weights: columns in chunks of kGemmKc, each chunk a sequential FMA chain from 0,
//                  chunks added in order into the output;
//   FP8 weights:   per 128-block a chain from 0, then acc = fma(chain, d, acc) over
//                  blocks in order. f16c path: the chain is a sequential FMA of the codes'
//                  kernel form (x 2^-8, quant/fp8.h; d x 2^8 then) with the f32
//                  activations (quant's dot_fp8 gives the same bits); bf16 path: a
//                  vdpbf16ps chain over column pairs (2j, 2j + 1) of the codes (exact
//                  in bf16) with the activations rounded to bf16 (nearest even);
//   int8 weights:  per 32-block an exact int32 sum (vpdpbusd), then
//                  acc = fma(float(isum), d_w * d_a, acc) over blocks in order.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace ridge::kernels {

inline constexpr int64_t kGemmKc = 256;

// Activation block of the integer GEMM: BlockQ8A's values with the integer sums of the
// codes of each half (the offset correction of the unsigned weight side needs them
// exactly; Q6_K's 16-element sub-blocks need the halves).
struct ActQ8 {
  float d;
  int16_t sum16[2];  // sums of qs[0..15] and qs[16..31]
  int8_t qs[32];
  int32_t sum() const { return int32_t(sum16[0]) + sum16[1]; }
};
static_assert(sizeof(ActQ8) == 40);

// Same rounding as quant::quantize_act_q8a (d = amax / 127, codes by lrintf); the
// AVX-512 and AVX2 versions (used when that path is active) give the same bits.
void quantize_act_gemm(const float* x, ActQ8* y, int64_t n);

// Whether the packed path runs for weight type t on the active ISA, and whether it runs
// on the AVX2 kernels (the AVX2 path: a CPU without AVX-512 VNNI, or RIDGE_ISA=avx2).
bool gemm_available(DType t);
bool gemm_on_avx2(DType t);

// Rows [0, m) x output panels [p0, p1) of y (row stride ldy; columns past n_out are not
// written). act: f32 rows [m][k] (stride lda floats) for float and FP8 weights, ActQ8 rows
// (stride lda blocks) for Q8_0 / Q4_0.
struct GemmArgs {
  DType type;
  const uint8_t* packed;
  int64_t k, n_out;
  const void* act;
  int64_t lda;
  float* y;
  int64_t ldy;
  // The call's weights come from DRAM and are shared by few rows (a decode batch): the
  // reduction runs in L1-sized passes with the next pass prefetched (gemm_avx512.cpp).
  // Otherwise (prefill) every row tile reduces in one pass over weights kept in L2. The
  // order changes no bit of the result.
  bool stream = false;
  // FP8 weights on the bf16 path (core/cpu.h fp8_path): act holds bf16 rows [m][k] (stride
  // lda elements), the panels that path's layout.
  bool fp8_bf16 = false;
  // The call's tuned parameters (tuning.h), none of which changes a bit of y: bytes the
  // weight streams are prefetched ahead (decode's or a decode batch's distance), weight
  // streams (panels) a decode or decode-batch kernel reads at once (2 or 4; the float
  // types' batches run passes, 2 panels), a 32-block decode batch's row tiles
  // (even, or 4s and the rest), and the rows of a prefill register tile.
  int64_t ahead = 1024;
  int32_t streams = 4;
  bool even_tiles = true;
  int32_t tile_rows = 4;  // rows of a register tile where rows share the weights: 4, 6 or 8
  // F16, BF16 and FP8 (f16c path) prefill (not stream): each kGemmKc columns (FP8: each
  // 128-block) of a panel pair converted to f32 once for all the row tiles, or by each
  // tile as it loads them. (A decode batch's weights come from DRAM: converting first
  // stalls on them, where the tiles' loads overlap the stream with their FMAs, and
  // measured slower.)
  bool convert_once = false;
};
void gemm_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1);

// The 32-block formats run their integer dots on AMX tiles (gemm_amx.cpp, where
// core/cpu.h amx_active()) in calls of at least this many rows; same bits either way.
int64_t amx_min_rows(DType t);
void set_amx_min_rows(int64_t rows);  // tests: every type from `rows` (at least 2; 0: the defaults)
// Whether a gemm_panels call of `rows` activation rows of type t runs on the tiles.
bool gemm_on_amx(DType t, int64_t rows);
// The most activation rows Matmul gives one gemm_panels call (its row chunk).
inline constexpr int64_t kGemmRowChunk = 48;

namespace detail {
void gemm_panels_avx512(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
void quantize_act_gemm_avx512(const float* x, ActQ8* y, int64_t n);
void round_bf16_avx512(const float* x, uint16_t* y, int64_t n);  // core/fp16.h f32_to_bf16's bits
bool gemm_avx2_has(DType t);  // every packed type but FP8
void gemm_panels_avx2(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
void quantize_act_gemm_avx2(const float* x, ActQ8* y, int64_t n);
bool gemm_amx_has(DType t);  // the 32-block formats (gemm_amx.cpp)
void gemm_panels_amx(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
}

}  // namespace ridge::kernels
