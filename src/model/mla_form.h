// Which form of multi-head latent attention a sequence's prompt runs in (the model's
// forward runs both: forward_mla.cpp, forward_mla_expand.cpp). Decode rows always run
// absorbed; a prompt's positions run expanded when the roofline says its chunks do less
// work that way: per layer, the absorbed form's per-row absorption (attn_k_b, attn_v_b)
// and latent-space attention against the expanded form's decompression of every cached
// position per chunk (attn_kv_b) and multi-head attention, each op's FLOPs over the roof
// of the kernel class that runs it. The choice is made once per sequence, from the model,
// the cache dtype and the prompt's length alone (chunks assumed of kMlaNominalChunk
// tokens, the engine's default budget, whatever the engine's is): a token's result never
// depends on a step's batch, nor on the engine's chunk budget.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "model/hparams.h"

namespace ridge {

class Model;

enum class MlaPrefill : uint8_t { Auto, Absorbed, Expanded };
const char* mla_prefill_name(MlaPrefill m);

// The types the two forms' ops run on: attn_k_b, attn_v_b, the transposed attn_k_b the
// model makes (Model::derive_weights), and the KV cache.
struct MlaTypes {
  DType k_b = DType::F32, v_b = DType::F32, k_b_t = DType::F32, kv = DType::F16;
};

// The types of a loaded model's latent attention (its first layer's) with cache dtype kv.
MlaTypes mla_types(const Model& m, DType kv);

// One layer's estimated seconds per unit of fp32 FMA throughput for a prompt of n_prompt
// tokens run in chunks of `chunk`: the ops that differ between the forms only.
struct MlaFormCost {
  double absorbed = 0, expanded = 0;
};
MlaFormCost mla_form_cost(const HParams& h, const MlaTypes& t, int32_t n_prompt, int32_t chunk);

constexpr int32_t kMlaNominalChunk = 2048;

// The dtype the expanded form keeps a head group's decompressed keys and values in (its
// scratch cache, forward_mla_expand.cpp): a BF16 cache's in BF16, rounded as the cache
// rounds its own keys and values, so that their attention runs where a BF16 cache's does
// (on bf16 dots where the CPU has them); f32 for every other cache.
DType mla_expanded_kv_dtype(DType kv);

// The positions of the prompt that run expanded (0 for a model without latent attention,
// or when the absorbed form is chosen): the prompt's full blocks of block_size that leave
// at least its last token out. The rest runs absorbed, so a request whose every full block
// comes from the prefix cache (which never serves the last token) computes its remaining
// few tokens absorbed, as a fresh run does, instead of decompressing its whole context
// for them.
int32_t mla_expand_until(const HParams& h, const MlaTypes& t, MlaPrefill mode, int32_t n_prompt, int32_t block_size);

}  // namespace ridge
