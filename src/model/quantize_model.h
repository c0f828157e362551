// Rewrites a GGUF with its matrices in another format (ridge quantize).
//
// Which tensors: 2-D (or more) tensors named *weight, except norms, as llama-quantize;
// vectors (norms, biases, rope factors) are copied as they are.
// Plain types (f32 ... q5_1, q4_k, q5_k): every such matrix gets that type. A matrix whose
// rows do not fit the type's block size falls back: the legacy types to f16; q4_k to
// q5_0, q5_k to q5_1 (then f16), as llama-quantize falls back.
// Mixes (q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k): llama-quantize's per-tensor choice
// (llama.cpp src/llama-quant.cpp, llama_tensor_get_type) for dense models of the llama
// family (llama, qwen2, qwen3):
//   output.weight (or token_embd.weight when the output is tied): q6_k (q8_0 when its
//     rows are not a multiple of 256);
//   attn_v: q6_k on the "more bits" layers for q4_k_m / q5_k_m; q5_k on layers 0-3 for
//     q4_k_s; ffn_down: q6_k on the more-bits layers for q4_k_m / q5_k_m; q5_k on the
//     first n_layer/8 layers for q4_k_s; attn_qkv (fused): q5_k for q4_k_m, q6_k for
//     q5_k_m; everything else the mix's base type;
//   more-bits layers: i < n/8, i >= 7n/8, and every third layer in between;
//   rows that fit no K block: q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0, then f16.
// q6_k is both a plain type and a mix; the two agree, so it is one target.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace ridge {

enum class QuantMix { None, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K };

struct QuantTarget {
  std::string name;    // as --type spells it: "q8_0", "q4_k_m"
  DType base;          // the type of most matrices
  QuantMix mix = QuantMix::None;
  uint32_t file_type;  // general.file_type (llama_ftype)
};

// nullopt for a name that is neither a plain type ridge can write nor a known mix.
std::optional<QuantTarget> quant_target_from_name(std::string_view name);
// Every accepted --type name, comma-separated, for messages and usage.
std::string quant_target_names();

// What one tensor becomes. n_dims / ne0: its rank and row length; layer: its block index
// (blk.N.), -1 for none; n_layer: the model's block count; has_output: the file has an
// output.weight (otherwise the token embedding doubles as the output). Returns `type`
// (the tensor's current type) for tensors that are not quantized.
DType quant_tensor_type(const QuantTarget& target, std::string_view name, DType type, int n_dims, int64_t ne0,
                        int layer, int n_layer, bool has_output);

struct QuantizeReport {
  int converted = 0;  // written in the type the rules chose
  int fallback = 0;   // rows fit no block of the chosen type: written in a fallback type
  int kept = 0;       // copied unchanged (vectors, or already of the chosen type)
  std::map<DType, int> types;  // every tensor of the output, by type
};

// keep_layers > 0: only the first keep_layers blocks (blk.N. with N below it) are
// written and block_count says so: a layer-truncated copy, the self-drafting model of
// speculative decoding (LayerSkip's early exit) and the tests' draft of a real model.
QuantizeReport quantize_model(const std::string& in, const std::string& out, const QuantTarget& target,
                              int threads = 0, int keep_layers = 0);
// A plain type; throws ridge::Error for a type ridge cannot write.
QuantizeReport quantize_model(const std::string& in, const std::string& out, DType target, int threads = 0);

}  // namespace ridge
