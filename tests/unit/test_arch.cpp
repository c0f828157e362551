// Architectures as units: each reads its own tensors (a missing one fails the load by
// name) and the forward asks the architecture where it differs, not which weights exist.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "model/mkmodel.h"
#include "model/model.h"

namespace ridge {
namespace {

std::string made(const std::string& arch) {
  const std::string path = testing::TempDir() + "/arch-" + arch + ".gguf";
  const char* preset = arch == "qwen3moe" ? "qwen3moe-tiny" : arch == "deepseek2" ? "deepseek-v3-tiny" : "tiny";
  make_model({arch, preset, DType::F32, 11, "", 0, 2}, path);
  return path;
}

// The file at `path` rewritten to path + suffix: its metadata but `drop_key`, then what
// `meta` adds; each tensor copied unless `tensor` writes or drops it (returns true).
std::string rewrite(const std::string& path, const std::string& suffix, const std::string& drop_key,
                    const std::function<void(gguf::Writer&)>& meta,
                    const std::function<bool(gguf::Writer&, const gguf::TensorInfo&)>& tensor) {
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [k, v] : f->kv())
    if (k != "general.alignment" && k != drop_key) w.set_value(k, v);
  if (meta) meta(w);
  for (const auto& t : f->tensors()) {
    if (tensor && tensor(w, t)) continue;
    const gguf::TensorInfo* src = &t;
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                 [src](uint8_t* dst) { std::memcpy(dst, src->data, src->nbytes); });
  }
  const std::string out = path + suffix;
  w.write(out);
  return out;
}

// The file at `path` without the tensor `drop`.
std::string without(const std::string& path, const std::string& drop) {
  return rewrite(path, ".without.gguf", "", nullptr, [&](gguf::Writer&, const gguf::TensorInfo& t) { return t.name == drop; });
}

// The file at `path` with the u32 metadata `key` set to v (or dropped when v < 0).
std::string with_u32(const std::string& path, const std::string& key, int64_t v) {
  return rewrite(path, "." + key + ".gguf", key, [&](gguf::Writer& w) { if (v >= 0) w.set_u32(key, uint32_t(v)); }, nullptr);
}

// The file at `path` with the 1-D f32 tensor `name` n elements long (zeros) instead.
std::string resized(const std::string& path, const std::string& name, int64_t n) {
  return rewrite(path, ".resized.gguf", "", nullptr, [&](gguf::Writer& w, const gguf::TensorInfo& t) {
    if (t.name != name) return false;
    w.add_tensor(t.name, DType::F32, {n}, std::vector<uint8_t>(size_t(n) * 4, 0));
    return true;
  });
}

std::string load_error(const std::string& path) {
  try {
    Model::load(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Arch, EachArchitectureLoadsItsOwnTensors) {
  for (const char* name : {"llama", "qwen2", "qwen3", "qwen3moe", "phi3"}) {
    auto m = Model::load(made(name));
    EXPECT_STREQ(m->arch().name, name);
    EXPECT_EQ(&m->arch(), find_arch(name));
    const LayerWeights& L = m->weights().layers[0];
    EXPECT_EQ(!L.bq.empty(), m->arch().qkv_bias) << name;
    EXPECT_EQ(!L.bk.empty() && !L.bv.empty(), m->arch().qkv_bias) << name;
    EXPECT_EQ(!L.q_norm.empty() && !L.k_norm.empty(), m->arch().qk_norm) << name;
    EXPECT_EQ(L.gate_exps.size(), m->arch().moe ? 8u : 0u) << name;
    EXPECT_EQ(L.w_gate.data == nullptr, m->arch().moe) << name;
  }
  EXPECT_EQ(find_arch("falcon"), nullptr);
  EXPECT_EQ(arch_names(), "llama, qwen2, qwen3, qwen3moe, deepseek2, phi3, gpt2, gemma3, gpt-oss");
}

// gemma3: windows in five of six layers with their own rope base, the global layers'
// linear scaling, sandwich norms, q/k norms, the embedding scale and Gemma's score scale;
// a missing sandwich norm or a per-layer pattern array is refused by name; without a
// window every layer is global.
TEST(Arch, Gemma3ReadsWindowsAndItsSandwich) {
  const std::string path = testing::TempDir() + "/arch-gemma3.gguf";
  make_model({"", "gemma3-tiny", DType::F32, 11, "", 0, 0}, path);
  {
    auto m = Model::load(path);
    const HParams& h = m->hparams();
    EXPECT_EQ(h.n_swa, 8);
    EXPECT_EQ(h.swa_period, 6);
    for (int32_t il = 0; il < h.n_layer; ++il) EXPECT_EQ(h.swa_layer(il), il != 5) << il;
    EXPECT_EQ(h.rope_freq_base_swa, 10000.f);
    EXPECT_EQ(h.rope_freq_base, 1000000.f);
    EXPECT_FLOAT_EQ(h.rope_freq_scale, 1.f / 8.f);
    EXPECT_FLOAT_EQ(h.embd_scale, std::sqrt(128.f));
    EXPECT_FLOAT_EQ(h.attn_scale(), 1.f / std::sqrt(32.f));
    EXPECT_EQ(h.final_softcap, 0.f);
    const LayerWeights& L = m->weights().layers[3];
    EXPECT_EQ(L.post_attn_norm.size(), 128u);
    EXPECT_EQ(L.post_ffn_norm.size(), 128u);
    EXPECT_EQ(L.q_norm.size(), 32u);
    EXPECT_TRUE(m->weights().tied_output);
    EXPECT_EQ(m->arch().ffn, Ffn::GeGlu);
  }
  {
    auto m = Model::load(with_u32(path, "gemma3.attention.sliding_window", -1));
    EXPECT_EQ(m->hparams().n_swa, 0);
    EXPECT_FALSE(m->hparams().swa_layer(0));
  }
  {
    auto m = Model::load(with_u32(path, "gemma3.attention.sliding_window_pattern", 2));
    EXPECT_TRUE(m->hparams().swa_layer(0));
    EXPECT_FALSE(m->hparams().swa_layer(1));
  }
  {
    auto m = Model::load(with_u32(path, "gemma3.attention.sliding_window_pattern", 1));  // llama.cpp: all global
    for (int32_t il = 0; il < m->hparams().n_layer; ++il) EXPECT_FALSE(m->hparams().swa_layer(il)) << il;
  }
  std::string msg = load_error(with_u32(path, "gemma3.attention.sliding_window_pattern", 0));
  EXPECT_NE(msg.find("sliding_window_pattern 0 is out of range"), std::string::npos) << msg;
  for (const char* t : {"blk.2.post_attention_norm.weight", "blk.5.post_ffw_norm.weight", "blk.0.attn_k_norm.weight"}) {
    msg = load_error(without(path, t));
    EXPECT_NE(msg.find(std::string("required tensor '") + t + "' is missing"), std::string::npos) << msg;
  }
}

// gpt-oss: windows on the even layers with the global layers' rope (YaRN's factors and
// magnitude in the score scale), a sink per head, biases on q/k/v/o, the router and
// every expert, the MoE's norm named post_attention_norm, an untied output. A missing
// window, a sink tensor of the wrong shape or a missing bias is refused by name.
TEST(Arch, GptOssReadsWindowsSinksAndBiases) {
  const std::string path = testing::TempDir() + "/arch-gpt-oss.gguf";
  make_model({"", "gpt-oss-tiny", DType::F32, 11, "", 0, 0}, path);
  {
    auto m = Model::load(path);
    const HParams& h = m->hparams();
    EXPECT_EQ(h.n_swa, 8);
    for (int32_t il = 0; il < h.n_layer; ++il) EXPECT_EQ(h.swa_layer(il), il % 2 == 0) << il;
    EXPECT_EQ(h.rope_freq_base_swa, h.rope_freq_base);
    EXPECT_EQ(h.yarn_factor, 4.f);
    const float ms = 1.f + 0.1f * std::log(4.f);
    EXPECT_FLOAT_EQ(h.attn_scale(), ms * ms / std::sqrt(32.f));
    EXPECT_EQ(m->weights().rope_freqs.size(), 16u);
    EXPECT_FALSE(m->weights().tied_output);
    EXPECT_EQ(m->arch().ffn, Ffn::SwiGluOai);
    const LayerWeights& L = m->weights().layers[1];
    EXPECT_EQ(L.attn_sinks.size(), 4u);
    EXPECT_EQ(L.bq.size(), 128u);
    EXPECT_EQ(L.bo.size(), 128u);
    EXPECT_EQ(L.router_b.size(), 8u);
    EXPECT_EQ(L.gate_exps_b.size(), 8u * 64u);
    EXPECT_EQ(L.up_exps_b.size(), 8u * 64u);
    EXPECT_EQ(L.down_exps_b.size(), 8u * 128u);
    EXPECT_EQ(L.gate_exps.size(), 8u);
  }
  std::string msg = load_error(with_u32(path, "gpt-oss.attention.sliding_window", -1));
  EXPECT_NE(msg.find("gpt-oss.attention.sliding_window is missing"), std::string::npos) << msg;
  msg = load_error(resized(path, "blk.2.attn_sinks.weight", 5));
  EXPECT_NE(msg.find("tensor 'blk.2.attn_sinks.weight' has shape [5], expected [4]"), std::string::npos) << msg;
  for (const char* t : {"blk.0.attn_sinks.weight", "blk.1.ffn_gate_inp.bias", "blk.3.ffn_down_exps.bias",
                        "blk.0.attn_output.bias", "blk.2.post_attention_norm.weight", "output.weight"}) {
    msg = load_error(without(path, t));
    EXPECT_NE(msg.find(std::string("required tensor '") + t + "' is missing"), std::string::npos) << msg;
  }
}

// An MXFP4 file (llama.cpp's type 39) loads and runs; a block scale of 0xff, the format's
// NaN, is refused naming the tensor and the block.
TEST(Arch, Mxfp4WeightsLoadAndANanScaleIsRefused) {
  const std::string path = testing::TempDir() + "/arch-mxfp4.gguf";
  make_model({"llama", "tiny", DType::MXFP4, 11, "", 0, 2}, path);
  {
    auto m = Model::load(path);
    EXPECT_EQ(m->weights().layers[1].wq.type, DType::MXFP4);
  }
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [k, v] : f->kv())
    if (k != "general.alignment") w.set_value(k, v);
  for (const auto& t : f->tensors()) {
    const gguf::TensorInfo* src = &t;
    const bool poison = t.name == "blk.1.ffn_up.weight";
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), [src, poison](uint8_t* dst) {
      std::memcpy(dst, src->data, src->nbytes);
      if (poison) dst[3 * 17] = 0xFF;  // block 3's scale
    });
  }
  const std::string bad = path + ".nan.gguf";
  w.write(bad);
  const std::string msg = load_error(bad);
  EXPECT_NE(msg.find("tensor 'blk.1.ffn_up.weight' has an MXFP4 block scale of 0xff"), std::string::npos) << msg;
  EXPECT_NE(msg.find("block 3"), std::string::npos) << msg;
}

// gpt2's block: the fused q/k/v and its one bias cut into views and vectors, LayerNorms
// with their biases, learned positions as an f32 table, no RoPE, an ungated FFN with
// biases. A missing epsilon, a position table of the wrong shape or a missing bias is
// refused by name.
TEST(Arch, Gpt2ReadsItsBlock) {
  const std::string path = made("gpt2");
  auto m = Model::load(path);
  const HParams& h = m->hparams();
  const ArchSpec& a = m->arch();
  EXPECT_TRUE(a.layer_norm && a.learned_pos && a.proj_bias && a.qkv_bias && a.ffn == Ffn::Gelu);
  EXPECT_EQ(h.rope_dim, 0);
  EXPECT_FLOAT_EQ(h.norm_eps, 1e-5f);
  auto f = gguf::File::open(path);
  auto floats = [&](const std::string& name) {
    const gguf::TensorInfo* t = f->find_tensor(name);
    EXPECT_TRUE(t && t->type == DType::F32) << name;
    const float* p = reinterpret_cast<const float*>(t->data);
    return std::vector<float>(p, p + t->n_elements());
  };
  EXPECT_EQ(m->weights().pos_embd, floats("position_embd.weight"));
  EXPECT_EQ(int64_t(m->weights().pos_embd.size()), int64_t(h.n_ctx_train) * h.n_embd);
  EXPECT_EQ(m->weights().output_norm_b, floats("output_norm.bias"));
  for (int32_t il = 0; il < h.n_layer; ++il) {
    const LayerWeights& L = m->weights().layers[size_t(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    const gguf::TensorInfo* qkv = f->find_tensor(p + "attn_qkv.weight");
    ASSERT_TRUE(qkv);
    const int64_t row = int64_t(h.n_embd) * 4;  // f32
    EXPECT_EQ(std::memcmp(L.wq.data, qkv->data, size_t(h.n_q() * row)), 0);
    EXPECT_EQ(std::memcmp(L.wk.data, qkv->data + h.n_q() * row, size_t(h.n_kv_k() * row)), 0);
    EXPECT_EQ(std::memcmp(L.wv.data, qkv->data + (h.n_q() + h.n_kv_k()) * row, size_t(h.n_kv_v() * row)), 0);
    std::vector<float> b = L.bq;
    b.insert(b.end(), L.bk.begin(), L.bk.end());
    b.insert(b.end(), L.bv.begin(), L.bv.end());
    EXPECT_EQ(b, floats(p + "attn_qkv.bias"));
    EXPECT_EQ(int64_t(L.bq.size()), h.n_q());
    EXPECT_EQ(L.attn_norm_b, floats(p + "attn_norm.bias"));
    EXPECT_EQ(L.ffn_norm_b, floats(p + "ffn_norm.bias"));
    EXPECT_EQ(L.bo, floats(p + "attn_output.bias"));
    EXPECT_EQ(L.b_up, floats(p + "ffn_up.bias"));
    EXPECT_EQ(L.b_down, floats(p + "ffn_down.bias"));
    EXPECT_EQ(L.w_gate.data, nullptr);
    EXPECT_EQ(L.w_up.n_out, h.n_ff);
  }
  std::string msg = load_error(with_u32(path, "gpt2.attention.layer_norm_epsilon", -1));
  EXPECT_NE(msg.find("'gpt2.attention.layer_norm_epsilon' is missing"), std::string::npos) << msg;
  msg = load_error(with_u32(path, "gpt2.context_length", 512));  // the table has 256 rows
  EXPECT_NE(msg.find("'position_embd.weight' has shape"), std::string::npos) << msg;
  for (const char* t : {"position_embd.weight", "blk.1.attn_qkv.bias", "output_norm.bias", "blk.0.ffn_down.bias"}) {
    msg = load_error(without(path, t));
    EXPECT_NE(msg.find(std::string("required tensor '") + t + "' is missing"), std::string::npos) << msg;
  }
}

// phi3's fused tensors become views of their row ranges: q, k, v one after another in
// attn_qkv, the gate's rows before up's in ffn_up.
TEST(Arch, Phi3CutsItsFusedTensorsIntoViews) {
  const std::string path = made("phi3");
  auto m = Model::load(path);
  const HParams& h = m->hparams();
  auto f = gguf::File::open(path);
  for (int32_t il = 0; il < h.n_layer; ++il) {
    const LayerWeights& L = m->weights().layers[size_t(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    const gguf::TensorInfo* qkv = f->find_tensor(p + "attn_qkv.weight");
    const gguf::TensorInfo* up = f->find_tensor(p + "ffn_up.weight");
    ASSERT_TRUE(qkv && up);
    const int64_t row = int64_t(h.n_embd) * 4;  // f32
    ASSERT_EQ(L.wq.n_out, h.n_q());
    ASSERT_EQ(L.wk.n_out, h.n_kv_k());
    ASSERT_EQ(L.wv.n_out, h.n_kv_v());
    // The same bytes as the file's rows (the model maps the file: compare contents).
    EXPECT_EQ(std::memcmp(L.wq.data, qkv->data, size_t(h.n_q() * row)), 0);
    EXPECT_EQ(std::memcmp(L.wk.data, qkv->data + h.n_q() * row, size_t(h.n_kv_k() * row)), 0);
    EXPECT_EQ(std::memcmp(L.wv.data, qkv->data + (h.n_q() + h.n_kv_k()) * row, size_t(h.n_kv_v() * row)), 0);
    EXPECT_EQ(std::memcmp(L.w_gate.data, up->data, size_t(h.n_ff * row)), 0);
    EXPECT_EQ(std::memcmp(L.w_up.data, up->data + h.n_ff * row, size_t(h.n_ff * row)), 0);
  }
  for (const char* t : {"blk.1.attn_qkv.weight", "blk.0.ffn_up.weight"}) {
    const std::string msg = load_error(without(path, t));
    EXPECT_NE(msg.find(std::string("required tensor '") + t + "' is missing"), std::string::npos) << msg;
  }
}

// phi3's LongRoPE: the long factors where the file's context is past the original one,
// the short ones otherwise; attn_factor on the rotation (the scores' scale unchanged); an
// incomplete set refused by name, as are the presets' scalings on another architecture.
TEST(Arch, Phi3LongRopeChoosesItsFactorsByContext) {
  const std::string path = testing::TempDir() + "/arch-phi3-longrope.gguf";
  make_model({"", "phi3-longrope-tiny", DType::F32, 11, "", 0, 2}, path);
  auto f = gguf::File::open(path);
  auto factors = [&](const char* name) {
    const gguf::TensorInfo* t = f->find_tensor(name);
    EXPECT_TRUE(t);
    return std::vector<float>(reinterpret_cast<const float*>(t->data), reinterpret_cast<const float*>(t->data) + t->ne[0]);
  };
  {
    auto m = Model::load(path);  // context 256, original 32: long
    EXPECT_EQ(m->weights().rope_freqs, factors("rope_factors_long.weight"));
    const HParams& h = m->hparams();
    EXPECT_EQ(h.longrope_orig_ctx, 32);
    const float af = float(std::sqrt(1.0 + std::log(8.0) / std::log(32.0)));
    EXPECT_NEAR(h.rope_attn_factor, af, 1e-6);
    EXPECT_EQ(h.attn_scale(), 1.f / std::sqrt(float(h.head_dim_k)));
    EXPECT_EQ(h.rope_dim, 24);  // a partial rotation, as Phi-4-mini's
  }
  {
    auto m = Model::load(with_u32(path, "phi3.rope.scaling.original_context_length", 256));  // not past it: short
    EXPECT_EQ(m->weights().rope_freqs, factors("rope_factors_short.weight"));
  }
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    const std::string msg = load_error(without(path, t));
    EXPECT_NE(msg.find(std::string("'") + t + "' is missing"), std::string::npos) << msg;
  }
  const std::string msg = load_error(with_u32(path, "phi3.rope.scaling.original_context_length", -1));
  EXPECT_NE(msg.find("original_context_length"), std::string::npos) << msg;
  const std::string other = testing::TempDir() + "/arch-phi3-other.gguf";
  EXPECT_THROW(make_model({"llama", "phi3-longrope-tiny", DType::F32, 11, "", 0, 2}, other), Error);
  EXPECT_THROW(make_model({"phi3", "tiny-llama3", DType::F32, 11, "", 0, 2}, other), Error);
}
// deepseek2 reads latent attention's tensors in place of q/k/v, a dense FFN in its leading
// layers, and shared experts and the routing bias in the others.
TEST(Arch, DeepSeekLoadsLatentAttentionAndSharedExperts) {
  auto m = Model::load(made("deepseek2"));
  const HParams& h = m->hparams();
  EXPECT_TRUE(h.mla());
  EXPECT_EQ(h.n_head_kv, 1);
  EXPECT_EQ(h.head_dim_k, h.rope_dim + h.n_lora_kv);
  EXPECT_EQ(h.head_dim_v, h.n_lora_kv);
  EXPECT_TRUE(h.gating_sigmoid);
  EXPECT_EQ(h.n_expert_groups, 4);
  const LayerWeights& L0 = m->weights().layers[0];
  const LayerWeights& L1 = m->weights().layers[1];
  for (const LayerWeights* L : {&L0, &L1}) {
    EXPECT_EQ(L->wq.data, nullptr);  // low-rank q: q_a, q_b
    EXPECT_NE(L->wq_a.data, nullptr);
    EXPECT_NE(L->wq_b.data, nullptr);
    EXPECT_EQ(L->wk.data, nullptr);
    EXPECT_EQ(int32_t(L->wk_b.size()), h.n_head);
    EXPECT_EQ(int32_t(L->wv_b.size()), h.n_head);
    EXPECT_EQ(L->wkv_c.n_out, h.n_lora_kv);
    EXPECT_EQ(L->wk_pe.n_out, h.rope_dim);
  }
  EXPECT_NE(L0.w_gate.data, nullptr);  // the leading dense layer
  EXPECT_TRUE(L0.gate_exps.empty());
  EXPECT_EQ(L1.w_gate.data, nullptr);
  EXPECT_EQ(L1.gate_exps.size(), 8u);
  EXPECT_NE(L1.down_shexp.data, nullptr);
  EXPECT_EQ(L1.exp_probs_b.size(), 8u);
}

TEST(Arch, DeepSeekMetadataMustAgreeWithItsTensors) {
  const std::string ds = made("deepseek2");
  for (const char* t : {"blk.1.attn_k_b.weight", "blk.0.attn_kv_a_norm.weight", "blk.1.ffn_down_shexp.weight",
                        "blk.0.attn_q_b.weight"}) {
    const std::string msg = load_error(without(ds, t));
    EXPECT_NE(msg.find(std::string("required tensor '") + t + "' is missing"), std::string::npos) << msg;
  }
  // A latent rank the cache's shape (key_length = rank + rope) disagrees with.
  std::string msg = load_error(with_u32(ds, "deepseek2.attention.kv_lora_rank", 32));
  EXPECT_NE(msg.find("key_length = kv_lora_rank + rope.dimension_count (32 + 16)"), std::string::npos) << msg;
  // ... and one the tensors disagree with (the cache's shape made to match).
  msg = load_error(with_u32(with_u32(with_u32(ds, "deepseek2.attention.kv_lora_rank", 32),
                                     "deepseek2.attention.key_length", 48),
                            "deepseek2.attention.value_length", 32));
  EXPECT_NE(msg.find("tensor 'blk.0.attn_kv_a_mqa.weight' has shape"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.attention.key_length_mla", 40));
  EXPECT_NE(msg.find("has shape"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.attention.key_length_mla", -1));
  EXPECT_NE(msg.find("key_length_mla is missing"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.expert_group_used_count", 4));
  EXPECT_NE(msg.find("expert_group_count 4 and expert_group_used_count 4"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.expert_gating_func", 3));
  EXPECT_NE(msg.find("expert_gating_func 3 is not supported"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.expert_used_count", 9));
  EXPECT_NE(msg.find("expert_used_count 9 is above expert_count 8"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.attention.value_length_mla", 0));
  EXPECT_NE(msg.find("value_length_mla must be at least 1"), std::string::npos) << msg;
  msg = load_error(with_u32(ds, "deepseek2.leading_dense_block_count", 2));
  EXPECT_NE(msg.find("required tensor 'blk.1.ffn_gate.weight' is missing"), std::string::npos) << msg;
}

TEST(Arch, AnArchitecturesOwnTensorIsRequired) {
  for (const auto& [arch, tensor] : {std::pair{"qwen2", "blk.1.attn_k.bias"}, std::pair{"qwen3", "blk.0.attn_q_norm.weight"},
                                     std::pair{"llama", "blk.1.ffn_up.weight"},
                                     std::pair{"qwen3moe", "blk.1.ffn_down_exps.weight"},
                                     std::pair{"qwen3moe", "blk.0.ffn_gate_inp.weight"},
                                     std::pair{"deepseek2", "blk.2.ffn_gate_inp.weight"}}) {
    const std::string msg = load_error(without(made(arch), tensor));
    EXPECT_NE(msg.find(std::string("required tensor '") + tensor + "' is missing"), std::string::npos)
        << arch << ": " << msg;
  }
}

// A mixture of experts whose metadata disagrees with itself or with its tensors is
// refused with the key or the tensor named.
TEST(Arch, MixtureOfExpertsMetadataMustAgree) {
  const std::string moe = made("qwen3moe");
  std::string msg = load_error(with_u32(moe, "qwen3moe.expert_used_count", 9));
  EXPECT_NE(msg.find("expert_used_count 9 is above expert_count 8"), std::string::npos) << msg;
  msg = load_error(with_u32(moe, "qwen3moe.expert_used_count", 0));
  EXPECT_NE(msg.find("expert_used_count"), std::string::npos) << msg;
  msg = load_error(with_u32(moe, "qwen3moe.expert_count", 16));
  EXPECT_NE(msg.find("tensor 'blk.0.ffn_gate_inp.weight' has shape"), std::string::npos) << msg;
  msg = load_error(with_u32(moe, "qwen3moe.expert_feed_forward_length", 32));
  EXPECT_NE(msg.find("tensor 'blk.0.ffn_gate_exps.weight' has shape"), std::string::npos) << msg;
  msg = load_error(with_u32(moe, "qwen3moe.expert_count", -1));
  EXPECT_NE(msg.find("qwen3moe.expert_count is missing"), std::string::npos) << msg;
  msg = load_error(with_u32(moe, "qwen3moe.expert_count", 4096));
  EXPECT_NE(msg.find("expert_count' = 4096 is out of range"), std::string::npos) << msg;
  // A dense architecture whose metadata counts experts: refused, not run as one.
  const std::string dense = made("qwen3");
  msg = load_error(with_u32(with_u32(dense, "qwen3.expert_count", 8), "qwen3.expert_used_count", 2));
  EXPECT_NE(msg.find("qwen3.expert_count is 8, but qwen3 has no mixture of experts"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ridge
