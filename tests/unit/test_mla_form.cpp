// The choice of latent attention's form for a prompt (model/mla_form.h): the FLOP model
// by hand on V2-Lite's shapes, and the choices it makes there.
#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "model/kv_cache.h"
#include "model/mla_form.h"

namespace ridge {
namespace {

// DeepSeek-V2-Lite's attention: 16 heads, rank 512, heads' key 192 (rope 64), value 128;
// the cache one KV head of 64 + 512 (value 512).
HParams v2_lite() {
  HParams h;
  h.n_embd = 2048;
  h.n_head = 16;
  h.n_head_kv = 1;
  h.n_lora_kv = 512;
  h.rope_dim = 64;
  h.head_dim_qk_mla = 192;
  h.head_dim_v_mla = 128;
  h.head_dim_k = 576;
  h.head_dim_v = 512;
  return h;
}

TEST(MlaForm, CostsByHand) {
  const HParams h = v2_lite();
  const MlaTypes f32{DType::F32, DType::F32, DType::F32, DType::F32};
  // One chunk of 4 rows: absorbed 4 x 16 x 2 x 512 x (128 + 128) matmul FLOPs plus
  // attention over 1 + 2 + 3 + 4 keys x 16 heads x (2 x 576 + 2 x 512 + 5); expanded the
  // same decompression over the 4 cached positions, attention at 2 x 192 + 2 x 128 + 5.
  const MlaFormCost c = mla_form_cost(h, f32, 4, 2048);
  const double mm = 4.0 * 16 * 2 * 512 * 256;
  EXPECT_DOUBLE_EQ(c.absorbed, mm + 10.0 * 16 * (2 * 576 + 2 * 512 + 5));
  EXPECT_DOUBLE_EQ(c.expanded, mm + 10.0 * 16 * (2 * 192 + 2 * 128 + 5));
  // Chunks of 2: the expanded form decompresses 2 then 4 positions.
  const MlaFormCost c2 = mla_form_cost(h, f32, 4, 2);
  EXPECT_DOUBLE_EQ(c2.expanded, 6.0 * 16 * 2 * 512 * 256 + 10.0 * 16 * (2 * 192 + 2 * 128 + 5));
  EXPECT_DOUBLE_EQ(c2.absorbed, c.absorbed);
}

// Each form's attention is costed on the unit the kernels run it on: a BF16 cache's (the
// latent, and the expanded form's keys and values, kept in BF16 too) on bf16 dots, at
// twice the FMA's rate, where the CPU has them for that layout; an f16 cache's on FMAs.
TEST(MlaForm, LatentAttentionCostedOnItsKernelsUnit) {
  const HParams h = v2_lite();
  const double attn = 10.0 * 16 * (2 * 576 + 2 * 512 + 5), mm = 4.0 * 16 * 2 * 512 * 256;
  const MlaFormCost f16 = mla_form_cost(h, MlaTypes{DType::F32, DType::F32, DType::F32, DType::F16}, 4, 2048);
  EXPECT_DOUBLE_EQ(f16.absorbed, mm + attn);
  const MlaFormCost bf16 = mla_form_cost(h, MlaTypes{DType::F32, DType::F32, DType::F32, DType::BF16}, 4, 2048);
  const bool dots = kernels::attention_dots_in_bf16(kv_layout_for(h, 16, 1, DType::BF16));
  EXPECT_DOUBLE_EQ(bf16.absorbed, mm + (dots ? attn / 2 : attn)) << "bf16 dots: " << dots;
  EXPECT_EQ(mla_expanded_kv_dtype(DType::BF16), DType::BF16);
  EXPECT_EQ(mla_expanded_kv_dtype(DType::F16), DType::F32);
  const double mha = 10.0 * 16 * (2 * 192 + 2 * 128 + 5);
  EXPECT_DOUBLE_EQ(f16.expanded, mm + mha);
  const bool mha_dots = kernels::attention_dots_in_bf16(KVLayout{1, 1, 192, 128, 16, 1, DType::BF16});
  EXPECT_DOUBLE_EQ(bf16.expanded, mm + (mha_dots ? mha / 2 : mha)) << "bf16 dots: " << mha_dots;
}

TEST(MlaForm, ChoicesOnV2LiteShapes) {
  const HParams h = v2_lite();
  const MlaTypes f16{DType::F16, DType::F16, DType::F16, DType::F16};
  // A q4_0 file: the model makes the transposed attn_k_b in q8_0 (int8 in both forms);
  // with a rank that is no multiple of 32, in f16 (FMAs expanded, int8 absorbed).
  const MlaTypes q4{DType::Q4_0, DType::Q4_0, DType::Q8_0, DType::F16};
  const MlaTypes q4_f16{DType::Q4_0, DType::Q4_0, DType::F16, DType::F16};
  const MlaTypes i8{DType::Q4_0, DType::Q4_0, DType::Q8_0, DType::I8};
  // Float weights: the decompression costs what the absorption does, so every prompt
  // expands, its full 16-token blocks short of the last token.
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Auto, 4096, 16), 4080);
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Auto, 4097, 16), 4096);
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Auto, 17, 16), 16);
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Auto, 16, 16), 0);
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Auto, 1, 16), 0);
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Auto, 5, 1), 4);
  for (int32_t n : {17, 4097}) EXPECT_EQ(mla_expand_until(h, q4, MlaPrefill::Auto, n, 16), n - 1) << n;
  // The decompression on FMAs against the absorption in int8: short prompts stay absorbed.
  EXPECT_EQ(mla_expand_until(h, q4_f16, MlaPrefill::Auto, 9, 1), 0);
  EXPECT_EQ(mla_expand_until(h, q4_f16, MlaPrefill::Auto, 513, 16), 512);
  // An int8 cache: the absorbed form's attention runs in integers.
  EXPECT_EQ(mla_expand_until(h, i8, MlaPrefill::Auto, 4097, 16), 0);
  // Forced, and a model without latent attention.
  EXPECT_EQ(mla_expand_until(h, i8, MlaPrefill::Expanded, 40, 16), 32);
  EXPECT_EQ(mla_expand_until(h, f16, MlaPrefill::Absorbed, 4097, 16), 0);
  HParams dense;
  dense.n_head = 4;
  EXPECT_EQ(mla_expand_until(dense, f16, MlaPrefill::Expanded, 40, 16), 0);
}

}  // namespace
}  // namespace ridge
