#include "model/tp_shard.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/model.h"

namespace ridge {
namespace {

struct Range {
  int64_t lo = 0, hi = 0;
  int64_t n() const { return hi - lo; }
};

// Part r of N of n units cut on multiples of `unit` (n one itself), as even as that allows.
Range part(int64_t n, int64_t unit, int32_t r, int32_t N) {
  const int64_t nb = n / unit;
  return {nb * r / N * unit, nb * (r + 1) / N * unit};
}

int64_t block_of(const kernels::WeightView& v) { return dtype_info(v.type).block_size; }

kernels::WeightView rows(const kernels::WeightView& v, Range r) {
  kernels::WeightView o = v;
  o.data = v.data + r.lo * row_bytes(v.type, v.k);
  o.n_out = r.n();
  return o;
}

std::vector<float> slice(const std::vector<float>& v, Range r) {
  if (v.empty()) return v;
  return {v.begin() + r.lo, v.begin() + r.hi};
}

// Columns [k0, k1) of matrices, copied once every cut is known (one allocation).
class Columns {
 public:
  void add(kernels::WeightView& v, Range k) { cuts_.push_back({&v, k}); }
  void copy(Arena& store) {
    size_t bytes = 0;
    for (const Cut& c : cuts_) bytes += size_t(row_bytes(c.v->type, c.k.n()) * c.v->n_out + 63) / 64 * 64;
    if (bytes == 0) return;
    store = Arena(bytes);
    uint8_t* dst = store.data();
    for (const Cut& c : cuts_) {
      kernels::WeightView& v = *c.v;
      const int64_t from = row_bytes(v.type, v.k), off = row_bytes(v.type, c.k.lo), len = row_bytes(v.type, c.k.n());
      for (int64_t i = 0; i < v.n_out; ++i) std::memcpy(dst + i * len, v.data + i * from + off, size_t(len));
      v.data = dst;
      v.k = c.k.n();
      dst += size_t(len * v.n_out + 63) / 64 * 64;
    }
  }

 private:
  struct Cut {
    kernels::WeightView* v;
    Range k;
  };
  std::vector<Cut> cuts_;
};

}  // namespace

TpSplit shard_weights(const TpShard& s, const std::string& name, HParams& h, Weights& w, Arena& store) {
  const int32_t N = s.size, r = s.rank;
  TpSplit out;
  if (N <= 1) {
    out.vocab1 = h.n_vocab;
    out.vocab_rows = {h.n_vocab};
    return out;
  }
  RIDGE_CHECK(r >= 0 && r < N, "rank {} of {}", r, N);
  const auto refuse = [&](const std::string& why) { fail("{}: --tensor-parallel-size {}: {}", name, N, why); };
  const int32_t nh = h.n_head, nkv = h.n_head_kv;
  if (nh % N != 0) refuse(fmt::format("{} attention heads do not split into {} equal parts", nh, N));
  if (nkv % N != 0 && N % nkv != 0)
    refuse(fmt::format("{} KV heads neither split into {} parts nor divide {} ranks", nkv, N, N));
  const Range q{int64_t(nh / N) * r, int64_t(nh / N) * (r + 1)};
  // A rank's query heads read KV heads [kv.lo, kv.hi); with fewer KV heads than ranks,
  // the one shared by this rank's group.
  const Range kv = nkv % N == 0 ? Range{int64_t(nkv / N) * r, int64_t(nkv / N) * (r + 1)}
                                : Range{r / (N / nkv), r / (N / nkv) + 1};
  // Latent attention (deepseek2) keeps its one latent "KV head" on every rank and splits
  // the heads' own matrices: q (or q_b), the per-head k_b and v_b, wo's columns.
  const int64_t dk = h.head_dim_k, dv = h.head_dim_v, dq = h.mla() ? h.head_dim_qk_mla : dk;
  const int64_t dvo = h.mla() ? h.head_dim_v_mla : dv;  // a head's width in wo's input

  // The FFN's cut: on the largest block of the layers' down matrices, so every layer's
  // hidden units split the same way (the local n_ff is one number).
  int64_t unit = 1, unit_exp = 1, unit_sh = 1;
  for (const LayerWeights& L : w.layers) {
    if (L.w_down.data) unit = std::max(unit, block_of(L.w_down));
    for (const auto& d : L.down_exps) unit_exp = std::max(unit_exp, block_of(d));
    if (L.down_shexp.data) unit_sh = std::max(unit_sh, block_of(L.down_shexp));
  }
  const auto ffn_part = [&](int64_t n, int64_t u, const char* what, const char* hint = "") {
    if (n % u != 0) refuse(fmt::format("{} of {} units are no whole number of {}-element blocks{}", what, n, u, hint));
    const Range p = part(n, u, r, N);
    if (p.n() == 0) refuse(fmt::format("{} of {} units give rank {} no block of {}{}", what, n, r, u, hint));
    return p;
  };
  const bool dense = std::any_of(w.layers.begin(), w.layers.end(), [](const LayerWeights& L) { return L.w_down.data; });
  const bool experts = std::any_of(w.layers.begin(), w.layers.end(), [](const LayerWeights& L) { return !L.down_exps.empty(); });
  const bool ep = experts && s.expert_parallel;
  if (ep && h.n_expert < N) refuse(fmt::format("{} experts leave a rank none (--enable-expert-parallel)", h.n_expert));
  const Range own{int64_t(h.n_expert) * r / N, int64_t(h.n_expert) * (r + 1) / N};  // expert parallel: this rank's experts
  const Range f = dense ? ffn_part(h.n_ff, unit, "the FFN's hidden layer") : Range{};
  const Range fe = experts && !ep ? ffn_part(h.n_ff_exp, unit_exp, "an expert's hidden layer",
                                             " (--enable-expert-parallel keeps experts whole)")
                                  : Range{0, h.n_ff_exp};
  const int64_t n_sh = int64_t(h.n_ff_exp) * h.n_expert_shared;  // the shared experts' width, as one SwiGLU
  const Range fs = n_sh > 0 ? ffn_part(n_sh, unit_sh, "the shared experts' hidden layer") : Range{};

  Columns cols;
  for (LayerWeights& L : w.layers) {
    if (!L.wo.data) continue;  // another pipeline stage's layer (cut_layers)
    const int64_t o0 = q.lo * dvo, o1 = q.hi * dvo;  // wo's columns: this rank's heads' outputs
    if (o0 % block_of(L.wo) != 0 || o1 % block_of(L.wo) != 0)
      refuse(fmt::format("attn_output's columns [{}, {}) cut {}'s blocks of {}", o0, o1, dtype_name(L.wo.type),
                         block_of(L.wo)));
    if (L.wq.data) L.wq = rows(L.wq, {q.lo * dq, q.hi * dq});
    if (L.wq_b.data) L.wq_b = rows(L.wq_b, {q.lo * dq, q.hi * dq});
    if (L.wk.data) L.wk = rows(L.wk, {kv.lo * dk, kv.hi * dk});
    if (L.wv.data) L.wv = rows(L.wv, {kv.lo * dv, kv.hi * dv});
    if (!L.wk_b.empty()) {  // per head
      L.wk_b = {L.wk_b.begin() + q.lo, L.wk_b.begin() + q.hi};
      L.wv_b = {L.wv_b.begin() + q.lo, L.wv_b.begin() + q.hi};
    }
    L.bq = slice(L.bq, {q.lo * dk, q.hi * dk});
    L.bk = slice(L.bk, {kv.lo * dk, kv.hi * dk});
    L.bv = slice(L.bv, {kv.lo * dv, kv.hi * dv});
    L.attn_sinks = slice(L.attn_sinks, q);
    cols.add(L.wo, {o0, o1});
    if (L.w_down.data) {
      if (L.w_gate.data) L.w_gate = rows(L.w_gate, f);
      L.w_up = rows(L.w_up, f);
      L.b_up = slice(L.b_up, f);
      cols.add(L.w_down, f);
    }
    if (L.down_shexp.data) {
      L.gate_shexp = rows(L.gate_shexp, fs);
      L.up_shexp = rows(L.up_shexp, fs);
      cols.add(L.down_shexp, fs);
    }
    for (size_t e = 0; e < L.down_exps.size(); ++e) {
      if (ep) {  // whole experts: this rank's kept as they are, the others' views emptied
        if (int64_t(e) < own.lo || int64_t(e) >= own.hi) L.gate_exps[e] = L.up_exps[e] = L.down_exps[e] = {};
        continue;
      }
      L.gate_exps[e] = rows(L.gate_exps[e], fe);
      L.up_exps[e] = rows(L.up_exps[e], fe);
      cols.add(L.down_exps[e], fe);
    }
    // gpt-oss: the experts' gate and up biases per expert [n_expert][n_ff_exp]; down's
    // are added to each rank's partial sum, so one rank adds them. (Expert parallel: an
    // expert runs on one rank, which adds its biases: nothing to cut.)
    if (ep) continue;
    const auto per_expert = [&](std::vector<float>& b) {
      if (b.empty()) return;
      std::vector<float> o;
      for (size_t e = 0; e < L.down_exps.size(); ++e)
        o.insert(o.end(), b.begin() + int64_t(e) * h.n_ff_exp + fe.lo, b.begin() + int64_t(e) * h.n_ff_exp + fe.hi);
      b = std::move(o);
    };
    per_expert(L.gate_exps_b);
    per_expert(L.up_exps_b);
    if (r != 0) std::fill(L.down_exps_b.begin(), L.down_exps_b.end(), 0.f);
  }
  cols.copy(store);

  // The vocabulary: parts of whole 16-row panels, the last one short.
  const int64_t V = h.n_vocab, per = ((V + N - 1) / N + 15) / 16 * 16;
  for (int32_t i = 0; i < N; ++i) {
    const int64_t lo = std::min<int64_t>(per * i, V), hi = std::min<int64_t>(per * (i + 1), V);
    if (hi <= lo) refuse(fmt::format("a vocabulary of {} leaves rank {} no rows", V, i));
    out.vocab_rows.push_back(hi - lo);
    if (i == r) out.vocab0 = lo, out.vocab1 = hi;
  }
  if (w.output.data) w.output = rows(w.output, {out.vocab0, out.vocab1});  // none before the last stage

  h.n_head = int32_t(q.n());
  h.n_head_kv = int32_t(kv.n());
  if (dense) h.n_ff = int32_t(f.n());
  if (experts && !ep) h.n_ff_exp = int32_t(fe.n());
  return out;
}

void cut_layers(PpStage& s, const std::string& name, const HParams& h, Weights& w) {
  s.first = stage_first_layer(h.n_layer, s.stage, s.size);
  s.end = stage_first_layer(h.n_layer, s.stage + 1, s.size);
  if (!s.on()) return;
  if (h.n_layer < s.size)
    fail("{}: --pipeline-parallel-size {}: {} layers leave a stage without one", name, s.size, h.n_layer);
  for (int32_t il = 0; il < h.n_layer; ++il)
    if (il < s.first || il >= s.end) w.layers[size_t(il)] = LayerWeights{};
  if (!s.is_last()) w.output = {};
}

}  // namespace ridge
