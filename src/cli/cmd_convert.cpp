// ridge convert DIR OUT.gguf [--type T]: a Hugging Face checkpoint directory as GGUF
// (model/hf_checkpoint.h for the mapping).
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/text_file.h"
#include "model/hf_checkpoint.h"
#include "tokenizer/hf_to_gguf.h"
#include "quant/quant.h"

namespace ridge::cli {
int cmd_convert(Args& a) {
  const std::string ts = a.str({"--type"}, "");
  // The weights alone, where the tokenizer is of a kind convert does not write yet.
  const bool no_tokenizer = a.flag({"--no-tokenizer"});
  auto pos = a.positional();
  a.finish();
  if (pos.size() != 2) fail("usage: ridge convert CHECKPOINT_DIR OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|...|fp8] [--no-tokenizer]");
  if (!is_hf_checkpoint_dir(pos[0])) fail("{} is not a Hugging Face checkpoint directory (no config.json)", pos[0]);
  HfConvertOptions o;
  o.fp8_type = DType::Q8_0;  // what llama.cpp reads; --type fp8 keeps FP8 as FP8 (a ridge-only file)
  if (!ts.empty()) {
    const auto t = dtype_from_name(ts);
    if (!t || !quant::can_quantize(*t)) fail("--type '{}' is not a weight type ridge writes (f32, f16, bf16, q8_0, q4_0, ..., fp8)", ts);
    o.type = *t;
  }
  const safetensors::Checkpoint ck(pos[0]);
  const auto w = hf_to_gguf(ck, o);
  const std::filesystem::path dir(pos[0]);
  const bool has_tok = std::filesystem::exists(dir / "tokenizer.json");
  if (has_tok && !no_tokenizer) {
    const auto cfg = dir / "tokenizer_config.json";
    hf_tokenizer_to_gguf(read_text_file((dir / "tokenizer.json").string()), std::filesystem::exists(cfg) ? read_text_file(cfg.string()) : "",
                         ck.require("model.embed_tokens.weight").shape[0], *w);
  }
  w->write(pos[1]);
  std::fprintf(stderr, "wrote %s (%s)\n", pos[1].c_str(),
               has_tok && !no_tokenizer ? "weights, hyperparameters and tokenizer" : "weights and hyperparameters, no tokenizer");
  return 0;
}

}  // namespace ridge::cli
