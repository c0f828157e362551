#include "model/forward.h"
#include "model/forward_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "perf/tracer.h"

namespace ridge {

Forward::Forward(const Model& model, KVCache& kv, kernels::Backend& backend, const dist::Ranks* ranks)
    : m_(model), h_(model.hparams()), kv_(kv), be_(backend), tp_(ranks ? ranks->tp() : nullptr),
      pp_(ranks ? ranks->pp() : nullptr), grid_(ranks ? ranks->grid() : dist::Grid{}) {
  const TpShard& ts = model.tp_shard();
  const PpStage& ps = model.pp_stage();
  RIDGE_CHECK(ts.size == grid_.tp && ts.rank == grid_.tp_rank && (!tp_ || tp_->size() == ts.size),
              "a model split over {} ranks needs their communicator", ts.size);
  RIDGE_CHECK(ps.size == grid_.pp && ps.stage == grid_.stage, "a model cut into {} stages needs their communicator",
              ps.size);
  const KVLayout& l = kv.layout();
  const KvGroups& g = kv.groups();
  RIDGE_CHECK(int32_t(g.page.size()) == h_.n_layer && (!g.grouped() || g.window == h_.n_swa),
              "KV cache groups are not the model's");
  for (int32_t il = model.pp_stage().first; il < model.pp_stage().end; ++il)
    RIDGE_CHECK(g.page[size_t(il)] < g.pages() && g.slot[size_t(il)] < l.n_layer &&
                    (!g.grouped() || (g.page[size_t(il)] >= g.n_global) == h_.swa_layer(il)),
                "KV cache groups: layer {} has no place", il);
  RIDGE_CHECK(l.n_layer == g.slots && l.n_kv_head == h_.n_head_kv && l.head_dim_k == h_.head_dim_k &&
                  l.head_dim_v == h_.head_dim_v,
              "KV cache layout does not match the model");
  RIDGE_CHECK(!l.v_in_k || (h_.mla() && l.v_dim0() == h_.rope_dim), "a KV cache with values in its keys is for latent attention");
  rope_.rope_dim = h_.rope_dim;
  rope_.freq_base = h_.rope_freq_base;
  rope_.freq_scale = h_.rope_freq_scale;
  rope_.neox = model.arch().rope_neox;
  rope_.freq_factors = model.weights().rope_freqs.empty() ? nullptr : model.weights().rope_freqs.data();
  rope_.attn_factor = h_.rope_attn_factor;
  if (h_.n_swa > 0) {  // window layers: their own base, no position scaling
    rope_swa_ = rope_;
    rope_swa_.freq_base = h_.rope_freq_base_swa;
    rope_swa_.freq_scale = 1.f;
  }
}

void Forward::validate(const Batch& b) const {
  const KVLayout& l = kv_.layout();
  int64_t total = 0;
  for (const auto& s : b.seqs) {
    RIDGE_CHECK(s.n_tokens > 0 && s.pos0 >= 0, "batch: a sequence slice needs tokens and a position >= 0");
    RIDGE_CHECK(s.expand_until >= 0, "batch: expand_until {} is negative", s.expand_until);
    const int64_t need = (int64_t(s.pos0) + s.n_tokens + l.block_size - 1) / l.block_size;
    const KvGroups& g = kv_.groups();
    RIDGE_CHECK(s.block_table.size() % size_t(g.pages()) == 0, "batch: a block table of {} ids for {} pages per block",
                s.block_table.size(), g.pages());
    const int64_t n = int64_t(s.block_table.size()) / g.pages();
    RIDGE_CHECK(n >= need, "batch: block table has {} blocks, positions up to {} need {}", n, s.pos0 + s.n_tokens, need);
    // A window page is read from the first block the slice's first query sees.
    const int64_t live = g.grouped() ? std::max<int64_t>(0, int64_t(s.pos0) - g.window + 1) / l.block_size : 0;
    for (int32_t k = 0; k < g.pages(); ++k)
      for (int64_t i = k < g.n_global ? 0 : live; i < need; ++i) {
        const int32_t b = s.block_table[size_t(k * n + i)];
        RIDGE_CHECK(b >= 0 && b < l.n_blocks, "batch: block id {} out of range", b);
      }
    if (!m_.weights().pos_embd.empty() && int64_t(s.pos0) + s.n_tokens > h_.n_ctx_train)
      fail("{} learned {} positions: position {} is past them", h_.arch, h_.n_ctx_train, s.pos0 + s.n_tokens - 1);
    total += s.n_tokens;
  }
  RIDGE_CHECK(total == int64_t(b.tokens.size()), "batch: {} tokens but the slices count {}", b.tokens.size(), total);
  for (int32_t t : b.tokens) RIDGE_CHECK(t >= 0 && t < h_.n_vocab, "token id {} is out of range (vocabulary {})", t, h_.n_vocab);
}

int64_t Forward::activation_bytes(const HParams& h, int64_t tokens, int64_t rows) {
  const int64_t E = h.n_embd, F = h.n_ff;
  // x, attn_norm, attn_out, ffn_norm, ffn_out; q, k, v, kqv; gate, up, act; rope.
  int64_t per_token = 5 * E + h.n_q() + h.n_kv_k() + h.n_kv_v() + h.n_attn_out() + 3 * F + h.rope_dim;
  int64_t act_q = tokens * std::max(E, F) * 5 / 4;  // int8 rows plus their scales
  if (h.moe()) {  // router logits, and per (token, slot) row: gathered x, gate, up, act, y
    const int64_t k = h.n_expert_used, Fe = h.n_ff_exp, Fs = Fe * h.n_expert_shared;
    per_token += h.n_expert + k * (2 * E + 3 * Fe) + 2 * Fs + E;  // and the shared experts' gate, up, out
    act_q = std::max(act_q, tokens * k * std::max(E, Fe) * 5 / 4);
    act_q = std::max(act_q, tokens * Fs * 5 / 4);
  }
  if (h.mla()) {  // q_a twice, the heads' queries, latent twice, rope key, two head-major buffers, values
    const int64_t nh = h.n_head, C = h.n_lora_kv, dqk = h.head_dim_qk_mla, dv = h.head_dim_v_mla;
    per_token += 2 * h.n_lora_q + nh * dqk + 2 * C + h.rope_dim + nh * std::max(dqk - h.rope_dim, C) +
                 nh * std::max(C, dv) + nh * dv;
    // the per-head matmuls quantize every head's rows at once
    act_q = std::max(act_q, tokens * std::max<int64_t>({h.n_lora_q, C, nh * dv, nh * std::max<int64_t>(dqk - h.rope_dim, C)}) * 5 / 4);
    // The expanded form (forward_mla_expand.cpp): a head group's keys and values, within
    // 256 MiB, and the sequence's latents read back, as many as the step's tokens (a
    // chunk deep in a long prompt reads more: its whole context).
    per_token += h.head_dim_k + C;
    act_q += int64_t(256) << 20;
  }
  return 4 * (tokens * per_token + rows * (E + h.n_vocab)) + act_q;
}

// A pipeline's step in micro-batches: about `parts` equal runs of the step's tokens (a
// sequence's slice cut where a run ends: its first piece writes the K/V its second reads,
// on every stage before the second), so the stages work on different runs at once.
namespace {

std::vector<Batch> micro_batches(const Batch& b, int32_t parts) {
  const int64_t T = int64_t(b.tokens.size());
  parts = int32_t(std::clamp<int64_t>(parts, 1, std::max<int64_t>(T, 1)));
  std::vector<Batch> out(static_cast<size_t>(parts));
  const auto run_end = [&](int32_t p) { return (int64_t(p) + 1) * T / parts; };  // run p: [run_end(p - 1), run_end(p))
  int64_t t = 0;
  int32_t p = 0;
  for (const SeqSlice& s : b.seqs) {
    int32_t done = 0;
    while (done < s.n_tokens) {
      while (t >= run_end(p)) ++p;  // the run token t falls in
      const int32_t n = int32_t(std::min<int64_t>(s.n_tokens - done, run_end(p) - t));
      const bool last = done + n == s.n_tokens;
      const Logits lg = s.logits == Logits::All ? Logits::All : last ? s.logits : Logits::None;
      out[size_t(p)].add(std::span<const int32_t>(b.tokens).subspan(size_t(t), size_t(n)), s.pos0 + done, s.block_table,
                         lg, s.expand_until);
      done += n;
      t += n;
    }
  }
  std::erase_if(out, [](const Batch& x) { return x.tokens.empty(); });
  return out;
}

}  // namespace

std::span<const float> Forward::run(const Batch& b) {
  if (!pp_) return run_pass(b);
  validate(b);
  const PpStage& pp = m_.pp_stage();
  // Micro-batches: with M of them over P stages a step takes (M + P - 1) / M stage-times
  // of its share, so more is better until a run is too short to keep a stage's matmuls
  // busy (and each run reads the stage's weights again). At least P (a decode batch's
  // few tokens: a run each stage can overlap), else runs of about 32 tokens, up to 4P.
  const int64_t n_parts = std::clamp<int64_t>(int64_t(b.tokens.size()) / 32, pp.size, 4 * int64_t(pp.size));
  const std::vector<Batch> parts = micro_batches(b, int32_t(n_parts));
  if (!pp.is_first() || grid_.tp_rank != 0) {
    for (const Batch& mb : parts) run_pass(mb);
    return {};
  }
  // World rank 0, the engine's: every part's logits come back from the last stage (its
  // first tensor-parallel rank, which gathers them), in order, into one buffer; their
  // receives are posted before the work.
  const int64_t rows = b.n_logit_rows();
  float* lg = pp_logits_.reserve(rows * h_.n_vocab);
  const int last = grid_.world_rank(pp.size - 1, 0);
  for (int64_t r = 0; const Batch& mb : parts) {
    const int64_t n = mb.n_logit_rows();
    if (n > 0) pp_->post_recv(last, lg + r * h_.n_vocab, n * h_.n_vocab);
    r += n;
  }
  for (const Batch& mb : parts) run_pass(mb);
  op(perf::Op::TpComm, perf::ComputeClass::None, -1, perf::OpCost{0, 4.0 * double(rows * h_.n_vocab)},
     [&] { pp_->wait_all(); });
  return be_.to_host(lg, rows * h_.n_vocab);
}

std::span<const float> Forward::run_pass(const Batch& b) {
  validate(b);
  residual_ = nullptr;  // nothing carries over from a run that threw
  const Weights& w = m_.weights();
  const int64_t T = T_ = int64_t(b.tokens.size());
  const int64_t E = h_.n_embd;

  tok_seq_.resize(size_t(T));
  tok_pos_.resize(size_t(T));
  logit_rows_.clear();
  tables_.clear();
  seq_shape_.clear();
  for (int64_t t = 0, s = 0; s < int64_t(b.seqs.size()); ++s) {
    const SeqSlice& sl = b.seqs[size_t(s)];
    for (int32_t j = 0; j < sl.n_tokens; ++j, ++t) {
      tok_seq_[size_t(t)] = int32_t(s);
      tok_pos_[size_t(t)] = sl.pos0 + j;
      if (j >= sl.n_tokens - Batch::logit_rows(sl)) logit_rows_.push_back(int32_t(t));
    }
    tables_.push_back(sl.block_table);
    seq_shape_.emplace_back(sl.pos0, sl.n_tokens);
  }
  const KvGroups& g = kv_.groups();
  if (g.grouped()) {
    page_tables_.resize(size_t(g.pages()));
    for (int32_t k = 0; k < g.pages(); ++k) {
      page_tables_[size_t(k)].clear();
      for (const auto& t : tables_) {
        const size_t n = t.size() / size_t(g.pages());
        page_tables_[size_t(k)].push_back(t.subspan(size_t(k) * n, n));
      }
    }
  }
  step_ = {b.tokens, tok_seq_, tok_pos_, g.grouped() ? page_tables_[0] : tables_, rope_, rope_swa_};
  be_.begin_step(step_);
  if (h_.mla()) mla_split(b);
  profile_.add_tokens(T);

  x_.reserve(T * E);
  const PpStage& pp = m_.pp_stage();
  if (pp_ && !pp.is_first()) {  // a later pipeline stage: the residual stream from the one before
    op(perf::Op::TpComm, perf::ComputeClass::None, -1, perf::OpCost{0, 4.0 * double(T * E)},
       [&] { pp_->recv(grid_.world_rank(pp.stage - 1, grid_.tp_rank), x_.data(), T * E); });
  } else {
    perf::OpCost ec = perf::embed_cost(T, E, w.tok_embd.type);
    if (!w.pos_embd.empty()) ec.flops += double(T * E), ec.bytes += 12.0 * double(T * E);  // a position row added
    if (h_.embd_scale > 0) ec.flops += double(T * E);
    op(perf::Op::TokenEmbd, perf::ComputeClass::None, -1, ec, [&] {
      be_.embed(w.tok_embd, x_.data());
      if (!w.pos_embd.empty()) be_.add_positions(w.pos_embd.data(), x_.data(), E);
      if (h_.embd_scale > 0) be_.scale(x_.data(), h_.embd_scale, T * E);
    });
  }

  for (int32_t il = pp.first; il < pp.end; ++il) {
    attention_block(il);
    ffn_block(il);
  }
  if (pp_ && !pp.is_last()) {  // the residual stream to the next stage (ffn_residual left none pending)
    RIDGE_CHECK(!residual_, "a residual add left across a pipeline stage");
    op(perf::Op::TpComm, perf::ComputeClass::None, -1, perf::OpCost{0, 4.0 * double(T * E)},
       [&] { pp_->send(grid_.world_rank(pp.stage + 1, grid_.tp_rank), x_.data(), T * E); });
    return {};  // the logits come from the last stage (run)
  }

  // Final norm on the rows that need logits only (the head is the largest matmul).
  const int64_t rows = int64_t(logit_rows_.size());
  RIDGE_CHECK(rows == b.n_logit_rows(), "batch: {} logit rows counted, {} expected", rows, b.n_logit_rows());
  result_norm_.reserve(rows * E);
  if (w.output_norm_b.empty()) {
    op(perf::Op::ResultNorm, perf::ComputeClass::Fp32Fma, -1, perf::rms_norm_cost(rows, E), [&] {
      be_.rms_norm_rows(x_.data(), logit_rows_, w.output_norm.data(), result_norm_.data(), E, h_.norm_eps);
    });
  } else {
    op(perf::Op::ResultNorm, perf::ComputeClass::Fp32Fma, -1, perf::layer_norm_cost(rows, E), [&] {
      be_.layer_norm_rows(x_.data(), logit_rows_, w.output_norm.data(), w.output_norm_b.data(), result_norm_.data(), E,
                          h_.norm_eps);
    });
  }
  const int64_t V = w.output.n_out;  // the vocabulary, or this rank's rows of it
  logits_.reserve(rows * V);
  op(perf::Op::Output, perf::matmul_class(w.output.type), -1, perf::matmul_cost(rows, E, V, w.output.type), [&] {
    be_.matmul(w.output, result_norm_.data(), rows, logits_.data());
    if (h_.final_softcap > 0) be_.softcap(logits_.data(), h_.final_softcap, rows * V);
  });
  // Tensor parallel: every rank's [rows][its vocabulary rows] to the stage's first rank,
  // laid out there as [rows][n_vocab].
  const float* out = logits_.data();
  if (tp_) {
    const TpSplit& sp = m_.tp_split();
    std::vector<int64_t> counts;
    for (const int64_t n : sp.vocab_rows) counts.push_back(n * rows);
    if (tp_->rank() == 0) tp_logits_.resize(size_t(rows * h_.n_vocab));
    float* all = tp_all_logits_.reserve(rows * h_.n_vocab);
    op(perf::Op::TpComm, perf::ComputeClass::None, -1, perf::OpCost{0, 4.0 * double(rows * h_.n_vocab)}, [&] {
      tp_->gather(logits_.data(), counts, tp_logits_.data());
      if (tp_->rank() != 0) return;
      const float* src = tp_logits_.data();
      for (int64_t v0 = 0, i = 0; i < int64_t(counts.size()); v0 += sp.vocab_rows[size_t(i)], ++i) {
        const int64_t n = sp.vocab_rows[size_t(i)];
        for (int64_t r = 0; r < rows; ++r) std::copy(src + r * n, src + (r + 1) * n, all + r * h_.n_vocab + v0);
        src += rows * n;
      }
    });
    if (tp_->rank() != 0) return {};
    out = all;
  }
  if (pp_) {  // the last stage: the logits to world rank 0 (run)
    if (rows > 0)
      op(perf::Op::TpComm, perf::ComputeClass::None, -1, perf::OpCost{0, 4.0 * double(rows * h_.n_vocab)},
         [&] { pp_->send(0, out, rows * h_.n_vocab); });
    return {};
  }
  return be_.to_host(out, rows * h_.n_vocab);
}

void Forward::tp_reduce(int32_t il, float* y) {
  const int64_t n = T_ * h_.n_embd;
  op(perf::Op::TpComm, perf::ComputeClass::None, il, perf::OpCost{0, 4.0 * double(n)},
     [&] { tp_->all_reduce_sum(y, n); });
}

perf::ComputeClass Forward::attention_class(const KVLayout& l) {
  if (l.dtype == DType::I8) return perf::ComputeClass::Int8Vnni;
  if (kernels::attention_dots_in_f16(l)) return perf::ComputeClass::Fp16Fma;
  return kernels::attention_dots_in_bf16(l) ? perf::ComputeClass::Bf16Dot : perf::ComputeClass::Fp32Fma;
}

void Forward::attention_block(int32_t il) {
  if (h_.mla()) return mla_attention_block(il);
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const ArchSpec& arch = m_.arch();  // where this architecture's attention differs
  const int64_t T = T_, E = h_.n_embd;
  const int32_t dk = h_.head_dim_k, dv = h_.head_dim_v, nh = h_.n_head, nkv = h_.n_head_kv;
  const int64_t nq = h_.n_q(), nk = h_.n_kv_k(), nv = h_.n_kv_v();

  float* q = q_.reserve(T * nq);
  float* k = k_.reserve(T * nk);
  float* v = v_.reserve(T * nv);
  // Q, K and V read the same activations: one activation pass, the three weights' bytes.
  perf::OpCost qkv = perf::matmul_cost(T, E, nq, L.wq.type);
  const perf::OpCost kc = perf::matmul_cost(T, E, nk, L.wk.type), vc = perf::matmul_cost(T, E, nv, L.wv.type);
  qkv.flops += kc.flops + vc.flops;
  qkv.bytes += kc.bytes + vc.bytes - 2.0 * 4.0 * double(T) * double(E);
  norm_matmul(il, perf::Op::AttnNorm, perf::Op::AttnQkv, qkv, L.wq.type, L.attn_norm, L.attn_norm_b, L.wqkv,
              {{nq, q}, {nk, k}, {nv, v}}, attn_norm_, [&](const float* xn) {
                be_.matmul(L.wq, xn, T, q);
                be_.matmul(L.wk, xn, T, k);
                be_.matmul(L.wv, xn, T, v);
              });

  kernels::QkvRopeArgs qa{q, k, v};
  if (arch.qkv_bias) qa.bq = L.bq.data(), qa.bk = L.bk.data(), qa.bv = L.bv.data();
  if (arch.qk_norm) qa.q_norm = L.q_norm.data(), qa.k_norm = L.k_norm.data();
  // The layer's K/V: a slot of one page of each block (one page of every layer unless
  // window and global layers are kept apart).
  const KvGroups& g = kv_.groups();
  const int32_t kvl = g.slot[size_t(il)];
  if (g.grouped()) be_.set_block_tables(page_tables_[size_t(g.page[size_t(il)])]);
  qa.n_head = nh, qa.n_kv_head = nkv, qa.dk = dk, qa.dv = dv, qa.eps = h_.norm_eps, qa.kv = &kv_, qa.layer = kvl;
  const bool swa = h_.swa_layer(il);
  qa.rope_swa = swa;
  op(perf::Op::RopeKv, perf::ComputeClass::Fp32Fma, il,
     perf::rope_kv_cost(h_.attn_shape(), T, arch.qkv_bias, arch.qk_norm, kv_.layout().dtype), [&] { be_.qkv_rope(qa); });

  const int64_t no = h_.n_attn_out();
  float* kqv = kqv_.reserve(T * no);
  const kernels::AttentionArgs aa{q,   kqv, nh, nkv, dk, dv, h_.attn_scale(), &kv_, kvl, swa ? h_.n_swa : 0,
                                  L.attn_sinks.empty() ? nullptr : L.attn_sinks.data()};
  op(perf::Op::Attention, attention_class(), il,
     perf::attention_cost(h_.attn_shape(), seq_shape_, kv_.layout().dtype, aa.window), [&] { be_.attention(aa); });

  float* attn_out = attn_out_.reserve(T * E);
  perf::OpCost oc = perf::matmul_cost(T, no, E, L.wo.type);
  if (!L.bo.empty()) oc += perf::bias_cost(T, E);
  if (!L.post_attn_norm.empty()) oc += perf::rms_norm_cost(T, E);
  // Tensor parallel: the bias and the norm go on the sum of the ranks' parts.
  const auto epilogue = [&] {
    if (!L.bo.empty()) be_.add_bias(attn_out, L.bo.data(), T, E);
    if (!L.post_attn_norm.empty()) be_.rms_norm(attn_out, L.post_attn_norm.data(), attn_out, T, E, h_.norm_eps);
  };
  op(perf::Op::AttnOut, perf::matmul_class(L.wo.type), il, oc, [&] {
    be_.matmul(L.wo, kqv, T, attn_out);
    if (!tp_) epilogue();
  });
  if (tp_) {
    tp_reduce(il, attn_out);
    if (!L.bo.empty() || !L.post_attn_norm.empty()) op(perf::Op::AttnOut, perf::ComputeClass::Fp32Fma, il, {}, epilogue);
  }
  attn_residual(il, attn_out);
}

void Forward::attn_residual(int32_t il, const float* attn_out) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd;
  if (norm_in_matmul(L.w_gate_up)) {
    residual_ = attn_out;  // ffn_block's norm runs inside gate/up and adds it row by row
  } else {
    op(perf::Op::AttnResidual, perf::ComputeClass::Fp32Fma, il, perf::residual_cost(T, E),
       [&] { be_.add(x_.data(), attn_out, T, E); });
  }
}

void Forward::ffn_block(int32_t il) {
  if (h_.moe_layer(il)) return moe_ffn_block(il);
  if (m_.arch().ffn == Ffn::Gelu) return gelu_ffn_block(il);
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd, F = h_.n_ff;
  float* gate = ffn_gate_.reserve(T * F);
  float* up = ffn_up_.reserve(T * F);
  perf::OpCost gu = perf::matmul_cost(T, E, F, L.w_gate.type);
  const perf::OpCost uc = perf::matmul_cost(T, E, F, L.w_up.type);
  gu.flops += uc.flops;
  gu.bytes += uc.bytes - 4.0 * double(T) * double(E);  // one activation pass for both
  norm_matmul(il, perf::Op::FfnNorm, perf::Op::FfnGateUp, gu, L.w_gate.type, L.ffn_norm, L.ffn_norm_b, L.w_gate_up,
              {{F, gate}, {F, up}}, ffn_norm_, [&](const float* xn) {
                be_.matmul(L.w_gate, xn, T, gate);
                be_.matmul(L.w_up, xn, T, up);
              });
  // The gated activation (SwiGLU, or GeGLU) feeds only down: where the backend takes its
  // rows it runs inside down's matmul.
  const bool geglu = m_.arch().ffn == Ffn::GeGlu;
  float* out = ffn_out_.reserve(T * E);
  perf::OpCost dc = perf::matmul_cost(T, F, E, L.w_down.type);
  perf::OpCost ac = geglu ? perf::gelu_cost(T, F) : perf::swiglu_cost(T, F);
  if (geglu) ac.flops += double(T * F), ac.bytes += 4.0 * double(T) * double(F);  // the product with up
  const bool post = !L.post_ffn_norm.empty();
  if (post) dc += perf::rms_norm_cost(T, E);
  auto post_norm = [&] {  // tensor parallel: on the ranks' sum, below
    if (post && !tp_) be_.rms_norm(out, L.post_ffn_norm.data(), out, T, E, h_.norm_eps);
  };
  if (be_.takes_rows(L.w_down)) {
    dc.flops += ac.flops;
    dc.bytes += 4.0 * double(T) * double(F);  // gate and up read where the activations were
    op(perf::Op::FfnDown, perf::matmul_class(L.w_down.type), il, dc, [&] {
      if (geglu) be_.geglu_matmul(L.w_down, gate, up, T, out);
      else be_.swiglu_matmul(L.w_down, gate, up, T, out);
      post_norm();
    });
  } else {
    float* act = ffn_act_.reserve(T * F);
    op(perf::Op::FfnAct, perf::ComputeClass::Fp32Fma, il, ac, [&] {
      if (geglu) be_.geglu(gate, up, act, T, F);
      else be_.swiglu(gate, up, act, T, F);
    });
    op(perf::Op::FfnDown, perf::matmul_class(L.w_down.type), il, dc, [&] {
      be_.matmul(L.w_down, act, T, out);
      post_norm();
    });
  }
  if (tp_) {
    tp_reduce(il, out);
    if (post)
      op(perf::Op::FfnDown, perf::ComputeClass::Fp32Fma, il, {},
         [&] { be_.rms_norm(out, L.post_ffn_norm.data(), out, T, E, h_.norm_eps); });
  }
  ffn_residual(il, out);
}

void Forward::gelu_ffn_block(int32_t il) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd, F = h_.n_ff;
  float* up = ffn_up_.reserve(T * F);
  norm_matmul(il, perf::Op::FfnNorm, perf::Op::FfnGateUp, perf::matmul_cost(T, E, F, L.w_up.type), L.w_up.type, L.ffn_norm, L.ffn_norm_b, L.w_up,
              {{F, up}}, ffn_norm_, [&](const float* xn) { be_.matmul(L.w_up, xn, T, up); });
  // up's bias goes on where GELU reads the rows: inside down's matmul where the backend
  // takes its rows (as SwiGLU), else in an op of their own.
  const float* b_up = L.b_up.empty() ? nullptr : L.b_up.data();
  float* out = ffn_out_.reserve(T * E);
  perf::OpCost dc = perf::matmul_cost(T, F, E, L.w_down.type);
  if (!L.b_down.empty()) dc += perf::bias_cost(T, E);
  perf::OpCost ac = perf::gelu_cost(T, F);
  if (b_up) ac.flops += double(T * F);
  const bool act_in_down = be_.takes_rows(L.w_down);
  float* act = nullptr;
  if (act_in_down) {
    dc.flops += ac.flops;
    dc.bytes += 4.0 * double(T) * double(F);  // up read where the activations were
  } else {
    act = ffn_act_.reserve(T * F);
    op(perf::Op::FfnAct, perf::ComputeClass::Fp32Fma, il, ac, [&] {
      if (b_up) be_.add_bias(up, b_up, T, F);
      be_.gelu(up, act, T, F);
    });
  }
  op(perf::Op::FfnDown, perf::matmul_class(L.w_down.type), il, dc, [&] {
    if (act_in_down) be_.gelu_matmul(L.w_down, up, b_up, T, out);
    else be_.matmul(L.w_down, act, T, out);
    if (!L.b_down.empty() && !tp_) be_.add_bias(out, L.b_down.data(), T, E);
  });
  if (tp_) {
    tp_reduce(il, out);
    if (!L.b_down.empty())
      op(perf::Op::FfnDown, perf::ComputeClass::Fp32Fma, il, {}, [&] { be_.add_bias(out, L.b_down.data(), T, E); });
  }
  ffn_residual(il, out);
}

void Forward::moe_ffn_block(int32_t il) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd, F = h_.n_ff_exp;
  const int32_t NE = h_.n_expert, K = h_.n_expert_used;
  const int64_t R = T * K;
  RIDGE_CHECK(!residual_, "a residual add was left to a mixture of experts' norm");
  float* xn = ffn_norm_.reserve(T * E);
  op(perf::Op::FfnNorm, perf::ComputeClass::Fp32Fma, il, perf::rms_norm_cost(T, E),
     [&] { be_.rms_norm(x_.data(), L.ffn_norm.data(), xn, T, E, h_.norm_eps); });

  // The router and each token's top-k.
  float* logits = moe_logits_.reserve(T * NE);
  moe_ids_.resize(size_t(R));
  moe_w_.resize(size_t(R));
  perf::OpCost rc = perf::matmul_cost(T, E, NE, L.router.type);
  if (!L.router_b.empty()) rc += perf::bias_cost(T, NE);
  op(perf::Op::FfnRouter, perf::matmul_class(L.router.type), il, rc, [&] {
    be_.matmul(L.router, xn, T, logits);
    if (!L.router_b.empty()) be_.add_bias(logits, L.router_b.data(), T, NE);
    kernels::MoeRouting r{NE, K, h_.gating_sigmoid, L.exp_probs_b.empty() ? nullptr : L.exp_probs_b.data(),
                          h_.n_expert_groups, h_.n_group_used, h_.expert_weights_norm, h_.expert_weights_scale};
    be_.moe_route(logits, T, r, moe_ids_.data(), moe_w_.data());
  });

  // Rows grouped by expert, in (token, slot) order within each group: the experts this
  // rank holds (all of them, but for expert parallelism, where the others' rows are
  // another rank's and here read one zero row, RE, so that they add nothing).
  const auto held = [&](int32_t e) { return L.down_exps[size_t(e)].data != nullptr; };
  moe_count_.assign(size_t(NE), 0);
  for (int64_t r = 0; r < R; ++r)
    if (const int32_t e = moe_ids_[size_t(r)]; held(e)) ++moe_count_[size_t(e)];
  std::vector<int32_t> start(size_t(NE) + 1, 0);
  for (int32_t e = 0; e < NE; ++e) start[size_t(e) + 1] = start[size_t(e)] + moe_count_[size_t(e)];
  const int64_t RE = start[size_t(NE)];  // the rows of the held experts
  moe_row_.resize(size_t(R));
  moe_src_.resize(size_t(RE));
  {
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int64_t r = 0; r < R; ++r) {
      const int32_t e = moe_ids_[size_t(r)];
      if (!held(e)) {
        moe_row_[size_t(r)] = int32_t(RE);
        continue;
      }
      const int32_t at = fill[size_t(e)]++;
      moe_row_[size_t(r)] = at;
      moe_src_[size_t(at)] = int32_t(r / K);
    }
  }
  int32_t e0 = 0;  // a held expert, whose views stand for all (the format, the backend's way)
  while (e0 + 1 < NE && !held(e0)) ++e0;
  float* xg = moe_x_.reserve(RE * E);
  float* g = moe_gate_.reserve(RE * F);
  float* u = moe_up_.reserve(RE * F);
  float* y = moe_y_.reserve((RE + 1) * E);  // and the zero row
  if (RE < R) std::fill(y + RE * E, y + (RE + 1) * E, 0.f);
  const perf::OpCost mix{2.0 * double(R) * double(E), 4.0 * double(2 * R * E + 2 * T * E)};
  op(perf::Op::FfnMoeMix, perf::ComputeClass::Fp32Fma, il, {0.0, 8.0 * double(RE * E)},
     [&] { be_.gather_rows(xn, moe_src_, E, xg); });

  // Each active expert once over its rows: only their weights are read.
  perf::OpCost gu{}, dc{};
  for (int32_t e = 0; e < NE; ++e) {
    const int64_t n = moe_count_[size_t(e)];
    if (n == 0) continue;
    const perf::OpCost a = perf::matmul_cost(n, E, F, L.gate_exps[size_t(e)].type),
                       b = perf::matmul_cost(n, E, F, L.up_exps[size_t(e)].type),
                       c = perf::matmul_cost(n, F, E, L.down_exps[size_t(e)].type);
    gu.flops += a.flops + b.flops, gu.bytes += a.bytes + b.bytes;
    dc.flops += c.flops, dc.bytes += c.bytes;
    if (!L.gate_exps_b.empty()) gu += perf::bias_cost(n, F), gu += perf::bias_cost(n, F), dc += perf::bias_cost(n, E);
  }
  // An expert's gate and up run as one matmul where the backend fuses them (one pass of
  // activation quantization for both), and SwiGLU runs inside down's where it takes the
  // rows: per expert, two rounds of the thread pool instead of six.
  const DType wt = L.gate_exps[size_t(e0)].type;
  // Where the backend groups them, all active experts' matmuls run in one pass each for
  // gate/up and for down (the same bits; a decode's 8 experts are 16 small matrices).
  // gpt-oss's experts add a bias to each matrix (one pass over every expert's rows) and
  // take the clamped SwiGLU as an op of its own between gate/up and down.
  const bool oai = m_.arch().ffn == Ffn::SwiGluOai;
  const bool fused_gu = !L.gate_up_exps.empty() && be_.fuses(L.gate_up_exps[size_t(e0)]);
  const bool grouped = fused_gu && be_.groups(L.gate_up_exps[size_t(e0)]) && be_.groups(L.down_exps[size_t(e0)]);
  if (grouped) {
    moe_gu_items_.clear();
    moe_down_items_.clear();
    moe_gu_bias_.clear();
    moe_down_bias_.clear();
    float* act = oai ? moe_act_.reserve(RE * F) : nullptr;
    for (int32_t e = 0; e < NE; ++e) {
      const int64_t n = moe_count_[size_t(e)], r0 = start[size_t(e)];
      if (n == 0) continue;
      kernels::GroupedMatmul a;
      a.w = &L.gate_up_exps[size_t(e)], a.x = xg + r0 * E, a.m = n, a.n_outs = 2;
      a.outs[0] = {F, g + r0 * F}, a.outs[1] = {F, u + r0 * F};
      moe_gu_items_.push_back(a);
      kernels::GroupedMatmul d;
      d.w = &L.down_exps[size_t(e)], d.m = n, d.n_outs = 1;
      if (oai) d.x = act + r0 * F;
      else d.gate = g + r0 * F, d.up = u + r0 * F;  // SwiGLU made row by row inside down's activation pass
      d.outs[0] = {E, y + r0 * E};
      moe_down_items_.push_back(d);
      if (oai) {
        moe_gu_bias_.push_back({g + r0 * F, L.gate_exps_b.data() + int64_t(e) * F, n});
        moe_gu_bias_.push_back({u + r0 * F, L.up_exps_b.data() + int64_t(e) * F, n});
        moe_down_bias_.push_back({y + r0 * E, L.down_exps_b.data() + int64_t(e) * E, n});
      }
    }
    op(perf::Op::FfnGateUp, perf::matmul_class(wt), il, gu, [&] {
      be_.matmul_grouped(moe_gu_items_);
      if (oai) be_.add_bias_runs(moe_gu_bias_, F);
    });
    if (oai) {
      op(perf::Op::FfnAct, perf::ComputeClass::Fp32Fma, il, perf::swiglu_cost(RE, F),
         [&] { be_.swiglu_oai(g, u, act, RE, F); });
    } else {
      dc.flops += perf::swiglu_cost(RE, F).flops;
    }
    op(perf::Op::FfnDown, perf::matmul_class(L.down_exps[size_t(e0)].type), il, dc, [&] {
      be_.matmul_grouped(moe_down_items_);
      if (oai) be_.add_bias_runs(moe_down_bias_, E);
    });
    float* out = ffn_out_.reserve(T * E);
    op(perf::Op::FfnMoeMix, perf::ComputeClass::Fp32Fma, il, mix,
       [&] { be_.moe_combine(y, moe_row_.data(), moe_w_.data(), T, K, E, out); });
    if (L.down_shexp.data) shared_experts(il, xn, out);
    if (tp_) tp_reduce(il, out);
    return ffn_residual(il, out);
  }
  op(perf::Op::FfnGateUp, perf::matmul_class(wt), il, gu, [&] {
    for (int32_t e = 0; e < NE; ++e) {
      const int64_t n = moe_count_[size_t(e)], r0 = start[size_t(e)];
      if (n == 0) continue;
      if (!L.gate_up_exps.empty() && be_.fuses(L.gate_up_exps[size_t(e)])) {
        be_.matmul_fused(L.gate_up_exps[size_t(e)], xg + r0 * E, n, {{F, g + r0 * F}, {F, u + r0 * F}});
      } else {
        be_.matmul(L.gate_exps[size_t(e)], xg + r0 * E, n, g + r0 * F);
        be_.matmul(L.up_exps[size_t(e)], xg + r0 * E, n, u + r0 * F);
      }
      if (oai) {
        be_.add_bias(g + r0 * F, L.gate_exps_b.data() + int64_t(e) * F, n, F);
        be_.add_bias(u + r0 * F, L.up_exps_b.data() + int64_t(e) * F, n, F);
      }
    }
  });
  const bool act_in_down = !oai && be_.takes_rows(L.down_exps[size_t(e0)]);
  float* act = nullptr;
  if (act_in_down) {
    dc.flops += perf::swiglu_cost(RE, F).flops;
  } else {
    act = moe_act_.reserve(RE * F);
    op(perf::Op::FfnAct, perf::ComputeClass::Fp32Fma, il, perf::swiglu_cost(RE, F), [&] {
      if (oai) be_.swiglu_oai(g, u, act, RE, F);
      else be_.swiglu(g, u, act, RE, F);
    });
  }
  op(perf::Op::FfnDown, perf::matmul_class(L.down_exps[size_t(e0)].type), il, dc, [&] {
    for (int32_t e = 0; e < NE; ++e) {
      const int64_t n = moe_count_[size_t(e)], r0 = start[size_t(e)];
      if (n == 0) continue;
      if (act_in_down) be_.swiglu_matmul(L.down_exps[size_t(e)], g + r0 * F, u + r0 * F, n, y + r0 * E);
      else be_.matmul(L.down_exps[size_t(e)], act + r0 * F, n, y + r0 * E);
      if (oai) be_.add_bias(y + r0 * E, L.down_exps_b.data() + int64_t(e) * E, n, E);
    }
  });
  float* out = ffn_out_.reserve(T * E);
  op(perf::Op::FfnMoeMix, perf::ComputeClass::Fp32Fma, il, mix,
     [&] { be_.moe_combine(y, moe_row_.data(), moe_w_.data(), T, K, E, out); });
  if (L.down_shexp.data) shared_experts(il, xn, out);
  if (tp_) tp_reduce(il, out);
  ffn_residual(il, out);
}

void Forward::shared_experts(int32_t il, const float* xn, float* out) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int64_t T = T_, E = h_.n_embd, F = L.gate_shexp.n_out;
  float* g = shexp_gate_.reserve(T * F);
  float* u = shexp_up_.reserve(T * F);
  float* y = shexp_out_.reserve(T * E);
  perf::OpCost c = perf::matmul_cost(T, E, F, L.gate_shexp.type);
  const perf::OpCost uc = perf::matmul_cost(T, E, F, L.up_shexp.type), dc = perf::matmul_cost(T, F, E, L.down_shexp.type);
  c.flops += uc.flops + dc.flops + perf::swiglu_cost(T, F).flops + perf::residual_cost(T, E).flops;
  c.bytes += uc.bytes + dc.bytes;
  op(perf::Op::FfnShexp, perf::matmul_class(L.gate_shexp.type), il, c, [&] {
    if (be_.fuses(L.gate_up_shexp)) {
      be_.matmul_fused(L.gate_up_shexp, xn, T, {{F, g}, {F, u}});
    } else {
      be_.matmul(L.gate_shexp, xn, T, g);
      be_.matmul(L.up_shexp, xn, T, u);
    }
    if (be_.takes_rows(L.down_shexp)) {
      be_.swiglu_matmul(L.down_shexp, g, u, T, y);
    } else {
      be_.swiglu(g, u, g, T, F);
      be_.matmul(L.down_shexp, g, T, y);
    }
    be_.add(out, y, T, E);
  });
}

void Forward::ffn_residual(int32_t il, const float* out) {
  const int64_t T = T_, E = h_.n_embd;
  const auto& layers = m_.weights().layers;
  if (il + 1 < m_.pp_stage().end && norm_in_matmul(layers[size_t(il) + 1].wqkv)) {  // not across a stage
    residual_ = out;  // the next layer's attention norm adds it
  } else {
    op(perf::Op::FfnResidual, perf::ComputeClass::Fp32Fma, il, perf::residual_cost(T, E),
       [&] { be_.add(x_.data(), out, T, E); });
  }
}

}  // namespace ridge
