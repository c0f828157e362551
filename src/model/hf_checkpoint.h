// Hugging Face checkpoints as they ship: a directory with config.json and model.safetensors
// (or shards and their index), turned into the GGUF llama.cpp's converter would write for
// the same model: its tensor names, its metadata keys, llama's Q/K rows in llama.cpp's
// order (Hugging Face keeps each head's rotary halves apart, llama.cpp interleaves them;
// the rows move whole, so f32/f16/bf16 weights keep their bits). config.json is checked
// against the tensors: a size that disagrees names the tensor and the key.
//
// Matrices keep their dtype (f32, f16, bf16) unless a type is asked for. FP8 (E4M3 codes
// with a scale per 128 x 128 tile, per row or per tensor: the fp8, fbgemm_fp8 and
// compressed-tensors checkpoints) loads as ridge's FP8 weight type, E4M3 codes and scales
// as they are (E5M2 codes are quantized again, to E4M3 blocks; rows that fit no 128-block,
// or a CPU without the FP8 GEMM, get q8_0); llama.cpp has no FP8 type, so `ridge
// convert` writes q8_0 unless told.
// Norms and biases are f32, as llama.cpp writes them.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf/safetensors.h"

namespace ridge {

struct HfConvertOptions {
  std::optional<DType> type;  // the matrices' type; unset: keep, FP8 as fp8_type
  // FP8 matrices when no type is asked for: ridge's FP8 blocks (exact where the scales are
  // constant over 128 columns) for -m DIR; ridge convert writes q8_0 by default, which
  // llama.cpp reads.
  DType fp8_type = DType::F8_E4M3_B128;
};

bool is_hf_checkpoint_dir(const std::string& path);

// The GGUF the checkpoint converts to; its tensors are filled from ck's mapping while it
// is written, so ck must outlive the writer's write().
std::unique_ptr<gguf::Writer> hf_to_gguf(const safetensors::Checkpoint& ck, const HfConvertOptions& o);

// The weights and hyperparameters as GGUF (ridge convert adds the tokenizer:
// tokenizer/hf_to_gguf.h).
void convert_hf_checkpoint(const std::string& dir, const std::string& out, const HfConvertOptions& o);

// -m DIR: the converted GGUF in memory (an anonymous file), parsed as any GGUF.
std::unique_ptr<gguf::File> open_hf_checkpoint(const std::string& dir, const HfConvertOptions& o = {});

}  // namespace ridge
