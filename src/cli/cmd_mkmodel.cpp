// ridge mkmodel: a random-weight GGUF of a real model's shape (--vocab: a GGUF's vocabulary,
// or a tokenizer.json's).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "core/text_file.h"
#include "gguf/gguf_writer.h"
#include "model/mkmodel.h"
#include "tokenizer/hf_to_gguf.h"
#include "tokenizer/hf_tokenizer.h"

namespace ridge::cli {
int cmd_mkmodel(Args& a) {
  MkModelOptions o;
  o.arch = a.str({"--arch"}, "");
  o.preset = a.str({"--preset"}, "tiny");
  const std::string dt = a.str({"--dtype"}, "f32");
  auto t = dtype_from_name(dt);
  if (!t || !(*t == DType::F32 || *t == DType::F16 || *t == DType::BF16 || *t == DType::Q8_0 || *t == DType::Q4_0 ||
              *t == DType::Q4_1 || *t == DType::Q5_0 || *t == DType::Q5_1 || *t == DType::MXFP4))
    fail("--dtype {} is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4", dt);
  o.dtype = *t;
  o.seed = uint64_t(a.integer({"--seed"}, 42, 0, INT64_MAX));
  o.vocab_path = a.str({"--vocab"}, "");
  o.layers = int32_t(a.integer({"--layers"}, 0, 0, 4096));
  o.ctx = int32_t(a.integer({"--ctx"}, 0, 0, 1 << 24));
  o.window = int32_t(a.integer({"--window"}, 0, 0, 1 << 24));
  o.threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  auto out = a.str({"-o", "--output"});
  a.finish();
  if (!out) fail("mkmodel needs -o OUT.gguf");
  // A Hugging Face tokenizer.json (with the tokenizer_config.json beside it): written as
  // ridge convert writes it, into a vocabulary file mkmodel copies from.
  std::string tmp_vocab;
  if (o.vocab_path.size() > 5 && o.vocab_path.ends_with(".json")) {
    const std::filesystem::path j(o.vocab_path), cfg = j.parent_path() / "tokenizer_config.json";
    const std::string tj = read_text_file(j.string()), tc = std::filesystem::exists(cfg) ? read_text_file(cfg.string()) : "";
    gguf::Writer w;
    hf_tokenizer_to_gguf(tj, tc, load_hf_tokenizer(tj, tc)->n_vocab(), w);
    tmp_vocab = *out + ".vocab.tmp";
    w.write(tmp_vocab);
    o.vocab_path = tmp_vocab;
  }
  try {
    make_model(o, *out);
  } catch (...) {
    if (!tmp_vocab.empty()) std::filesystem::remove(tmp_vocab);
    throw;
  }
  if (!tmp_vocab.empty()) std::filesystem::remove(tmp_vocab);
  std::fprintf(stderr, "wrote %s\n", out->c_str());
  return 0;
}

}  // namespace ridge::cli
