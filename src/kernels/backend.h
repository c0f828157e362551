// The forward's operations on one device. model/forward.cpp says what a layer computes
// and in which order; a Backend says how and where: the CPU (cpu/cpu_backend.h) is the
// first, a GPU the next. The engine and the architecture files never call a kernel
// themselves, so a backend is added here and chosen in engine/model_runner.cpp.
//
// Memory, by kind:
// - Activations live where the backend's ops read them: Forward allocates them through
//   the backend (Activations below) and only passes their pointers on.
// - Weights (WeightView, and the float vectors of norms and biases) are passed as the
//   model holds them, in host memory; a device backend keeps its own resident copy,
//   made on first use and found by address.
// - The KV cache is a KVView (kernels/kv_view.h) over the memory alloc_kv gives: host
//   memory for the CPU, the device's for a GPU (whose KV then never visits the host).
// - The step's token rows (positions, sequences, block tables) are host arrays handed to
//   begin_step; a device backend copies them once per step.
// - Logits come back to the host with to_host, where the engine samples them.
//
// Fusion is the backend's to choose where it pays: takes_rows(w) says the norm or the
// activation feeding w runs inside w's matmul (the CPU does it in the activation
// quantization of its int8 GEMM); fuses(w) says a fused weight (wqkv, w_gate_up) runs as
// one matmul. The forward asks, then accounts the ops that really ran.
//
// Every op keeps the batch invariance of the kernels below it: a token row's result never
// depends on the other rows of the step, on the thread count, or on the order of work.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>

#include "kernels/kv_view.h"
#include "kernels/tensors.h"

namespace ridge::kernels {

// One step's tokens: host arrays that live until the step ends.
struct StepInfo {
  std::span<const int32_t> tokens;  // [T]
  std::span<const int32_t> seq;     // [T] each token's sequence, an index into block_tables
  std::span<const int32_t> pos;     // [T] each token's absolute position
  std::span<const std::span<const int32_t>> block_tables;  // [seqs]
  RopeParams rope;
  // The sliding-window layers' RoPE where it differs (gemma3: another base, no scaling);
  // rope_dim 0: they rotate as the others.
  RopeParams rope_swa;
};

// Per token of the step: q/k/v biases, per-head q/k RMSNorm, RoPE, then K and V into the
// token's cache slot. q, k and v are rewritten in place.
struct QkvRopeArgs {
  float* q = nullptr;        // [T][n_head * dk]
  float* k = nullptr;        // [T][n_kv_head * dk]
  float* v = nullptr;        // [T][n_kv_head * dv]
  const float* bq = nullptr;  // [n_head * dk] biases, all three or none
  const float* bk = nullptr;  // [n_kv_head * dk]
  const float* bv = nullptr;  // [n_kv_head * dv]
  const float* q_norm = nullptr;  // [dk] per-head RMSNorm weights, both or none
  const float* k_norm = nullptr;
  int32_t n_head = 0, n_kv_head = 0, dk = 0, dv = 0;
  float eps = 0;
  const KVView* kv = nullptr;
  int32_t layer = 0;
  bool rope_swa = false;  // rotate by StepInfo::rope_swa (a sliding-window layer's)
};

// Every token's query heads over its sequence's K/V at positions [0, its own] (with a
// window, its last `window` positions only): grouped query attention, query head h
// reading KV head h / (n_head / n_kv_head).
struct AttentionArgs {
  const float* q = nullptr;  // [T][n_head * dk]
  float* out = nullptr;      // [T][n_head * dv]
  int32_t n_head = 0, n_kv_head = 0, dk = 0, dv = 0;
  float scale = 1.f;
  const KVView* kv = nullptr;
  int32_t layer = 0;
  int32_t window = 0;  // a sliding window's positions (kernels/cpu/attention.h AttnArgs::window); 0: none
  const float* sinks = nullptr;  // [n_head] attention sinks (AttnArgs::sinks), or null
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // f32 memory where this backend's ops read and write, [n] floats.
  virtual float* alloc(int64_t n) = 0;
  virtual void free(float* p) = 0;
  // The paged KV pool's bytes where this backend's attention reads them, zeroed; null:
  // host memory, which the pool (model/kv_cache.h) maps itself.
  virtual uint8_t* alloc_kv(int64_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void free_kv(uint8_t* p) { (void)p; }
  // Device memory free now, in bytes (what sizes a device's KV pool); -1: host memory.
  virtual int64_t device_free_bytes() const { return -1; }

  // The step every op until the next begin_step runs over; T = s.tokens.size().
  virtual void begin_step(const StepInfo& s) = 0;
  // The block tables the next KV ops read (StepInfo::block_tables): a model whose window
  // and global layers keep their K/V in pages of their own switches between the step's
  // tables of each page (model/kv_cache.h KvGroups). Valid until the step ends.
  virtual void set_block_tables(std::span<const std::span<const int32_t>> tables) = 0;
  // Returns once every op issued so far has finished (for timing them).
  virtual void sync() {}
  // Seconds the ops fn issues take, waited for (the profile's per-op time). A device
  // backend times them with its own events, where the host's clock would add the launch
  // and the wait; the default is the host's clock around fn and sync.
  virtual double timed(const std::function<void()>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // x[T][table.k]: each token's row of the embedding table.
  virtual void embed(const WeightView& table, float* x) = 0;
  // y[m][n] = rms_norm(x[m][n]) * w.
  virtual void rms_norm(const float* x, const float* w, float* y, int64_t m, int64_t n, float eps) = 0;
  // y[i][n] = rms_norm(x[rows[i]][n]) * w: the rows that need logits.
  virtual void rms_norm_rows(const float* x, std::span<const int32_t> rows, const float* w, float* y, int64_t n,
                             float eps) = 0;
  // y[m][n] = layer_norm(x[m][n]) * w + b (GPT-2's norm, with its bias).
  virtual void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t n,
                          float eps) = 0;
  // y[i][n] = layer_norm(x[rows[i]][n]) * w + b: the rows that need logits.
  virtual void layer_norm_rows(const float* x, std::span<const int32_t> rows, const float* w, const float* b, float* y,
                               int64_t n, float eps) = 0;
  // x[T][n] += table[pos[t]][n] for each token t of the step: learned absolute positions
  // (table, host memory as the model holds it, has a row for every position the step has).
  virtual void add_positions(const float* table, float* x, int64_t n) = 0;
  // x[m][n] += y[m][n].
  virtual void add(float* x, const float* y, int64_t m, int64_t n) = 0;
  // x[m][n] += b[n]: a matmul's bias.
  virtual void add_bias(float* x, const float* b, int64_t m, int64_t n) = 0;
  // Each run's x[rows][n] += its b[n], all runs in one pass: the biases of grouped
  // matmuls (gpt-oss's experts), each item's rows its own.
  virtual void add_bias_runs(std::span<const BiasRun> runs, int64_t n) = 0;
  // out[m][n] = silu(gate) * up.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t m, int64_t n) = 0;
  // out[m][n] = gpt-oss's clamped SwiGLU of gate and up (kernels/cpu/ops.h swiglu_oai).
  virtual void swiglu_oai(const float* gate, const float* up, float* out, int64_t m, int64_t n) = 0;
  // out[m][n] = gelu(x), the tanh form (kernels/cpu/ops.h). out may be x.
  virtual void gelu(const float* x, float* out, int64_t m, int64_t n) = 0;
  // out[m][n] = gelu(gate) * up (GeGLU).
  virtual void geglu(const float* gate, const float* up, float* out, int64_t m, int64_t n) = 0;
  // x[n] *= s.
  virtual void scale(float* x, float s, int64_t n) = 0;
  // x[n] = c tanh(x / c): Gemma's logit cap.
  virtual void softcap(float* x, float c, int64_t n) = 0;

  // Mixture of experts. moe_route: per row of logits[m][r.n_expert], the experts chosen
  // as MoeRouting says, into the host arrays ids[m][r.k] and weights[m][r.k] (the
  // forward groups the rows by expert on the host).
  virtual void moe_route(const float* logits, int64_t m, const MoeRouting& r, int32_t* ids, float* weights) = 0;
  // y[i][0..n) = x[i][0..n) for i < m, x's rows ldx floats apart and y's ldy: a
  // strided copy (multi-head latent attention moves heads between token-major and
  // head-major rows around its per-head matmuls).
  virtual void copy_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t m, int64_t n) = 0;
  // y[i][n] = x[rows[i]][n].
  virtual void gather_rows(const float* x, std::span<const int32_t> rows, int64_t n, float* y) = 0;
  // out[t][n] = the sum over j = 0..k-1, in that order, of w[t][j] * y[idx[t][j]][n]
  // (idx and w host arrays [m][k]): each row's experts' outputs, weighted.
  virtual void moe_combine(const float* y, const int32_t* idx, const float* w, int64_t m, int32_t k, int64_t n,
                           float* out) = 0;

  // y[m][w.n_out] = x[m][w.k] . W^T.
  virtual void matmul(const WeightView& w, const float* x, int64_t m, float* y) = 0;
  // Whether matmul_grouped runs for weights like w (packed, of one type and width).
  virtual bool groups(const WeightView& w) const = 0;
  // Only where groups(w) for every item's weight: every item's matmul (GroupedMatmul) in
  // one pass, the same bits as running them one by one.
  virtual void matmul_grouped(std::span<const GroupedMatmul> items) = 0;
  // Whether the fused weight w (several matrices' rows back to back) runs as one matmul
  // here; where not, the forward runs its parts one by one.
  virtual bool fuses(const WeightView& w) const = 0;
  // Only where fuses(w): outs split w.n_out in order.
  virtual void matmul_fused(const WeightView& w, const float* x, int64_t m, std::initializer_list<MatmulOut> outs) = 0;

  // Whether the row op feeding w (a norm, SwiGLU) runs inside w's matmul here.
  virtual bool takes_rows(const WeightView& w) const = 0;
  // Only where takes_rows(w): x[m][w.k] += residual (when not null), then
  // outs = rms_norm(x) * norm_w . W^T; x keeps the sum.
  virtual void add_norm_matmul(const WeightView& w, float* x, const float* residual, const float* norm_w, float eps,
                               int64_t m, std::initializer_list<MatmulOut> outs) = 0;
  // Only where takes_rows(w): y[m][w.n_out] = (silu(gate) * up)[m][w.k] . W^T.
  virtual void swiglu_matmul(const WeightView& w, const float* gate, const float* up, int64_t m, float* y) = 0;
  // Only where takes_rows(w): y[m][w.n_out] = (gelu(gate) * up)[m][w.k] . W^T.
  virtual void geglu_matmul(const WeightView& w, const float* gate, const float* up, int64_t m, float* y) = 0;
  // Only where takes_rows(w): y[m][w.n_out] = gelu(x + b)[m][w.k] . W^T (b [w.k], or null).
  virtual void gelu_matmul(const WeightView& w, const float* x, const float* b, int64_t m, float* y) = 0;

  virtual void qkv_rope(const QkvRopeArgs& a) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // k[t][n_kv_head * head_dim_k] = every step token's cached K vectors (all KV heads), in
  // f32: what attention would read at (its sequence, its position) of `layer`.
  virtual void kv_read(const KVView& kv, int32_t layer, float* k) = 0;
  // Every step token's K and V of KV heads [0, n_heads) into its cache slot of `layer`:
  // k[T][n_heads * head_dim_k], v[T][n_heads * head_dim_v] (what qkv_rope stores, without
  // its biases, norms and RoPE).
  virtual void kv_write(const KVView& kv, int32_t layer, int32_t n_heads, const float* k, const float* v) = 0;

  // x[n] readable on the host until the next op (the logits the engine samples).
  virtual std::span<const float> to_host(const float* x, int64_t n) = 0;
  // dst[src.size()] (this backend's memory) = src (host memory), in order with the ops.
  virtual void from_host(float* dst, std::span<const float> src) {
    for (size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
  }
};

// f32 scratch in a backend's memory: grows to the largest step; what it held is not kept
// when it grows (every step writes its activations before reading them).
class Activations {
 public:
  explicit Activations(Backend& be) : be_(&be) {}
  ~Activations() {
    if (p_) be_->free(p_);
  }
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;

  float* reserve(int64_t n) {
    if (n > cap_) {
      if (p_) be_->free(p_);
      p_ = nullptr, cap_ = 0;  // alloc may throw
      p_ = be_->alloc(n);
      cap_ = n;
    }
    return p_;
  }
  float* data() const { return p_; }

 private:
  Backend* be_;
  float* p_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace ridge::kernels
