// `ridge roofline`: runs prefill and decode through the engine at each batch size with
// per-op timing on, and returns the measurement the report analyzes (roofline_report.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
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
  // The engine flags (threads, token budget, KV dtype and block size, ...); each batch
  // size runs with max_num_seqs = the batch, no prefix cache and a pool just large enough.
  EngineConfig engine;
  uint64_t seed = 1;               // prompt token ids
  std::string model_name;          // for the report
};

// Throws ridge::Error for impossible options (a batch or prompt < 1, a prompt beyond the
// model's context).
RooflineRun measure_roofline(const Model& m, const Tokenizer* tok, const Peaks& peaks, const RooflineOptions& o);

}  // namespace ridge::tools
