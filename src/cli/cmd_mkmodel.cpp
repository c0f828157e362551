// ridge mkmodel: a random-weight GGUF of a real model's shape.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "model/mkmodel.h"

namespace ridge::cli {

int cmd_mkmodel(Args& a) {
  MkModelOptions o;
  o.arch = a.str({"--arch"}, "");
  o.preset = a.str({"--preset"}, "tiny");
  const std::string dt = a.str({"--dtype"}, "f32");
  auto t = dtype_from_name(dt);
  if (!t || !(*t == DType::F32 || *t == DType::F16 || *t == DType::BF16 || *t == DType::Q8_0 || *t == DType::Q4_0 ||
              *t == DType::Q4_1 || *t == DType::Q5_0 || *t == DType::Q5_1))
    fail("--dtype {} is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1", dt);
  o.dtype = *t;
  o.seed = uint64_t(a.integer({"--seed"}, 42, 0, INT64_MAX));
  o.vocab_path = a.str({"--vocab"}, "");
  o.layers = int32_t(a.integer({"--layers"}, 0, 0, 4096));
  o.threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  auto out = a.str({"-o", "--output"});
  a.finish();
  if (!out) fail("mkmodel needs -o OUT.gguf");
  make_model(o, *out);
  std::fprintf(stderr, "wrote %s\n", out->c_str());
  return 0;
}

}  // namespace ridge::cli
