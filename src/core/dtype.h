// Tensor element types. The numeric values are GGUF's (ggml_type) so that a type read
// from a file maps directly; block_size x type_size describe GGUF's on-disk layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ridge {

enum class DType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
  // OCP MX FP4 as ggml stores it (quant/blocks.h BlockMxfp4): 32 E2M1 codes, an E8M0 scale.
  MXFP4 = 39,
  // ridge's own, not GGUF's (GGUF has no 8-bit float): OCP FP8 (quant/fp8.h). The KV
  // cache stores I8 and these with a scale per token and head (kernels/kv_view.h).
  F8_E4M3 = 1000, F8_E5M2 = 1001,
  // ridge's FP8 weight format (quant/blocks.h BlockFp8): E4M3 codes in blocks of 128
  // along a row, each block with an f32 scale. The one ridge type a GGUF file may hold
  // (`ridge quantize --type fp8`, `ridge convert --type fp8`); llama.cpp cannot read it.
  F8_E4M3_B128 = 1002,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
  bool supported;      // ridge can compute with it (dequantize + dot)
};

// The KV cache's 8-bit dtypes, stored as codes with a scale per position and head
// (kernels/kv_view.h).
constexpr bool is_scaled_kv_dtype(DType t) { return t == DType::I8 || t == DType::F8_E4M3 || t == DType::F8_E5M2; }

// nullopt for a value GGUF does not define (or one ridge does not know): ridge's own
// types are never read from a file.
std::optional<DTypeInfo> dtype_info(uint32_t raw);
const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // "q8_0", "f16", ...

// Bytes of a row of n elements; n must be a multiple of the block size.
inline int64_t row_bytes(DType t, int64_t n) {
  const auto& i = dtype_info(t);
  return n / i.block_size * i.type_size;
}

}  // namespace ridge
