#include "tools/bench_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "engine/block_manager.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_step.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed.h"
#include "model/kv_cache.h"
#include "model/mkmodel.h"
#include "quant/quant.h"

namespace ridge {

std::vector<KernelShape> preset_shapes(const std::string& preset) {
  const PresetDims d = preset_dims(preset);
  return {{"attn_q", d.n_embd, d.n_q},  {"attn_kv", d.n_embd, d.n_kv}, {"attn_output", d.n_q, d.n_embd},
          {"ffn_up", d.n_embd, d.n_ff}, {"ffn_down", d.n_ff, d.n_embd}, {"output", d.n_embd, d.n_vocab}};
}

// Rows of valid blocks: random codes, scales of a plausible size. What the values are
// does not change the time; that they are finite keeps the FP units on their fast path.
std::vector<uint8_t> random_rows(DType t, int64_t k, int64_t n_out, uint64_t seed) {
  const int64_t rb = row_bytes(t, k);
  std::vector<uint8_t> v(static_cast<size_t>(rb * n_out));
  std::mt19937_64 rng(seed);
  const auto& info = dtype_info(t);
  if (t == DType::F32) {
    auto* f = reinterpret_cast<float*>(v.data());
    for (int64_t i = 0; i < k * n_out; ++i) f[i] = float(int64_t(rng() % 2001) - 1000) * 1e-3f;
    return v;
  }
  if (t == DType::F16 || t == DType::BF16) {
    auto* h = reinterpret_cast<uint16_t*>(v.data());
    for (int64_t i = 0; i < k * n_out; ++i) {
      const float x = float(int64_t(rng() % 2001) - 1000) * 1e-3f;
      h[i] = t == DType::F16 ? f32_to_f16(x) : f32_to_bf16(x);
    }
    return v;
  }
  for (auto& b : v) b = uint8_t(rng());
  if (t == DType::F8_E4M3_B128) {  // an f32 scale first; no NaN codes
    const float d = 0.01f;
    for (int64_t i = 0; i < int64_t(v.size()) / 132; ++i) {
      uint8_t* b = v.data() + i * 132;
      std::memcpy(b, &d, 4);
      for (int j = 4; j < 132; ++j)
        if ((b[j] & 0x7F) == 0x7F) b[j] = uint8_t(b[j] - 1);
    }
    return v;
  }
  // Every block type but Q6_K starts with its f16 scale(s); Q6_K ends with it.
  const uint16_t scale = f32_to_f16(0.01f);
  const int64_t bs = int64_t(info.type_size), nblocks = int64_t(v.size()) / bs;
  for (int64_t i = 0; i < nblocks; ++i) {
    uint8_t* b = v.data() + i * bs;
    if (t == DType::Q6_K) std::memcpy(b + bs - 2, &scale, 2);
    else {
      std::memcpy(b, &scale, 2);
      if (t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K) std::memcpy(b + 2, &scale, 2);
    }
  }
  return v;
}

namespace {

// Largest activation row count benchmarked with the weights streamed from DRAM.
constexpr int64_t kStreamMaxM = 64;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

std::vector<KernelResult> bench_kernels(const KernelBenchOptions& opt, const Peaks& peaks) {
  ThreadPool pool(opt.threads > 0 ? opt.threads : default_thread_count());
  std::vector<KernelResult> out;
  kernels::Matmul mm;
  const double bw = peaks.dram_read_gbs.count(pool.size()) ? peaks.dram_read_gbs.at(pool.size()) : peaks.dram_read_gbs_max;
  Progress progress("bench kernels", int64_t(opt.types.size() * opt.shapes.size()), "kernels");
  for (DType t : opt.types) {
    for (const KernelShape& s : opt.shapes) {
      progress.set_detail(fmt::format("{} {}", dtype_name(t), s.name));
      progress.add(1);
      if (s.k % dtype_info(t).block_size != 0) {
        std::fprintf(stderr, "skipping %s x %s: k = %lld is not a multiple of the %d-element block\n", s.name.c_str(),
                     std::string(dtype_name(t)).c_str(), (long long)s.k, int(dtype_info(t).block_size));
        continue;
      }
      const bool packed = kernels::gemm_available(t);
      const bool fp8_bf16 = t == DType::F8_E4M3_B128 && fp8_path() == Fp8Path::Bf16;
      const auto rows = random_rows(t, s.k, s.n_out, uint64_t(s.k * 131 + s.n_out));
      const int64_t mat_bytes = packed ? kernels::packed_bytes(t, s.k, s.n_out) : int64_t(rows.size());
      std::vector<uint8_t> one(static_cast<size_t>(mat_bytes));
      if (packed)
        kernels::pack_panels(t, s.k, s.n_out, rows.data(), one.data(), 0, (s.n_out + kernels::kPanelRows - 1) / kernels::kPanelRows,
                             fp8_bf16);
      else
        std::memcpy(one.data(), rows.data(), rows.size());
      const int64_t max_m = *std::max_element(opt.ms.begin(), opt.ms.end());
      std::vector<float> x(static_cast<size_t>(max_m * s.k)), y(static_cast<size_t>(max_m * s.n_out));
      std::mt19937 rng(7);
      std::normal_distribution<float> nd;
      for (auto& v : x) v = nd(rng);
      // The decode ring: copies of the matrix, ring_bytes in all.
      const int64_t copies = std::max<int64_t>(1, (opt.ring_bytes + mat_bytes - 1) / mat_bytes);
      Arena ring(size_t(copies * mat_bytes));
      for (int64_t c = 0; c < copies; ++c) std::memcpy(ring.data() + c * mat_bytes, one.data(), size_t(mat_bytes));

      for (int64_t m : opt.ms) {
        // Up to a decode batch, the engine's step reads each matrix from DRAM: so does
        // the bench. Larger m (prefill) reuses one matrix from cache, as a prefill does
        // across its row tiles.
        const bool stream = m <= kStreamMaxM;
        auto view = [&](int64_t c) {
          const uint8_t* base = stream ? ring.data() + c * mat_bytes : one.data();
          return kernels::WeightView{t, s.k, s.n_out, base, packed ? base : nullptr, fp8_bf16};
        };
        mm.run(pool, view(0), x.data(), m, y.data());  // warm-up: scratch sized, pages touched
        std::vector<double> per_call;
        const auto t0 = std::chrono::steady_clock::now();
        while (per_call.size() < 3 || seconds_since(t0) < opt.seconds) {
          const int64_t n = stream ? copies : 1;
          const auto c0 = std::chrono::steady_clock::now();
          for (int64_t c = 0; c < n; ++c) mm.run(pool, view(c), x.data(), m, y.data());
          per_call.push_back(seconds_since(c0) / double(n));
          if (per_call.size() >= 1000) break;
        }
        KernelResult r;
        r.kernel = "matmul";
        r.shape = s.name;
        r.type = t;
        r.m = m;
        r.k = s.k;
        r.n_out = s.n_out;
        // The path of the first row chunk (a last, smaller one may run another).
        const bool amx = packed && kernels::gemm_on_amx(t, std::min(m, kernels::kGemmRowChunk));
        r.path = amx ? std::string("packed-amx") : packed ? "packed-" + std::string(isa_name(active_isa()))
                                                          : "dot-" + std::string(isa_name(active_isa()));
        const double sec = median(per_call);
        r.us = sec * 1e6;
        r.bytes = double(mat_bytes) + 4.0 * double(m) * double(s.k + s.n_out);
        r.flops = 2.0 * double(m) * double(s.k) * double(s.n_out);
        r.gbs = r.bytes / sec / 1e9;
        r.gflops = r.flops / sec / 1e9;
        const bool int8 = quant::act_kind(t) == quant::ActKind::Q8A;
        const auto& peak = int8 ? peaks.int8_vnni : peaks.fp32_fma;
        const double t_mem = stream && bw > 0 ? r.bytes / (bw * 1e9) : 0;
        const double t_comp = peak ? r.flops / (peak->all * 1e9) : 0;
        r.bound = t_mem >= t_comp ? "dram" : (int8 ? "int8_vnni" : "fp32_fma");
        r.pct = 100.0 * std::max(t_mem, t_comp) / sec;
        out.push_back(r);
      }
    }
  }
  if (opt.attn_seqs > 0) out.push_back(bench_attention(opt, peaks));
  return out;
}

struct AttnDecodeStep::Impl {
  PresetDims d;
  int64_t seqs, ctx, per_seq;
  int32_t group;
  int32_t dk, dv;  // a query row's and an output row's width
  KVLayout l;
  std::unique_ptr<KVCache> kv;
  std::vector<int32_t> ids;
  std::vector<float> q, out;  // q: [seqs][n_head][dk], out: [seqs][n_head][dv]
  std::vector<std::span<const int32_t>> tables;  // [seqs] each sequence's blocks in ids
  std::vector<int32_t> n_ctx;                    // [seqs] ctx each
  kernels::AttnStepRunner runner;                // as the CPU backend runs the step
  ThreadPool* pool;
};

AttnDecodeStep::AttnDecodeStep(const KernelBenchOptions& opt, ThreadPool& pool) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.pool = &pool;
  m.d = preset_dims(opt.preset);
  m.seqs = opt.attn_seqs, m.ctx = opt.attn_ctx;
  const int32_t block = opt.attn_block;
  KVLayout& l = m.l;
  l.n_layer = 1;
  l.block_size = block;
  l.n_blocks = int32_t(m.seqs * ((m.ctx + block - 1) / block));
  l.dtype = opt.attn_dtype;
  if (m.d.n_lora_kv > 0) {  // latent attention: one KV head of [rope key | latent], the latent its value
    HParams h;
    h.n_layer = 1, h.n_head = m.d.n_head, h.n_head_kv = 1, h.n_lora_kv = m.d.n_lora_kv;
    h.head_dim_k = m.d.rope_dim + m.d.n_lora_kv, h.head_dim_v = m.d.n_lora_kv;
    l = kv_layout_for(h, block, l.n_blocks, opt.attn_dtype);
  } else {
    l.n_kv_head = m.d.n_head_kv;
    l.head_dim_k = l.head_dim_v = m.d.head_dim;
  }
  m.group = m.d.n_head / l.n_kv_head;
  m.dk = l.head_dim_k, m.dv = l.head_dim_v;
  m.kv = std::make_unique<KVCache>(l);
  // Finite values everywhere, written as the engine writes them (8-bit codes with their
  // scales; a latent's value is its key's last dv dimensions); each sequence's blocks
  // placed as opt.attn_order says.
  std::mt19937_64 rng(3);
  {
    std::vector<float> x(static_cast<size_t>(m.dk));
    for (int32_t b = 0; b < l.n_blocks; ++b)
      for (int32_t h = 0; h < l.n_kv_head; ++h)
        for (int32_t s = 0; s < block; ++s) {
          for (auto& e : x) e = float(int64_t(rng() % 2001) - 1000) * 1e-3f;
          m.kv->write_k(0, b, h, s, x.data());
          m.kv->write_v(0, b, h, s, x.data() + (m.dk - m.dv));
        }
  }
  m.ids.resize(static_cast<size_t>(l.n_blocks));
  for (size_t i = 0; i < m.ids.size(); ++i) m.ids[i] = int32_t(i);
  m.per_seq = l.n_blocks / m.seqs;
  using O = KernelBenchOptions::AttnOrder;
  if (opt.attn_order == O::Shuffled) std::shuffle(m.ids.begin(), m.ids.end(), rng);
  if (opt.attn_order == O::Reversed)
    for (int64_t s = 0; s < m.seqs; ++s) std::reverse(m.ids.begin() + s * m.per_seq, m.ids.begin() + (s + 1) * m.per_seq);
  if (opt.attn_order == O::Turns) {
    BlockManager bm(l.n_blocks, block);
    std::vector<BlockTable> tables(static_cast<size_t>(m.seqs));
    for (int64_t i = 1; i <= m.per_seq; ++i)
      for (auto& t : tables) RIDGE_CHECK(bm.reserve(t, i * block), "bench attention: the pool ran out of blocks");
    for (int64_t s = 0; s < m.seqs; ++s) std::copy(tables[size_t(s)].begin(), tables[size_t(s)].end(), m.ids.begin() + s * m.per_seq);
  }
  m.q.assign(static_cast<size_t>(m.seqs * m.d.n_head * m.dk), 0.01f);
  m.out.resize(static_cast<size_t>(m.seqs * m.d.n_head * m.dv));
  for (int64_t s = 0; s < m.seqs; ++s) m.tables.emplace_back(m.ids.data() + s * m.per_seq, size_t(m.per_seq));
  m.n_ctx.assign(size_t(m.seqs), int32_t(m.ctx));
}

AttnDecodeStep::~AttnDecodeStep() = default;

void AttnDecodeStep::run() {
  Impl& m = *impl_;
  kernels::AttnStep s;
  s.kv = m.kv.get(), s.scale = 0.125f, s.n_head = m.d.n_head, s.n_kv_head = m.l.n_kv_head;
  s.q = m.q.data(), s.out = m.out.data(), s.tables = m.tables, s.n_ctx = m.n_ctx;
  m.runner.run(*m.pool, s);
}

double AttnDecodeStep::bytes() const {
  return double(impl_->seqs) * double(impl_->ctx) * double(impl_->l.bytes_per_token());
}

double AttnDecodeStep::flops() const {
  return double(impl_->seqs) * double(impl_->ctx) * impl_->d.n_head * double(impl_->dk + impl_->dv) * 2.0;
}

const KVLayout& AttnDecodeStep::layout() const { return impl_->l; }

const char* AttnDecodeStep::plan() const { return kernels::attn_plan_name(impl_->runner.last_plan()); }

KernelResult bench_attention(const KernelBenchOptions& opt, const Peaks& peaks) {
  ThreadPool pool(opt.threads > 0 ? opt.threads : default_thread_count());
  AttnDecodeStep step(opt, pool);
  step.run();
  std::vector<double> times;
  const auto t0 = std::chrono::steady_clock::now();
  while (times.size() < 3 || seconds_since(t0) < opt.seconds) {
    const auto c0 = std::chrono::steady_clock::now();
    step.run();
    times.push_back(seconds_since(c0));
    if (times.size() >= 100000) break;
  }
  using O = KernelBenchOptions::AttnOrder;
  const PresetDims d = preset_dims(opt.preset);
  KernelResult r;
  r.kernel = "attention";
  r.shape = fmt::format("decode {}x{} b{}{}{} t{}", opt.attn_seqs, opt.attn_ctx, opt.attn_block,
                        preset_dims(opt.preset).n_lora_kv > 0 ? " latent" : "",
                        opt.attn_order == O::Ordered    ? " ordered"
                        : opt.attn_order == O::Reversed ? " reversed"
                        : opt.attn_order == O::Turns    ? " turns"
                                                        : "",
                        kernels::attention_tile_keys());
  r.type = opt.attn_dtype;
  r.m = opt.attn_seqs;
  r.k = opt.attn_ctx;
  r.n_out = d.n_head;
  r.path = "grouped-" + std::string(isa_name(active_isa())) + (step.layout().v_in_k ? std::string("-") + step.plan() : "");
  const double sec = median(times);
  r.us = sec * 1e6;
  r.bytes = step.bytes();
  r.flops = step.flops();
  r.gbs = r.bytes / sec / 1e9;
  r.gflops = r.flops / sec / 1e9;
  const double bw = peaks.dram_read_gbs.count(pool.size()) ? peaks.dram_read_gbs.at(pool.size()) : peaks.dram_read_gbs_max;
  const double t_mem = bw > 0 ? r.bytes / (bw * 1e9) : 0;
  // An int8 cache's scores and P.V are integer dot products (attention_avx512.cpp), on
  // CPUs with VNNI; the bf16 ways' are vdpbf16ps (kernels/cpu/attention.h AttnDots; AMX
  // tiles are measured against it too, a lower roof than theirs), the F16 way's
  // vfmadd231ph; the other dtypes' arithmetic is fp32 FMAs.
  const bool i8 = opt.attn_dtype == DType::I8 && peaks.int8_vnni && active_isa() == Isa::Avx512;
  const auto dots = kernels::detail::attention_dots(step.layout());
  const bool h16 = dots == kernels::detail::AttnDots::F16 && peaks.fp16_fma;
  const bool b16 = (dots == kernels::detail::AttnDots::Amx || dots == kernels::detail::AttnDots::Bf16) && peaks.bf16_dot;
  const auto& peak = i8 ? peaks.int8_vnni : h16 ? peaks.fp16_fma : b16 ? peaks.bf16_dot : peaks.fp32_fma;
  const double t_comp = peak ? r.flops / (peak->all * 1e9) : 0;
  r.bound = t_mem >= t_comp ? "dram" : i8 ? "int8_vnni" : h16 ? "fp16_fma" : b16 ? "bf16_dot" : "fp32_fma";
  r.pct = 100.0 * std::max(t_mem, t_comp) / sec;
  return r;
}

std::string kernel_results_json(const std::vector<KernelResult>& rs, const Peaks& peaks) {
  std::string s = fmt::format("{{\"cpu\":\"{}\",\"dram_read_gbs_max\":{:.3f},\"results\":[", peaks.cpu, peaks.dram_read_gbs_max);
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    s += fmt::format(
        "{}{{\"kernel\":\"{}\",\"shape\":\"{}\",\"type\":\"{}\",\"m\":{},\"k\":{},\"n\":{},\"path\":\"{}\",\"us\":{:.3f},"
        "\"bytes\":{:.0f},\"flops\":{:.0f},\"gbs\":{:.3f},\"gflops\":{:.3f},\"bound\":\"{}\",\"pct_of_bound\":{:.2f}}}",
        i ? "," : "", r.kernel, r.shape, dtype_name(r.type), r.m, r.k, r.n_out, r.path, r.us, r.bytes, r.flops, r.gbs,
        r.gflops, r.bound, r.pct);
  }
  return s + "]}\n";
}

}  // namespace ridge
