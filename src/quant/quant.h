// Block formats of GGUF, bit-exact: pack (quantize), unpack (dequantize) and the dot of a
// weight row with an activation row. Every path has a scalar reference; AVX2 / AVX-512
// paths are chosen at run time (core/cpu.h) and tested against it.
//
// Dot contract: the weight row is in its stored format; the activation row is in the
// form act_kind(type) says: plain f32 for f32/f16/bf16 weights, and BlockQ8A (8-bit
// blocks of 32 with an f32 scale) for every quantized type, so that the inner loop is an
// integer dot. A dot's value depends only on its two rows (never on other rows or on
// threads): the batch-invariance contract of the kernels rests on it.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"

namespace ridge::quant {

// Activation block: 32 int8 values x d; s = d * sum(qs) (the Q4_1/Q5_1/K-quant min terms
// need it). Not a GGUF type: it lives only in scratch memory.
struct BlockQ8A {
  float d;
  float s;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8A) == 40);

enum class ActKind { F32, Q8A };
ActKind act_kind(DType t);

// Bytes the activation form of an n-element row takes (n % 32 == 0 for Q8A).
int64_t act_row_bytes(DType weight_type, int64_t n);

// x[n] -> y[n/32]: d = max|x| / 127, q = round(x / d).
void quantize_act_q8a(const float* x, BlockQ8A* y, int64_t n);
// Converts an f32 activation row into the form the dot of weight type t reads.
void prepare_act(DType t, const float* x, void* act, int64_t n);

// Blocks in a row of n elements of type t; throws ridge::Error when n is not a whole
// number of blocks.
int64_t whole_blocks(DType t, int64_t n);

// An MXFP4 block's scale, 2^(e - 128) (BlockMxfp4), as ggml's e8m0_to_fp32_half: e < 2 are
// its denormals. The OCP NaN code 0xFF reads as 2^127 here; loading refuses it.
float mxfp4_scale(uint8_t e);

// Weight rows (GGUF layouts). n must be a multiple of the type's block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Implemented for f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k; other
// types throw ridge::Error naming the type.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
bool can_quantize(DType t);
// The K-type part of quantize_row (quantize_kquant.cpp): nb super-blocks of 256.
void quantize_row_k(DType t, const float* src, void* dst, int64_t nb);

using DotFn = float (*)(const void* w, const void* act, int64_t n);
// The dot for weight type t on the given path (falls back to a slower path when no
// SIMD version exists for t); throws ridge::Error for a type ridge cannot compute with.
DotFn dot_fn(DType t, Isa isa);
inline DotFn dot_fn(DType t) { return dot_fn(t, active_isa()); }

}  // namespace ridge::quant
