// Multi-head latent attention (DeepSeek V2/V3) in the absorbed form, for every step.
//
// A token's keys and values are decompressed from its latent c (n_lora_kv wide, normed)
// per head: k_nope_h = Wkb_h c, v_h = Wvb_h c, and one RoPE key k_pe shared by the heads.
// Rather than decompress (the expanded form: n_head x (nope + dv) numbers per cached
// token, rebuilt every step), the queries move into the latent space: q_nope_h . k_nope_h
// = (Wkb_h^T q_nope_h) . c, and the output out of it: sum_t p_t v_h,t = Wvb_h (sum_t p_t
// c_t). Attention is then MQA with one KV head whose key is [k_pe | c] and whose value is
// c, so the paged cache holds rope_dim + n_lora_kv numbers (and the value's copy of c)
// per token and layer instead of n_head x (dqk + dv). Decode reads the cache once for all
// heads; the absorption costs n_head x nope x C multiply-adds per query token, against
// the expanded form's n_head x (nope + dv) x C per cached token per step: at decode the
// absorbed form does the least work and moves the fewest bytes. (Long prefills do less
// arithmetic expanded; docs/ARCHITECTURE.md says when that would pay.)
//
// Layout choice: ridge's RoPE rotates the first rope_dim dimensions of a head, so the
// cache's key is [k_pe | c] and the absorbed query [q_pe | Wkb^T q_nope] (llama.cpp
// stores [c | k_pe]; the dot products are the same).
#include <algorithm>

#include "model/forward.h"
#include "model/forward_ops.h"

namespace ridge {

void Forward::mla_attention_block(int32_t il) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd;
  const int32_t nh = h_.n_head, R = h_.rope_dim, C = h_.n_lora_kv, dqk = h_.head_dim_qk_mla;
  const int32_t dv = h_.head_dim_v_mla, dk = h_.head_dim_k;  // dk = R + C
  const bool low_rank_q = h_.n_lora_q > 0;
  const int64_t nq0 = low_rank_q ? h_.n_lora_q : int64_t(nh) * dqk;
  const kernels::WeightView& wq0 = low_rank_q ? L.wq_a : L.wq;

  // q (or q_a), the latent and the rope key read the same normed input: one matmul.
  float* q0 = (low_rank_q ? mla_qa_ : mla_q_).reserve(T * nq0);
  float* c = mla_c_.reserve(T * C);
  float* kpe = mla_kpe_.reserve(T * R);
  perf::OpCost first = perf::matmul_cost(T, E, nq0, wq0.type);
  for (const auto* w : {&L.wkv_c, &L.wk_pe}) {
    const perf::OpCost p = perf::matmul_cost(T, E, w->n_out, w->type);
    first.flops += p.flops, first.bytes += p.bytes - 4.0 * double(T) * double(E);
  }
  norm_matmul(il, perf::Op::AttnNorm, perf::Op::AttnQkv, first, wq0.type, L.attn_norm, {}, L.wqkv,
              {{nq0, q0}, {C, c}, {R, kpe}}, attn_norm_, [&](const float* xn) {
                be_.matmul(wq0, xn, T, q0);
                be_.matmul(L.wkv_c, xn, T, c);
                be_.matmul(L.wk_pe, xn, T, kpe);
              });
  float* q = q0;  // [T][nh][dqk]
  if (low_rank_q) {
    float* qan = mla_qan_.reserve(T * nq0);
    q = mla_q_.reserve(T * nh * dqk);
    perf::OpCost qb = perf::matmul_cost(T, nq0, int64_t(nh) * dqk, L.wq_b.type);
    qb.flops += perf::rms_norm_cost(T, nq0).flops;
    op(perf::Op::AttnQB, perf::matmul_class(L.wq_b.type), il, qb, [&] {
      be_.rms_norm(q0, L.q_a_norm.data(), qan, T, nq0, h_.norm_eps);
      be_.matmul(L.wq_b, qan, T, q);
    });
  }

  // The cache's key [k_pe | normed latent] and value (the normed latent).
  float* cn = mla_cn_.reserve(T * C);
  float* K = k_.reserve(T * dk);
  op(perf::Op::AttnNorm, perf::ComputeClass::Fp32Fma, il, perf::rms_norm_cost(T, C), [&] {
    be_.rms_norm(c, L.kv_a_norm.data(), cn, T, C, h_.norm_eps);
    be_.copy_rows(kpe, R, K, dk, T, R);
    be_.copy_rows(cn, C, K + R, dk, T, C);
  });

  float* o = mla_o_.reserve(T * nh * dv);  // [T][nh][dv] the heads' values, wo's input
  if (mla_x_rows_.empty()) {
    mla_absorbed(il, q, T, true, o);
  } else {
    // Some rows expand: the cache rows go in first (the expanded rows read their own
    // position back), then each form over its own rows, then the outputs back in order.
    kernels::QkvRopeArgs wa{nullptr, K, cn};
    wa.n_kv_head = 1, wa.dk = dk, wa.dv = C, wa.kv = &kv_, wa.layer = kv_slot(il);
    op(perf::Op::RopeKv, perf::ComputeClass::Fp32Fma, il,
       perf::rope_kv_cost(h_.attn_shape(), T, false, false, kv_.layout().dtype), [&] { be_.qkv_rope(wa); });
    const int64_t TA = int64_t(mla_a_rows_.size()), TX = int64_t(mla_x_rows_.size());
    float* ocat = mla_ocat_.reserve(T * nh * dv);
    if (TA > 0) {
      float* qa = mla_qsub_.reserve(TA * nh * dqk);
      be_.gather_rows(q, mla_a_rows_, int64_t(nh) * dqk, qa);
      be_.begin_step({a_pos_, a_seq_, a_pos_, tables_, rope_, {}});
      std::swap(seq_shape_, seq_shape_a_);
      mla_absorbed(il, qa, TA, false, ocat);
      std::swap(seq_shape_, seq_shape_a_);
    }
    float* qx = mla_qsub_.reserve(TX * nh * dqk);
    be_.gather_rows(q, mla_x_rows_, int64_t(nh) * dqk, qx);
    mla_expanded(il, qx, ocat + TA * nh * dv);
    be_.begin_step(step_);
    be_.gather_rows(ocat, mla_merge_, int64_t(nh) * dv, o);
  }

  float* attn_out = attn_out_.reserve(T * E);
  op(perf::Op::AttnOut, perf::matmul_class(L.wo.type), il, perf::matmul_cost(T, int64_t(nh) * dv, E, L.wo.type),
     [&] { be_.matmul(L.wo, o, T, attn_out); });
  if (tp_) tp_reduce(il, attn_out);
  attn_residual(il, attn_out);
}

void Forward::mla_absorbed(int32_t il, const float* q, int64_t Tn, bool write_kv, float* o) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int32_t nh = h_.n_head, R = h_.rope_dim, C = h_.n_lora_kv, dqk = h_.head_dim_qk_mla;
  const int32_t nope = dqk - R, dv = h_.head_dim_v_mla, dk = h_.head_dim_k;  // dk = R + C
  const int64_t T = Tn;

  // Each head's matmul over the rows, all heads in one pass where the backend groups
  // them: x [nh][T][k] head-major -> y [nh][T][n_out].
  auto per_head = [&](const std::vector<kernels::WeightView>& w, const float* x, float* y) {
    const int64_t k = w[0].k, n = w[0].n_out;
    if (be_.groups(w[0])) {
      mla_items_.assign(size_t(nh), {});
      for (int32_t h = 0; h < nh; ++h) {
        kernels::GroupedMatmul& it = mla_items_[size_t(h)];
        it.w = &w[size_t(h)], it.x = x + h * T * k, it.m = T, it.n_outs = 1;
        it.outs[0] = {n, y + h * T * n};
      }
      be_.matmul_grouped(mla_items_);
    } else {
      for (int32_t h = 0; h < nh; ++h) be_.matmul(w[size_t(h)], x + h * T * k, T, y + h * T * n);
    }
  };
  auto heads_cost = [&](const std::vector<kernels::WeightView>& w) {
    perf::OpCost s{};
    for (const auto& v : w) {
      const perf::OpCost p = perf::matmul_cost(T, v.k, v.n_out, v.type);
      s.flops += p.flops, s.bytes += p.bytes;
    }
    return s;
  };

  // The absorbed queries [T][nh][R + C]: q_pe, then Wkb_h^T q_nope_h.
  float* Q = q_.reserve(T * nh * dk);
  float* hin = mla_hin_.reserve(int64_t(nh) * T * std::max(nope, C));
  float* hout = mla_hout_.reserve(int64_t(nh) * T * std::max(C, dv));
  op(perf::Op::AttnKB, perf::matmul_class(L.wk_b[0].type), il, heads_cost(L.wk_b), [&] {
    for (int32_t h = 0; h < nh; ++h) be_.copy_rows(q + h * dqk, int64_t(nh) * dqk, hin + h * T * nope, nope, T, nope);
    per_head(L.wk_b, hin, hout);
    for (int32_t h = 0; h < nh; ++h) {
      be_.copy_rows(q + h * dqk + nope, int64_t(nh) * dqk, Q + h * dk, int64_t(nh) * dk, T, R);
      be_.copy_rows(hout + h * T * C, C, Q + h * dk + R, int64_t(nh) * dk, T, C);
    }
  });

  kernels::QkvRopeArgs qa{Q, write_kv ? k_.data() : nullptr, write_kv ? mla_cn_.data() : nullptr};
  qa.n_head = nh, qa.n_kv_head = write_kv ? 1 : 0, qa.dk = dk, qa.dv = C, qa.eps = h_.norm_eps, qa.kv = &kv_,
  qa.layer = kv_slot(il);
  op(perf::Op::RopeKv, perf::ComputeClass::Fp32Fma, il,
     perf::rope_kv_cost(h_.attn_shape(), T, false, false, kv_.layout().dtype), [&] { be_.qkv_rope(qa); });

  float* kqv = kqv_.reserve(T * nh * C);  // [T][nh][C] the heads' outputs in the latent space
  const kernels::AttentionArgs aa{Q, kqv, nh, 1, dk, C, h_.attn_scale(), &kv_, kv_slot(il)};
  op(perf::Op::Attention, attention_class(), il,
     perf::attention_cost(h_.attn_shape(), seq_shape_, kv_.layout().dtype), [&] { be_.attention(aa); });

  // Out of the latent space: each head's value Wvb_h o_h, token-major for wo.
  op(perf::Op::AttnVB, perf::matmul_class(L.wv_b[0].type), il, heads_cost(L.wv_b), [&] {
    for (int32_t h = 0; h < nh; ++h) be_.copy_rows(kqv + h * C, int64_t(nh) * C, hin + h * T * C, C, T, C);
    per_head(L.wv_b, hin, hout);
    for (int32_t h = 0; h < nh; ++h) be_.copy_rows(hout + h * T * dv, dv, o + h * dv, int64_t(nh) * dv, T, dv);
  });
}

}  // namespace ridge
