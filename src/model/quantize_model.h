// Rewrites a GGUF with its matrices in another format (ridge quantize). Vectors (norms,
// biases) stay as they are; a matrix whose rows do not fit the target's block size falls
// back to f16, as llama-quantize falls back to a type that fits.
#pragma once
#include <string>

#include "core/dtype.h"

namespace ridge {

struct QuantizeReport {
  int converted = 0, kept = 0, fallback = 0;
};

QuantizeReport quantize_model(const std::string& in, const std::string& out, DType target, int threads = 0);

}  // namespace ridge
