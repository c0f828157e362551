#include "kernels/cuda/cuda_backend.h"

#include "core/error.h"

#if RIDGE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ridge::kernels {
namespace {

// Grow-only device memory; what it held is not kept when it grows.
class DeviceBuf {
 public:
  ~DeviceBuf() {
    if (p_) cudaFree(p_);
  }
  // The stream is synchronized before the old buffer is freed (kernels may still read it).
  void* reserve(int64_t bytes, cudaStream_t s) {
    if (bytes > cap_) {
      const int64_t n = std::max<int64_t>(bytes, cap_ * 3 / 2);
      if (p_) {
        RIDGE_CU(cudaStreamSynchronize(s));
        RIDGE_CU(cudaFree(p_));
        p_ = nullptr, cap_ = 0;
      }
      RIDGE_CU(cudaMalloc(&p_, size_t(n)));
      cap_ = n;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  int64_t cap_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    RIDGE_CU(cudaSetDevice(0));
    RIDGE_CU(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    cudaDeviceProp p{};
    RIDGE_CU(cudaGetDeviceProperties(&p, 0));
    n_sm_ = p.multiProcessorCount;
    max_smem_ = int(p.sharedMemPerBlockOptin);
    // Tuning and test knobs: the GEMV's launch shape, and the fewest rows that take cuBLAS
    // (a large value keeps every matmul in the GEMV's f32 arithmetic, for exact tests).
    if (const char* e = std::getenv("RIDGE_CUDA_GEMV"); e && *e)
      if (std::sscanf(e, "%d,%d", &gemv_.rows, &gemv_.unroll) != 2) fail("RIDGE_CUDA_GEMV={}: not ROWS,UNROLL", e);
    if (const char* e = std::getenv("RIDGE_CUDA_GEMM_ROWS"); e && *e) gemm_rows_ = std::atoi(e);
    // RIDGE_CUDA_ATTN=tc: prompt chunks on the tensor-core kernel (attention_tc.cu), which
    // has not yet run on a device (docs/BENCHMARKS.md, issue 30): off until its tests pass
    // there.
    if (const char* e = std::getenv("RIDGE_CUDA_ATTN"); e && std::string(e) == "tc") tc_attention_ = true;
    RIDGE_CHECK(gemm_rows_ >= 1, "RIDGE_CUDA_GEMM_ROWS must be positive");
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(s_);
    cublas_.reset();  // its handle is bound to the stream
    for (cudaEvent_t e : ev_)
      if (e) cudaEventDestroy(e);
    for (auto& [k, r] : resident_) cudaFree(r);
    if (host_) cudaFreeHost(host_);
    cudaStreamDestroy(s_);
  }

  const char* name() const override { return "cuda"; }

  float* alloc(int64_t n) override {
    void* p = nullptr;
    RIDGE_CU(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(float)));
    return static_cast<float*>(p);
  }
  void free(float* p) override {
    cudaStreamSynchronize(s_);
    cudaFree(p);
  }
  uint8_t* alloc_kv(int64_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, size_t(bytes));
    if (e != cudaSuccess) fail("CUDA: cannot allocate a KV cache of {} MiB: {}", bytes >> 20, cudaGetErrorString(e));
    // On the backend's stream: the legacy stream's memset is not ordered with it.
    RIDGE_CU(cudaMemsetAsync(p, 0, size_t(bytes), s_));
    return static_cast<uint8_t*>(p);
  }
  void free_kv(uint8_t* p) override {
    cudaStreamSynchronize(s_);
    cudaFree(p);
  }
  int64_t device_free_bytes() const override {
    size_t free = 0, total = 0;
    RIDGE_CU(cudaMemGetInfo(&free, &total));
    return int64_t(free);
  }
  void sync() override { RIDGE_CU(cudaStreamSynchronize(s_)); }
  double timed(const std::function<void()>& fn) override {
    if (!ev_[0]) {
      RIDGE_CU(cudaEventCreate(&ev_[0]));
      RIDGE_CU(cudaEventCreate(&ev_[1]));
    }
    RIDGE_CU(cudaEventRecord(ev_[0], s_));
    fn();
    RIDGE_CU(cudaEventRecord(ev_[1], s_));
    RIDGE_CU(cudaEventSynchronize(ev_[1]));
    float ms = 0;
    RIDGE_CU(cudaEventElapsedTime(&ms, ev_[0], ev_[1]));
    return double(ms) * 1e-3;
  }

  void begin_step(const StepInfo& s) override {
    step_info_ = s;
    const int64_t T = int64_t(s.tokens.size());
    RIDGE_CHECK(s.seq.size() == size_t(T) && s.pos.size() == size_t(T), "step: tokens, sequences and positions differ");
    arena_off_ = 0;
    if (!retired_.empty()) {  // queued kernels may still read them (a step that threw)
      RIDGE_CU(cudaStreamSynchronize(s_));
      retired_.clear();
    }
    max_pos_ = 0;
    for (int32_t p : s.pos) max_pos_ = std::max(max_pos_, p);
    max_seq_tokens_ = 0;
    for (int64_t t = 0, run = 0; t < T; ++t) {
      run = t > 0 && s.seq[size_t(t)] == s.seq[size_t(t) - 1] ? run + 1 : 1;
      max_seq_tokens_ = std::max<int64_t>(max_seq_tokens_, run);
    }
    tiles_tokens_ = 0;
    std::vector<int32_t>& h = staging_;
    h.clear();
    h.insert(h.end(), s.tokens.begin(), s.tokens.end());
    h.insert(h.end(), s.seq.begin(), s.seq.end());
    h.insert(h.end(), s.pos.begin(), s.pos.end());
    const int32_t* d = upload(h);
    step_.tokens = d, step_.seq = d + T, step_.pos = d + 2 * T, step_.T = int32_t(T);
    tables_.clear();
    set_block_tables(s.block_tables);
  }

  void set_block_tables(std::span<const std::span<const int32_t>> tables) override {
    const void* key = tables.data();
    for (const auto& [k, off, tab] : tables_)
      if (k == key) {
        step_.tab_off = off, step_.tab = tab;
        return;
      }
    std::vector<int32_t>& h = staging_;
    h.clear();
    int32_t at = 0;
    for (const auto& t : tables) h.push_back(at), at += int32_t(t.size());
    h.push_back(at);
    for (const auto& t : tables) h.insert(h.end(), t.begin(), t.end());
    const int32_t* d = upload(h);
    step_.tab_off = d, step_.tab = d + tables.size() + 1;
    tables_.push_back({key, step_.tab_off, step_.tab});
  }

  void embed(const WeightView& table, float* x) override {
    cuda::embed(table.type, weight(table), row_bytes(table.type, table.k), table.k, step_.tokens, step_.T, x, s_);
    launched();
  }
  void rms_norm(const float* x, const float* w, float* y, int64_t m, int64_t n, float eps) override {
    cuda::rms_norm(x, nullptr, vec(w, n), y, m, n, eps, s_);
    launched();
  }
  void rms_norm_rows(const float* x, std::span<const int32_t> rows, const float* w, float* y, int64_t n,
                     float eps) override {
    cuda::rms_norm(x, upload(rows), vec(w, n), y, int64_t(rows.size()), n, eps, s_);
    launched();
  }
  void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t n,
                  float eps) override {
    cuda::layer_norm(x, nullptr, vec(w, n), vec(b, n), y, m, n, eps, s_);
    launched();
  }
  void layer_norm_rows(const float* x, std::span<const int32_t> rows, const float* w, const float* b, float* y,
                       int64_t n, float eps) override {
    cuda::layer_norm(x, upload(rows), vec(w, n), vec(b, n), y, int64_t(rows.size()), n, eps, s_);
    launched();
  }
  void add_positions(const float* table, float* x, int64_t n) override {
    // The table stays on the host (its rows are the step's positions): the rows go up.
    std::vector<float> rows(step_info_.pos.size() * size_t(n));
    for (size_t t = 0; t < step_info_.pos.size(); ++t)
      std::copy_n(table + int64_t(step_info_.pos[t]) * n, n, rows.begin() + int64_t(t) * n);
    cuda::add(x, upload_f32(rows), int64_t(rows.size()), s_);
    launched();
  }
  void add(float* x, const float* y, int64_t m, int64_t n) override {
    cuda::add(x, y, m * n, s_);
    launched();
  }
  void add_bias(float* x, const float* b, int64_t m, int64_t n) override {
    cuda::add_bias(x, vec(b, n), m, n, s_);
    launched();
  }
  void add_bias_runs(std::span<const BiasRun> runs, int64_t n) override {
    for (const BiasRun& r : runs) add_bias(r.x, r.b, r.rows, n);
  }
  void swiglu(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    act(cuda::Act::SwiGlu, gate, up, out, m * n);
  }
  void swiglu_oai(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    act(cuda::Act::SwiGluOai, gate, up, out, m * n);
  }
  void gelu(const float* x, float* out, int64_t m, int64_t n) override { act(cuda::Act::Gelu, x, nullptr, out, m * n); }
  void geglu(const float* gate, const float* up, float* out, int64_t m, int64_t n) override {
    act(cuda::Act::GeGlu, gate, up, out, m * n);
  }
  void scale(float* x, float s, int64_t n) override {
    cuda::scale(x, s, n, s_);
    launched();
  }
  void softcap(float* x, float c, int64_t n) override {
    cuda::softcap(x, c, n, s_);
    launched();
  }

  // The router's choice runs on the host (the CPU's, kernels/cpu/ops.h): the forward
  // groups the rows by expert there anyway.
  void moe_route(const float* logits, int64_t m, const MoeRouting& r, int32_t* ids, float* weights) override {
    const std::span<const float> l = to_host(logits, m * r.n_expert);
    for (int64_t t = 0; t < m; ++t) moe_route_row(l.data() + t * r.n_expert, r, ids + t * r.k, weights + t * r.k);
  }
  void copy_rows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t m, int64_t n) override {
    cuda::copy_rows(x, ldx, y, ldy, m, n, s_);
    launched();
  }
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t n, float* y) override {
    cuda::gather_rows(x, upload(rows), int64_t(rows.size()), n, y, s_);
    launched();
  }
  void moe_combine(const float* y, const int32_t* idx, const float* w, int64_t m, int32_t k, int64_t n,
                   float* out) override {
    const int32_t* di = upload(std::span<const int32_t>(idx, size_t(m * k)));
    const float* dw = upload_f32(std::span<const float>(w, size_t(m * k)));
    cuda::moe_combine(y, di, dw, m, k, n, out, s_);
    launched();
  }

  void matmul(const WeightView& w, const float* x, int64_t m, float* y) override {
    if (m <= 0) return;
    RIDGE_CHECK(cuda::weight_type_supported(w.type), "the CUDA backend has no kernel for {} weights",
                dtype_name(w.type));
    const uint8_t* dw = weight(w);
    const int64_t rb = row_bytes(w.type, w.k);
    if (m < gemm_rows_) {
      cuda::gemv(w.type, dw, rb, w.n_out, w.k, x, m, y, gemv_, s_);
      launched();
      return;
    }
    gemm(w, dw, x, m, y);
  }
  bool groups(const WeightView&) const override { return false; }
  void matmul_grouped(std::span<const GroupedMatmul> items) override {
    for (const GroupedMatmul& it : items) {
      const float* x = it.x;
      if (it.gate) {
        float* a = static_cast<float*>(act_buf_.reserve(it.m * it.w->k * 4, s_));
        act(cuda::Act::SwiGlu, it.gate, it.up, a, it.m * it.w->k);
        x = a;
      }
      if (it.n_outs == 1) matmul(*it.w, x, it.m, it.outs[0].y);
      else matmul_fused(*it.w, x, it.m, {it.outs[0], it.outs[1]});
    }
  }
  bool fuses(const WeightView&) const override { return false; }
  // The parts one by one, each resident on its own (fuses() is false: the forward does
  // not call this; grouped experts do).
  void matmul_fused(const WeightView& w, const float* x, int64_t m, std::initializer_list<MatmulOut> outs) override {
    int64_t row0 = 0;
    for (const MatmulOut& o : outs) {
      WeightView part = w;
      part.data = w.data + row0 * row_bytes(w.type, w.k);
      part.packed = nullptr;
      part.n_out = o.n_out;
      matmul(part, x, m, o.y);
      row0 += o.n_out;
    }
  }
  bool takes_rows(const WeightView&) const override { return false; }
  void add_norm_matmul(const WeightView& w, float* x, const float* residual, const float* norm_w, float eps, int64_t m,
                       std::initializer_list<MatmulOut> outs) override {
    if (residual) add(x, residual, m, w.k);
    float* xn = static_cast<float*>(act_buf_.reserve(m * w.k * 4, s_));
    rms_norm(x, norm_w, xn, m, w.k, eps);
    matmul_fused(w, xn, m, outs);
  }
  void swiglu_matmul(const WeightView& w, const float* gate, const float* up, int64_t m, float* y) override {
    float* a = static_cast<float*>(act_buf_.reserve(m * w.k * 4, s_));
    act(cuda::Act::SwiGlu, gate, up, a, m * w.k);
    matmul(w, a, m, y);
  }
  void geglu_matmul(const WeightView& w, const float* gate, const float* up, int64_t m, float* y) override {
    float* a = static_cast<float*>(act_buf_.reserve(m * w.k * 4, s_));
    act(cuda::Act::GeGlu, gate, up, a, m * w.k);
    matmul(w, a, m, y);
  }
  void gelu_matmul(const WeightView& w, const float* x, const float* b, int64_t m, float* y) override {
    float* a = static_cast<float*>(act_buf_.reserve(m * w.k * 4, s_));
    cuda::copy_rows(x, w.k, a, w.k, m, w.k, s_);
    if (b) cuda::add_bias(a, vec(b, w.k), m, w.k, s_);
    act(cuda::Act::Gelu, a, nullptr, a, m * w.k);
    matmul(w, a, m, y);
  }

  void qkv_rope(const QkvRopeArgs& a) override {
    cuda::QkvDev d;
    d.q = a.q, d.k = a.k, d.v = a.v;
    const int64_t nq = int64_t(a.n_head) * a.dk, nk = int64_t(a.n_kv_head) * a.dk, nv = int64_t(a.n_kv_head) * a.dv;
    if (a.bq) d.bq = vec(a.bq, nq), d.bk = vec(a.bk, nk), d.bv = vec(a.bv, nv);
    if (a.q_norm) d.q_norm = vec(a.q_norm, a.dk), d.k_norm = vec(a.k_norm, a.dk);
    d.n_head = a.n_head, d.n_kv_head = a.n_kv_head, d.dk = a.dk, d.dv = a.dv, d.layer = a.layer, d.eps = a.eps;
    d.rope = rope(a.rope_swa && step_info_.rope_swa.rope_dim > 0 ? step_info_.rope_swa : step_info_.rope);
    d.kv = kv(*a.kv);
    d.step = step_;
    cuda::qkv_rope(d, s_);
    launched();
  }
  void attention(const AttentionArgs& a) override {
    cuda::AttnDev d;
    d.q = a.q, d.out = a.out, d.n_head = a.n_head, d.n_kv_head = a.n_kv_head, d.dk = a.dk, d.dv = a.dv;
    d.layer = a.layer, d.window = a.window, d.scale = a.scale;
    d.sinks = a.sinks ? vec(a.sinks, a.n_head) : nullptr;
    d.kv = kv(*a.kv);
    d.step = step_;
    d.max_pos = max_pos_;
    d.n_sm = n_sm_;
    d.max_smem = max_smem_;
    RIDGE_CHECK(a.n_kv_head > 0 && a.n_head % a.n_kv_head == 0, "attention: {} heads over {} KV heads", a.n_head,
                a.n_kv_head);
    // Prompt chunks on the tensor cores; decode rows (and shapes it lacks) on the kernel
    // that splits a long context over the multiprocessors.
    const int tpt = tc_attention_ && max_seq_tokens_ >= 16 ? cuda::attention_tc_tokens(d) : 0;
    if (tpt > 0) {
      if (tiles_tokens_ != tpt) {  // the step's query tiles, made once per step
        std::vector<int32_t> tiles;
        const auto& sq = step_info_.seq;
        for (size_t t = 0; t < sq.size();) {
          size_t e = t;
          while (e < sq.size() && sq[e] == sq[t]) ++e;
          for (size_t a0 = t; a0 < e; a0 += size_t(tpt))
            tiles.push_back(int32_t(a0)), tiles.push_back(int32_t(std::min(e - a0, size_t(tpt))));
          t = e;
        }
        tiles_ = upload(tiles);
        n_tiles_ = int(tiles.size() / 2);
        tiles_tokens_ = tpt;
      }
      cuda::attention_tc(d, tiles_, n_tiles_, s_);
      launched();
      return;
    }
    float* scratch = static_cast<float*>(attn_buf_.reserve(cuda::attention_scratch_floats(d) * 4, s_));
    cuda::attention(d, scratch, s_);
    launched();
  }
  void kv_read(const KVView& kv_view, int32_t layer, float* k) override {
    cuda::kv_read(kv(kv_view), step_, layer, k, s_);
    launched();
  }
  void kv_write(const KVView& kv_view, int32_t layer, int32_t n_heads, const float* k, const float* v) override {
    cuda::kv_write(kv(kv_view), step_, layer, n_heads, k, v, s_);
    launched();
  }

  void from_host(float* dst, std::span<const float> src) override {
    RIDGE_CU(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice, s_));
  }
  std::span<const float> to_host(const float* x, int64_t n) override {
    if (n > host_cap_) {
      if (host_) cudaFreeHost(host_);
      host_ = nullptr;
      RIDGE_CU(cudaMallocHost(&host_, size_t(n) * sizeof(float)));
      host_cap_ = n;
    }
    RIDGE_CU(cudaMemcpyAsync(host_, x, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost, s_));
    RIDGE_CU(cudaStreamSynchronize(s_));
    return {host_, size_t(n)};
  }

 private:
  // A launch's configuration errors surface here; its faults at the next synchronization.
  void launched() { RIDGE_CU(cudaGetLastError()); }

  void act(cuda::Act a, const float* x, const float* y, float* out, int64_t n) {
    cuda::activation(a, x, y, out, n, s_);
    launched();
  }

  // The resident copy of n bytes of host memory at h (weights and the model's vectors,
  // which live as long as the model): uploaded on first use.
  const void* resident(const void* h, int64_t bytes) {
    auto it = resident_.find(h);
    if (it != resident_.end()) return it->second;
    void* d = nullptr;
    const cudaError_t e = cudaMalloc(&d, size_t(bytes));
    if (e != cudaSuccess)
      fail("CUDA: cannot place {} MiB of weights on the device ({} MiB there already): {}", bytes >> 20,
           resident_bytes_ >> 20, cudaGetErrorString(e));
    // On the backend's stream: a copy from pageable memory may return before its DMA
    // lands, and the legacy stream is not ordered with this one. h lives as long as the
    // model (weights) or is staged before the call returns.
    RIDGE_CU(cudaMemcpyAsync(d, h, size_t(bytes), cudaMemcpyHostToDevice, s_));
    resident_.emplace(h, d);
    resident_bytes_ += bytes;
    return d;
  }
  const uint8_t* weight(const WeightView& w) {
    RIDGE_CHECK(w.data, "the CUDA backend reads a weight's GGUF rows, and this one has none (load without repacking)");
    return static_cast<const uint8_t*>(resident(w.data, w.n_out * row_bytes(w.type, w.k)));
  }
  const float* vec(const float* h, int64_t n) { return h ? static_cast<const float*>(resident(h, n * 4)) : nullptr; }

  cuda::RopeDev rope(const RopeParams& p) {
    cuda::RopeDev r;
    r.rope_dim = p.rope_dim, r.freq_base = p.freq_base, r.freq_scale = p.freq_scale, r.attn_factor = p.attn_factor;
    r.neox = p.neox;
    r.freq_factors = vec(p.freq_factors, p.rope_dim / 2);
    return r;
  }

  static cuda::KvDev kv(const KVView& v) {
    const KVLayout& l = v.layout();
    RIDGE_CHECK(l.dtype == DType::F16 || l.dtype == DType::BF16 || l.dtype == DType::F32,
                "the CUDA backend keeps its KV cache in f16, bf16 or f32, not {}", dtype_name(l.dtype));
    RIDGE_CHECK(!l.v_in_k, "the CUDA backend has no latent attention (values inside the keys) yet");
    cuda::KvDev d;
    d.base = v.k_tile(0, 0, 0);
    d.n_blocks = l.n_blocks, d.n_kv_head = l.n_kv_head, d.dk = l.head_dim_k, d.dv = l.head_dim_v, d.bs = l.block_size;
    d.k_head_bytes = v.k_head_bytes(), d.v_head_bytes = v.v_head_bytes();
    d.k_block_bytes = v.k_block_bytes(), d.v_block_bytes = v.v_block_bytes();
    d.type = l.dtype;
    return d;
  }

  // Host arrays for this step's kernels, in a device arena reset by begin_step. An arena
  // that fills is retired (kept until the next step: queued kernels read it) for a larger.
  const void* upload_bytes(const void* h, int64_t bytes) {
    const int64_t need = (bytes + 255) / 256 * 256;
    if (arena_off_ + need > arena_cap_) {
      if (arena_) retired_.push_back(std::move(arena_));
      arena_cap_ = std::max<int64_t>(need, std::max<int64_t>(arena_cap_ * 2, int64_t(1) << 20));
      arena_ = std::make_unique<DeviceBuf>();
      arena_->reserve(arena_cap_, s_);
      arena_off_ = 0;
    }
    uint8_t* d = static_cast<uint8_t*>(arena_->reserve(arena_cap_, s_)) + arena_off_;
    arena_off_ += need;
    // From pageable memory: returns once the bytes are staged, so h may change after.
    if (bytes > 0) RIDGE_CU(cudaMemcpyAsync(d, h, size_t(bytes), cudaMemcpyHostToDevice, s_));
    return d;
  }
  const int32_t* upload(std::span<const int32_t> h) {
    return static_cast<const int32_t*>(upload_bytes(h.data(), int64_t(h.size()) * 4));
  }
  const float* upload_f32(std::span<const float> h) {
    return static_cast<const float*>(upload_bytes(h.data(), int64_t(h.size()) * 4));
  }

  // More rows than the GEMV takes: cuBLAS, in the weight's own 16-bit type (bf16, f16) or
  // f32, quantized weights dequantized to bf16 first.
  void gemm(const WeightView& w, const uint8_t* dw, const float* x, int64_t m, float* y) {
    if (!cublas_) cublas_ = std::make_unique<cuda::Cublas>(s_);
    const int64_t k = w.k, n = w.n_out;
    if (w.type == DType::F32) {
      cublas_->gemm(CUDA_R_32F, dw, x, y, n, m, k);
      return;
    }
    uint16_t* xh = static_cast<uint16_t*>(x_buf_.reserve(m * k * 2, s_));
    if (w.type == DType::F16) {
      cuda::f32_to_f16(x, m * k, xh, s_);
      launched();
      cublas_->gemm(CUDA_R_16F, dw, xh, y, n, m, k);
      return;
    }
    cuda::f32_to_bf16(x, m * k, xh, s_);
    launched();
    const void* wb = dw;
    if (w.type != DType::BF16) {
      uint16_t* d = static_cast<uint16_t*>(w_buf_.reserve(n * k * 2, s_));
      cuda::dequant_bf16(w.type, dw, row_bytes(w.type, w.k), n, k, d, s_);
      launched();
      wb = d;
    }
    cublas_->gemm(CUDA_R_16BF, wb, xh, y, n, m, k);
  }

  cudaStream_t s_ = nullptr;
  int n_sm_ = 0, max_smem_ = 48 << 10;
  cudaEvent_t ev_[2] = {nullptr, nullptr};  // timed()'s start and end
  cuda::GemvShape gemv_;
  int gemm_rows_ = cuda::kGemvMaxRows + 1;
  std::unordered_map<const void*, void*> resident_;
  int64_t resident_bytes_ = 0;
  StepInfo step_info_;
  cuda::StepDev step_;
  int32_t max_pos_ = 0;
  int64_t max_seq_tokens_ = 0;  // the most tokens one sequence has in the step
  bool tc_attention_ = false;   // RIDGE_CUDA_ATTN=tc: prompt chunks on the tensor cores
  int tiles_tokens_ = 0, n_tiles_ = 0;
  const int32_t* tiles_ = nullptr;
  struct Tables {
    const void* key;
    const int32_t* off;
    const int32_t* tab;
  };
  std::vector<Tables> tables_;  // this step's uploaded block tables
  std::vector<int32_t> staging_;
  std::unique_ptr<DeviceBuf> arena_;
  std::vector<std::unique_ptr<DeviceBuf>> retired_;
  int64_t arena_cap_ = 0, arena_off_ = 0;
  DeviceBuf act_buf_, attn_buf_, x_buf_, w_buf_;
  std::unique_ptr<cuda::Cublas> cublas_;
  float* host_ = nullptr;
  int64_t host_cap_ = 0;
};

}  // namespace

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why)
      *why = e != cudaSuccess ? fmt::format("no usable NVIDIA GPU and driver: {}", cudaGetErrorString(e))
                              : std::string("no CUDA device");
    cudaGetLastError();  // clear it
    return false;
  }
  return true;
}

std::unique_ptr<Backend> make_cuda_backend() {
  std::string why;
  if (!cuda_available(&why)) fail("--device cuda: no CUDA device can be used here ({})", why);
  return std::make_unique<CudaBackend>();
}

}  // namespace ridge::kernels

#else  // built without nvcc

namespace ridge::kernels {

bool cuda_available(std::string* why) {
  if (why) *why = "this ridge was built without CUDA (no nvcc when it was built)";
  return false;
}

std::unique_ptr<Backend> make_cuda_backend() {
  fail("--device cuda: this ridge was built without CUDA (no nvcc when it was built); rebuild where nvcc is");
}

}  // namespace ridge::kernels

#endif
