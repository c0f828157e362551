// A loaded model: the mmap'd GGUF, its hyperparameters and views of its weights, in
// place (zero copy). Small vectors (norm weights, biases, rope factors) are converted to
// f32 once at load; matrices stay in their stored format.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "gguf/gguf.h"
#include "kernels/tensors.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/tp_shard.h"

namespace ridge {

struct LayerWeights {
  std::vector<float> attn_norm;          // [n_embd]
  std::vector<float> attn_norm_b, ffn_norm_b;  // [n_embd] LayerNorm's biases (ArchSpec::layer_norm)
  std::vector<float> bo, b_up, b_down;   // [n_embd], [n_ff], [n_embd] (ArchSpec::proj_bias)
  kernels::WeightView wq, wk, wv, wo;    // [n_q][n_embd], [n_kv_k][n_embd], [n_kv_v][n_embd], [n_embd][n_attn_out]
  std::vector<float> bq, bk, bv;         // qwen2: [n_q], [n_kv_k], [n_kv_v]
  std::vector<float> q_norm, k_norm;     // qwen3: [head_dim_k]
  std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd] (ArchSpec::post_norms)
  std::vector<float> ffn_norm;           // [n_embd]
  kernels::WeightView w_gate, w_up, w_down;  // [n_ff][n_embd], [n_ff][n_embd], [n_embd][n_ff] (no gate: Ffn::Gelu)
  // Mixture of experts (ArchSpec::moe) in place of the three above: the router
  // [n_expert][n_embd] and per expert [n_ff_exp][n_embd], [n_ff_exp][n_embd], [n_embd][n_ff_exp].
  kernels::WeightView router;
  std::vector<kernels::WeightView> gate_exps, up_exps, down_exps;
  std::vector<kernels::WeightView> gate_up_exps;  // packed-only: each expert's gate and up as one matmul
  std::vector<float> exp_probs_b;                  // [n_expert] DeepSeek V3's routing bias, or empty
  // gpt-oss (Ffn::SwiGluOai): the router's bias [n_expert] and the experts' biases,
  // [n_expert][n_ff_exp] for gate and up and [n_expert][n_embd] for down; empty elsewhere.
  std::vector<float> router_b, gate_exps_b, up_exps_b, down_exps_b;
  std::vector<float> attn_sinks;                   // [n_head] gpt-oss's sink logits, or empty
  // DeepSeek's shared experts, all n_expert_shared as one SwiGLU of n_ff_exp x shared:
  // [n_sh][n_embd], [n_sh][n_embd], [n_embd][n_sh]; gate_up_shexp packed-only as w_gate_up.
  kernels::WeightView gate_shexp, up_shexp, down_shexp, gate_up_shexp;
  // Multi-head latent attention (HParams::mla()) in place of wq/wk/wv: q from wq
  // [n_head x dqk][n_embd] or through the low rank wq_a [n_lora_q][n_embd], q_a_norm,
  // wq_b [n_head x dqk][n_lora_q]; attn_kv_a_mqa's rows cut in two, the latent wkv_c
  // [n_lora_kv][n_embd] (then kv_a_norm) and the rope key wk_pe [rope_dim][n_embd]; per
  // head wk_b [n_lora_kv][qk_nope] (absorbs a query's no-RoPE part into the latent space)
  // and wv_b [head_dim_v_mla][n_lora_kv] (a head's latent output to its value). wo is
  // [n_embd][n_head x head_dim_v_mla]. wqkv fuses q (or q_a), wkv_c and wk_pe.
  kernels::WeightView wq_a, wq_b, wkv_c, wk_pe;
  std::vector<float> q_a_norm, kv_a_norm;          // [n_lora_q], [n_lora_kv]
  std::vector<kernels::WeightView> wk_b, wv_b;     // [n_head]
  // wk_b transposed, [qk_nope][n_lora_kv] per head: the expanded form's decompression of a
  // cached latent into the head's no-RoPE key (k_nope = Wkb c). No GGUF holds it (the
  // file's rows are k_nope wide), so the model makes it at load (Model::derive_weights).
  std::vector<kernels::WeightView> wk_b_t;         // [n_head]
  // Packed-only: every head's wk_b_t (wv_b) rows as one matrix [n_head x qk_nope (x
  // head_dim_v_mla)][n_lora_kv], so the expanded form decompresses all heads in one GEMM.
  kernels::WeightView wk_b_t_all, wv_b_all;
  // Packed-only fusions (no GGUF rows: data is null), set when the parts share a type and
  // panel boundaries: [n_q + n_kv_k + n_kv_v][n_embd] and [2 n_ff][n_embd].
  kernels::WeightView wqkv, w_gate_up;
};

struct Weights {
  kernels::WeightView tok_embd;   // [n_vocab][n_embd]
  std::vector<float> output_norm; // [n_embd]
  std::vector<float> output_norm_b;  // [n_embd] (ArchSpec::layer_norm)
  // [n_ctx_train][n_embd] learned absolute positions (ArchSpec::learned_pos), f32 whatever
  // the file's type: a few MB, read a row per token.
  std::vector<float> pos_embd;
  kernels::WeightView output;     // [n_vocab][n_embd] (token_embd when tied)
  bool tied_output = false;
  std::vector<float> rope_freqs;  // [rope_dim/2] Llama 3.1 factors, or empty
  std::vector<LayerWeights> layers;
};

class Model {
 public:
  // Throws ridge::Error naming the file and the missing/invalid key or tensor. path is a
  // GGUF file or a Hugging Face checkpoint directory (model/hf_checkpoint.h).
  // pack: repack the matrices into GEMM panels (kernels/cpu/packed.h) when the active
  // CPU path has a packed GEMM for their type; RIDGE_REPACK=0 turns it off.
  // shard: this process's part under tensor parallelism (model/tp_shard.h); hparams()
  // then has the local shape.
  // pp: this process's stage under pipeline parallelism; only its layers are kept.
  static std::unique_ptr<Model> load(const std::string& path, bool pack = true, TpShard shard = {}, PpStage pp = {});
  static std::unique_ptr<Model> from_file(std::unique_ptr<gguf::File> f, bool pack = true, TpShard shard = {},
                                          PpStage pp = {});

  const gguf::File& file() const { return *file_; }
  // What load() was given (the file, or the checkpoint's directory); empty from from_file.
  const std::string& path() const { return path_; }
  const HParams& hparams() const { return hp_; }
  const ArchSpec& arch() const { return *arch_; }
  const Weights& weights() const { return w_; }
  const TpShard& tp_shard() const { return shard_; }
  const TpSplit& tp_split() const { return split_; }
  // The layers this process runs (all of them unless pipeline parallel).
  const PpStage& pp_stage() const { return pp_; }
  // Bytes of all weight tensors, and of those streamed per token (all but token_embd).
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t streamed_weight_bytes() const { return streamed_bytes_; }
  int64_t packed_bytes() const { return int64_t(packed_.size()); }
  // File bytes the forward still reads through the mapping: token_embd (gathered) and
  // any matrix left unpacked. A repacked matrix's file pages are given back once packed,
  // so these plus the panels and the f32 vectors are what the weights hold in RAM.
  int64_t mapped_bytes() const { return mapped_bytes_; }
  int64_t resident_weight_bytes() const { return packed_bytes() + mapped_bytes_ + vector_bytes_ + derived_bytes(); }
  // Matrices the model made at load from the file's (LayerWeights::wk_b_t).
  int64_t derived_bytes() const { return int64_t(derived_.size()); }
  // mlock what the forward reads: the repacked panels and the still-mapped tensors.
  void lock_in_memory() const;

 private:
  Model() = default;
  void pack_weights();
  void derive_weights();  // fills derived_ and the views into it
  void note_live_ranges();  // fills live_ and mapped_bytes_ after packing
  std::unique_ptr<gguf::File> file_;
  std::string path_;
  HParams hp_;
  const ArchSpec* arch_ = nullptr;
  Weights w_;
  Arena packed_;  // panels of every packable matrix, 64-byte aligned each
  Arena derived_;  // matrices made at load (derive_weights), in GGUF row layout
  Arena sliced_;   // tensor parallelism: this rank's columns of the row-parallel matrices
  TpShard shard_;
  TpSplit split_;
  PpStage pp_;
  int64_t weight_bytes_ = 0, streamed_bytes_ = 0;
  int64_t mapped_bytes_ = 0, vector_bytes_ = 0;
  std::vector<std::pair<const uint8_t*, size_t>> live_;  // file ranges still read
};

}  // namespace ridge
