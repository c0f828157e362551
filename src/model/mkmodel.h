// Random-weight models of real shapes, written as GGUF: every test and benchmark uses
// them, and users can measure their hardware without downloading anything.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ridge {

struct MkModelOptions {
  std::string arch;            // llama, qwen2, qwen3, phi3, ...; empty: the preset's own
  std::string preset = "tiny"; // tiny, tinyllama-1.1b, llama3.2-1b, qwen2.5-0.5b, qwen3-0.6b, phi-3-mini, ...
  DType dtype = DType::F32;    // matrices; norms and biases stay f32
  uint64_t seed = 42;
  std::string vocab_path;      // copy tokenizer.* from this GGUF; empty: synthetic SPM vocab
  int32_t layers = 0;          // override the preset's layer count (0: keep)
  int threads = 0;
  int32_t ctx = 0;             // override the preset's context length (0: keep)
  int32_t window = 0;          // override a windowed preset's sliding window (0: keep)
};

std::vector<std::string> mkmodel_presets();
// Matrix widths of a preset (for benchmarks of its shapes): query and key/value widths
// are heads x head_dim.
struct PresetDims {
  int64_t n_vocab, n_embd, n_q, n_kv, n_ff;
  int32_t n_head, n_head_kv, head_dim;
  int32_t n_layer = 0, n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int32_t n_lora_kv = 0, rope_dim = 0;  // latent attention (deepseek2): the cache's latent and RoPE key
};
PresetDims preset_dims(const std::string& preset);
// general.file_type (llama_ftype) for a file whose matrices are of type t.
uint32_t gguf_file_type(DType t);
// Throws ridge::Error for an unknown preset/arch/dtype or an unreadable vocab file.
void make_model(const MkModelOptions& opt, const std::string& out_path);

}  // namespace ridge
