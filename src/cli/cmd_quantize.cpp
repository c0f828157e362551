// ridge quantize IN OUT --type T (see model/quantize_model.h for the rules).
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "model/quantize_model.h"

namespace ridge::cli {

int cmd_quantize(Args& a) {
  const std::string ts = a.str({"--type"}, "");
  const int threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  auto pos = a.positional();
  a.finish();
  if (pos.size() != 2) fail("usage: ridge quantize IN.gguf OUT.gguf --type TYPE");
  auto target = dtype_from_name(ts);
  if (!target) fail("--type '{}' is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1", ts);
  const QuantizeReport r = quantize_model(pos[0], pos[1], *target, threads);
  std::fprintf(stderr, "wrote %s: %d matrices converted to %s, %d fell back to f16, %d tensors kept\n", pos[1].c_str(),
               r.converted, std::string(dtype_name(*target)).c_str(), r.fallback, r.kept);
  return 0;
}

}  // namespace ridge::cli
