// ridge quantize IN OUT --type T (see model/quantize_model.h for the rules).
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "model/quantize_model.h"

namespace ridge::cli {

int cmd_quantize(Args& a) {
  const std::string ts = a.str({"--type"}, "");
  const int threads = int(a.integer({"-t", "--threads"}, 0, 0, 1024));
  const int layers = int(a.integer({"--layers"}, 0, 0, 1 << 16));
  auto pos = a.positional();
  a.finish();
  if (pos.size() != 2) fail("usage: ridge quantize IN.gguf OUT.gguf --type TYPE ({})", quant_target_names());
  const auto target = quant_target_from_name(ts);
  if (!target) fail("--type '{}' is not one of {}", ts, quant_target_names());
  const QuantizeReport r = quantize_model(pos[0], pos[1], *target, threads, layers);
  // One line a person (or a test) can check against llama-quantize's choice: how many
  // tensors of each type the file now holds.
  std::string types;
  for (const auto& [t, n] : r.types) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, dtype_name(t));
  std::fprintf(stderr, "wrote %s (%s): %s; %d converted, %d fell back (rows fit no block of the chosen type), %d kept\n",
               pos[1].c_str(), target->name.c_str(), types.c_str(), r.converted, r.fallback, r.kept);
  return 0;
}

}  // namespace ridge::cli
