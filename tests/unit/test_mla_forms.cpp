// Multi-head latent attention's two forms (model/forward_mla.cpp, forward_mla_expand.cpp):
// the absorbed and the expanded form each against the double-precision reference (which
// computes attention expanded, per head, from the decompressed keys and values), against
// each other, and the contract that makes the expanded form usable at all: which form a
// position runs is its sequence's (SeqSlice::expand_until), so a token's logits are the
// same bits however the steps cut the sequence, whatever else rides in the step, and
// however many heads the scratch holds at once.
//
// Metric: max|ridge - ref| / max|ref| over all logits of all positions (test_forward_ref.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/threadpool.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "ref_forward.h"
#include "isa_guard.h"

namespace ridge {
namespace {

constexpr int32_t kBlockSize = 16;
// As test_forward_ref.cpp's (same reasons, same observed ranges): f32 arithmetic on f32
// weights and cache; f16 rounding of the cache; 8-bit rounding of quantized matmuls'
// activations. The expanded form adds only its own f32 order of sums (observed within
// the same ranges as the absorbed form's). An E4M3 cache's 3 mantissa bits (2^-4 of each
// key and latent element) move the logits most: 8.7e-2 observed, on every path.
constexpr double kTolFloat = 2e-6, kTolKvF16 = 1e-3, kTolKvBf16 = 1e-2, kTolKvI8 = 2e-2, kTolKvFp8 = 1.5e-1,
                 kTolQuant = 4e-2;

std::vector<int32_t> prompt_tokens() {
  std::vector<int32_t> t = {1};
  for (int32_t i = 1; i < 24; ++i) t.push_back((i * 97 + 13) % 509);
  t[20] = t[5];
  return t;
}

std::string write_model(const std::string& name, const char* preset, DType dtype) {
  MkModelOptions o;
  o.preset = preset;
  o.arch = "deepseek2";
  o.dtype = dtype;
  o.seed = 7;
  const std::string path = ::testing::TempDir() + "ridge_mla_" + std::to_string(::getpid()) + "_" + name + ".gguf";
  make_model(o, path);
  return path;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One sequence's slice of a step: its tokens [from, to) of toks, a logit row each.
struct Part {
  const std::vector<int32_t>* toks;
  int32_t from, to, expand_until;
  const std::vector<int32_t>* table;
};

class Runner {
 public:
  Runner(const std::string& path, DType kv_dtype) : model_(Model::load(path)), pool_(1) {
    kv_ = std::make_unique<KVCache>(kv_layout_for(model_->hparams(), kBlockSize, 8, kv_dtype));
    be_ = kernels::make_cpu_backend(pool_);
    fwd_ = std::make_unique<Forward>(*model_, *kv_, *be_);
  }
  int32_t n_vocab() const { return model_->hparams().n_vocab; }
  Forward& forward() { return *fwd_; }

  // One step of these parts; the logits of each part's tokens appended to outs[part].
  void step(const std::vector<Part>& parts, std::vector<std::vector<float>>& outs) {
    Batch b;  // by hand: Batch::add of a 1-token span trips GCC 12's -Wstringop-overflow
    for (const Part& p : parts) {
      b.tokens.insert(b.tokens.end(), p.toks->begin() + p.from, p.toks->begin() + p.to);
      b.seqs.push_back({p.to - p.from, p.from, *p.table, Logits::All, p.expand_until});
    }
    const auto l = fwd_->run(b);
    const size_t nv = size_t(n_vocab());
    size_t row = 0;
    outs.resize(std::max(outs.size(), parts.size()));
    for (size_t i = 0; i < parts.size(); ++i) {
      const size_t n = size_t(parts[i].to - parts[i].from);
      outs[i].insert(outs[i].end(), l.begin() + std::ptrdiff_t(row * nv), l.begin() + std::ptrdiff_t((row + n) * nv));
      row += n;
    }
  }
  // The sequence cut at `cuts` (ascending ends; the last is toks.size()), one step each.
  std::vector<float> chunks(const std::vector<int32_t>& toks, const std::vector<int32_t>& cuts, int32_t expand_until) {
    std::vector<std::vector<float>> outs;
    int32_t from = 0;
    for (int32_t to : cuts) {
      std::vector<std::vector<float>> o;
      step({{&toks, from, to, expand_until, &table_a_}}, o);
      outs.resize(1);
      outs[0].insert(outs[0].end(), o[0].begin(), o[0].end());
      from = to;
    }
    return outs[0];
  }
  const std::vector<int32_t> table_a_ = {0, 1, 2, 3}, table_b_ = {4, 5, 6, 7};

 private:
  std::unique_ptr<Model> model_;
  ThreadPool pool_;
  std::unique_ptr<KVCache> kv_;
  std::unique_ptr<kernels::Backend> be_;
  std::unique_ptr<Forward> fwd_;
};

std::vector<int32_t> ones_to(int32_t n) {  // decode cuts: 1, 2, ..., n
  std::vector<int32_t> v;
  for (int32_t i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

using test::IsaGuard;

void check_forms(const std::string& name, const std::string& path, DType kv, double tol) {
  const std::vector<int32_t> toks = prompt_tokens();
  const int32_t n = int32_t(toks.size());
  const std::vector<double> ref = test::ref_logits(path, toks);
  IsaGuard guard;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (int(isa) > int(best_isa())) continue;
    set_isa(isa);
    const std::string what = name + " kv=" + std::string(dtype_name(kv)) + " isa=" + std::string(isa_name(isa));
    Runner r(path, kv);
    const std::vector<float> absorbed = r.chunks(toks, {n}, 0), expanded = r.chunks(toks, {n}, n);
    const double ea = test::max_rel_err(absorbed, ref), ex = test::max_rel_err(expanded, ref);
    std::vector<double> absorbed_d(absorbed.begin(), absorbed.end());
    const double exa = test::max_rel_err(expanded, absorbed_d);
    std::printf("[MlaForms] %-40s absorbed %.3e expanded %.3e apart %.3e (tol %.0e)\n", what.c_str(), ea, ex, exa, tol);
    EXPECT_LE(ea, tol) << what;
    EXPECT_LE(ex, tol) << what;
    EXPECT_LE(exa, tol) << what;
    EXPECT_FALSE(same_bits(absorbed, expanded)) << what << ": the expanded form did not run";

    // However the steps cut an expanded prompt: the same bits.
    EXPECT_TRUE(same_bits(expanded, r.chunks(toks, {5, 16, n}, n))) << what << ": chunks 5/11/8";
    EXPECT_TRUE(same_bits(expanded, r.chunks(toks, ones_to(n), n))) << what << ": token by token, expanded";
    // Positions [0, 13) expanded, the rest absorbed (a recompute after a preemption runs
    // prompt and generated tokens in one chunk): one step, chunks across the boundary,
    // and the prompt then a decode per token all agree.
    const std::vector<float> split = r.chunks(toks, {n}, 13);
    std::vector<int32_t> decode_cuts = {13};
    for (int32_t i = 14; i <= n; ++i) decode_cuts.push_back(i);
    EXPECT_TRUE(same_bits(split, r.chunks(toks, {7, 20, n}, 13))) << what << ": split at 13, chunks 7/13/4";
    EXPECT_TRUE(same_bits(split, r.chunks(toks, decode_cuts, 13))) << what << ": split at 13, then decodes";
    EXPECT_LE(test::max_rel_err(split, ref), tol) << what;

    // Heads in groups of one and of three (the scratch budget forces them): same bits.
    for (int64_t budget : {int64_t(1), int64_t(3) * n * (32 + 32 + 2 * 48 + 2 * 32) * 4}) {
      r.forward().set_mla_scratch_bytes(budget);
      EXPECT_TRUE(same_bits(expanded, r.chunks(toks, {9, n}, n))) << what << ": scratch budget " << budget;
    }
    r.forward().set_mla_scratch_bytes(int64_t(256) << 20);

    // Another sequence in the same steps, absorbed, decoding while the expanded prompt
    // runs in chunks: each sequence's logits are its own alone.
    const std::vector<int32_t> other = {1, 7, 300, 42, 42, 9, 100, 201, 5, 77, 12};
    const std::vector<float> other_alone = r.chunks(other, ones_to(int32_t(other.size())), 0);
    std::vector<std::vector<float>> outs;
    int32_t from = 0, j = 0;
    for (int32_t to : {6, 14, 20, n}) {
      std::vector<std::vector<float>> o;
      r.step({{&toks, from, to, n, &r.table_a_}, {&other, j, j + 1, 0, &r.table_b_}}, o);
      outs.resize(2);
      for (size_t i = 0; i < 2; ++i) outs[i].insert(outs[i].end(), o[i].begin(), o[i].end());
      from = to, ++j;
    }
    EXPECT_TRUE(same_bits(expanded, outs[0])) << what << ": expanded prompt beside a decode";
    std::vector<float> other_head(other_alone.begin(), other_alone.begin() + std::ptrdiff_t(4 * r.n_vocab()));
    EXPECT_TRUE(same_bits(other_head, outs[1])) << what << ": the decode beside an expanded prompt";
  }
}

TEST(MlaForms, DirectQuerySoftmaxYarn) {
  const std::string p = write_model("v2l_f32", "deepseek-v2-lite-tiny", DType::F32);
  check_forms("deepseek-v2-lite-tiny f32", p, DType::F32, kTolFloat);
  check_forms("deepseek-v2-lite-tiny f32", p, DType::F16, kTolKvF16);
  check_forms("deepseek-v2-lite-tiny f32", p, DType::I8, kTolKvI8);  // 8-bit, the latent once on AVX-512
  check_forms("deepseek-v2-lite-tiny f32", p, DType::F8_E4M3, kTolKvFp8);
  // The expanded keys and values in BF16 as well (mla_expanded_kv_dtype).
  check_forms("deepseek-v2-lite-tiny f32", p, DType::BF16, kTolKvBf16);
  std::filesystem::remove(p);
}

TEST(MlaForms, LowRankQueryGroupedSigmoid) {
  const std::string p = write_model("v3_f32", "deepseek-v3-tiny", DType::F32);
  check_forms("deepseek-v3-tiny f32", p, DType::F32, kTolFloat);
  std::filesystem::remove(p);
}

TEST(MlaForms, QuantizedWeights) {
  // q8_0 attn_k_b: the expanded form's transposed copy is q8_0 too (a second rounding).
  const std::string p = write_model("v2l_q8", "deepseek-v2-lite-tiny", DType::Q8_0);
  check_forms("deepseek-v2-lite-tiny q8_0", p, DType::F16, kTolQuant);
  std::filesystem::remove(p);
}

}  // namespace
}  // namespace ridge
