// The CUDA kernels' launchers, called by the backend (cuda_backend.cpp). Every pointer is
// device memory unless its comment says host; every launch is on the given stream and
// returns at once. The CPU kernels (kernels/cpu/) are each one's reference: the tests in
// tests/unit/test_cuda_backend.cpp run both on the same inputs.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

#ifdef __CUDACC__
#define RIDGE_HD __host__ __device__
#else
#define RIDGE_HD
#endif

namespace ridge::kernels::cuda {

// Decode rows: by default up to this many rows of x run the GEMV (each weight byte read
// once for all of them), more a cuBLAS GEMM; RIDGE_CUDA_GEMM_ROWS moves the line.
inline constexpr int kGemvMaxRows = 8;

// The formats the GEMV and the dequantization read (GGUF blocks, as the model file holds
// them).
bool weight_type_supported(DType t);

// A KVView's addresses on the device (kernels/kv_view.h has the layout). kv_type: F32,
// F16 or BF16.
struct KvDev {
  uint8_t* base = nullptr;
  int32_t n_blocks = 0, n_kv_head = 0, dk = 0, dv = 0, bs = 16;
  int64_t k_head_bytes = 0, v_head_bytes = 0;  // a head's tile
  int64_t k_block_bytes = 0, v_block_bytes = 0;  // all heads' tiles of one block
  DType type = DType::F16;
  RIDGE_HD int64_t layer_bytes() const { return int64_t(n_blocks) * (k_block_bytes + v_block_bytes); }
};

// The step's token rows and block tables on the device (Backend::begin_step).
struct StepDev {
  const int32_t* tokens = nullptr;   // [T]
  const int32_t* seq = nullptr;      // [T]
  const int32_t* pos = nullptr;      // [T]
  const int32_t* tab_off = nullptr;  // [seqs + 1] where each sequence's table starts in tab
  const int32_t* tab = nullptr;      // the tables back to back
  int32_t T = 0;
};

struct RopeDev {
  int32_t rope_dim = 0;
  float freq_base = 10000.f, freq_scale = 1.f, attn_factor = 1.f;
  bool neox = false;
  const float* freq_factors = nullptr;  // [rope_dim / 2] or null
};

struct QkvDev {
  float *q = nullptr, *k = nullptr, *v = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  int32_t n_head = 0, n_kv_head = 0, dk = 0, dv = 0, layer = 0;
  float eps = 0;
  RopeDev rope;
  KvDev kv;
  StepDev step;
};

struct AttnDev {
  const float* q = nullptr;  // [T][n_head * dk]
  float* out = nullptr;      // [T][n_head * dv]
  int32_t n_head = 0, n_kv_head = 0, dk = 0, dv = 0, layer = 0, window = 0;
  float scale = 1.f;
  const float* sinks = nullptr;  // [n_head] or null
  KvDev kv;
  StepDev step;
  int32_t max_pos = 0;  // the step's largest position (sizes the split)
  int32_t n_sm = 132;
  int32_t max_smem = 48 << 10;  // shared memory a block may opt in to (bytes)
};

// The tensor-core kernel for prompts (attention_tc.cu): the tokens of a query tile where
// it runs a's shape (f16/bf16 cache, dk == dv of 64, 96, 128 or 256, the group dividing
// 64), else 0. tiles: [n_tiles][2] (first step token, tokens), each tile's tokens one
// sequence's, consecutive.
int attention_tc_tokens(const AttnDev& a);
void attention_tc(const AttnDev& a, const int32_t* tiles, int n_tiles, cudaStream_t s);
// Scratch floats attention needs for a step of T tokens (its split partials).
int64_t attention_scratch_floats(const AttnDev& a);
void attention(const AttnDev& a, float* scratch, cudaStream_t s);
void qkv_rope(const QkvDev& a, cudaStream_t s);
// Every step token's K and V of heads [0, n_heads) into its slot (qkv_rope's write alone).
void kv_write(const KvDev& kv, const StepDev& st, int32_t layer, int32_t n_heads, const float* k, const float* v,
              cudaStream_t s);
// k[T][n_kv_head * dk]: each step token's cached K at its (sequence, position).
void kv_read(const KvDev& kv, const StepDev& st, int32_t layer, float* k, cudaStream_t s);

// x[T][n] = row tokens[t] of the table (rows of row_bytes in type t).
void embed(DType t, const uint8_t* table, int64_t row_bytes, int64_t n, const int32_t* tokens, int64_t T, float* x,
           cudaStream_t s);
// y[i] = norm(x[rows ? rows[i] : i]) * w (+ b), i < m; layer norm where b is given or
// layer is set.
void rms_norm(const float* x, const int32_t* rows, const float* w, float* y, int64_t m, int64_t n, float eps,
              cudaStream_t s);
void layer_norm(const float* x, const int32_t* rows, const float* w, const float* b, float* y, int64_t m, int64_t n,
                float eps, cudaStream_t s);
void add(float* x, const float* y, int64_t n, cudaStream_t s);
void add_bias(float* x, const float* b, int64_t m, int64_t n, cudaStream_t s);
enum class Act { SwiGlu, SwiGluOai, Gelu, GeGlu };
// out[n] = act(a) (* b for the gated ones).
void activation(Act act, const float* a, const float* b, float* out, int64_t n, cudaStream_t s);
void scale(float* x, float f, int64_t n, cudaStream_t s);
void softcap(float* x, float c, int64_t n, cudaStream_t s);
void copy_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t m, int64_t n, cudaStream_t s);
void gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t n, float* y, cudaStream_t s);

// The dense GEMV's launch shape: warps (rows) per block, 16-byte loads in flight per
// lane. Candidates: (8, 4) the default, (4, 4), (4, 8), (8, 8), (2, 8); RIDGE_CUDA_GEMV
// "rows,unroll" picks one (the device check times them).
struct GemvShape {
  int rows = 8, unroll = 4;
};
// y[m][n_out] = x[m][k] . W^T, W [n_out] rows of row_bytes; any m (8 rows a pass).
void gemv(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, const float* x, int64_t m, float* y,
          GemvShape g, cudaStream_t s);
// out[n_out][k] = W in bf16 (the GEMM's operand).
void dequant_bf16(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_out, int64_t k, uint16_t* out,
                  cudaStream_t s);
void f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);
void f32_to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);
// out[t][n] = the sum over j < k, in order, of w[t][j] * y[idx[t][j]][n] (idx, w [m][k]).
void moe_combine(const float* y, const int32_t* idx, const float* w, int64_t m, int32_t k, int64_t n, float* out,
                 cudaStream_t s);

}  // namespace ridge::kernels::cuda
