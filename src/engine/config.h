// The engine's one configuration vocabulary (vLLM's names where vLLM has the knob).
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/mla_form.h"

namespace ridge {

enum class PreemptionMode { Recompute, Swap, Auto };

// Speculative decoding (engine/proposer.h): who proposes, and how far ahead. Ngram:
// prompt lookup in the sequence itself; Suffix: the text of all recent requests
// (suffix_proposer.h); Draft: a draft model (draft_proposer.h). External: the proposer
// a driver hands the engine (Engine::set_proposer; the benches' replay of a known
// continuation).
enum class SpecMethod { None, Ngram, Suffix, Draft, External };
const char* spec_method_name(SpecMethod m);
struct SpeculativeConfig {
  SpecMethod method = SpecMethod::None;
  int32_t num_speculative_tokens = 4;  // the most tokens proposed per sequence and step
  int32_t prompt_lookup_min = 2, prompt_lookup_max = 4;  // n-gram lengths tried, longest first
  // Each step runs the proposed tokens worth their rows (SpecPolicy: measured acceptance
  // and step costs); false: all of every proposal, up to num_speculative_tokens.
  bool adaptive = true;
  // The engine's, not a request's: the draft model's GGUF (Draft needs one), and the
  // suffix store's bound and confidence floor.
  std::string draft_model;
  int64_t suffix_cache_tokens = int64_t(1) << 20;
  double suffix_min_token_prob = 0.1;

  static SpeculativeConfig make(SpecMethod m, int32_t k, int32_t lookup_min, int32_t lookup_max, bool adaptive) {
    SpeculativeConfig c;
    c.method = m;
    c.num_speculative_tokens = k;
    c.prompt_lookup_min = lookup_min;
    c.prompt_lookup_max = lookup_max;
    c.adaptive = adaptive;
    return c;
  }
};

// Where the forward runs (engine/model_runner.cpp chooses the backend).
enum class Device { Cpu, Cuda };

struct EngineConfig {
  Device device = Device::Cpu;      // --device: cuda puts the weights, KV pool and activations on the GPU
  // Processes the model is split over (Megatron's tensor parallelism over MPI: the world
  // mpirun starts, model/tp_shard.h); 1: this process alone.
  int32_t tensor_parallel_size = 1;
  // Pipeline stages the layers are cut into, one process each (model/tp_shard.h PpStage).
  int32_t pipeline_parallel_size = 1;
  // Under tensor parallelism, a mixture of experts' experts go whole to the ranks (each
  // rank all the hidden units of its experts) instead of each expert cut over all ranks.
  bool expert_parallel = false;
  // The kernel cache directory the command reads ("": none), which a split model's other
  // ranks read too (engine/tp_worker.h).
  std::string kernel_cache;
  int threads = 0;                  // 0: all cores
  DType kv_dtype = DType::F16;
  int32_t block_size = 16;
  int64_t kv_cache_bytes = 0;       // KV pool size; 0: mem_fraction of the RAM left after weights
  int64_t kv_cache_tokens = 0;      // > 0: the pool holds this many tokens (the draft model's too); overrides bytes
  double mem_fraction = 0.5;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  bool prefix_cache = true;
  // Window layers keep every position's K/V, as global layers do (llama.cpp's --swa-full):
  // more memory, nothing dropped. Off: a window layer's KV is bounded by its window.
  bool swa_full = false;
  PreemptionMode preemption = PreemptionMode::Recompute;
  int64_t swap_bytes = 0;           // swap space for preempted KV (0: none)
  std::string swap_dir = "/tmp";
  std::string swap_faults;          // injected swap I/O faults (tests; see SwapFaults)
  int32_t aging_steps = 256;
  bool mlock = false;               // pin the mmap'd weights in RAM
  SpeculativeConfig speculative;    // the default of requests that do not choose
  bool jump_forward = true;         // structured output: run a grammar's forced spans as drafts
  MlaPrefill mla_prefill = MlaPrefill::Auto;  // latent attention: the form prompts run in (mla_form.h)
};

}  // namespace ridge
