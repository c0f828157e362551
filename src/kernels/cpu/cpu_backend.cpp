#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_step.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "quant/quant.h"

namespace ridge::kernels {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}
  const char* name() const override { return "cpu"; }

  float* alloc(int64_t n) override {
    // Cache-line aligned: a row of a SIMD kernel never straddles more lines than it must.
    const size_t bytes = (size_t(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<float*>(p);
  }
  void free(float* p) override { std::free(p); }

  void begin_step(const StepInfo& s) override {
    step_ = s;
    const int64_t T = int64_t(s.tokens.size()), rd = s.rope.rope_dim, rds = s.rope_swa.rope_dim;
    rope_cs_.resize(size_t(T * rd));  // [T][rope_dim] (cos, sin) pairs
    for (int64_t t = 0; t < T; ++t) rope_cache(s.rope, s.pos[size_t(t)], rope_cs_.data() + t * rd);
    rope_cs_swa_.resize(size_t(T * rds));
    for (int64_t t = 0; t < T; ++t) rope_cache(s.rope_swa, s.pos[size_t(t)], rope_cs_swa_.data() + t * rds);
  }

  void set_block_tables(std::span<const std::span<const int32_t>> tables) override { step_.block_tables = tables; }

  void embed(const WeightView& table, float* x) override {
    const int64_t T = int64_t(step_.tokens.size()), E = table.k, erow = row_bytes(table.type, E);
    pool_.parallel_for(T, 16, [&](int64_t lo, int64_t hi, int) {
      for (int64_t t = lo; t < hi; ++t)
        quant::dequantize_row(table.type, table.data + step_.tokens[size_t(t)] * erow, x + t * E, E);
    });
  }

  void rms_norm(const float* x, const float* w, float* y, int64_t m, int64_t n, float eps) override {
    rows(m, [&](int64_t t) { kernels::rms_norm(x + t * n, w, y + t * n, n, eps); });
  }
  void rms_norm_rows(const float* x, std::span<const int32_t> rows, const float* w, float* y, int64_t n,
                     float eps) override {
    // A handful of rows (one per sequence): less work than a pool round costs.
    for (size_t r = 0; r < rows.size(); ++r) kernels::rms_norm(x + int64_t(rows[r]) * n, w, y + int64_t(r) * n, n, eps);
  }
  void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t n,
                  float eps) override {
    rows(m, [&](int64_t t) { kernels::layer_norm(x + t * n, w, b, y + t * n, n, eps); });
  }
  void layer_norm_rows(const float* x, std::span<const int32_t> rows, const float* w, const float* b, float* y,
                       int64_t n, float eps) override {
    for (size_t r = 0; r < rows.size(); ++r)
      kernels::layer_norm(x + int64_t(rows[r]) * n, w, b, y + int64_t(r) * n, n, eps);
  }
  void add_positions(const float* table, float* x, int64_t n) override {
    rows(int64_t(step_.tokens.size()), [&](int64_t t) { add_inplace(x + t * n, table + int64_t(step_.pos[size_t(t)]) * n, n); });
  }
  void add(float* x, const float* y, int64_t m, int64_t n) override {
    rows(m, [&](int64_t t) { add_inplace(x + t * n, y + t * n, n); });
  }
  void add_bias(float* x, const float* b, int64_t m, int64_t n) override {
    rows(m, [&](int64_t t) { add_inplace(x + t * n, b, n); });
  }
  void add_bias_runs(std::span<const BiasRun> runs, int64_t n) override {
    int64_t total = 0;
    for (const BiasRun& r : runs) total += r.rows;
    rows(total, [&](int64_t t) {
      size_t i = 0;  // a handful of runs (two per active expert): found by walking
      while (t >= runs[i].rows) t -= runs[i++].rows;
      add_inplace(runs[i].x + t * n, runs[i].b, n);
    });
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    rows(m, [&](int64_t t) { kernels::swiglu(gate + t * n, up + t * n, out + t * n, n); });
  }
  void swiglu_oai(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    rows(m, [&](int64_t t) { kernels::swiglu_oai(gate + t * n, up + t * n, out + t * n, n); });
  }
  void gelu(const float* x, float* out, int64_t m, int64_t n) override {
    rows(m, [&](int64_t t) { kernels::gelu(x + t * n, out + t * n, n); });
  }
  void geglu(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    rows(m, [&](int64_t t) { kernels::geglu(gate + t * n, up + t * n, out + t * n, n); });
  }
  void scale(float* x, float s, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
  }
  void softcap(float* x, float c, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
  }

  void moe_route(const float* logits, int64_t m, const MoeRouting& r, int32_t* ids, float* weights) override {
    rows(m, [&](int64_t t) { kernels::moe_route_row(logits + t * r.n_expert, r, ids + t * r.k, weights + t * r.k); });
  }
  void copy_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t m, int64_t n) override {
    // A decode's few rows on this thread (a pool round would cost more); a prefill's over
    // the pool.
    if (m * n < (int64_t(1) << 15)) {
      for (int64_t i = 0; i < m; ++i) std::copy(x + i * ldx, x + i * ldx + n, y + i * ldy);
      return;
    }
    rows(m, [&](int64_t i) { std::copy(x + i * ldx, x + i * ldx + n, y + i * ldy); });
  }
  void gather_rows(const float* x, std::span<const int32_t> r, int64_t n, float* y) override {
    rows(int64_t(r.size()), [&](int64_t i) { std::copy(x + int64_t(r[size_t(i)]) * n, x + (int64_t(r[size_t(i)]) + 1) * n, y + i * n); });
  }
  void moe_combine(const float* y, const int32_t* idx, const float* w, int64_t m, int32_t k, int64_t n,
                   float* out) override {
    rows(m, [&](int64_t t) {
      float* o = out + t * n;
      std::fill(o, o + n, 0.0f);
      for (int32_t j = 0; j < k; ++j) axpy_inplace(o, y + int64_t(idx[t * k + j]) * n, w[t * k + j], n);
    });
  }

  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override { mm_.run(pool_, w, x, m, y); }
  bool groups(const WeightView& w) const override { return Matmul::takes_rows(w); }
  void matmul_grouped(std::span<const GroupedMatmul> items) override { mm_.run_grouped(pool_, items); }
  bool fuses(const WeightView& w) const override { return w.packed && gemm_available(w.type); }
  void matmul_fused(const WeightView& w, const float* x, int64_t m, std::initializer_list<MatmulOut> outs) override {
    mm_.run_fused(pool_, w, x, m, outs);
  }
  bool takes_rows(const WeightView& w) const override { return Matmul::takes_rows(w); }
  void add_norm_matmul(const WeightView& w, float* x, const float* residual, const float* norm_w, float eps, int64_t m,
                       std::initializer_list<MatmulOut> outs) override {
    const int64_t n = w.k;
    auto row = [&](int64_t t, float* out) {
      if (residual) add_inplace(x + t * n, residual + t * n, n);
      kernels::rms_norm(x + t * n, norm_w, out, n, eps);
    };
    mm_.run_fused(pool_, w, RowSource::of(row), m, outs);
  }
  void swiglu_matmul(const WeightView& w, const float* gate, const float* up, int64_t m, float* y) override {
    const int64_t n = w.k;
    auto row = [&](int64_t t, float* out) { kernels::swiglu(gate + t * n, up + t * n, out, n); };
    mm_.run(pool_, w, RowSource::of(row), m, y);
  }
  void geglu_matmul(const WeightView& w, const float* gate, const float* up, int64_t m, float* y) override {
    const int64_t n = w.k;
    auto row = [&](int64_t t, float* out) { kernels::geglu(gate + t * n, up + t * n, out, n); };
    mm_.run(pool_, w, RowSource::of(row), m, y);
  }
  void gelu_matmul(const WeightView& w, const float* x, const float* b, int64_t m, float* y) override {
    const int64_t n = w.k;
    auto row = [&](int64_t t, float* out) {
      if (b) {
        for (int64_t i = 0; i < n; ++i) out[i] = x[t * n + i] + b[i];
        kernels::gelu(out, out, n);
      } else {
        kernels::gelu(x + t * n, out, n);
      }
    };
    mm_.run(pool_, w, RowSource::of(row), m, y);
  }

  void qkv_rope(const QkvRopeArgs& a) override;
  void attention(const AttentionArgs& a) override;
  // Multi-head attention over runs of consecutive positions; false (nothing done) when
  // the step has no such run (decode).
  bool position_blocks(const AttentionArgs& a);
  void kv_read(const KVView& kv, int32_t layer, float* k) override;
  void kv_write(const KVView& kv, int32_t layer, int32_t n_heads, const float* k, const float* v) override;

  std::span<const float> to_host(const float* x, int64_t n) override { return {x, size_t(n)}; }

 private:
  // fn(t) for every row, spread over the pool (row ops write only their own row).
  template <typename F>
  void rows(int64_t m, F&& fn) {
    pool_.parallel_for(m, std::max<int64_t>(1, m / (int64_t(pool_.size()) * 4)), [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) fn(t);
    });
  }

  ThreadPool& pool_;
  Matmul mm_;
  StepInfo step_;
  std::vector<float> rope_cs_;       // [T][rope_dim] (cos, sin) pairs of the step's positions
  std::vector<float> rope_cs_swa_;   // [T][rope_swa.rope_dim] the same for StepInfo::rope_swa
  std::vector<float> attn_scratch_;  // [threads][attention_scratch_floats(kv, run * group)]
  std::vector<std::pair<int64_t, int32_t>> pos_blocks_;  // (first token, rows) per position block
  std::vector<int32_t> row_ctx_;     // [T] each token's position + 1
  std::vector<std::span<const int32_t>> token_tables_;  // [T] each token's block table
  AttnStepRunner attn_step_;
  std::vector<std::pair<int64_t, int32_t>> runs_;  // kv_read / kv_write: (first token, count) per block run
  std::vector<float> kv_tmp_;        // [threads][head_dim * block_size] a tile's rows in f32
  // The step's tokens in runs of consecutive positions of one sequence inside one block.
  void block_runs(int32_t bs);
};

void CpuBackend::qkv_rope(const QkvRopeArgs& a) {
  // Tokens never share a cache slot, so the rows run in parallel.
  const KVLayout& kl = a.kv->layout();
  const int32_t dk = a.dk, dv = a.dv;
  const int64_t nq = int64_t(a.n_head) * dk, nk = int64_t(a.n_kv_head) * dk, nv = int64_t(a.n_kv_head) * dv;
  const bool swa = a.rope_swa && step_.rope_swa.rope_dim > 0;
  const RopeParams& rp = swa ? step_.rope_swa : step_.rope;
  const int32_t rd = rp.rope_dim;
  const float* cs_all = swa ? rope_cs_swa_.data() : rope_cs_.data();
  rows(int64_t(step_.tokens.size()), [&](int64_t t) {
    float* q = a.q + t * nq;
    float* k = a.k + t * nk;
    float* v = a.v + t * nv;
    if (a.bq) {
      add_inplace(q, a.bq, nq);
      add_inplace(k, a.bk, nk);
      add_inplace(v, a.bv, nv);
    }
    const float* cs = cs_all + t * rd;
    for (int32_t hh = 0; hh < a.n_head; ++hh) {
      if (a.q_norm) kernels::rms_norm(q + hh * dk, a.q_norm, q + hh * dk, dk, a.eps);
      rope_apply(rp, cs, q + hh * dk);
    }
    const std::span<const int32_t> table = step_.block_tables[size_t(step_.seq[size_t(t)])];
    const int32_t pos = step_.pos[size_t(t)];
    const int32_t block = table[size_t(pos / kl.block_size)], slot = pos % kl.block_size;
    for (int32_t hh = 0; hh < a.n_kv_head; ++hh) {
      if (a.k_norm) kernels::rms_norm(k + hh * dk, a.k_norm, k + hh * dk, dk, a.eps);
      rope_apply(rp, cs, k + hh * dk);
      a.kv->write_k(a.layer, block, hh, slot, k + hh * dk);
      a.kv->write_v(a.layer, block, hh, slot, v + hh * dv);
    }
  });
}

void CpuBackend::block_runs(int32_t bs) {
  runs_.clear();
  for (int64_t t = 0; t < int64_t(step_.tokens.size()); ++t) {
    const int32_t p = step_.pos[size_t(t)];
    const bool cont = t > 0 && step_.seq[size_t(t)] == step_.seq[size_t(t - 1)] && p == step_.pos[size_t(t - 1)] + 1 &&
                      p % bs != 0;
    if (cont) ++runs_.back().second;
    else runs_.emplace_back(t, 1);
  }
}

void CpuBackend::kv_read(const KVView& kv, int32_t layer, float* k) {
  const KVLayout& kl = kv.layout();
  const int64_t dk = kl.head_dim_k, nk = int64_t(kl.n_kv_head) * dk, bs = kl.block_size;
  if (kl.scaled()) {  // codes and their scales: the view converts a slot at a time
    rows(int64_t(step_.tokens.size()), [&](int64_t t) {
      const std::span<const int32_t> table = step_.block_tables[size_t(step_.seq[size_t(t)])];
      const int32_t pos = step_.pos[size_t(t)], block = table[size_t(pos / kl.block_size)];
      for (int32_t h = 0; h < kl.n_kv_head; ++h)
        kv.read_k(layer, block, h, pos % kl.block_size, k + t * nk + int64_t(h) * dk);
    });
    return;
  }
  // A K tile is [dk][block_size]: each dimension's run of slots converts as one row, then
  // the run's tokens take their columns.
  block_runs(kl.block_size);
  const int64_t esz = int64_t(dtype_info(kl.dtype).type_size);
  kv_tmp_.resize(size_t(pool_.size() * dk * bs));
  pool_.run(int64_t(runs_.size()) * kl.n_kv_head, [&](int64_t task, int thread) {
    const auto [t0, n] = runs_[size_t(task / kl.n_kv_head)];
    const int32_t h = int32_t(task % kl.n_kv_head), pos0 = step_.pos[size_t(t0)];
    const int32_t block = step_.block_tables[size_t(step_.seq[size_t(t0)])][size_t(pos0 / bs)], slot0 = int32_t(pos0 % bs);
    const uint8_t* tile = kv.k_tile(layer, block, h);
    float* tmp = kv_tmp_.data() + thread * dk * bs;
    for (int64_t d = 0; d < dk; ++d) to_f32(kl.dtype, tile + (d * bs + slot0) * esz, tmp + d * n, n);
    for (int32_t s = 0; s < n; ++s) {
      float* o = k + (t0 + s) * nk + int64_t(h) * dk;
      for (int64_t d = 0; d < dk; ++d) o[d] = tmp[d * n + s];
    }
  });
}

void CpuBackend::kv_write(const KVView& kv, int32_t layer, int32_t n_heads, const float* k, const float* v) {
  const KVLayout& kl = kv.layout();
  const int64_t dk = kl.head_dim_k, dv = kl.head_dim_v, nk = int64_t(n_heads) * dk, nv = int64_t(n_heads) * dv;
  const int64_t bs = kl.block_size;
  if (kl.scaled()) {  // each slot's scale comes from its own vector
    rows(int64_t(step_.tokens.size()), [&](int64_t t) {
      const std::span<const int32_t> table = step_.block_tables[size_t(step_.seq[size_t(t)])];
      const int32_t pos = step_.pos[size_t(t)], block = table[size_t(pos / kl.block_size)];
      for (int32_t h = 0; h < n_heads; ++h) {
        kv.write_k(layer, block, h, pos % kl.block_size, k + t * nk + int64_t(h) * dk);
        kv.write_v(layer, block, h, pos % kl.block_size, v + t * nv + int64_t(h) * dv);
      }
    });
    return;
  }
  // A run's keys gathered dimension by dimension, each converted as one row of the tile;
  // values are rows already. The same conversion per element as write_k and write_v.
  block_runs(kl.block_size);
  const int64_t esz = int64_t(dtype_info(kl.dtype).type_size);
  kv_tmp_.resize(size_t(pool_.size() * dk * bs));
  pool_.run(int64_t(runs_.size()) * n_heads, [&](int64_t task, int thread) {
    const auto [t0, n] = runs_[size_t(task / n_heads)];
    const int32_t h = int32_t(task % n_heads), pos0 = step_.pos[size_t(t0)];
    const int32_t block = step_.block_tables[size_t(step_.seq[size_t(t0)])][size_t(pos0 / bs)], slot0 = int32_t(pos0 % bs);
    float* tmp = kv_tmp_.data() + thread * dk * bs;
    for (int32_t s = 0; s < n; ++s) {
      const float* x = k + (t0 + s) * nk + int64_t(h) * dk;
      for (int64_t d = 0; d < dk; ++d) tmp[d * n + s] = x[d];
    }
    uint8_t* tile = kv.k_tile(layer, block, h);
    for (int64_t d = 0; d < dk; ++d) from_f32(kl.dtype, tmp + d * n, tile + (d * bs + slot0) * esz, n);
    if (kl.v_in_k) return;
    uint8_t* vt = kv.v_tile(layer, block, h);
    for (int32_t s = 0; s < n; ++s) from_f32(kl.dtype, v + (t0 + s) * nv + int64_t(h) * dv, vt + (slot0 + s) * dv * esz, dv);
  });
}

bool CpuBackend::position_blocks(const AttentionArgs& a) {
  // Multi-head attention: no query heads share a KV head's tiles, so a run of one
  // sequence's consecutive positions (a prompt chunk) shares them instead, up to
  // kPositionBlock rows per call, each row with its own causal end (AttnArgs::row_ctx).
  constexpr int32_t kPositionBlock = 16;
  const int64_t T = int64_t(step_.tokens.size());
  pos_blocks_.clear();
  row_ctx_.resize(size_t(T));
  bool shared = false;
  for (int64_t t = 0; t < T; ++t) {
    row_ctx_[size_t(t)] = step_.pos[size_t(t)] + 1;
    const bool cont = t > 0 && step_.seq[size_t(t)] == step_.seq[size_t(t - 1)] &&
                      step_.pos[size_t(t)] == step_.pos[size_t(t - 1)] + 1 && pos_blocks_.back().second < kPositionBlock;
    if (cont) ++pos_blocks_.back().second, shared = true;
    else pos_blocks_.emplace_back(t, 1);
  }
  if (!shared) return false;
  const int64_t nq = int64_t(a.n_head) * a.dk, no = int64_t(a.n_head) * a.dv;
  const int64_t scratch_per = attention_scratch_floats(a.kv->layout(), kPositionBlock);
  attn_scratch_.resize(size_t(pool_.size() * scratch_per));
  const int64_t tasks = int64_t(pos_blocks_.size()) * a.n_kv_head;
  pool_.run(tasks, [&](int64_t task, int thread) {
    const auto [t0, m] = pos_blocks_[size_t(task / a.n_kv_head)];
    const int32_t h = int32_t(task % a.n_kv_head);
    const std::span<const int32_t> ctx = std::span<const int32_t>(row_ctx_).subspan(size_t(t0), size_t(m));
    AttnArgs args{a.kv, a.layer, step_.block_tables[size_t(step_.seq[size_t(t0)])], ctx.back(), a.scale, {}, a.window};
    if (m > 1) args.row_ctx = ctx;
    attention_heads(args, h, 1, m, a.q + t0 * nq + int64_t(h) * a.dk, nq, a.out + t0 * no + int64_t(h) * a.dv, no,
                    attn_scratch_.data() + thread * scratch_per);
  });
  return true;
}

void CpuBackend::attention(const AttentionArgs& a) {
  // K/V are read back from the cache in the stored dtype, so a row sees exactly what a
  // later decode step will see.
  const int64_t T = int64_t(step_.tokens.size());
  const int32_t group = a.n_head / a.n_kv_head;
  // (Sinks are per query head: a block of one head's positions would need them per row.)
  if (group == 1 && !a.sinks && attention_shares_positions(a.kv->layout()) && position_blocks(a)) return;
  row_ctx_.resize(size_t(T));
  token_tables_.resize(size_t(T));
  for (int64_t t = 0; t < T; ++t) {
    row_ctx_[size_t(t)] = step_.pos[size_t(t)] + 1;
    token_tables_[size_t(t)] = step_.block_tables[size_t(step_.seq[size_t(t)])];
  }
  AttnStep s;
  s.kv = a.kv, s.layer = a.layer, s.scale = a.scale, s.window = a.window, s.sinks = a.sinks;
  s.n_head = a.n_head, s.n_kv_head = a.n_kv_head, s.q = a.q, s.out = a.out;
  s.tables = token_tables_, s.n_ctx = row_ctx_;
  attn_step_.run(pool_, s);
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool) { return std::make_unique<CpuBackend>(pool); }

}  // namespace ridge::kernels
