// `ridge roofline`: runs prefill and decode through the engine at each batch size with
// per-op timing on, and returns the measurement the report analyzes (roofline_report.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/roofline_report.h"

namespace ridge {
class Model;
class Tokenizer;
}

namespace ridge::tools {

struct RooflineOptions {
  std::vector<int32_t> batches{1, 4, 16, 64};
  int32_t prompt = 512;            // prompt tokens per sequence (the prefill phase)
  int32_t decode_steps = 16;       // decode steps measured per batch size
  int threads = 0;                 // 0: all cores
  int32_t max_batched_tokens = 2048;  // tokens per prefill step (longer prompts are chunked)
  uint64_t seed = 1;               // prompt token ids
  std::string model_name;          // for the report
};

// Throws ridge::Error for impossible options (a batch or prompt < 1, a prompt beyond the
// model's context).
RooflineRun measure_roofline(const Model& m, const Tokenizer* tok, const Peaks& peaks, const RooflineOptions& o);

}  // namespace ridge::tools
