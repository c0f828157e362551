// The forward pass of the llama family over a variable-length batch through the paged
// KV cache: what a layer computes and in which order, each operation run by a
// kernels::Backend (kernels/backend.h). Every intermediate has a stable name (the member
// buffers below, per layer); the tracer and roofline accounting hang on these names.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "dist/comm.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "perf/op_cost.h"
#include "perf/op_profile.h"

namespace ridge {

class Forward {
 public:
  // ranks: the processes of a model split by tensor parallelism (model.tp_shard()),
  // pipeline parallelism (model.pp_stage()) or both, or null.
  Forward(const Model& model, KVCache& kv, kernels::Backend& backend, const dist::Ranks* ranks = nullptr);

  // Writes the batch's K/V into the cache and returns the logits,
  // [batch.n_logit_rows()][n_vocab], valid until the next call. Split: every rank runs it
  // on the same batch (pipeline: each stage its layers, passing the residual stream on);
  // world rank 0 gets the logits, the others an empty span.
  std::span<const float> run(const Batch& batch);
  // Throws ridge::Error on a batch run() would refuse (before any rank starts on it).
  void validate(const Batch& b) const;

  // The most the named intermediates and the matmul's quantized activations take for a
  // step of `tokens` tokens with `rows` logit rows (they grow to the largest step seen).
  static int64_t activation_bytes(const HParams& h, int64_t tokens, int64_t rows);

  // Every op's FLOPs and bytes accumulate here on every run (a few multiplications per
  // op); set profile().timing to time each op too. The caller resets it between phases.
  perf::OpProfile& profile() { return profile_; }

  // The most the expanded form's per-layer scratch (a head group's keys and values) may
  // take; heads go in groups within it. Tests shrink it to force several groups.
  void set_mla_scratch_bytes(int64_t n) { mla_scratch_bytes_ = n; }

 private:
  // One pass of the layers over b (a pipeline stage's: its layers over a micro-batch).
  std::span<const float> run_pass(const Batch& b);
  void attention_block(int32_t il);
  // Layer il's slot in a page of the KV pool (a pipeline stage's pool holds its own
  // layers, from slot 0).
  int32_t kv_slot(int32_t il) const { return kv_.groups().slot[size_t(il)]; }
  // Tensor parallelism: y [T][n_embd], this rank's partial sum of a row-parallel matmul,
  // becomes the sum over all ranks (op TpComm).
  void tp_reduce(int32_t il, float* y);
  // Multi-head latent attention (forward_mla.cpp) in the absorbed form: the cache holds
  // each token's latent and rope key; each head's query is taken into the latent space
  // (attn_k_b) and its latent output out of it (attn_v_b), so attention itself is MQA
  // over one KV head of rope_dim + n_lora_kv.
  void mla_attention_block(int32_t il);
  // The absorbed form over the rows of the backend's current step: q [Tn][n_head][dqk] ->
  // o [Tn][n_head][dv]. write_kv: this step's rows are the whole step's, and qkv_rope
  // writes their cache rows (k_ and mla_cn_) as it ropes the queries.
  void mla_absorbed(int32_t il, const float* q, int64_t Tn, bool write_kv, float* o);
  // The expanded form (forward_mla_expand.cpp) for the step's expanded rows, their queries
  // qx [TX][n_head][dqk] -> ox [TX][n_head][dv]: each such sequence's cached latents are
  // decompressed into per-head keys and values, and attention is multi-head over them.
  void mla_expanded(int32_t il, const float* qx, float* ox);
  // Splits the step's rows by form and builds the sub-steps both forms run over.
  void mla_split(const Batch& b);
  // After attention's output projection: the residual add, or left to the FFN's norm.
  void attn_residual(int32_t il, const float* attn_out);
  void ffn_block(int32_t il);
  // GPT-2's FFN (Ffn::Gelu): down(gelu(up x + b_up)) + b_down.
  void gelu_ffn_block(int32_t il);
  // Whether the RMSNorm feeding w runs inside w's matmul (and a residual add may be left
  // to it): the backend takes its rows, and the architecture's norms are RMSNorms.
  bool norm_in_matmul(const kernels::WeightView& w) const { return !m_.arch().layer_norm && be_.takes_rows(w); }
  // A mixture of experts in place of the FFN: route each token to its top-k experts, run
  // each active expert once over the rows routed to it (decode reads only the active
  // experts' weights), and weight their outputs back per token, in the token's slot order.
  void moe_ffn_block(int32_t il);
  // DeepSeek's shared experts on the FFN's normed input xn, added into out [T][n_embd].
  void shared_experts(int32_t il, const float* xn, float* out);
  // After the FFN's output: the residual add, or left to the next layer's norm.
  void ffn_residual(int32_t il, const float* out);
  // Runs fn as op `o` of layer `layer` (-1: outside the layers), accounting its cost and,
  // when profiling or tracing, timing it.
  // The roof attention's arithmetic runs against, over this forward's cache or one of
  // layout l (the latent form's expanded scratch): an int8 cache's scores and P.V are
  // integer dot products (VNNI), a bf16 or FP8 cache's bf16 pair dots where the CPU path
  // runs them so (kernels::attention_dots_in_bf16), the others fp32 FMAs.
  perf::ComputeClass attention_class() const { return attention_class(kv_.layout()); }
  static perf::ComputeClass attention_class(const KVLayout& l);
  template <typename F>
  void op(perf::Op o, perf::ComputeClass cls, int32_t layer, const perf::OpCost& c, F&& fn);
  // The norm of x_ (RMSNorm of weight nw, or LayerNorm where nb, its bias, is not empty;
  // a residual add left in residual_ goes first) feeding op mm_op's matmul of the fused
  // weight w into outs: inside the matmul where norm_in_matmul(w), else as op norm_op
  // into buf, then the matmul (w itself where the backend fuses(w), else split(buf)
  // running its parts one by one).
  template <typename Split>
  void norm_matmul(int32_t il, perf::Op norm_op, perf::Op mm_op, perf::OpCost cost, DType type,
                   const std::vector<float>& nw, const std::vector<float>& nb, const kernels::WeightView& w,
                   std::initializer_list<kernels::MatmulOut> outs, kernels::Activations& buf, Split&& split);

  const Model& m_;
  const HParams& h_;
  KVCache& kv_;
  kernels::Backend& be_;
  dist::Comm* tp_ = nullptr;  // set when the model's layers are split over ranks: this stage's
  dist::Comm* pp_ = nullptr;  // set when its layers are cut into pipeline stages: the world
  dist::Grid grid_;           // this rank's place (pp_'s ranks: grid_.world_rank)
  std::vector<float> tp_logits_;  // [ranks][rows][their vocabulary rows] as gathered
  kernels::RopeParams rope_;
  kernels::RopeParams rope_swa_;  // the sliding-window layers' (rope_dim 0: as rope_)

  perf::OpProfile profile_;
  std::vector<std::pair<int32_t, int32_t>> seq_shape_;  // [seqs] (pos0, n_tokens) for the attention cost
  int64_t T_ = 0;                  // tokens in the batch
  std::vector<int32_t> tok_seq_;   // [T] sequence index of each token
  std::vector<int32_t> tok_pos_;   // [T] absolute position
  std::vector<int32_t> logit_rows_;  // [rows] token index of each logit row
  std::vector<std::span<const int32_t>> tables_;  // [seqs] block tables
  // Window and global layers in pages of their own (kv_.groups().grouped()): each
  // slice's table is [pages][entries]; page k's tables of all sequences.
  std::vector<std::vector<std::span<const int32_t>>> page_tables_;  // [pages][seqs]
  kernels::StepInfo step_;         // the whole step, as begun
  // A residual add left to the next norm: that norm runs inside its matmul and adds this
  // [T][n_embd] into x_ row by row first, in place of a pass of its own.
  const float* residual_ = nullptr;

  // Named intermediates in the backend's memory, row-major [T][width].
  kernels::Activations x_{be_};           // residual stream [T][n_embd]
  kernels::Activations attn_norm_{be_};   // [T][n_embd]
  kernels::Activations q_{be_};           // [T][n_q]
  kernels::Activations k_{be_};           // [T][n_kv_k]
  kernels::Activations v_{be_};           // [T][n_kv_v]
  kernels::Activations kqv_{be_};         // [T][n_attn_out] attention output before wo
  kernels::Activations attn_out_{be_};    // [T][n_embd]
  kernels::Activations ffn_norm_{be_};    // [T][n_embd]
  kernels::Activations ffn_gate_{be_};    // [T][n_ff]
  kernels::Activations ffn_up_{be_};      // [T][n_ff]
  kernels::Activations ffn_act_{be_};     // [T][n_ff] silu(gate) * up (or gelu(up))
  kernels::Activations ffn_out_{be_};     // [T][n_embd]
  // Mixture of experts: R = T x n_expert_used (token, slot) rows, grouped by expert; the
  // buffers below of R rows hold the held experts' rows (all of them, but under expert
  // parallelism) and moe_y_ one zero row after them.
  kernels::Activations moe_logits_{be_};  // [T][n_expert] router logits
  kernels::Activations moe_x_{be_};       // [R][n_embd] the normed rows, gathered per expert
  kernels::Activations moe_gate_{be_};    // [R][n_ff_exp]
  kernels::Activations moe_up_{be_};      // [R][n_ff_exp]
  kernels::Activations moe_act_{be_};     // [R][n_ff_exp]
  kernels::Activations moe_y_{be_};       // [R][n_embd] each row's expert output
  std::vector<int32_t> moe_ids_;          // [T][k] the experts of each token, host
  std::vector<float> moe_w_;              // [T][k] their weights
  std::vector<int32_t> moe_row_;          // [T][k] where (token, slot) sits among the R rows
  std::vector<int32_t> moe_src_;          // [R] the token of each gathered row
  std::vector<int32_t> moe_count_;        // [n_expert] rows per expert this step (0: not held here)
  std::vector<kernels::GroupedMatmul> moe_gu_items_, moe_down_items_;  // [active experts]
  std::vector<kernels::BiasRun> moe_gu_bias_, moe_down_bias_;  // gpt-oss: each expert's biases on its rows
  kernels::Activations shexp_gate_{be_};  // [T][n_ff_exp x n_expert_shared]
  kernels::Activations shexp_up_{be_};    // [T][n_ff_exp x n_expert_shared]
  kernels::Activations shexp_out_{be_};   // [T][n_embd]
  // Multi-head latent attention (C = n_lora_kv, R = rope_dim, dqk = head_dim_qk_mla,
  // nope = dqk - R, dv = head_dim_v_mla; q_ holds the absorbed queries [T][n_head][R + C],
  // k_ the cache rows [T][R + C], kqv_ the latent outputs [T][n_head][C]).
  kernels::Activations mla_qa_{be_};      // [T][n_lora_q] the low-rank query, then normed in mla_qan_
  kernels::Activations mla_qan_{be_};     // [T][n_lora_q]
  kernels::Activations mla_q_{be_};       // [T][n_head][dqk] the heads' queries
  kernels::Activations mla_c_{be_};       // [T][C] the latent before its norm
  kernels::Activations mla_cn_{be_};      // [T][C] the latent, normed: V and K's latent part
  kernels::Activations mla_kpe_{be_};     // [T][R] the rope key before RoPE
  kernels::Activations mla_hin_{be_};     // [n_head][T][max(nope, C)] a per-head matmul's input, head-major
                                          // (expanded form: a head group's queries [TX][g][dqk])
  kernels::Activations mla_hout_{be_};    // [n_head][T][max(C, dv)] its output
  kernels::Activations mla_o_{be_};       // [T][n_head][dv] the heads' values, wo's input
  std::vector<kernels::GroupedMatmul> mla_items_;  // [n_head] (expanded form: [2 x heads of a group])
  // The step's rows by form when some are expanded (SeqSlice::expand_until), and the
  // sub-steps the forms run over: A the absorbed rows; X the expanded rows, whose
  // sequence index j names the j-th expanded sequence's block table in the scratch
  // cache mla_xkv_; C every position [0, ctx_j) of each expanded sequence j, read from
  // the real cache (c_seq_real_) and written to the scratch one (c_seq_tmp_).
  std::vector<int32_t> mla_a_rows_, mla_x_rows_;  // token indices, ascending
  std::vector<int32_t> mla_merge_;                // [T] each token's row in [absorbed; expanded] outputs
  std::vector<int32_t> a_seq_, a_pos_, x_seq_, x_pos_, c_seq_real_, c_seq_tmp_, c_pos_;
  std::vector<int32_t> x_first_, c_first_;        // [expanded seqs + 1] each one's first X and C row
  std::vector<int32_t> xt_blocks_;                // scratch blocks, [max_j ceil(ctx_j / block_size)]
  std::vector<std::span<const int32_t>> xt_tables_;  // [expanded seqs] (they run one at a time)
  std::vector<std::pair<int32_t, int32_t>> seq_shape_a_, seq_shape_x_;
  std::unique_ptr<KVCache> mla_xkv_;              // a head group's expanded K/V, one layer (mla_expanded_kv_dtype)
  int64_t mla_scratch_bytes_ = int64_t(256) << 20;
  kernels::Activations mla_qsub_{be_};    // [TA or TX][n_head][dqk] a form's queries
  kernels::Activations mla_ocat_{be_};    // [T][n_head][dv] absorbed rows' outputs, then expanded rows'
  kernels::Activations mla_kc_{be_};      // [NC][R + C] an expanded sequence's cached keys (NC: its context)
  kernels::Activations mla_lat_{be_};     // [NC][C] their latents
  kernels::Activations mla_kn_{be_};      // [g][NC][nope] a head group's no-RoPE keys, head-major
                                          // (all heads at once: token-major [NC][n_head][nope])
  kernels::Activations mla_ve_{be_};      // [g][NC][dv] its values, head-major (or [NC][n_head][dv])
  kernels::Activations mla_kx_{be_};      // [NC][g][dqk] the group's keys [k_pe | k_nope], token-major
  kernels::Activations mla_vx_{be_};      // [NC][g][dv]
  kernels::Activations mla_qg_{be_};      // [TX][n_head][dqk] the expanded rows' queries [q_pe | q_nope]
  kernels::Activations mla_og_{be_};      // [TX][g][dv] the group's outputs
  kernels::Activations result_norm_{be_}; // [rows][n_embd] final norm of the logit rows
  kernels::Activations logits_{be_};      // [rows][n_vocab] (tensor parallel: this rank's vocabulary rows)
  kernels::Activations pp_logits_{be_};      // [rows][n_vocab] pipeline, first stage: every micro-batch's
  kernels::Activations tp_all_logits_{be_};  // [rows][n_vocab] tensor parallel, rank 0: every rank's
};

}  // namespace ridge
