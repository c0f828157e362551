// Pieces shared by the commands: which model to load, the engine flags, peak memory.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "gguf/gguf.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ridge::cli {

// --model / -m, else $RIDGE_MODEL, else the first *.gguf (by name) in ./models.
std::string resolve_model(Args& a);
// The model's tokenizer: the GGUF's, or a checkpoint directory's tokenizer.json (with its
// tokenizer_config.json); checked against the model's vocabulary.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_path, const Model& m);
// A vocabulary alone: --tokenizer-json FILE, else the GGUF that -m names (whole or
// vocabulary-only), whose file stays open beside its tokenizer.
struct Vocabulary {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};
Vocabulary load_vocabulary(Args& a);
// --config FILE: the flags in a JSON file, under the command line's (a flag given on the
// command line wins, whichever alias). The file is an object of flags by their long names
// without the dashes ("max-num-seqs": 64, "kv-cache-dtype": "int8", "no-prefix-cache":
// true; '_' may stand for '-'), or an object whose "flags" member is one (what `ridge
// tune --output` writes; its other members are the tuning's record). A key no option of
// the command reads is an error naming the file.
void apply_config_file(Args& a);
// The same for a file named by another flag (`ridge tune --check FILE`).
void apply_config_file(Args& a, const std::string& path, const char* flag);
// The engine flags, one vocabulary for every command that runs the model (generate,
// serve, bench throughput, perplexity, roofline): -t, --kv-cache-dtype (alias --kv-type),
// --block-size, --max-num-seqs, --max-num-batched-tokens (alias -b, --batch-size),
// --kv-cache-memory, --mem-fraction, --no-prefix-cache, --preemption-mode, --swap-space,
// --swap-dir, --priority-aging, --mlock.
EngineConfig engine_config(Args& a);
// The same flags over c's own defaults (GenOptions keeps its smaller token budget).
void engine_config(Args& a, EngineConfig& c);
// The subset that shapes the forward alone: -t, --kv-cache-dtype, --block-size and
// --max-num-batched-tokens. perplexity (no engine) and roofline (which sets the
// scheduling and the pool for each batch size itself) take these, so a scheduling flag
// there is an unknown flag, not one silently ignored.
void forward_config(Args& a, EngineConfig& c);
// The kernel cache (tools/kernel_cache.h): kernel_flags reads --kernel-cache DIR|off and
// --no-kernel-autotune (forward_config calls it); prepare_kernels, called by each command
// after its flags are checked and before any weights are packed, applies this CPU's entry,
// or where it has none times the kernels once (tools/kernel_tune.h, the quick profile)
// and saves them. A cache that cannot be used is a warning, never an error.
void kernel_flags(Args& a, int threads);
void prepare_kernels();
// A split model's worker's: the cache in rank 0's directory (its --kernel-cache, else
// $RIDGE_KERNEL_CACHE or the default as rank 0 saw them; "": none), never a tuning run of
// its own (rank 0 tunes, before it sends the setup).
void prepare_kernels_worker(const std::string& dir);
// The model for a run on c.device: the CPU's kernels prepared and the weights repacked
// into their panels; for CUDA neither (the device reads the GGUF rows).
std::unique_ptr<Model> load_model_for(const std::string& path, const EngineConfig& c);
// The non-empty lines of a prompts file (one prompt per line); fails naming `flag` when
// the file cannot be read or has none.
std::vector<std::string> read_prompt_lines(const std::string& path, const char* flag);
// Parses "512M", "2G", "1.5GiB", "1000000" into bytes.
int64_t parse_bytes(const std::string& s, const char* flag);
// --kv-cache-dtype (alias --kv-type): auto (f16), f32, f16, bf16, int8, fp8 (e4m3), fp8_e5m2.
DType kv_type_flag(Args& a);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --seed (default: from the clock, printed).
SamplingParams sampling_params(Args& a, bool* seed_given = nullptr);
double peak_rss_mib();
// One line on stderr, as vLLM logs at start: the weights' resident bytes (panels, what
// is still read from the mapped file, f32 vectors), the KV pool and the activations.
void print_memory_budget(const char* cmd, const Model& m, const Engine& e);
// "a,b,,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s);

}  // namespace ridge::cli
