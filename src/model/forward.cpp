#include "model/forward.h"

#include <chrono>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "perf/tracer.h"
#include "quant/quant.h"

namespace ridge {

Forward::Forward(const Model& model, KVCache& kv, ThreadPool& pool)
    : m_(model), h_(model.hparams()), kv_(kv), pool_(pool) {
  const KVLayout& l = kv.layout();
  RIDGE_CHECK(l.n_layer == h_.n_layer && l.n_kv_head == h_.n_head_kv && l.head_dim_k == h_.head_dim_k &&
                  l.head_dim_v == h_.head_dim_v,
              "KV cache layout does not match the model");
  rope_.rope_dim = h_.rope_dim;
  rope_.freq_base = h_.rope_freq_base;
  rope_.freq_scale = h_.rope_freq_scale;
  rope_.neox = model.arch().rope_neox;
  rope_.freq_factors = model.weights().rope_freqs.empty() ? nullptr : model.weights().rope_freqs.data();
}

void Forward::validate(const Batch& b) const {
  const KVLayout& l = kv_.layout();
  int64_t total = 0;
  for (const auto& s : b.seqs) {
    RIDGE_CHECK(s.n_tokens > 0 && s.pos0 >= 0, "batch: a sequence slice needs tokens and a position >= 0");
    const int64_t need = (int64_t(s.pos0) + s.n_tokens + l.block_size - 1) / l.block_size;
    RIDGE_CHECK(int64_t(s.block_table.size()) >= need, "batch: block table has {} blocks, positions up to {} need {}",
                s.block_table.size(), s.pos0 + s.n_tokens, need);
    for (int64_t i = 0; i < need; ++i)
      RIDGE_CHECK(s.block_table[size_t(i)] >= 0 && s.block_table[size_t(i)] < l.n_blocks, "batch: block id {} out of range",
                  s.block_table[size_t(i)]);
    total += s.n_tokens;
  }
  RIDGE_CHECK(total == int64_t(b.tokens.size()), "batch: {} tokens but the slices count {}", b.tokens.size(), total);
  for (int32_t t : b.tokens) RIDGE_CHECK(t >= 0 && t < h_.n_vocab, "token id {} is out of range (vocabulary {})", t, h_.n_vocab);
}

template <typename F>
void Forward::op(perf::Op o, perf::ComputeClass cls, int32_t layer, const perf::OpCost& c, F&& fn) {
  const bool trace = perf::trace_on();
  if (!profile_.timing && !trace) {
    fn();
    profile_.add(o, cls, c.flops, c.bytes, 0.0);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  fn();
  const auto t1 = Clock::now();
  profile_.add(o, cls, c.flops, c.bytes, profile_.timing ? std::chrono::duration<double>(t1 - t0).count() : 0.0);
  if (trace) {
    auto ns = [](Clock::time_point t) {
      return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    perf::trace_op(perf::op_name(o), ns(t0), ns(t1), layer, T_, c.flops, c.bytes);
  }
}

template <typename Split>
void Forward::norm_matmul(int32_t il, perf::Op norm_op, perf::Op mm_op, perf::OpCost cost, DType type,
                          const std::vector<float>& nw, const kernels::WeightView& w,
                          std::initializer_list<kernels::MatmulOut> outs, std::vector<float>& buf, Split&& split) {
  const int64_t T = T_, E = h_.n_embd;
  const float* res = std::exchange(residual_, nullptr);
  auto norm_row = [&](int64_t t, float* out) {
    if (res) kernels::add_inplace(x_.data() + t * E, res + t * E, E);
    kernels::rms_norm(x_.data() + t * E, nw.data(), out, E, h_.rms_eps);
  };
  const perf::ComputeClass cls = perf::matmul_class(type);
  if (kernels::Matmul::takes_rows(w)) {
    // The norm (and the residual add left to it) runs row by row inside the matmul's
    // activation quantization; its FLOPs, and x's row read and written by the add, are
    // the matmul op's.
    cost.flops += perf::rms_norm_cost(T, E).flops;
    if (res) cost.flops += perf::residual_cost(T, E).flops, cost.bytes += 8.0 * double(T) * double(E);
    op(mm_op, cls, il, cost, [&] { mm_.run_fused(pool_, w, kernels::RowSource::of(norm_row), T, outs); });
    return;
  }
  RIDGE_CHECK(!res, "a residual add was left to a norm that runs on its own");
  buf.resize(size_t(T * E));
  op(norm_op, perf::ComputeClass::Fp32Fma, il, perf::rms_norm_cost(T, E),
     [&] { rows(T, [&](int64_t t) { norm_row(t, buf.data() + t * E); }); });
  op(mm_op, cls, il, cost, [&] {
    if (w.packed && kernels::gemm_available(w.type)) mm_.run_fused(pool_, w, buf.data(), T, outs);
    else split(buf.data());
  });
}

int64_t Forward::activation_bytes(const HParams& h, int64_t tokens, int64_t rows) {
  const int64_t E = h.n_embd, F = h.n_ff;
  // x, attn_norm, attn_out, ffn_norm, ffn_out; q, k, v, kqv; gate, up, act; rope.
  const int64_t per_token = 5 * E + h.n_q() + h.n_kv_k() + h.n_kv_v() + h.n_attn_out() + 3 * F + h.rope_dim;
  const int64_t act_q = tokens * std::max(E, F) * 5 / 4;  // int8 rows plus their scales
  return 4 * (tokens * per_token + rows * (E + h.n_vocab)) + act_q;
}

std::span<const float> Forward::run(const Batch& b) {
  validate(b);
  residual_ = nullptr;  // nothing carries over from a run that threw
  const Weights& w = m_.weights();
  const int64_t T = T_ = int64_t(b.tokens.size());
  const int64_t E = h_.n_embd;

  tok_seq_.resize(size_t(T));
  tok_pos_.resize(size_t(T));
  rope_cs_.resize(size_t(T * h_.rope_dim));
  for (int64_t t = 0, s = 0; s < int64_t(b.seqs.size()); ++s)
    for (int32_t j = 0; j < b.seqs[size_t(s)].n_tokens; ++j, ++t) {
      tok_seq_[size_t(t)] = int32_t(s);
      tok_pos_[size_t(t)] = b.seqs[size_t(s)].pos0 + j;
      kernels::rope_cache(rope_, tok_pos_[size_t(t)], rope_cs_.data() + t * h_.rope_dim);
    }

  profile_.add_tokens(T);
  seq_shape_.clear();
  for (const auto& s : b.seqs) seq_shape_.emplace_back(s.pos0, s.n_tokens);

  x_.resize(size_t(T * E));
  const int64_t erow = row_bytes(w.tok_embd.type, E);
  op(perf::Op::TokenEmbd, perf::ComputeClass::None, -1, perf::embed_cost(T, E, w.tok_embd.type), [&] {
    pool_.parallel_for(T, 16, [&](int64_t lo, int64_t hi, int) {
      for (int64_t t = lo; t < hi; ++t)
        quant::dequantize_row(w.tok_embd.type, w.tok_embd.data + b.tokens[size_t(t)] * erow, x_.data() + t * E, E);
    });
  });

  for (int32_t il = 0; il < h_.n_layer; ++il) {
    attention_block(il, b);
    ffn_block(il);
  }

  // Final norm on the rows that need logits only (the head is the largest matmul).
  const int64_t rows = b.n_logit_rows();
  result_norm_.resize(size_t(rows * E));
  op(perf::Op::ResultNorm, perf::ComputeClass::Fp32Fma, -1, perf::rms_norm_cost(rows, E), [&] {
    int64_t r = 0, t0 = 0;
    for (const auto& s : b.seqs) {
      for (int32_t j = s.n_tokens - Batch::logit_rows(s); j < s.n_tokens; ++j, ++r)
        kernels::rms_norm(x_.data() + (t0 + j) * E, w.output_norm.data(), result_norm_.data() + r * E, E, h_.rms_eps);
      t0 += s.n_tokens;
    }
  });
  logits_.resize(size_t(rows * h_.n_vocab));
  op(perf::Op::Output, perf::matmul_class(w.output.type), -1,
     perf::matmul_cost(rows, E, h_.n_vocab, w.output.type),
     [&] { mm_.run(pool_, w.output, result_norm_.data(), rows, logits_.data()); });
  return logits_;
}

void Forward::attention_block(int32_t il, const Batch& b) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const ArchSpec& arch = m_.arch();  // where this architecture's attention differs
  const int64_t T = T_, E = h_.n_embd;
  const int32_t dk = h_.head_dim_k, dv = h_.head_dim_v, nh = h_.n_head, nkv = h_.n_head_kv;
  const int64_t nq = h_.n_q(), nk = h_.n_kv_k(), nv = h_.n_kv_v();

  q_.resize(size_t(T * nq));
  k_.resize(size_t(T * nk));
  v_.resize(size_t(T * nv));
  // Q, K and V read the same activations: one activation pass, the three weights' bytes.
  perf::OpCost qkv = perf::matmul_cost(T, E, nq, L.wq.type);
  const perf::OpCost kc = perf::matmul_cost(T, E, nk, L.wk.type), vc = perf::matmul_cost(T, E, nv, L.wv.type);
  qkv.flops += kc.flops + vc.flops;
  qkv.bytes += kc.bytes + vc.bytes - 2.0 * 4.0 * double(T) * double(E);
  norm_matmul(il, perf::Op::AttnNorm, perf::Op::AttnQkv, qkv, L.wq.type, L.attn_norm, L.wqkv,
              {{nq, q_.data()}, {nk, k_.data()}, {nv, v_.data()}}, attn_norm_, [&](const float* xn) {
                mm_.run(pool_, L.wq, xn, T, q_.data());
                mm_.run(pool_, L.wk, xn, T, k_.data());
                mm_.run(pool_, L.wv, xn, T, v_.data());
              });

  // Per token: biases, q/k norms, RoPE, and K/V into the token's own cache slot (tokens
  // never share a slot, so the rows run in parallel).
  const KVLayout& kl = kv_.layout();
  op(perf::Op::RopeKv, perf::ComputeClass::Fp32Fma, il,
     perf::rope_kv_cost(h_.attn_shape(), T, arch.qkv_bias, arch.qk_norm, kl.dtype), [&] {
    rows(T, [&](int64_t t) {
      float* q = q_.data() + t * nq;
      float* k = k_.data() + t * nk;
      float* v = v_.data() + t * nv;
      if (arch.qkv_bias) {
        kernels::add_inplace(q, L.bq.data(), nq);
        kernels::add_inplace(k, L.bk.data(), nk);
        kernels::add_inplace(v, L.bv.data(), nv);
      }
      const float* cs = rope_cs_.data() + t * h_.rope_dim;
      for (int32_t hh = 0; hh < nh; ++hh) {
        if (arch.qk_norm) kernels::rms_norm(q + hh * dk, L.q_norm.data(), q + hh * dk, dk, h_.rms_eps);
        kernels::rope_apply(rope_, cs, q + hh * dk);
      }
      const SeqSlice& s = b.seqs[size_t(tok_seq_[size_t(t)])];
      const int32_t pos = tok_pos_[size_t(t)];
      const int32_t block = s.block_table[size_t(pos / kl.block_size)], slot = pos % kl.block_size;
      for (int32_t hh = 0; hh < nkv; ++hh) {
        if (arch.qk_norm) kernels::rms_norm(k + hh * dk, L.k_norm.data(), k + hh * dk, dk, h_.rms_eps);
        kernels::rope_apply(rope_, cs, k + hh * dk);
        kv_.write_k(il, block, hh, slot, k + hh * dk);
        kv_.write_v(il, block, hh, slot, v + hh * dv);
      }
    });
  });

  // Tasks of (token, a run of KV heads): each head's group of query heads (adjacent in q_
  // and kqv_) shares each K/V tile, and a run of heads reads its tiles of a block as one
  // piece; as few runs per token as keep every thread busy. K/V are read back from the
  // cache in the stored dtype, so a row sees exactly what a later decode step will see.
  const int64_t no = h_.n_attn_out();
  kqv_.resize(size_t(T * no));
  const int32_t group = nh / nkv;
  const kernels::AttnHeadRuns hr = kernels::attention_head_runs(T, nkv, pool_.size());
  const int64_t scratch_per = kernels::attention_scratch_floats(kl, hr.run * group);
  attn_scratch_.resize(size_t(pool_.size() * scratch_per));
  const float scale = 1.0f / std::sqrt(float(dk));
  op(perf::Op::Attention, perf::ComputeClass::Fp32Fma, il, perf::attention_cost(h_.attn_shape(), seq_shape_, kl.dtype), [&] {
    pool_.run(T * hr.splits, [&](int64_t task, int thread) {
      const int64_t t = task / hr.splits;
      const int32_t h0 = int32_t(task % hr.splits) * hr.run, n = std::min(hr.run, nkv - h0);
      const SeqSlice& s = b.seqs[size_t(tok_seq_[size_t(t)])];
      kernels::AttnArgs a{&kv_, il, s.block_table, tok_pos_[size_t(t)] + 1, scale};
      kernels::attention_heads(a, h0, n, group, q_.data() + t * nq + int64_t(h0) * group * dk, dk,
                               kqv_.data() + t * no + int64_t(h0) * group * dv, dv,
                               attn_scratch_.data() + thread * scratch_per);
    });
  });

  attn_out_.resize(size_t(T * E));
  op(perf::Op::AttnOut, perf::matmul_class(L.wo.type), il, perf::matmul_cost(T, no, E, L.wo.type),
     [&] { mm_.run(pool_, L.wo, kqv_.data(), T, attn_out_.data()); });
  if (kernels::Matmul::takes_rows(L.w_gate_up)) {
    residual_ = attn_out_.data();  // ffn_block's norm runs inside gate/up and adds it row by row
  } else {
    op(perf::Op::AttnResidual, perf::ComputeClass::Fp32Fma, il, perf::residual_cost(T, E), [&] {
      rows(T, [&](int64_t t) { kernels::add_inplace(x_.data() + t * E, attn_out_.data() + t * E, E); });
    });
  }
}

void Forward::ffn_block(int32_t il) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd, F = h_.n_ff;
  ffn_gate_.resize(size_t(T * F));
  ffn_up_.resize(size_t(T * F));
  perf::OpCost gu = perf::matmul_cost(T, E, F, L.w_gate.type);
  const perf::OpCost uc = perf::matmul_cost(T, E, F, L.w_up.type);
  gu.flops += uc.flops;
  gu.bytes += uc.bytes - 4.0 * double(T) * double(E);  // one activation pass for both
  norm_matmul(il, perf::Op::FfnNorm, perf::Op::FfnGateUp, gu, L.w_gate.type, L.ffn_norm, L.w_gate_up,
              {{F, ffn_gate_.data()}, {F, ffn_up_.data()}}, ffn_norm_, [&](const float* xn) {
                mm_.run(pool_, L.w_gate, xn, T, ffn_gate_.data());
                mm_.run(pool_, L.w_up, xn, T, ffn_up_.data());
              });
  // SwiGLU feeds only down: where w_down takes a RowSource it runs row by row inside
  // down's activation quantization.
  auto act_row = [&](int64_t t, float* out) { kernels::swiglu(ffn_gate_.data() + t * F, ffn_up_.data() + t * F, out, F); };
  ffn_out_.resize(size_t(T * E));
  perf::OpCost dc = perf::matmul_cost(T, F, E, L.w_down.type);
  if (kernels::Matmul::takes_rows(L.w_down)) {
    const perf::OpCost ac = perf::swiglu_cost(T, F);
    dc.flops += ac.flops;
    dc.bytes += 4.0 * double(T) * double(F);  // gate and up read where the activations were
    op(perf::Op::FfnDown, perf::matmul_class(L.w_down.type), il, dc,
       [&] { mm_.run(pool_, L.w_down, kernels::RowSource::of(act_row), T, ffn_out_.data()); });
  } else {
    ffn_act_.resize(size_t(T * F));
    op(perf::Op::FfnAct, perf::ComputeClass::Fp32Fma, il, perf::swiglu_cost(T, F),
       [&] { rows(T, [&](int64_t t) { act_row(t, ffn_act_.data() + t * F); }); });
    op(perf::Op::FfnDown, perf::matmul_class(L.w_down.type), il, dc,
       [&] { mm_.run(pool_, L.w_down, ffn_act_.data(), T, ffn_out_.data()); });
  }
  const auto& layers = m_.weights().layers;
  if (il + 1 < h_.n_layer && kernels::Matmul::takes_rows(layers[size_t(il) + 1].wqkv)) {
    residual_ = ffn_out_.data();  // the next layer's attention norm adds it
  } else {
    op(perf::Op::FfnResidual, perf::ComputeClass::Fp32Fma, il, perf::residual_cost(T, E), [&] {
      rows(T, [&](int64_t t) { kernels::add_inplace(x_.data() + t * E, ffn_out_.data() + t * E, E); });
    });
  }
}

}  // namespace ridge
