// Roofline accounting: each op's FLOPs and minimum bytes against values computed by hand
// for a small model, and the forward's profile summing them per step.
#include <gtest/gtest.h>

#include "core/cpu.h"
#include "engine/engine.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "perf/op_cost.h"

namespace ridge::perf {
namespace {

// A small llama: n_embd 64, 4 heads of 16, 2 KV heads, n_ff 128, vocab 100, rope on all 16.
HParams small() {
  HParams h;
  h.n_vocab = 100;
  h.n_embd = 64;
  h.n_layer = 2;
  h.n_ff = 128;
  h.n_head = 4;
  h.n_head_kv = 2;
  h.head_dim_k = h.head_dim_v = h.rope_dim = 16;
  return h;
}

TEST(OpCost, MatmulByHand) {
  // 3 rows x k 64 x n 32 in q8_0: 2*3*64*32 = 12288 ops; weights 32 rows x 2 blocks x 34
  // bytes = 2176, x 3*64*4 = 768, y 3*32*4 = 384.
  const OpCost c = matmul_cost(3, 64, 32, DType::Q8_0);
  EXPECT_EQ(c.flops, 12288.0);
  EXPECT_EQ(c.bytes, 2176.0 + 768.0 + 384.0);
  // f16: 32 x 64 x 2 = 4096 weight bytes.
  EXPECT_EQ(matmul_cost(1, 64, 32, DType::F16).bytes, 4096.0 + 256.0 + 128.0);
  EXPECT_EQ(matmul_class(DType::Q4_K), ComputeClass::Int8Vnni);
  EXPECT_EQ(matmul_class(DType::BF16), ComputeClass::Fp32Fma);
}

TEST(OpCost, AttentionByHand) {
  const HParams h = small();
  // One sequence, a 3-token chunk at positions 5, 6, 7: keys 6 + 7 + 8 = 21 per head;
  // per key 2*16 + 2*16 + 5 = 69 ops; 4 heads: 4 * 21 * 69 = 5796.
  // Bytes: context 8 tokens x 2 KV heads x (16 + 16) x 2 (f16) = 1024; q in and out
  // 3 x 4 x (64 + 64) = 1536.
  const std::pair<int32_t, int32_t> one[] = {{5, 3}};
  const OpCost c = attention_cost(h.attn_shape(), one, DType::F16);
  EXPECT_EQ(c.flops, 5796.0);
  EXPECT_EQ(c.bytes, 1024.0 + 1536.0);
  // Two decode tokens of two sequences at positions 9 and 0: keys 10 and 1.
  const std::pair<int32_t, int32_t> two[] = {{9, 1}, {0, 1}};
  const OpCost d = attention_cost(h.attn_shape(), two, DType::F32);
  EXPECT_EQ(d.flops, 4.0 * 11.0 * 69.0);
  EXPECT_EQ(d.bytes, (10.0 + 1.0) * 2 * 32 * 4 + 2 * 4 * 128.0);
}

// Latent attention's one KV head of [rope 64 | latent 512], the value inside the key for
// every KV dtype (an 8-bit one's under the key's one scale): one decode token at position
// 99 reads 100 keys of 576 elements (and 4 bytes of scale each), and 16 query rows of 576
// and outputs of 512 in f32.
TEST(OpCost, LatentAttentionBytesByHand) {
  AttnShape h;
  h.n_head = 16, h.n_head_kv = 1, h.head_dim_k = 576, h.head_dim_v = 512, h.rope_dim = 64, h.mla = true;
  const std::pair<int32_t, int32_t> one[] = {{99, 1}};
  const double io = 16.0 * (576 + 512) * 4;
  EXPECT_EQ(attention_cost(h, one, DType::BF16).bytes, 100.0 * 576 * 2 + io);
  EXPECT_EQ(attention_cost(h, one, DType::I8).bytes, 100.0 * (576 + 4) + io);
  EXPECT_EQ(attention_cost(h, one, DType::F8_E4M3).bytes, 100.0 * (576 + 4) + io);
  h.mla = false;  // the same shape with values apart: codes and a scale each
  EXPECT_EQ(attention_cost(h, one, DType::I8).bytes, 100.0 * (576 + 512 + 8) + io);
}

TEST(OpCost, ElementwiseByHand) {
  EXPECT_EQ(rms_norm_cost(2, 64).flops, 384.0);
  EXPECT_EQ(rms_norm_cost(2, 64).bytes, 4.0 * (256.0 + 64.0));
  EXPECT_EQ(residual_cost(2, 64).flops, 128.0);
  EXPECT_EQ(residual_cost(2, 64).bytes, 1536.0);
  EXPECT_EQ(swiglu_cost(1, 128).flops, 640.0);
  EXPECT_EQ(swiglu_cost(1, 128).bytes, 1536.0);
  // RoPE: 3 x 16 x (4 + 2) = 288 per token; bytes 4*(64+32+32) + 4*(64+32) + 2*(32+32).
  const HParams h = small();
  EXPECT_EQ(rope_kv_cost(h.attn_shape(), 1, false, false, DType::F16).flops, 288.0);
  EXPECT_EQ(rope_kv_cost(h.attn_shape(), 1, false, false, DType::F16).bytes, 512.0 + 384.0 + 128.0);
  EXPECT_EQ(rope_kv_cost(h.attn_shape(), 1, true, true, DType::F16).flops, 288.0 + 128.0 + 3.0 * 96.0);
  EXPECT_EQ(embed_cost(2, 64, DType::Q8_0).bytes, 2 * (68.0 + 256.0));
  EXPECT_EQ(embed_cost(2, 64, DType::Q8_0).flops, 0.0);
}

// The forward's profile on a real (synthetic) model: the matmul FLOPs of one step are
// 2 x tokens x the layer matrices' elements, plus the head once per logit row.
TEST(OpCost, ForwardProfileSumsTheModel) {
  const std::string path = testing::TempDir() + "/opcost-llama.gguf";
  make_model({"llama", "tiny", DType::Q8_0, 3, "", 0, 2}, path);
  auto m = Model::load(path);
  const HParams& h = m->hparams();
  EngineConfig cfg;
  cfg.threads = 1;
  cfg.kv_cache_bytes = 8 << 20;
  Engine e(*m, nullptr, cfg);
  RequestParams rp;
  rp.sampling.temperature = 0;
  rp.max_tokens = 2;
  e.add_request({1, 5, 9, 13, 17, 21, 25}, rp);
  OpProfile& p = e.op_profile();
  p.reset();
  p.timing = true;
  e.step();  // the prompt: 7 tokens, 1 logit row
  const double layer_elems = double(h.n_embd) * (h.n_q() + h.n_kv_k() + h.n_kv_v()) + double(h.n_attn_out()) * h.n_embd +
                             3.0 * double(h.n_embd) * h.n_ff;
  const double mm = p.op(Op::AttnQkv).flops + p.op(Op::AttnOut).flops + p.op(Op::FfnGateUp).flops + p.op(Op::FfnDown).flops;
  // Packed Q8_0 weights take their inputs from a RowSource: the norms and SwiGLU run
  // inside the matmuls that read them, are no ops of their own, and count in those
  // matmuls; so do the residual adds before the norms (all but the last layer's FFN one).
  // Without the packed GEMM (a CPU path that lacks it) each is an op of its own.
  const bool rows = kernels::gemm_available(DType::Q8_0);
  const int64_t L = h.n_layer;
  EXPECT_EQ(p.op(Op::AttnNorm).calls + p.op(Op::FfnNorm).calls + p.op(Op::FfnAct).calls, rows ? 0 : 3 * L);
  EXPECT_EQ(p.op(Op::AttnResidual).calls, rows ? 0 : L);
  EXPECT_EQ(p.op(Op::FfnResidual).calls, rows ? 1 : L);
  const double fused = double(L) * (2.0 * rms_norm_cost(7, h.n_embd).flops + swiglu_cost(7, h.n_ff).flops) +
                       double(2 * L - 1) * residual_cost(7, h.n_embd).flops;
  EXPECT_DOUBLE_EQ(mm, 2.0 * 7 * layer_elems * L + (rows ? fused : 0.0));
  EXPECT_DOUBLE_EQ(p.op(Op::Output).flops, 2.0 * h.n_embd * h.n_vocab);
  EXPECT_EQ(p.op(Op::AttnQkv).calls, h.n_layer);
  EXPECT_EQ(p.op(Op::Output).calls, 1);
  EXPECT_EQ(p.tokens(), 7);
  for (int i = 0; i < int(Op::kCount); ++i)
    if (p.op(Op(i)).calls && Op(i) != Op::Sampling) {
      EXPECT_GT(p.op(Op(i)).seconds, 0.0) << op_name(Op(i));
    }
  // Decode: one token at position 7 attends 8 keys per head in every layer.
  p.reset();
  e.step();
  EXPECT_EQ(p.tokens(), 1);
  EXPECT_DOUBLE_EQ(p.op(Op::Attention).flops,
                   h.n_layer * double(h.n_head) * 8.0 * (2.0 * h.head_dim_k + 2.0 * h.head_dim_v + 5.0));
}

// The attention op runs against the roof of the arithmetic its cache takes on this CPU:
// int8 VNNI, bf16 pair dots (a bf16 cache on AVX512-BF16 vectors), else fp32 FMAs. A
// bf16 cache's attention reported against the FMA roof would call a memory-bound step
// compute-bound.
TEST(OpCost, AttentionRunsAgainstTheRoofOfItsArithmetic) {
  const std::string path = testing::TempDir() + "/opcost-attn.gguf";
  make_model({"llama", "tiny", DType::F32, 3, "", 2}, path);  // heads of 32 dimensions
  auto m = Model::load(path);
  const Fp8Path saved = fp8_path();
  const auto cls = [&](DType kv, Fp8Path fp8) {
    set_fp8_path(fp8);
    EngineConfig cfg;
    cfg.threads = 1;
    cfg.kv_cache_bytes = 8 << 20;
    cfg.kv_dtype = kv;
    Engine e(*m, nullptr, cfg);
    RequestParams rp;
    rp.sampling.temperature = 0;
    rp.max_tokens = 2;
    e.add_request({1, 5, 9, 13}, rp);
    e.op_profile().reset();
    e.step();
    return e.op_profile().op(Op::Attention).cls;
  };
  const bool halves = cpu_features().avx512fp16 && active_isa() == Isa::Avx512 && kernels::detail::attention_f16_built();
  const bool f16_saved = kernels::detail::attention_f16_arith();
  kernels::detail::set_attention_f16_arith(true);
  EXPECT_EQ(cls(DType::F16, Fp8Path::Bf16), halves ? ComputeClass::Fp16Fma : ComputeClass::Fp32Fma);
  kernels::detail::set_attention_f16_arith(false);
  EXPECT_EQ(cls(DType::F16, Fp8Path::Bf16), ComputeClass::Fp32Fma);
  kernels::detail::set_attention_f16_arith(f16_saved);
  EXPECT_EQ(cls(DType::I8, Fp8Path::Bf16), ComputeClass::Int8Vnni);
  EXPECT_EQ(cls(DType::BF16, Fp8Path::F16c), ComputeClass::Fp32Fma);  // RIDGE_FP8_PATH=f16c: the f32 way
  const CpuFeatures& f = cpu_features();
  const bool vectors = f.avx512bf16 && f.avx512vbmi && active_isa() == Isa::Avx512 && !amx_bf16_active();
  EXPECT_EQ(cls(DType::BF16, Fp8Path::Bf16), vectors ? ComputeClass::Bf16Dot : ComputeClass::Fp32Fma);
  set_fp8_path(saved);
}

}  // namespace
}  // namespace ridge::perf
