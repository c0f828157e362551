// Tensor parallelism's split of a loaded model (Megatron-LM's): this process keeps the
// query heads [r nh/N, (r+1) nh/N) of every layer with their KV heads and the matching
// columns of the attention output, a part of the FFN's hidden units (rows of gate and up,
// columns of down; each expert's likewise), and a part of the output head's vocabulary
// rows. The forward then runs unchanged on the local shapes, with one all-reduce after
// each row-parallel matrix (wo, down) and the logits gathered (model/forward.h).
//
// Fewer KV heads than ranks: each rank keeps the one KV head its query heads read (the
// head's K/V is then computed and cached on several ranks, as vLLM does). Row parts stay
// views of the file; column parts are copied, a row's blocks [k0, k1) at a time, so every
// cut lies on a whole block of the matrix's format. The FFN is cut on w_down's blocks into
// N parts as even as whole blocks allow.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/hparams.h"

namespace ridge {

struct Weights;

struct TpShard {
  int32_t rank = 0, size = 1;
  // Expert parallelism: a mixture of experts' experts [r NE/N, (r+1) NE/N) go whole to
  // rank r (the others' views are empty), instead of every expert's hidden units cut
  // over all ranks; the rest of the layer is cut as ever. A decode's few active experts
  // then run on the ranks that hold them, each read once, whatever the format's block
  // size (an expert of 768 hidden units is three 256-element K-quant blocks: no cut over
  // four ranks exists).
  bool expert_parallel = false;
  bool on() const { return size > 1; }
};

// Pipeline parallelism's split: stage s of `size` runs layers [first, end) (the layers
// divided as evenly as whole layers allow); the first stage also embeds the tokens, the
// last also computes the logits.
struct PpStage {
  int32_t stage = 0, size = 1;
  int32_t first = 0, end = 0;  // set by cut_layers
  bool on() const { return size > 1; }
  bool is_first() const { return stage == 0; }
  bool is_last() const { return stage == size - 1; }
};

// The first layer of stage `stage` of `size` over n_layer layers (stage `size`: n_layer),
// the layers divided as evenly as whole layers allow.
inline int32_t stage_first_layer(int32_t n_layer, int32_t stage, int32_t size) {
  return int32_t(int64_t(n_layer) * stage / size);
}

// Drops from w every layer outside stage s's range (and the output head unless it is the
// last stage), so they are neither packed nor read; sets s.first and s.end. Throws
// ridge::Error naming the model when a stage would get no layer.
void cut_layers(PpStage& s, const std::string& name, const HParams& h, Weights& w);

// What the split left this rank besides its weights: its rows of the vocabulary, and every
// rank's count of them (for the logits' gather).
struct TpSplit {
  int64_t vocab0 = 0, vocab1 = 0;
  std::vector<int64_t> vocab_rows;  // [size]
};

// Cuts w (views of the whole model) to shard's part and h to the local shape (n_head,
// n_head_kv, n_ff, n_ff_exp; n_vocab stays the model's). Column parts are copied into
// store. Throws ridge::Error naming the model (name) and what does not divide.
TpSplit shard_weights(const TpShard& s, const std::string& name, HParams& h, Weights& w, Arena& store);

}  // namespace ridge
