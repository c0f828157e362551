// Pieces shared by the commands: which model to load, the engine flags, peak memory.
#pragma once
#include <string>

#include "cli/args.h"
#include "engine/generator.h"
#include "engine/sampler.h"

namespace ridge::cli {

// --model / -m, else $RIDGE_MODEL, else the first *.gguf (by name) in ./models.
std::string resolve_model(Args& a);
// -t/--threads, --kv-type, --block-size, --batch-size.
GenOptions gen_options(Args& a);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --seed (default: from the clock, printed).
SamplingParams sampling_params(Args& a, bool* seed_given = nullptr);
double peak_rss_mib();

}  // namespace ridge::cli
