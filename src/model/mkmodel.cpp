#include "model/mkmodel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "quant/quant.h"

namespace ridge {
namespace {

struct Preset {
  const char* name;
  const char* arch;
  int32_t n_vocab, n_ctx, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
  float rope_base, norm_eps;
  bool tied;
  bool llama3_rope;  // write rope_freqs.weight (Llama 3.1/3.2 scaling)
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // a mixture of experts (0: dense)
  // deepseek2 (head_dim is a head's decompressed key, no-RoPE part then rope_dim):
  // latent attention, shared experts, dense leading layers, routing, YaRN.
  int32_t n_lora_q = 0, n_lora_kv = 0, rope_dim = 0, head_dim_v = 0;
  int32_t n_expert_shared = 0, n_dense_lead = 0;
  bool sigmoid = false, weights_norm = false;  // sigmoid routing comes with exp_probs_b
  float weights_scale = 1.f;
  int32_t n_groups = 0, n_groups_used = 0;
  float yarn_factor = 0.f;
  int32_t yarn_orig_ctx = 0;
  float yarn_mscale_all_dim = 0.f;
  // phi3 LongRoPE: rope_factors_long/short and the original context (0: none).
  int32_t longrope_orig_ctx = 0;
  // gemma3: the sliding window (0: none) and the global layers' linear rope scaling (0: none).
  int32_t n_swa = 0;
  float linear_scale = 0.f;
};

// Shapes of the real models (config.json of each), vocabulary sizes included.
constexpr Preset kPresets[] = {
    {"tiny", "llama", 512, 256, 128, 2, 4, 2, 32, 256, 10000.f, 1e-5f, false, false},
    // tiny with what Llama 3.2 adds: a tied output matrix and rope_freqs scaling.
    {"tiny-llama3", "llama", 512, 256, 128, 2, 4, 2, 32, 256, 500000.f, 1e-5f, true, true},
    {"tinyllama-1.1b", "llama", 32000, 2048, 2048, 22, 32, 4, 64, 5632, 10000.f, 1e-5f, false, false},
    {"llama3.2-1b", "llama", 128256, 131072, 2048, 16, 32, 8, 64, 8192, 500000.f, 1e-5f, true, true},
    {"llama3-8b", "llama", 128256, 8192, 4096, 32, 32, 8, 128, 14336, 500000.f, 1e-5f, false, true},
    {"qwen2.5-0.5b", "qwen2", 151936, 32768, 896, 24, 14, 2, 64, 4864, 1000000.f, 1e-6f, true, false},
    {"qwen3-0.6b", "qwen3", 151936, 40960, 1024, 28, 16, 8, 128, 3072, 1000000.f, 1e-6f, true, false},
    // Phi-3-mini-4k: fused projections (arch phi3), no LongRoPE.
    {"phi-3-mini", "phi3", 32064, 4096, 3072, 32, 32, 32, 96, 8192, 10000.f, 1e-5f, false, false},
    // tiny phi3 with LongRoPE: a context (256) past the original (32) runs the long factors;
    // 24 of 32 dimensions rotated, as Phi-4-mini rotates 96 of 128.
    // GPT-2 small as llama.cpp's converter writes it (output.weight a copy of the embeddings).
    {"gpt2-124m", "gpt2", 50257, 1024, 768, 12, 12, 12, 64, 3072, 10000.f, 1e-5f, false, false},
    {.name = "phi3-longrope-tiny", .arch = "phi3", .n_vocab = 512, .n_ctx = 256, .n_embd = 128, .n_layer = 2,
     .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_ff = 256, .rope_base = 10000.f, .norm_eps = 1e-5f, .tied = false,
     .llama3_rope = false, .rope_dim = 24, .longrope_orig_ctx = 32},
    // Gemma 3: windows of 512 (1B) and 1024 (4B, whose global layers scale positions by 8);
    // a tiny one of six layers (five windowed, one global) with a window of 8 for tests.
    {.name = "gemma-3-1b", .arch = "gemma3", .n_vocab = 262144, .n_ctx = 32768, .n_embd = 1152, .n_layer = 26,
     .n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_ff = 6912, .rope_base = 1000000.f, .norm_eps = 1e-6f,
     .tied = true, .llama3_rope = false, .n_swa = 512},
    {.name = "gemma-3-4b", .arch = "gemma3", .n_vocab = 262208, .n_ctx = 131072, .n_embd = 2560, .n_layer = 34,
     .n_head = 8, .n_head_kv = 4, .head_dim = 256, .n_ff = 10240, .rope_base = 1000000.f, .norm_eps = 1e-6f,
     .tied = true, .llama3_rope = false, .n_swa = 1024, .linear_scale = 8.f},
    {.name = "gemma3-tiny", .arch = "gemma3", .n_vocab = 512, .n_ctx = 256, .n_embd = 128, .n_layer = 6,
     .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_ff = 256, .rope_base = 1000000.f, .norm_eps = 1e-6f,
     .tied = true, .llama3_rope = false, .n_swa = 8, .linear_scale = 8.f},
    // Mixtures of experts: 8 experts, 2 active, for tests; Qwen3-30B-A3B's shapes.
    {"qwen3moe-tiny", "qwen3moe", 512, 256, 128, 2, 4, 2, 64, 256, 10000.f, 1e-6f, false, false, 8, 2, 64},
    {"qwen3-30b-a3b", "qwen3moe", 151936, 40960, 2048, 48, 32, 4, 128, 6144, 1000000.f, 1e-6f, false, false, 128, 8,
     768},
    // Mixtral: a llama with 8 experts of feed_forward_length, 2 active.
    {"mixtral-tiny", "llama", 512, 256, 128, 2, 4, 2, 32, 128, 10000.f, 1e-5f, false, false, 8, 2, 128},
    {"mixtral-8x7b", "llama", 32000, 32768, 4096, 32, 32, 8, 128, 14336, 1000000.f, 1e-5f, false, false, 8, 2, 14336},
    // DeepSeek: V2-Lite's (q straight from attn_q, softmax routing, 2 shared experts,
    // YaRN) and V3's (low-rank q, sigmoid routing with a bias in 8 groups, scaled weights)
    // shapes, and a tiny of each for tests (V2-Lite's with YaRN over a 64-token context).
    // gpt-oss: 20b's shapes (MXFP4 experts in the real file), and a tiny one of four
    // layers (two windowed) with a window of 8 and YaRN over a 64-token context.
    {.name = "gpt-oss-20b", .arch = "gpt-oss", .n_vocab = 201088, .n_ctx = 131072, .n_embd = 2880, .n_layer = 24,
     .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_ff = 2880, .rope_base = 150000.f, .norm_eps = 1e-5f,
     .tied = false, .llama3_rope = false, .n_expert = 32, .n_expert_used = 4, .n_ff_exp = 2880, .yarn_factor = 32.f,
     .yarn_orig_ctx = 4096, .n_swa = 128},
    {.name = "gpt-oss-tiny", .arch = "gpt-oss", .n_vocab = 512, .n_ctx = 256, .n_embd = 128, .n_layer = 4,
     .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_ff = 64, .rope_base = 150000.f, .norm_eps = 1e-5f, .tied = false,
     .llama3_rope = false, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64, .yarn_factor = 4.f, .yarn_orig_ctx = 64,
     .n_swa = 8},
    {.name = "deepseek-v2-lite-tiny", .arch = "deepseek2", .n_vocab = 512, .n_ctx = 256, .n_embd = 128, .n_layer = 2,
     .n_head = 4, .n_head_kv = 1, .head_dim = 48, .n_ff = 256, .rope_base = 10000.f, .norm_eps = 1e-6f, .tied = false,
     .llama3_rope = false, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64, .n_lora_q = 0, .n_lora_kv = 64,
     .rope_dim = 16, .head_dim_v = 32, .n_expert_shared = 2, .n_dense_lead = 1, .sigmoid = false, .weights_norm = false,
     .weights_scale = 1.f, .yarn_factor = 4.f, .yarn_orig_ctx = 64, .yarn_mscale_all_dim = 0.707f},
    {.name = "deepseek-v3-tiny", .arch = "deepseek2", .n_vocab = 512, .n_ctx = 256, .n_embd = 128, .n_layer = 3,
     .n_head = 4, .n_head_kv = 1, .head_dim = 48, .n_ff = 256, .rope_base = 10000.f, .norm_eps = 1e-6f, .tied = false,
     .llama3_rope = false, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64, .n_lora_q = 64, .n_lora_kv = 64,
     .rope_dim = 16, .head_dim_v = 32, .n_expert_shared = 1, .n_dense_lead = 1, .sigmoid = true, .weights_norm = true,
     .weights_scale = 2.5f, .n_groups = 4, .n_groups_used = 2},
    {.name = "deepseek-v2-lite", .arch = "deepseek2", .n_vocab = 102400, .n_ctx = 163840, .n_embd = 2048,
     .n_layer = 27, .n_head = 16, .n_head_kv = 1, .head_dim = 192, .n_ff = 10944, .rope_base = 10000.f,
     .norm_eps = 1e-6f, .tied = false, .llama3_rope = false, .n_expert = 64, .n_expert_used = 6, .n_ff_exp = 1408,
     .n_lora_q = 0, .n_lora_kv = 512, .rope_dim = 64, .head_dim_v = 128, .n_expert_shared = 2, .n_dense_lead = 1,
     .sigmoid = false, .weights_norm = false, .weights_scale = 1.f, .yarn_factor = 40.f, .yarn_orig_ctx = 4096,
     .yarn_mscale_all_dim = 0.707f},
    {.name = "deepseek-v3", .arch = "deepseek2", .n_vocab = 129280, .n_ctx = 163840, .n_embd = 7168, .n_layer = 61,
     .n_head = 128, .n_head_kv = 1, .head_dim = 192, .n_ff = 18432, .rope_base = 10000.f, .norm_eps = 1e-6f,
     .tied = false, .llama3_rope = false, .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 2048, .n_lora_q = 1536,
     .n_lora_kv = 512, .rope_dim = 64, .head_dim_v = 128, .n_expert_shared = 1, .n_dense_lead = 3, .sigmoid = true,
     .weights_norm = true, .weights_scale = 2.5f, .n_groups = 8, .n_groups_used = 4, .yarn_factor = 40.f,
     .yarn_orig_ctx = 4096, .yarn_mscale_all_dim = 1.f},
};

const Preset& find_preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p;
  std::string all;
  for (const auto& p : kPresets) all += std::string(all.empty() ? "" : ", ") + p.name;
  fail("unknown preset '{}' (one of: {})", name, all);
}


// with_endoftext: the last token is the control token <|endoftext|>, which llama.cpp
// looks up by text in any vocabulary of a model named like Phi-3.
void synthetic_vocab(gguf::Writer& w, int32_t n_vocab, bool with_endoftext) {
  RIDGE_CHECK(n_vocab >= 259 + 26, "a synthetic vocabulary needs at least 285 tokens, preset asks for {}", n_vocab);
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    toks.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  // Then "▁a".."▁z", "a".."z", and letter strings of growing length, all distinct.
  const std::string sp = "\xe2\x96\x81";
  for (char c = 'a'; c <= 'z' && int32_t(toks.size()) < n_vocab; ++c) toks.push_back(sp + c);
  for (char c = 'a'; c <= 'z' && int32_t(toks.size()) < n_vocab; ++c) toks.push_back(std::string(1, c));
  for (int64_t k = 0; int32_t(toks.size()) < n_vocab; ++k) {
    std::string s;
    for (int64_t v = k + 26; v > 0; v /= 26) s.insert(s.begin(), char('a' + v % 26));
    toks.push_back(k % 2 ? s : sp + s);
  }
  types.resize(toks.size(), 1);
  if (with_endoftext) toks.back() = "<|endoftext|>", types.back() = 3;
  std::vector<float> scores(toks.size(), 0.f);
  for (size_t i = 259; i < toks.size(); ++i) scores[i] = -float(i - 259);
  w.set_str("tokenizer.ggml.model", "llama");
  w.set_str_array("tokenizer.ggml.tokens", toks);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
}

// deepseek2's keys as llama.cpp's converter writes them: the cache as one KV head of the
// absorbed form's sizes, the heads' own as the _mla lengths, q_lora_rank 0 for a direct q
// (the converter writes none for V2-Lite, whose 27 layers llama.cpp recognizes; a
// shrunk copy needs the key).
void write_mla_metadata(gguf::Writer& w, const std::string& a, const Preset& p, int32_t n_layer) {
  w.set_u32(a + "attention.head_count_kv", 1);
  w.set_u32(a + "attention.key_length", uint32_t(p.n_lora_kv + p.rope_dim));
  w.set_u32(a + "attention.value_length", uint32_t(p.n_lora_kv));
  w.set_u32(a + "attention.key_length_mla", uint32_t(p.head_dim));
  w.set_u32(a + "attention.value_length_mla", uint32_t(p.head_dim_v));
  w.set_u32(a + "rope.dimension_count", uint32_t(p.rope_dim));
  w.set_u32(a + "attention.q_lora_rank", uint32_t(p.n_lora_q));
  w.set_u32(a + "attention.kv_lora_rank", uint32_t(p.n_lora_kv));
  w.set_u32(a + "leading_dense_block_count", uint32_t(std::min(p.n_dense_lead, n_layer)));
  w.set_u32(a + "expert_shared_count", uint32_t(p.n_expert_shared));
  w.set_f32(a + "expert_weights_scale", p.weights_scale);
  w.set_bool(a + "expert_weights_norm", p.weights_norm);
  w.set_u32(a + "expert_gating_func", p.sigmoid ? 2 : 1);
  if (p.n_groups > 1) {
    w.set_u32(a + "expert_group_count", uint32_t(p.n_groups));
    w.set_u32(a + "expert_group_used_count", uint32_t(p.n_groups_used));
  }
  if (p.yarn_factor > 0) {
    w.set_str(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", p.yarn_factor);
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(p.yarn_orig_ctx));
    w.set_f32(a + "rope.scaling.yarn_log_multiplier", 0.1f * p.yarn_mscale_all_dim);
  }
}

}  // namespace

uint32_t gguf_file_type(DType t) {
  switch (t) {  // llama_ftype values: what llama.cpp prints as the file's type
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    // llama.cpp names no all-q4_k / all-q5_k file: the _S mixes are the closest.
    case DType::Q4_K: return 14;
    case DType::Q5_K: return 16;
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    case DType::MXFP4: return 38;  // llama.cpp's MXFP4_MOE
    // llama.cpp names no FP8 file type: its "guessed" value rather than all-f32's 0.
    case DType::F8_E4M3_B128: return 1024;
    default: return 0;
  }
}

std::vector<std::string> mkmodel_presets() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.push_back(p.name);
  return v;
}

PresetDims preset_dims(const std::string& preset) {
  const Preset& p = find_preset(preset);
  return {p.n_vocab, p.n_embd, int64_t(p.n_head) * p.head_dim, int64_t(p.n_head_kv) * p.head_dim, p.n_ff,
          p.n_head, p.n_head_kv, p.head_dim, p.n_layer, p.n_expert, p.n_expert_used, p.n_ff_exp,
          p.n_lora_kv, p.n_lora_kv > 0 ? p.rope_dim : 0};
}

void make_model(const MkModelOptions& opt, const std::string& out_path) {
  const Preset& p = find_preset(opt.preset);
  const std::string arch_name = opt.arch.empty() ? p.arch : opt.arch;
  const ArchSpec* arch = find_arch(arch_name);
  if (!arch) fail("unknown architecture '{}' ({})", arch_name, arch_names());
  if (arch->moe && p.n_expert == 0)
    fail("architecture {} is a mixture of experts: use a preset with experts (qwen3moe-tiny, qwen3-30b-a3b)", arch_name);
  if (p.n_expert > 0 && arch_name != p.arch)
    fail("preset {} is a mixture of experts: its architecture is {}, not {}", p.name, p.arch, arch_name);
  // Rope scalings are an architecture's own: another's loader would ignore the tensors.
  if ((p.longrope_orig_ctx > 0 || p.rope_dim > 0 || p.n_swa > 0) && arch_name != p.arch)
    fail("preset {} has {}'s rope scaling: its architecture is {}, not {}", p.name, p.arch, p.arch, arch_name);
  if (p.llama3_rope && arch_name == "phi3")
    fail("preset {} has Llama 3's rope scaling (rope_freqs.weight), which phi3 does not take", p.name);
  RIDGE_CHECK(quant::can_quantize(opt.dtype), "mkmodel cannot write dtype {}", dtype_name(opt.dtype));
  if (opt.window > 0 && p.n_swa == 0) fail("preset {} has no sliding window to set (--window)", p.name);

  int32_t n_vocab = p.n_vocab, head_dim = p.head_dim;
  // The tiny qwen3 gets a head size unlike n_embd / n_head, as the real Qwen3 has.
  if (std::string(p.name) == "tiny" && arch == &arch_qwen3()) head_dim = 64;
  const int32_t n_layer = opt.layers > 0 ? opt.layers : p.n_layer;

  gguf::Writer w;
  const std::string a = arch_name + ".";
  w.set_str("general.architecture", arch_name);
  w.set_str("general.name", fmt::format("ridge-mkmodel-{}-{}", p.name, dtype_name(opt.dtype)));
  w.set_u32("general.file_type", gguf_file_type(opt.dtype));
  w.set_u32(a + "context_length", uint32_t(opt.ctx > 0 ? opt.ctx : p.n_ctx));
  w.set_u32(a + "embedding_length", uint32_t(p.n_embd));
  w.set_u32(a + "block_count", uint32_t(n_layer));
  w.set_u32(a + "feed_forward_length", uint32_t(p.n_ff));
  w.set_u32(a + "attention.head_count", uint32_t(p.n_head));
  const bool mla = p.n_lora_kv > 0;
  if (mla) {
    write_mla_metadata(w, a, p, n_layer);
  } else {
    w.set_u32(a + "attention.head_count_kv", uint32_t(p.n_head_kv));
    w.set_u32(a + "attention.key_length", uint32_t(head_dim));
    w.set_u32(a + "attention.value_length", uint32_t(head_dim));
    if (!arch->learned_pos) w.set_u32(a + "rope.dimension_count", uint32_t(p.rope_dim > 0 ? p.rope_dim : head_dim));
  }
  if (!arch->learned_pos) w.set_f32(a + "rope.freq_base", p.rope_base);
  w.set_f32(a + (arch->layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"), p.norm_eps);
  const bool oai = arch->ffn == Ffn::SwiGluOai;  // gpt-oss
  if (p.n_swa > 0) {
    w.set_u32(a + "attention.sliding_window", uint32_t(opt.window > 0 ? opt.window : p.n_swa));
    if (!oai) w.set_f32(a + "rope.freq_base_swa", 10000.f);
  }
  if (oai && p.yarn_factor > 0) {
    w.set_str(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", p.yarn_factor);
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(p.yarn_orig_ctx));
  }
  if (p.linear_scale > 0) {
    w.set_str(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", p.linear_scale);
  }
  if (p.n_expert > 0) {
    w.set_u32(a + "expert_count", uint32_t(p.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(p.n_expert_used));
    // llama.cpp's converter writes no expert width for Mixtral: it is feed_forward_length.
    if (arch_name != "llama") w.set_u32(a + "expert_feed_forward_length", uint32_t(p.n_ff_exp));
  }

  std::unique_ptr<gguf::File> vocab;
  if (!opt.vocab_path.empty()) {
    vocab = gguf::File::open(opt.vocab_path);
    const gguf::Value* toks = vocab->get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING);
    if (!toks) fail("{}: has no tokenizer.ggml.tokens", opt.vocab_path);
    n_vocab = int32_t(toks->count);
    for (const auto& [key, val] : vocab->kv())
      if (key.substr(0, 10) == "tokenizer.") w.set_value(key, val);
  } else {
    synthetic_vocab(w, n_vocab, arch_name == "phi3");
  }
  w.set_u32(a + "vocab_size", uint32_t(n_vocab));

  ThreadPool pool(opt.threads > 0 ? opt.threads : default_thread_count());
  const uint64_t seed = opt.seed;
  // A matrix [rows][k] (n_mat of them back to back, a 3-D tensor, when n_mat > 1) of type
  // t0, f16 where k is no multiple of its block: N(0, gain/sqrt(k)) so activations stay
  // O(1) through the layers; rows are generated independently (seeded by tensor name and
  // row) and in parallel.
  auto matrix_as = [&](const std::string& name, DType t0, int64_t k, int64_t rows, int64_t n_mat, double gain) {
    const DType t = k % dtype_info(t0).block_size == 0 ? t0 : DType::F16;
    const int64_t rb = row_bytes(t, k), all = rows * n_mat;
    const double sd = gain / std::sqrt(double(k));
    std::vector<int64_t> shape{k, rows};
    if (n_mat > 1) shape.push_back(n_mat);
    w.add_tensor(name, t, shape, [=, &pool](uint8_t* dst) {
      const uint64_t ts = hash_str(name, seed * 0x9e3779b97f4a7c15ull + 1);
      pool.parallel_for(all, 64, [&](int64_t lo, int64_t hi, int) {
        std::vector<float> row(static_cast<size_t>(k));
        for (int64_t r = lo; r < hi; ++r) {
          Rng rng(ts ^ (uint64_t(r) * 0xd1b54a32d192ed03ull));
          for (auto& v : row) v = float(rng.normal() * sd);
          quant::quantize_row(t, row.data(), dst + r * rb, k);
        }
      });
    });
  };
  // A gpt-oss file in MXFP4 is what llama.cpp's MXFP4_MOE type writes and gpt-oss ships:
  // the experts in MXFP4, every other matrix in q8_0.
  const DType dense = arch->ffn == Ffn::SwiGluOai && opt.dtype == DType::MXFP4 ? DType::Q8_0 : opt.dtype;
  auto matrix = [&](const std::string& name, int64_t k, int64_t rows, double gain) {
    matrix_as(name, dense, k, rows, 1, gain);
  };
  auto vec = [&](const std::string& name, int64_t n, double mean, double sd) {
    std::vector<uint8_t> bytes(size_t(n) * 4);
    Rng rng(hash_str(name, seed + 7));
    for (int64_t i = 0; i < n; ++i) {
      const float v = float(mean + sd * rng.normal());
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    w.add_tensor(name, DType::F32, {n}, std::move(bytes));
  };

  const int64_t E = p.n_embd, nq = int64_t(p.n_head) * head_dim, nkv = int64_t(p.n_head_kv) * head_dim;
  // Embeddings N(0, 1): with a tied head the logits then spread widely, so greedy
  // choices have clear margins even on random weights.
  // (An architecture that scales them by sqrt(n_embd) on the way in gets N(0, 1/n_embd):
  // N(0, 1) after the scale, as the others, and logits of unit spread through its tied head.)
  matrix("token_embd.weight", E, n_vocab, arch->embd_scale_sqrt ? 1.0 : std::sqrt(double(E)));
  // Learned positions N(0, 0.5^2), f32 as llama-quantize leaves them.
  if (arch->learned_pos) matrix_as("position_embd.weight", DType::F32, E, opt.ctx > 0 ? opt.ctx : p.n_ctx, 1, 0.5 * std::sqrt(double(E)));
  // (With embeddings scaled on the way in, the tied head's logits spread ~1 only: the final
  // norm's weights around 3 widen the top-2 gaps past the oracle's margins.)
  vec("output_norm.weight", E, arch->embd_scale_sqrt ? 3.0 : 1.0, 0.1);
  if (arch->layer_norm) vec("output_norm.bias", E, 0.0, 0.1);
  if (!p.tied) matrix("output.weight", E, n_vocab, 4.0);
  if (p.llama3_rope) {
    // Llama 3.1's: factor 32, low 1, high 4, original context 8192.
    const auto f = llama3_rope_factors(head_dim, p.rope_base, 32.f, 1.f, 4.f, 8192.f);
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", DType::F32, {int64_t(f.size())}, std::move(bytes));
  }
  if (p.longrope_orig_ctx > 0) {
    // Factors as the 128k models have them: near 1 for the fast pairs, growing for the
    // slow ones (long up to 8, short up to 1.5); attn_factor as Phi-3's converter computes
    // it from the context's growth.
    const int32_t ctx = opt.ctx > 0 ? opt.ctx : p.n_ctx, half = (p.rope_dim > 0 ? p.rope_dim : head_dim) / 2;
    for (const auto& [name, top] : {std::pair{"rope_factors_long.weight", 8.0}, std::pair{"rope_factors_short.weight", 1.5}}) {
      std::vector<uint8_t> bytes(size_t(half) * 4);
      for (int32_t i = 0; i < half; ++i) {
        const float x = float(1.0 + (top - 1.0) * double(i) / double(half - 1));
        std::memcpy(bytes.data() + 4 * i, &x, 4);
      }
      w.add_tensor(name, DType::F32, {int64_t(half)}, std::move(bytes));
    }
    const double scale = double(ctx) / p.longrope_orig_ctx;
    w.set_u32(a + "rope.scaling.original_context_length", uint32_t(p.longrope_orig_ctx));
    w.set_f32(a + "rope.scaling.attn_factor",
              scale <= 1.0 ? 1.f : float(std::sqrt(1.0 + std::log(scale) / std::log(double(p.longrope_orig_ctx)))));
  }
  for (int32_t il = 0; il < n_layer; ++il) {
    const std::string b = fmt::format("blk.{}.", il);
    vec(b + "attn_norm.weight", E, 1.0, 0.1);
    if (arch->layer_norm) vec(b + "attn_norm.bias", E, 0.0, 0.1);
    if (mla) {
      const int64_t C = p.n_lora_kv, R = p.rope_dim, nh = p.n_head;
      if (p.n_lora_q > 0) {
        matrix(b + "attn_q_a.weight", E, p.n_lora_q, 1.0);
        vec(b + "attn_q_a_norm.weight", p.n_lora_q, 1.0, 0.1);
        matrix(b + "attn_q_b.weight", p.n_lora_q, nh * head_dim, 1.0);
      } else {
        matrix(b + "attn_q.weight", E, nh * head_dim, 1.0);
      }
      matrix(b + "attn_kv_a_mqa.weight", E, C + R, 1.0);
      vec(b + "attn_kv_a_norm.weight", C, 1.0, 0.1);
      matrix_as(b + "attn_k_b.weight", opt.dtype, head_dim - R, C, nh, 1.0);
      matrix_as(b + "attn_v_b.weight", opt.dtype, C, p.head_dim_v, nh, 1.0);
      matrix(b + "attn_output.weight", nh * p.head_dim_v, E, 1.0);
      vec(b + "ffn_norm.weight", E, 1.0, 0.1);
      if (il < p.n_dense_lead) {
        matrix(b + "ffn_gate.weight", E, p.n_ff, 1.0);
        matrix(b + "ffn_up.weight", E, p.n_ff, 1.0);
        matrix(b + "ffn_down.weight", p.n_ff, E, 1.0);
        continue;
      }
      matrix_as(b + "ffn_gate_inp.weight", DType::F32, E, p.n_expert, 1, 2.0);
      if (p.sigmoid) vec(b + "exp_probs_b.bias", p.n_expert, 0.0, 0.05);
      matrix_as(b + "ffn_gate_exps.weight", opt.dtype, E, p.n_ff_exp, p.n_expert, 1.0);
      matrix_as(b + "ffn_up_exps.weight", opt.dtype, E, p.n_ff_exp, p.n_expert, 1.0);
      matrix_as(b + "ffn_down_exps.weight", opt.dtype, p.n_ff_exp, E, p.n_expert, 1.0);
      const int64_t Fs = int64_t(p.n_ff_exp) * p.n_expert_shared;
      matrix(b + "ffn_gate_shexp.weight", E, Fs, 1.0);
      matrix(b + "ffn_up_shexp.weight", E, Fs, 1.0);
      matrix(b + "ffn_down_shexp.weight", Fs, E, 1.0);
      continue;
    }
    if (arch->fused_qkv) {
      matrix(b + "attn_qkv.weight", E, nq + 2 * nkv, 1.0);
    } else {
      matrix(b + "attn_q.weight", E, nq, 1.0);
      matrix(b + "attn_k.weight", E, nkv, 1.0);
      matrix(b + "attn_v.weight", E, nkv, 1.0);
    }
    matrix(b + "attn_output.weight", nq, E, 1.0);
    if (arch->proj_bias) vec(b + "attn_output.bias", E, 0.0, 0.1);
    if (arch->qkv_bias && arch->fused_qkv) {
      vec(b + "attn_qkv.bias", nq + 2 * nkv, 0.0, 0.1);
    } else if (arch->qkv_bias) {
      vec(b + "attn_q.bias", nq, 0.0, 0.1);
      vec(b + "attn_k.bias", nkv, 0.0, 0.1);
      vec(b + "attn_v.bias", nkv, 0.0, 0.1);
    }
    if (arch->qk_norm) {
      vec(b + "attn_q_norm.weight", head_dim, arch->post_norms ? 3.0 : 1.0, 0.1);
      vec(b + "attn_k_norm.weight", head_dim, 1.0, 0.1);
    }
    if (oai) {
      // Biases on q/k/v (above) and the output, a sink per head, the MoE's norm under
      // the name post_attention_norm, biases on the router and every expert matrix.
      vec(b + "attn_output.bias", E, 0.0, 0.1);
      vec(b + "attn_sinks.weight", p.n_head, 0.0, 1.0);
      vec(b + "post_attention_norm.weight", E, 1.0, 0.1);
      matrix_as(b + "ffn_gate_inp.weight", DType::F32, E, p.n_expert, 1, 2.0);
      vec(b + "ffn_gate_inp.bias", p.n_expert, 0.0, 0.5);
      matrix_as(b + "ffn_gate_exps.weight", opt.dtype, E, p.n_ff_exp, p.n_expert, 1.0);
      matrix_as(b + "ffn_up_exps.weight", opt.dtype, E, p.n_ff_exp, p.n_expert, 1.0);
      matrix_as(b + "ffn_down_exps.weight", opt.dtype, p.n_ff_exp, E, p.n_expert, 1.0);
      matrix_as(b + "ffn_gate_exps.bias", DType::F32, p.n_ff_exp, p.n_expert, 1, 0.1 * std::sqrt(double(p.n_ff_exp)));
      matrix_as(b + "ffn_up_exps.bias", DType::F32, p.n_ff_exp, p.n_expert, 1, 0.1 * std::sqrt(double(p.n_ff_exp)));
      matrix_as(b + "ffn_down_exps.bias", DType::F32, E, p.n_expert, 1, 0.1 * std::sqrt(double(E)));
      continue;
    }
    if (arch->post_norms) vec(b + "post_attention_norm.weight", E, 1.0, 0.1);
    vec(b + "ffn_norm.weight", E, 1.0, 0.1);
    if (arch->layer_norm) vec(b + "ffn_norm.bias", E, 0.0, 0.1);
    if (arch->post_norms) vec(b + "post_ffw_norm.weight", E, 1.0, 0.1);
    if (arch->ffn == Ffn::Gelu) {
      matrix(b + "ffn_up.weight", E, p.n_ff, 1.0);
      vec(b + "ffn_up.bias", p.n_ff, 0.0, 0.1);
      matrix(b + "ffn_down.weight", p.n_ff, E, 1.0);
      vec(b + "ffn_down.bias", E, 0.0, 0.1);
      continue;
    }
    if (p.n_expert > 0) {
      // The router stays f32, as llama.cpp's converter and llama-quantize keep it; each
      // expert tensor is [n_expert][rows][k], an expert's matrix after another's.
      matrix_as(b + "ffn_gate_inp.weight", DType::F32, E, p.n_expert, 1, 2.0);
      matrix_as(b + "ffn_gate_exps.weight", opt.dtype, E, p.n_ff_exp, p.n_expert, 1.0);
      matrix_as(b + "ffn_up_exps.weight", opt.dtype, E, p.n_ff_exp, p.n_expert, 1.0);
      matrix_as(b + "ffn_down_exps.weight", opt.dtype, p.n_ff_exp, E, p.n_expert, 1.0);
      continue;
    }
    if (arch->fused_gate_up) {
      matrix(b + "ffn_up.weight", E, 2 * int64_t(p.n_ff), 1.0);  // the gate's rows, then up's
    } else {
      matrix(b + "ffn_gate.weight", E, p.n_ff, 1.0);
      matrix(b + "ffn_up.weight", E, p.n_ff, 1.0);
    }
    matrix(b + "ffn_down.weight", p.n_ff, E, 1.0);
  }
  w.write(out_path);
}

}  // namespace ridge
