// Roofline accounting for the forward pass: every named op knows, for the batch at hand,
// its useful operations (2 per multiply-add) and the minimum bytes it must move (weights,
// KV read and written, activations in and out), and which compute ceiling of
// `ridge peaks` applies to the kernel that ran it. The counts are a few multiplications
// per op and always on; wall time per op is measured only when `timing` is set.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace ridge::perf {

// The instruction class of the kernel that ran an op: which compute roof bounds it.
enum class ComputeClass : uint8_t { Fp32Fma, Fp16Fma, Bf16Dot, Int8Vnni, None };
std::string_view compute_class_name(ComputeClass c);  // "fp32_fma", ..., "none" (peaks JSON keys)

// The forward's ops, in execution order within a layer. Matmul ops are the weights' names.
enum class Op : uint8_t {
  TokenEmbd,    // embedding rows gathered (and dequantized) per token
  AttnNorm,     // RMSNorm before attention
  AttnQkv,      // Q, K, V projections (one fused matmul when packed); MLA: q or q_a, latent, rope key
  AttnQB,       // MLA: q_a's norm and the low-rank query's second matmul (attn_q_b)
  AttnKB,       // MLA: each head's query absorbed into the latent space (attn_k_b)
  AttnKvB,      // MLA, expanded form: cached latents decompressed into each head's keys and values
  RopeKv,       // biases, q/k norms, RoPE, K/V converted into the paged cache
  Attention,    // softmax(QK^T)V over the cached context, per KV head group
  AttnVB,       // MLA: each head's latent output to its value (attn_v_b)
  AttnOut,      // output projection wo
  AttnResidual, // x += attn_out
  FfnNorm,      // RMSNorm before the FFN
  FfnRouter,    // a mixture of experts' router (ffn_gate_inp) and its top-k
  FfnGateUp,    // gate and up projections (fused when packed; the active experts' under MoE)
  FfnAct,       // silu(gate) * up
  FfnDown,      // down projection
  FfnMoeMix,    // the rows gathered per expert, and their outputs weighted back per token
  FfnShexp,     // DeepSeek's shared experts: gate/up, SwiGLU, down, added to the mix
  FfnResidual,  // x += ffn_out
  ResultNorm,   // final RMSNorm of the rows that need logits
  Output,       // the vocabulary head
  Sampling,     // penalties, softmax, top-k/p cuts, the draw (engine, per logit row)
  TpComm,       // tensor parallelism: partial sums all-reduced across ranks, logits gathered
  kCount
};
std::string_view op_name(Op op);  // "token_embd", "attn_norm", "attn_qkv", ...
bool op_is_matmul(Op op);
// The op reads only activations the step itself just produced (norms, residual adds,
// RoPE, SwiGLU, sampling): its bytes come from the caches, not DRAM, so its memory roof
// is the cache read ceiling. Matmuls (weights), attention (the KV cache) and the
// embedding gather stream from DRAM.
bool op_reads_cache(Op op);
// By name (a report read back from JSON); false for a name that is no op.
bool op_reads_cache(std::string_view name);

struct OpStat {
  ComputeClass cls = ComputeClass::None;
  double flops = 0;    // useful operations
  double bytes = 0;    // minimum bytes moved
  double seconds = 0;  // measured wall time (0 unless timing)
  int64_t calls = 0;   // instances (one per layer for layer ops)
};

// One profile accumulates any number of forward calls (reset() between phases).
class OpProfile {
 public:
  bool timing = false;  // measure wall time per op (a clock read before and after each)

  void reset() { ops_ = {}; steps_ = 0; tokens_ = 0; step_seconds_ = 0; }
  void add(Op op, ComputeClass cls, double flops, double bytes, double seconds) {
    OpStat& s = ops_[size_t(op)];
    s.cls = cls;
    s.flops += flops;
    s.bytes += bytes;
    s.seconds += seconds;
    ++s.calls;
  }
  void merge(const OpProfile& o) {
    for (size_t i = 0; i < ops_.size(); ++i) {
      const OpStat& s = o.ops_[i];
      if (s.calls == 0) continue;
      ops_[i].cls = s.cls;
      ops_[i].flops += s.flops;
      ops_[i].bytes += s.bytes;
      ops_[i].seconds += s.seconds;
      ops_[i].calls += s.calls;
    }
    steps_ += o.steps_, tokens_ += o.tokens_, step_seconds_ += o.step_seconds_;
  }
  // Tokens through the forward (counted by the forward itself).
  void add_tokens(int64_t tokens) { tokens_ += tokens; }
  // One engine step (forward + sampling) that took `seconds` end to end.
  void add_step(double seconds) { ++steps_, step_seconds_ += seconds; }

  const OpStat& op(Op o) const { return ops_[size_t(o)]; }
  int64_t steps() const { return steps_; }
  int64_t tokens() const { return tokens_; }
  double step_seconds() const { return step_seconds_; }
  double total_flops() const;
  double total_bytes() const;
  double op_seconds() const;  // sum of the timed ops

 private:
  std::array<OpStat, size_t(Op::kCount)> ops_{};
  int64_t steps_ = 0, tokens_ = 0;
  double step_seconds_ = 0;
};

}  // namespace ridge::perf
