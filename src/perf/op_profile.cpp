#include "perf/op_profile.h"

namespace ridge::perf {

std::string_view compute_class_name(ComputeClass c) {
  switch (c) {
    case ComputeClass::Fp32Fma: return "fp32_fma";
    case ComputeClass::Fp16Fma: return "fp16_fma";
    case ComputeClass::Bf16Dot: return "bf16_dot";
    case ComputeClass::Int8Vnni: return "int8_vnni";
    case ComputeClass::None: break;
  }
  return "none";
}

std::string_view op_name(Op op) {
  static constexpr std::string_view kNames[] = {
      "token_embd", "attn_norm",   "attn_qkv",    "attn_q_b",  "attn_k_b",   "attn_kv_b", "rope_kv",      "attention",
      "attn_v_b",   "attn_out",    "attn_residual", "ffn_norm", "ffn_router", "ffn_gate_up", "ffn_act",
      "ffn_down",   "ffn_moe_mix", "ffn_shexp",   "ffn_residual", "result_norm", "output", "sampling",
      "tp_comm"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(Op::kCount));
  return op < Op::kCount ? kNames[size_t(op)] : "?";
}

bool op_is_matmul(Op op) {
  return op == Op::AttnQkv || op == Op::AttnQB || op == Op::AttnKB || op == Op::AttnKvB || op == Op::AttnVB || op == Op::FfnShexp ||
         op == Op::AttnOut || op == Op::FfnRouter || op == Op::FfnGateUp || op == Op::FfnDown ||
         op == Op::Output;
}

bool op_reads_cache(Op op) {
  switch (op) {
    case Op::AttnNorm: case Op::RopeKv: case Op::AttnResidual: case Op::FfnNorm: case Op::FfnAct:
    case Op::FfnMoeMix: case Op::FfnResidual: case Op::ResultNorm: case Op::Sampling:
      return true;
    default:
      return false;
  }
}

bool op_reads_cache(std::string_view name) {
  for (int i = 0; i < int(Op::kCount); ++i)
    if (op_name(Op(i)) == name) return op_reads_cache(Op(i));
  return false;
}

double OpProfile::total_flops() const {
  double s = 0;
  for (const OpStat& o : ops_) s += o.flops;
  return s;
}

double OpProfile::total_bytes() const {
  double s = 0;
  for (const OpStat& o : ops_) s += o.bytes;
  return s;
}

double OpProfile::op_seconds() const {
  double s = 0;
  for (const OpStat& o : ops_) s += o.seconds;
  return s;
}

}  // namespace ridge::perf
