// The CUDA backend against the CPU's, op by op and whole models: every kernel's reference
// is the CPU backend (or, for the matmuls, the dequantized weights in double). Where no
// GPU is (every CI machine), each test says so and skips; scripts/cuda_device_check.sh
// runs them on a lent H200.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "engine/generator.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "model/kv_cache.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "quant/quant.h"

namespace ridge {
namespace {

using kernels::Backend;

#define RIDGE_REQUIRE_CUDA()                                                  \
  do {                                                                        \
    std::string why_;                                                         \
    if (!kernels::cuda_available(&why_)) GTEST_SKIP() << "no GPU: " << why_;  \
  } while (0)

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// ||a - b|| / ||b||.
double rel_err(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A buffer of n floats on a backend, filled from the host.
struct Buf {
  Backend* be;
  float* p;
  int64_t n;
  Buf(Backend& b, std::span<const float> h) : be(&b), p(b.alloc(int64_t(h.size()))), n(int64_t(h.size())) {
    b.from_host(p, h);
  }
  Buf(Backend& b, int64_t size) : be(&b), p(b.alloc(size)), n(size) {
    std::vector<float> nan(size_t(size), NAN);  // poisoned: every element must be written
    b.from_host(p, nan);
  }
  ~Buf() { be->free(p); }
  std::vector<float> host() const {
    auto s = be->to_host(p, n);
    return {s.begin(), s.end()};
  }
};

class CudaTest : public testing::Test {
 protected:
  void SetUp() override {
    cpu_ = kernels::make_cpu_backend(pool_);
    // RIDGE_CUDA_TEST_SELF=1: the CPU in the GPU's place, to check these tests' own
    // references and tolerances on a machine without one.
    if (const char* e = std::getenv("RIDGE_CUDA_TEST_SELF"); e && std::string(e) == "1") {
      gpu_ = kernels::make_cpu_backend(pool_);
      return;
    }
    std::string why;
    if (!kernels::cuda_available(&why)) GTEST_SKIP() << "no GPU: " << why;
    gpu_ = kernels::make_cuda_backend();
  }
  ThreadPool pool_{2};
  std::unique_ptr<Backend> gpu_, cpu_;
};

// --- matmul: every weight format, GEMV and GEMM row counts --------------------------

TEST_F(CudaTest, MatmulEveryFormatMatchesDequantizedReference) {
  const int64_t k = 512, n_out = 300;
  // Every format's rows stay alive: the backend finds its resident copies by address.
  std::vector<std::vector<uint8_t>> keep;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K,
                  DType::F8_E4M3_B128}) {
    const auto wf = randn(size_t(n_out * k), 7, 0.05f);
    std::vector<uint8_t>& rows = keep.emplace_back(size_t(n_out * row_bytes(t, k)));
    for (int64_t r = 0; r < n_out; ++r)
      quant::quantize_row(t, wf.data() + r * k, rows.data() + r * row_bytes(t, k), k);
    std::vector<float> deq(size_t(n_out * k));
    for (int64_t r = 0; r < n_out; ++r) quant::dequantize_row(t, rows.data() + r * row_bytes(t, k), deq.data() + r * k, k);
    kernels::WeightView w{t, k, n_out, rows.data()};
    for (int64_t m : {1, 3, 8, 13, 40}) {
      const auto x = randn(size_t(m * k), 100 + m);
      std::vector<float> ref(size_t(m * n_out));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t o = 0; o < n_out; ++o) {
          double s = 0;
          for (int64_t j = 0; j < k; ++j) s += double(deq[size_t(o * k + j)]) * x[size_t(i * k + j)];
          ref[size_t(i * n_out + o)] = float(s);
        }
      Buf xd(*gpu_, x), yd(*gpu_, m * n_out);
      gpu_->matmul(w, xd.p, m, yd.p);
      const auto y = yd.host();
      // GEMV rows: the exact dequantized weights, f32 sums. GEMM rows: operands rounded
      // to bf16 (f16 for f16 weights; f32 weights stay f32).
      const bool gemm = m > 8;
      const double tol = !gemm || t == DType::F32 ? 1e-5 : t == DType::F16 ? 2e-3 : 1e-2;
      EXPECT_LT(rel_err(y, ref), tol) << dtype_name(t) << " m=" << m;
    }
  }
}

// --- row ops ----------------------------------------------------------------------------

TEST_F(CudaTest, RowOpsMatchCpu) {
  const int64_t m = 7, n = 1000;
  const auto x = randn(size_t(m * n), 1), y = randn(size_t(m * n), 2), w = randn(size_t(n), 3), b = randn(size_t(n), 4);
  auto both = [&](const char* what, auto&& op, double tol = 1e-5) {
    Buf xc(*cpu_, x), yc(*cpu_, y), oc(*cpu_, m * n);
    Buf xg(*gpu_, x), yg(*gpu_, y), og(*gpu_, m * n);
    op(*cpu_, xc.p, yc.p, oc.p);
    op(*gpu_, xg.p, yg.p, og.p);
    const auto a = og.host(), r = oc.host();
    EXPECT_LT(rel_err(a, r), tol) << what;
    const auto a2 = xg.host(), r2 = xc.host();  // in-place ops write x
    EXPECT_LT(rel_err(a2, r2), tol) << what << " (x)";
  };
  const std::vector<int32_t> rows = {6, 0, 3};
  both("rms_norm", [&](Backend& be, float* x, float*, float* o) { be.rms_norm(x, w.data(), o, m, n, 1e-5f); });
  both("rms_norm_rows", [&](Backend& be, float* x, float*, float* o) {
    std::vector<float> z(size_t(m * n), 0.f);
    be.from_host(o, z);
    be.rms_norm_rows(x, rows, w.data(), o, n, 1e-6f);
  });
  both("layer_norm", [&](Backend& be, float* x, float*, float* o) { be.layer_norm(x, w.data(), b.data(), o, m, n, 1e-5f); });
  both("layer_norm_rows", [&](Backend& be, float* x, float*, float* o) {
    std::vector<float> z(size_t(m * n), 0.f);
    be.from_host(o, z);
    be.layer_norm_rows(x, rows, w.data(), b.data(), o, n, 1e-5f);
  });
  both("add", [&](Backend& be, float* x, float* yy, float* o) {
    be.add(x, yy, m, n);
    be.copy_rows(x, n, o, n, m, n);
  });
  both("add_bias", [&](Backend& be, float* x, float*, float* o) {
    be.add_bias(x, b.data(), m, n);
    be.copy_rows(x, n, o, n, m, n);
  });
  both("swiglu", [&](Backend& be, float* x, float* yy, float* o) { be.swiglu(x, yy, o, m, n); });
  both("swiglu_oai", [&](Backend& be, float* x, float* yy, float* o) { be.swiglu_oai(x, yy, o, m, n); });
  both("gelu", [&](Backend& be, float* x, float*, float* o) { be.gelu(x, o, m, n); });
  both("geglu", [&](Backend& be, float* x, float* yy, float* o) { be.geglu(x, yy, o, m, n); });
  both("scale+softcap", [&](Backend& be, float* x, float*, float* o) {
    be.scale(x, 3.f, m * n);
    be.softcap(x, 2.5f, m * n);
    be.copy_rows(x, n, o, n, m, n);
  });
  both("gather_rows", [&](Backend& be, float* x, float*, float* o) {
    std::vector<float> z(size_t(m * n), 0.f);
    be.from_host(o, z);
    be.gather_rows(x, rows, n, o);
  });
  both("moe_combine", [&](Backend& be, float*, float* yy, float* o) {
    const std::vector<int32_t> idx = {0, 5, 2, 2, 6, 1};  // 3 rows of k = 2
    const std::vector<float> wt = {0.25f, 0.75f, 0.5f, 0.5f, 1.f, -0.5f};
    std::vector<float> z(size_t(m * n), 0.f);
    be.from_host(o, z);
    be.moe_combine(yy, idx.data(), wt.data(), 3, 2, n, o);
  });
}

// --- qkv_rope and paged attention -------------------------------------------------------

struct AttnCase {
  int32_t n_head, n_kv_head, dk, block_size, window;
  DType kv;
  bool sinks, bias_norm_neox;
};

// Three sequences over shuffled pages: a prompt chunk from 0, a decode deep in the
// context (long enough to split), a chunk in the middle. Step 1 writes every earlier
// position's K/V; step 2 runs the query tokens. Returns (q after RoPE, attention out,
// the step's K read back).
struct AttnRun {
  std::vector<float> q, out, k;
};

AttnRun run_attention(Backend& be, const AttnCase& c, uint64_t seed) {
  const int32_t nh = c.n_head, nkv = c.n_kv_head, dk = c.dk, dv = c.dk, bs = c.block_size;
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{0, 37}, {1500, 1}, {200, 5}};  // (pos0, tokens)
  int32_t n_blocks = 0;
  for (auto [p0, n] : seqs) n_blocks += (p0 + n + bs - 1) / bs;
  KVLayout l{1, nkv, dk, dv, bs, n_blocks, c.kv};
  KVCache kv(l, {}, &be);
  std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<std::vector<int32_t>> tabs;
  for (size_t s = 0, at = 0; s < seqs.size(); ++s) {
    const int32_t nb = (seqs[s].first + seqs[s].second + bs - 1) / bs;
    tabs.emplace_back(perm.begin() + int64_t(at), perm.begin() + int64_t(at) + nb);
    at += size_t(nb);
  }
  std::vector<std::span<const int32_t>> tab_spans(tabs.begin(), tabs.end());
  const auto bq = randn(size_t(nh * dk), seed + 1, 0.1f), bk = randn(size_t(nkv * dk), seed + 2, 0.1f),
             bv = randn(size_t(nkv * dv), seed + 3, 0.1f);
  auto qn = randn(size_t(dk), seed + 4, 0.2f), kn = randn(size_t(dk), seed + 5, 0.2f);
  for (auto& v : qn) v += 1.f;
  for (auto& v : kn) v += 1.f;
  const auto ff = randn(size_t(dk / 2), seed + 6, 0.1f);
  std::vector<float> freq_factors(ff.size());
  for (size_t i = 0; i < ff.size(); ++i) freq_factors[i] = 1.f + std::fabs(ff[i]);
  const auto sinks = randn(size_t(nh), seed + 7);
  kernels::RopeParams rope;
  rope.rope_dim = dk, rope.freq_base = 10000.f, rope.neox = c.bias_norm_neox;
  if (c.bias_norm_neox) rope.freq_factors = freq_factors.data();

  AttnRun res;
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> toks, sq, pos;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto [p0, n] = seqs[s];
      const int32_t a = step == 0 ? 0 : p0, e = step == 0 ? p0 : p0 + n;
      for (int32_t p = a; p < e; ++p) toks.push_back(0), sq.push_back(int32_t(s)), pos.push_back(p);
    }
    const int64_t T = int64_t(toks.size());
    kernels::StepInfo si{toks, sq, pos, tab_spans, rope, {}};
    be.begin_step(si);
    Buf q(be, randn(size_t(T * nh * dk), seed + 10 + uint64_t(step))), k(be, randn(size_t(T * nkv * dk), seed + 20 + uint64_t(step))),
        v(be, randn(size_t(T * nkv * dv), seed + 30 + uint64_t(step)));
    kernels::QkvRopeArgs qa{q.p, k.p, v.p};
    if (c.bias_norm_neox) qa.bq = bq.data(), qa.bk = bk.data(), qa.bv = bv.data(), qa.q_norm = qn.data(), qa.k_norm = kn.data();
    qa.n_head = nh, qa.n_kv_head = nkv, qa.dk = dk, qa.dv = dv, qa.eps = 1e-6f, qa.kv = &kv, qa.layer = 0;
    be.qkv_rope(qa);
    if (step == 0) continue;
    Buf out(be, T * nh * dv), kr(be, T * nkv * dk);
    const kernels::AttentionArgs aa{q.p, out.p, nh, nkv, dk, dv, 1.f / std::sqrt(float(dk)), &kv, 0, c.window,
                                    c.sinks ? sinks.data() : nullptr};
    be.attention(aa);
    be.kv_read(kv, 0, kr.p);
    res.q = q.host(), res.out = out.host(), res.k = kr.host();
  }
  return res;
}

class CudaAttention : public CudaTest, public testing::WithParamInterface<AttnCase> {};

TEST_P(CudaAttention, MatchesCpu) {
  const AttnCase c = GetParam();
  // The default kernel (f32 arithmetic), then the tensor-core one for prompt chunks where
  // the shape allows (Q and P rounded to the cache's 16-bit type).
  const AttnRun g = run_attention(*gpu_, c, 11), r = run_attention(*cpu_, c, 11);
  EXPECT_LT(rel_err(g.q, r.q), 1e-5) << "q after biases, norms and RoPE";
  EXPECT_LT(rel_err(g.k, r.k), 1e-3) << "K as cached";
  EXPECT_LT(rel_err(g.out, r.out), 2e-4) << "attention output";
  if (kernels::cuda_available()) {
    setenv("RIDGE_CUDA_ATTN", "tc", 1);
    auto tc = kernels::make_cuda_backend();
    unsetenv("RIDGE_CUDA_ATTN");
    const AttnRun s = run_attention(*tc, c, 11);
    const double tol = c.kv == DType::F32 ? 2e-4 : c.kv == DType::BF16 ? 1.5e-2 : 5e-3;
    EXPECT_LT(rel_err(s.out, r.out), tol) << "attention output, tensor-core kernel";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttention,
    testing::Values(AttnCase{8, 2, 64, 16, 0, DType::F16, false, false},     // GQA 4, f16
                    AttnCase{4, 4, 128, 16, 0, DType::BF16, true, true},     // MHA, sinks, biases, norms, neox
                    AttnCase{8, 1, 256, 16, 100, DType::F16, false, false},  // gemma-like: window, dk 256
                    AttnCase{6, 2, 32, 64, 0, DType::F32, false, true},      // blocks of 64 (two tiles)
                    AttnCase{4, 2, 96, 8, 0, DType::F16, true, false}));     // phi-like dk 96, small blocks

// --- whole models ------------------------------------------------------------------------

struct ModelCase {
  const char* arch;
  const char* preset;
  DType dtype;
  // Every matmul in the GEMV's f32 arithmetic: a mixture of experts' routing turns the
  // GEMM's bf16 rounding into other experts, so it is compared without it.
  bool exact = false;
};

std::vector<GenResult> generate(const Model& m, Device dev, const std::vector<std::vector<int32_t>>& prompts) {
  GenOptions opt;
  opt.device = dev;
  opt.threads = 2;
  opt.max_num_batched_tokens = 64;  // prompts in chunks; GEMM rows and GEMV rows both run
  Generator gen(m, nullptr, opt);
  std::vector<GenRequest> reqs;
  for (const auto& p : prompts) {
    GenRequest r;
    r.prompt = p;
    r.max_tokens = 8;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.capture_logits = true;
    reqs.push_back(r);
  }
  return gen.run(reqs);
}

class CudaModel : public testing::TestWithParam<ModelCase> {};

TEST_P(CudaModel, GreedyTokensAndLogitsMatchCpu) {
  RIDGE_REQUIRE_CUDA();
  const ModelCase c = GetParam();
  const std::string path = testing::TempDir() + "/cuda-" + c.preset + "-" + std::string(dtype_name(c.dtype)) + ".gguf";
  make_model({c.arch, c.preset, c.dtype, 3, "", 0, 2}, path);
  auto cpu_model = Model::load(path);
  auto gpu_model = Model::load(path, false);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> t{1};
    for (int j = 0; j < 5 + 23 * i; ++j) t.push_back(3 + (i * 37 + j * 11) % 500);
    prompts.push_back(t);
  }
  const auto ref = generate(*cpu_model, Device::Cpu, prompts);
  if (c.exact) setenv("RIDGE_CUDA_GEMM_ROWS", "1000000", 1);
  const auto got = generate(*gpu_model, Device::Cuda, prompts);
  unsetenv("RIDGE_CUDA_GEMM_ROWS");
  const int64_t V = gpu_model->hparams().n_vocab;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].tokens.size(), ref[i].tokens.size());
    for (size_t s = 0; s < ref[i].tokens.size(); ++s) {
      const std::span<const float> a(got[i].logits.data() + s * size_t(V), size_t(V));
      const std::span<const float> b(ref[i].logits.data() + s * size_t(V), size_t(V));
      EXPECT_LT(rel_err(a, b), 3e-2) << "prompt " << i << " step " << s;
      if (got[i].tokens[s] != ref[i].tokens[s]) {
        // Only a near tie may go the other way; the sequences part there.
        EXPECT_LT(ref[i].margins[s], 0.05f) << "prompt " << i << " step " << s << ": " << got[i].tokens[s]
                                            << " vs the CPU's " << ref[i].tokens[s];
        break;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaModel,
                         testing::Values(ModelCase{"llama", "tiny", DType::F32}, ModelCase{"llama", "tiny", DType::Q8_0},
                                         ModelCase{"llama", "tiny-llama3", DType::BF16},
                                         ModelCase{"qwen2", "tiny", DType::F16}, ModelCase{"qwen3", "tiny", DType::Q4_0},
                                         ModelCase{"phi3", "phi3-longrope-tiny", DType::Q8_0},
                                         ModelCase{"gpt2", "tiny", DType::Q8_0},
                                         ModelCase{"gemma3", "gemma3-tiny", DType::F16},
                                         ModelCase{"llama", "mixtral-tiny", DType::F16, true},
                                         ModelCase{"qwen3moe", "qwen3moe-tiny", DType::F16, true}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.preset) + "_" + info.param.arch + "_" +
                                           std::string(dtype_name(info.param.dtype));
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace ridge
