// Multi-head latent attention in the expanded form, for the rows of a step whose
// sequence asks for it (SeqSlice::expand_until: a long prompt's positions).
//
// The absorbed form (forward_mla.cpp) attends in the latent space: per (query, key) pair
// and head it does (R + C) + C multiply-adds (V2-Lite: 1,088). The expanded form
// decompresses every cached latent c of the sequence into each head's key k_nope = Wkb c
// and value v = Wvb c, then attends over them as ordinary multi-head attention: dqk + dv
// multiply-adds per pair and head (V2-Lite: 320), for n_head x C x (nope + dv)
// multiply-adds per cached token per step to decompress, about what the absorbed form
// spends per query row to absorb (Wkb^T q_nope, Wvb o), which the expanded form does not.
// A long prompt's chunk has many query rows over its context, so the expanded form does a
// third of the absorbed form's arithmetic; a decode row has one, and would decompress the
// whole context for it. Which positions expand is the sequence's (its prompt), never the
// step's, so a token's result does not depend on how steps cut its sequence
// (perf/mla_form.h decides, docs/ARCHITECTURE.md gives the arithmetic).
//
// The keys and values are decompressed from the cache (what the absorbed form reads too),
// for every position [0, ctx) of the sequence, into a scratch paged cache of one layer,
// f32, one KV head per query head, where the backend's attention runs over them. The
// expanded sequences of a step run one at a time, their heads in groups small enough that
// a group's keys and values stay within mla_scratch_bytes_ (down to one head: a head
// takes 3.5 KB per position at V2/V3's sizes), beside the sequence's latents (4.4 KB per
// position): a 32K-token prompt's expanded form holds about 0.3 GB.
#include <algorithm>

#include "core/error.h"
#include "model/forward.h"
#include "model/forward_ops.h"
#include "model/mla_form.h"

namespace ridge {

void Forward::mla_split(const Batch& b) {
  mla_a_rows_.clear(), mla_x_rows_.clear(), a_seq_.clear(), a_pos_.clear(), x_seq_.clear(), x_pos_.clear();
  c_seq_real_.clear(), c_seq_tmp_.clear(), c_pos_.clear(), xt_blocks_.clear(), xt_tables_.clear();
  seq_shape_a_.clear(), seq_shape_x_.clear(), x_first_.assign(1, 0), c_first_.assign(1, 0);
  bool any = false;
  for (const SeqSlice& sl : b.seqs) any = any || sl.expand_until > sl.pos0;
  if (!any) return;
  const int32_t bs = kv_.layout().block_size;
  std::vector<int32_t> ctx;  // [expanded seqs] positions decompressed
  for (int32_t t = 0, s = 0; s < int32_t(b.seqs.size()); ++s) {
    const SeqSlice& sl = b.seqs[size_t(s)];
    // Positions below expand_until expand; a slice crossing it (a recompute after a
    // preemption: prompt and generated tokens in one chunk) splits there.
    const int32_t nx = std::clamp(sl.expand_until - sl.pos0, 0, sl.n_tokens);
    if (nx > 0) {
      const int32_t j = int32_t(ctx.size());
      for (int32_t i = 0; i < nx; ++i) mla_x_rows_.push_back(t + i), x_seq_.push_back(j), x_pos_.push_back(sl.pos0 + i);
      ctx.push_back(sl.pos0 + nx);
      for (int32_t p = 0; p < ctx.back(); ++p) c_seq_real_.push_back(s), c_seq_tmp_.push_back(j), c_pos_.push_back(p);
      seq_shape_x_.emplace_back(sl.pos0, nx);
      x_first_.push_back(int32_t(mla_x_rows_.size())), c_first_.push_back(int32_t(c_pos_.size()));
    }
    if (nx < sl.n_tokens) {
      for (int32_t i = nx; i < sl.n_tokens; ++i) mla_a_rows_.push_back(t + i), a_seq_.push_back(s), a_pos_.push_back(sl.pos0 + i);
      seq_shape_a_.emplace_back(sl.pos0 + nx, sl.n_tokens - nx);
    }
    t += sl.n_tokens;
  }
  // Outputs come back absorbed rows first, then expanded ones.
  mla_merge_.assign(size_t(T_), 0);
  for (size_t i = 0; i < mla_a_rows_.size(); ++i) mla_merge_[size_t(mla_a_rows_[i])] = int32_t(i);
  for (size_t i = 0; i < mla_x_rows_.size(); ++i)
    mla_merge_[size_t(mla_x_rows_[i])] = int32_t(mla_a_rows_.size() + i);
  // Scratch blocks: the sequences run one at a time, each over blocks [0, ctx_j / bs).
  const int32_t most = *std::max_element(ctx.begin(), ctx.end());
  for (int32_t i = 0; i < (most + bs - 1) / bs; ++i) xt_blocks_.push_back(i);
  for (int32_t n : ctx) xt_tables_.push_back(std::span<const int32_t>(xt_blocks_).first(size_t((n + bs - 1) / bs)));
}

void Forward::mla_expanded(int32_t il, const float* qx, float* ox) {
  const LayerWeights& L = m_.weights().layers[size_t(il)];
  const int32_t nh = h_.n_head, R = h_.rope_dim, C = h_.n_lora_kv, dqk = h_.head_dim_qk_mla;
  const int32_t nope = dqk - R, dv = h_.head_dim_v_mla, dk = h_.head_dim_k;  // dk = R + C
  const int64_t TX = int64_t(mla_x_rows_.size());
  const int32_t bs = kv_.layout().block_size;
  const kernels::RopeParams no_rope{};

  // The queries [TX][nh][dqk] as [q_pe | q_nope] (ridge's RoPE turns a head's first R
  // dimensions), roped at their positions.
  float* q = mla_qg_.reserve(TX * nh * dqk);
  be_.begin_step({x_pos_, x_seq_, x_pos_, xt_tables_, rope_, {}});
  kernels::QkvRopeArgs qa{q, nullptr, nullptr};
  qa.n_head = nh, qa.dk = dqk, qa.kv = &kv_, qa.layer = kv_slot(il);
  op(perf::Op::RopeKv, perf::ComputeClass::Fp32Fma, il, perf::rope_kv_cost(h_.attn_shape(), TX, false, false, DType::F32),
     [&] {
       for (int32_t h = 0; h < nh; ++h) {
         be_.copy_rows(qx + h * dqk + nope, int64_t(nh) * dqk, q + h * dqk, int64_t(nh) * dqk, TX, R);
         be_.copy_rows(qx + h * dqk, int64_t(nh) * dqk, q + h * dqk + R, int64_t(nh) * dqk, TX, nope);
       }
       be_.qkv_rope(qa);
     });

  // Head groups, one size for the step (the longest context's): per context position a
  // group holds its keys and values three times (head-major, token-major, the scratch
  // cache), in f32. The group size changes no bits (each head's arithmetic is its own).
  int64_t nc_max = 0;
  for (size_t j = 0; j + 1 < c_first_.size(); ++j) nc_max = std::max<int64_t>(nc_max, c_first_[j + 1] - c_first_[j]);
  const int64_t per_head = nc_max * (nope + dv + 2 * dqk + 2 * dv) * 4;
  const int32_t g = int32_t(std::clamp<int64_t>(mla_scratch_bytes_ / std::max<int64_t>(per_head, 1), 1, nh));
  const int32_t need = int32_t(xt_blocks_.size());
  const DType xdt = mla_expanded_kv_dtype(kv_.layout().dtype);
  if (!mla_xkv_ || mla_xkv_->layout().n_kv_head < g || mla_xkv_->layout().n_blocks < need ||
      mla_xkv_->layout().head_dim_k != dqk || mla_xkv_->layout().dtype != xdt) {
    // Twice the blocks needed: pages are committed as they are first written, so the
    // spare room costs address space only, and a growing prompt does not fault in a
    // fresh scratch at every chunk. (A scratch with more heads than a group serves too.)
    mla_xkv_.reset();
    mla_xkv_ = std::make_unique<KVCache>(KVLayout{1, g, dqk, dv, bs, std::max(2 * need, 64), xdt});
  }

  // One sequence at a time, so the scratch holds one context.
  for (size_t j = 0; j + 1 < x_first_.size(); ++j) {
    const int32_t x0 = x_first_[j], c0 = c_first_[j];
    const int64_t TXj = x_first_[j + 1] - x0, NC = c_first_[j + 1] - c0;
    auto sub = [](const std::vector<int32_t>& v, int32_t at, int64_t n) {
      return std::span<const int32_t>(v).subspan(size_t(at), size_t(n));
    };
    const std::span<const std::pair<int32_t, int32_t>> shape(&seq_shape_x_[j], 1);

    // The sequence's cached keys [k_pe | latent] at every context position, and the latents.
    float* kc = mla_kc_.reserve(NC * dk);
    float* lat = mla_lat_.reserve(NC * C);
    float* kn = mla_kn_.reserve(int64_t(g) * NC * nope);
    float* ve = mla_ve_.reserve(int64_t(g) * NC * dv);
    float* kx = mla_kx_.reserve(NC * g * dqk);
    float* vx = mla_vx_.reserve(NC * g * dv);
    float* qj = q + int64_t(x0) * nh * dqk;
    float* oj = ox + int64_t(x0) * nh * dv;
    float* og = g < nh ? mla_og_.reserve(TXj * g * dv) : oj;
    float* qg = g < nh ? mla_hin_.reserve(TXj * g * dqk) : qj;  // a group's queries, contiguous
    const kernels::StepInfo read{sub(c_pos_, c0, NC), sub(c_seq_real_, c0, NC), sub(c_pos_, c0, NC), tables_, no_rope, {}};
    const kernels::StepInfo write{sub(c_pos_, c0, NC), sub(c_seq_tmp_, c0, NC), sub(c_pos_, c0, NC), xt_tables_, no_rope, {}};
    const kernels::StepInfo attend{sub(x_pos_, x0, TXj), sub(x_seq_, x0, TXj), sub(x_pos_, x0, TXj), xt_tables_, no_rope, {}};

    for (int32_t h0 = 0; h0 < nh; h0 += g) {
      const int32_t gn = std::min(g, nh - h0);
      perf::OpCost cost{};
      for (int32_t h = h0; h < h0 + gn; ++h)
        for (const auto* w : {&L.wk_b_t[size_t(h)], &L.wv_b[size_t(h)]}) {
          const perf::OpCost p = perf::matmul_cost(NC, w->k, w->n_out, w->type);
          cost.flops += p.flops, cost.bytes += p.bytes;
        }
      op(perf::Op::AttnKvB, perf::matmul_class(L.wk_b_t[0].type), il, cost, [&] {
        if (h0 == 0) {
          be_.begin_step(read);
          be_.kv_read(kv_, kv_slot(il), kc);
          be_.copy_rows(kc + R, dk, lat, C, NC, C);
        }
        // k_nope and v of each head of the group, from the one latent input: the heads of
        // one matrix in one grouped pass where the backend groups them.
        auto heads = [&](const std::vector<kernels::WeightView>& w, int64_t n, float* y) {
          if (be_.groups(w[0])) {
            mla_items_.assign(size_t(gn), {});
            for (int32_t i = 0; i < gn; ++i) {
              kernels::GroupedMatmul& it = mla_items_[size_t(i)];
              it.w = &w[size_t(h0 + i)], it.x = lat, it.m = NC, it.outs[0] = {n, y + i * NC * n};
            }
            be_.matmul_grouped(mla_items_);
          } else {
            for (int32_t i = 0; i < gn; ++i) be_.matmul(w[size_t(h0 + i)], lat, NC, y + i * NC * n);
          }
        };
        // All heads at once: one GEMM per matrix over the heads' rows back to back,
        // token-major [NC][nh][n] (a GEMM as wide as a layer's projections, where per
        // head it would be 128 outputs deep in K = rank).
        const bool all = gn == nh && be_.fuses(L.wk_b_t_all) && be_.fuses(L.wv_b_all);
        if (all) {
          be_.matmul_fused(L.wk_b_t_all, lat, NC, {{int64_t(nh) * nope, kn}});
          be_.matmul_fused(L.wv_b_all, lat, NC, {{int64_t(nh) * dv, ve}});
        } else {
          heads(L.wk_b_t, nope, kn);
          heads(L.wv_b, dv, ve);
        }
        // kn, ve: token-major rows of all heads, or head-major [gn][NC][n].
        const int64_t ldk = all ? int64_t(nh) * nope : nope, ldv = all ? int64_t(nh) * dv : dv;
        const int64_t hk = all ? nope : NC * nope, hv = all ? dv : NC * dv;
        for (int32_t i = 0; i < gn; ++i) {
          be_.copy_rows(kc, dk, kx + i * dqk, int64_t(gn) * dqk, NC, R);  // the one rope key, every head
          be_.copy_rows(kn + i * hk, ldk, kx + i * dqk + R, int64_t(gn) * dqk, NC, nope);
          be_.copy_rows(ve + i * hv, ldv, vx + i * dv, int64_t(gn) * dv, NC, dv);
        }
      });
      // Into the scratch cache's tiles, as rope_kv writes a step's K/V (no RoPE here).
      const double xsz = double(dtype_info(xdt).type_size);
      op(perf::Op::RopeKv, perf::ComputeClass::Fp32Fma, il, {0.0, (4.0 + xsz) * double(NC) * gn * (dqk + dv)}, [&] {
        be_.begin_step(write);
        be_.kv_write(*mla_xkv_, 0, gn, kx, vx);
      });

      be_.begin_step(attend);
      if (g < nh) be_.copy_rows(qj + int64_t(h0) * dqk, int64_t(nh) * dqk, qg, int64_t(gn) * dqk, TXj, int64_t(gn) * dqk);
      const kernels::AttentionArgs aa{qg, og, gn, gn, dqk, dv, h_.attn_scale(), mla_xkv_.get(), 0};
      const perf::AttnShape ashape{gn, gn, dqk, dv, R, false};
      op(perf::Op::Attention, attention_class(mla_xkv_->layout()), il, perf::attention_cost(ashape, shape, xdt),
         [&] { be_.attention(aa); });
      if (g < nh) be_.copy_rows(og, int64_t(gn) * dv, oj + int64_t(h0) * dv, int64_t(nh) * dv, TXj, int64_t(gn) * dv);
    }
  }
}

}  // namespace ridge
