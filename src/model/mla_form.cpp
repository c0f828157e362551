#include "model/mla_form.h"

#include <algorithm>

#include "kernels/cpu/attention.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "perf/op_cost.h"

namespace ridge {

const char* mla_prefill_name(MlaPrefill m) {
  switch (m) {
    case MlaPrefill::Auto: return "auto";
    case MlaPrefill::Absorbed: return "absorbed";
    case MlaPrefill::Expanded: return "expanded";
  }
  return "?";
}

namespace {

// Throughput of a kernel class relative to fp32 FMA on the AVX-512 CPUs ridge targets:
// an int8 VNNI multiply-add does four lanes' work per 32-bit lane (vpdpbusd), bf16 two.
double rate(perf::ComputeClass c) {
  switch (c) {
    case perf::ComputeClass::Int8Vnni: return 4.0;
    case perf::ComputeClass::Bf16Dot: case perf::ComputeClass::Fp16Fma: return 2.0;
    default: return 1.0;
  }
}

// Each form's attention runs where the kernels put a cache of its layout (blocks of 16
// nominally): int8 on VNNI, BF16 on bf16 dots where the CPU has them, else FMAs.
double attention_rate(const KVLayout& l) {
  if (l.dtype == DType::I8) return rate(perf::ComputeClass::Int8Vnni);
  return kernels::attention_dots_in_bf16(l) ? rate(perf::ComputeClass::Bf16Dot) : 1.0;
}

double mm(int64_t m, int64_t k, int64_t n, DType t) {
  return perf::matmul_cost(m, k, n, t).flops / rate(perf::matmul_class(t));
}

}  // namespace

MlaTypes mla_types(const Model& m, DType kv) {
  if (!m.hparams().mla() || m.weights().layers.empty()) return {DType::F32, DType::F32, DType::F32, kv};
  const LayerWeights& L = m.weights().layers[0];
  return {L.wk_b[0].type, L.wv_b[0].type, L.wk_b_t[0].type, kv};
}

MlaFormCost mla_form_cost(const HParams& h, const MlaTypes& t, int32_t n_prompt, int32_t chunk) {
  MlaFormCost c;
  if (!h.mla() || n_prompt <= 0) return c;
  chunk = std::max(chunk, 1);
  const int64_t nh = h.n_head, C = h.n_lora_kv, nope = h.qk_nope(), dv = h.head_dim_v_mla;
  const perf::AttnShape mha{h.n_head, h.n_head, h.head_dim_qk_mla, h.head_dim_v_mla, h.rope_dim, false};
  const double attn_rate = attention_rate(kv_layout_for(h, 16, 1, t.kv));
  const double mha_rate = attention_rate(KVLayout{1, 1, h.head_dim_qk_mla, h.head_dim_v_mla, 16, 1,
                                                  mla_expanded_kv_dtype(t.kv)});
  for (int32_t pos0 = 0; pos0 < n_prompt; pos0 += chunk) {
    const int32_t n = std::min(chunk, n_prompt - pos0);
    const std::pair<int32_t, int32_t> seq[] = {{pos0, n}};
    c.absorbed += double(nh) * (mm(n, nope, C, t.k_b) + mm(n, C, dv, t.v_b));
    c.absorbed += perf::attention_cost(h.attn_shape(), seq, t.kv).flops / attn_rate;
    const int64_t ctx = int64_t(pos0) + n;
    c.expanded += double(nh) * (mm(ctx, C, nope, t.k_b_t) + mm(ctx, C, dv, t.v_b));
    c.expanded += perf::attention_cost(mha, seq, mla_expanded_kv_dtype(t.kv)).flops / mha_rate;
  }
  return c;
}

DType mla_expanded_kv_dtype(DType kv) { return kv == DType::BF16 ? DType::BF16 : DType::F32; }

int32_t mla_expand_until(const HParams& h, const MlaTypes& t, MlaPrefill mode, int32_t n_prompt, int32_t block_size) {
  if (!h.mla() || mode == MlaPrefill::Absorbed || n_prompt <= 1) return 0;
  const int32_t bs = std::max(block_size, 1), until = (n_prompt - 1) / bs * bs;
  if (mode == MlaPrefill::Expanded) return until;
  const MlaFormCost c = mla_form_cost(h, t, until, kMlaNominalChunk);
  return c.expanded < c.absorbed ? until : 0;
}

}  // namespace ridge
