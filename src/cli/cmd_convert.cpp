// ridge convert DIR OUT.gguf [--type T]: a Hugging Face checkpoint directory as GGUF
// (model/hf_checkpoint.h for the mapping).
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "model/hf_checkpoint.h"
#include "quant/quant.h"

namespace ridge::cli {

int cmd_convert(Args& a) {
  const std::string ts = a.str({"--type"}, "");
  auto pos = a.positional();
  a.finish();
  if (pos.size() != 2) fail("usage: ridge convert CHECKPOINT_DIR OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|...]");
  if (!is_hf_checkpoint_dir(pos[0])) fail("{} is not a Hugging Face checkpoint directory (no config.json)", pos[0]);
  HfConvertOptions o;
  if (!ts.empty()) {
    const auto t = dtype_from_name(ts);
    if (!t || !quant::can_quantize(*t)) fail("--type '{}' is not a weight type ridge writes (f32, f16, bf16, q8_0, q4_0, ...)", ts);
    o.type = *t;
  }
  convert_hf_checkpoint(pos[0], pos[1], o);
  std::fprintf(stderr, "wrote %s (weights and hyperparameters; the tokenizer stays in %s/tokenizer.json)\n",
               pos[1].c_str(), pos[0].c_str());
  return 0;
}

}  // namespace ridge::cli
