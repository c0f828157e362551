// Hugging Face checkpoints (model/hf_checkpoint, gguf/safetensors): a model written as
// Hugging Face lays it out by an independent writer (tests/hf/write_hf_checkpoint.mjs,
// Node, from the formats' specifications: its tensor names, its Q/K row order, sharded
// or not) loads and gives logits bitwise equal to the GGUF it was written from; and
// every way a safetensors file or config.json can be wrong is a clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/safetensors.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "model/forward.h"
#include "model/hf_checkpoint.h"
#include "model/kv_cache.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "engine/engine.h"
#include "tokenizer/hf_tokenizer.h"
#include "core/cpu.h"
#include "quant/fp8.h"
#include "quant/quant.h"

namespace ridge {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "ridge_hf_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<float> logits(const Model& m, const std::vector<int32_t>& toks) {
  const HParams& h = m.hparams();
  KVLayout l{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, 16, 4, DType::F16};
  KVCache kv(l);
  ThreadPool pool(1);
  const auto be = kernels::make_cpu_backend(pool);
  Forward fwd(m, kv, *be);
  const std::vector<int32_t> table{0, 1, 2, 3};
  Batch b;
  b.add(toks, 0, table, Logits::All);
  const auto lg = fwd.run(b);
  return {lg.begin(), lg.end()};
}

// The independent writer, or a skip (a failure under CI=true, where node must be there).
bool write_hf(const std::string& gguf, const std::string& dir, int shards, const std::string& extra = "") {
  const std::string script = std::string(RIDGE_SOURCE_DIR) + "/tests/hf/write_hf_checkpoint.mjs";
  const std::string cmd =
      "node " + script + " --gguf " + gguf + " --out " + dir + " --shards " + std::to_string(shards) + " " + extra;
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") ADD_FAILURE() << cmd << " failed (" << rc << ")";
    return false;
  }
  return true;
}

TEST(HfCheckpoint, IndependentlyWrittenCheckpointsGiveTheGgufsLogitsBitForBit) {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << "node is missing; under CI=true this test must run";
    GTEST_SKIP() << "node is not installed: the independent checkpoint writer cannot run";
  }
  const std::vector<int32_t> toks{1, 17, 300, 4, 99, 17, 256, 3, 511, 42};
  int n = 0;
  // tiny-llama3: a tied output and Llama 3.1's rope scaling, which the checkpoint states in
  // config.json (rope_scaling) and the converter turns back into rope_freqs.weight.
  const std::string llama3_rope =
      R"('{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}')";
  for (const char* arch : {"llama", "qwen2", "qwen3", "llama3"})
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      const bool l3 = std::string(arch) == "llama3";
      const std::string name = std::string(arch) + "_" + std::string(dtype_name(t));
      MkModelOptions o;
      o.preset = l3 ? "tiny-llama3" : "tiny";
      o.arch = l3 ? "llama" : arch;
      o.dtype = t;
      o.seed = 11;
      const std::string gguf = tmp(name + ".gguf"), dir = tmp(name + "_hf");
      make_model(o, gguf);
      const int shards = 1 + n++ % 3;  // 1, 2 and 3 shards in turn
      ASSERT_TRUE(write_hf(gguf, dir, shards, l3 ? "--rope-scaling " + llama3_rope : "")) << name;
      const auto want = logits(*Model::load(gguf), toks);
      const auto got = logits(*Model::from_file(open_hf_checkpoint(dir)), toks);
      ASSERT_EQ(want.size(), got.size()) << name;
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << name << ", " << shards << " shards";
      // ridge convert's file: the same bytes, so the same logits.
      const std::string conv = tmp(name + "_conv.gguf");
      convert_hf_checkpoint(dir, conv, {});
      const auto again = logits(*Model::load(conv), toks);
      EXPECT_EQ(std::memcmp(want.data(), again.data(), want.size() * 4), 0) << name << " via ridge convert";
      // To q8_0: the GGUF route quantizes the same rows.
      if (t == DType::F32) {
        HfConvertOptions q;
        q.type = DType::Q8_0;
        const auto mq = Model::from_file(open_hf_checkpoint(dir, q));
        EXPECT_EQ(mq->weights().layers[0].wq.type, DType::Q8_0);
      }
      fs::remove(gguf), fs::remove(conv), fs::remove_all(dir);
    }
}

// A checkpoint's embedding has rows past its tokenizer's ids (Qwen's 151936 rows for
// 151669 tokens): those rows are no token, never sampled and absent from logprobs. A tiny
// model (512 rows) with a 264-token byte-level tokenizer, sampled at temperature 1.5.
TEST(HfCheckpoint, EmbeddingRowsPastTheTokenizerAreNeverSampled) {
  nlohmann::json vocab;
  for (int b = 0; b < 256; ++b) {
    // GPT-2's byte-to-unicode map for printable ASCII is the identity; the rest need not
    // be meaningful here, only distinct.
    vocab[b >= 33 && b <= 126 ? std::string(1, char(b)) : "<b" + std::to_string(b) + ">"] = b;
  }
  for (int i = 256; i < 264; ++i) vocab["tok" + std::to_string(i)] = i;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  const auto tok = load_hf_tokenizer(j.dump(), "");
  ASSERT_EQ(tok->n_vocab(), 264);
  const std::string path = tmp("pad.gguf");
  make_model({"llama", "tiny", DType::F32, 9, "", 0, 1}, path);
  const auto m = Model::load(path);
  ASSERT_EQ(m->hparams().n_vocab, 512);
  EngineConfig c;
  c.threads = 1;
  Engine e(*m, tok.get(), c);
  RequestParams p;
  p.sampling.temperature = 1.5f;
  p.sampling.seed = 3;
  p.max_tokens = 200;
  p.ignore_eos = true;
  p.logprobs = 5;
  const int64_t id = e.add_request({65, 66, 67}, p);
  while (e.has_work()) e.step();
  const RequestOutput out = e.output(id);
  ASSERT_EQ(out.tokens.size(), 200u);
  for (int32_t t : out.tokens) EXPECT_LT(t, 264);
  for (const auto& lp : out.logprobs)
    for (const auto& [alt, v] : lp.top) EXPECT_LT(alt, 264) << v;
  fs::remove(path);
}

// --- bad files ------------------------------------------------------------------------

std::vector<uint8_t> st_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_parse_error(const std::string& header, size_t data_bytes, const std::string& what) {
  const auto b = st_file(header, data_bytes);
  try {
    safetensors::File::parse(b.data(), b.size(), "t.safetensors");
    ADD_FAILURE() << "no error for " << header << "; expected '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Safetensors, ParsesAValidFile) {
  const auto b = st_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                         R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"__metadata__":{"format":"pt"}})",
                         32);
  const auto f = safetensors::File::parse(b.data(), b.size(), "t");
  ASSERT_EQ(f->tensors().size(), 2u);
  const auto* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ(f->find("b")->data, a->data + 24);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, BadFilesAreClearErrors) {
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 20, "past the data");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20, "needs 24 bytes");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12, "overlaps");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "belong to no tensor");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12, "after the last tensor");
  expect_parse_error(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8, "dtype 'Q4'");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "non-negative");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, "more than the file");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "backwards");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2]}})", 8, "data_offsets");
  expect_parse_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8, "not valid JSON");
  expect_parse_error(R"([1,2])", 8, "not a JSON object");
  {
    std::vector<uint8_t> b(16, 0);
    const uint64_t n = 200'000'000;
    std::memcpy(b.data(), &n, 8);
    try {
      safetensors::File::parse(b.data(), b.size(), "big");
      ADD_FAILURE() << "a 200 MB header";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
    }
  }
  {
    const uint8_t four[4] = {1, 2, 3, 4};
    EXPECT_THROW(safetensors::File::parse(four, 4, "short"), Error);
  }
}

// A checkpoint made by hand: a config.json that disagrees with its tensors, a missing
// tensor, an index naming a shard that lacks the tensor.
TEST(HfCheckpoint, ConfigThatDisagreesWithTheTensorsIsAClearError) {
  const std::string dir = tmp("cfg");
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::vector<uint8_t>& b) {
    std::ofstream(dir + "/" + name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  };
  const auto write_text = [&](const std::string& name, const std::string& s) { std::ofstream(dir + "/" + name) << s; };
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 8}, {"intermediate_size", 16},
                        {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                        {"vocab_size", 4}, {"rms_norm_eps", 1e-5}};
  write_text("config.json", cfg.dump());
  // Only the embedding, with 5 rows where config.json says 4.
  write("model.safetensors", st_file(R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[5,8],"data_offsets":[0,160]}})", 160));
  auto expect = [&](const std::string& what) {
    try {
      open_hf_checkpoint(dir);
      ADD_FAILURE() << "no error; expected '" << what << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect("has shape [5, 8], config.json makes it [4, 8]");
  write("model.safetensors", st_file(R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]}})", 128));
  expect("no tensor 'model.norm.weight'");
  cfg["architectures"] = {"GPT2LMHeadModel"};
  write_text("config.json", cfg.dump());
  expect("'GPT2LMHeadModel' is not supported");
  cfg["architectures"] = {"LlamaForCausalLM"};
  cfg.erase("hidden_size");
  write_text("config.json", cfg.dump());
  expect("'hidden_size' is missing");
  write_text("config.json", "{not json");
  expect("not valid JSON");
  cfg["hidden_size"] = 8;
  cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  write_text("config.json", cfg.dump());
  expect("rope_scaling");
  cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 2.0}, {"high_freq_factor", 2.0}};
  write_text("config.json", cfg.dump());
  expect("low_freq_factor equals");
  cfg.erase("rope_scaling");
  cfg["attention_bias"] = true;
  write_text("config.json", cfg.dump());
  expect("attention_bias = true");
  cfg.erase("attention_bias");
  cfg["sliding_window"] = 4096;
  write_text("config.json", cfg.dump());
  expect("sliding_window");
  cfg["use_sliding_window"] = false;  // Qwen2's configs name a window they do not use
  write_text("config.json", cfg.dump());
  expect("no tensor 'model.norm.weight'");  // past the config checks
  cfg.erase("sliding_window");
  cfg.erase("use_sliding_window");
  write_text("config.json", cfg.dump());
  write_text("model.safetensors.index.json", R"({"weight_map":{"model.norm.weight":"model.safetensors"}})");
  expect("has no such tensor");
  write_text("model.safetensors.index.json", R"({"weight_map":{"model.norm.weight":"../x"}})");
  expect("not a file in the directory");
  fs::remove(dir + "/model.safetensors.index.json");
  fs::remove(dir + "/model.safetensors");
  expect("no model.safetensors");
  fs::remove_all(dir);
}

// Safetensors tensors as these tests write them (name -> dtype, shape, bytes), and a
// checkpoint directory of them: model.safetensors (tensors in name order, the header
// padded to 8 bytes) and config.json.
struct Blob {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Blobs = std::map<std::string, Blob>;

void put_f32(Blobs& m, const std::string& n, std::vector<int64_t> shape, const std::vector<float>& v) {
  Blob b{"F32", std::move(shape), std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(b.bytes.data(), v.data(), b.bytes.size());
  m[n] = std::move(b);
}

void write_checkpoint(const std::string& dir, const Blobs& m, const nlohmann::json& config) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [n, b] : m) {
    h[n] = {{"dtype", b.dtype}, {"shape", b.shape}, {"data_offsets", {off, off + b.bytes.size()}}};
    off += b.bytes.size();
  }
  std::string hs = h.dump();
  while ((8 + hs.size()) % 8) hs += ' ';
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  const uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << hs;
  for (const auto& [nm, b] : m) f.write(reinterpret_cast<const char*>(b.bytes.data()), std::streamsize(b.bytes.size()));
  std::ofstream(dir + "/config.json") << config.dump();
}

// A one-layer llama with one KV head.
nlohmann::json llama_config(int64_t hidden, int64_t ff, int64_t heads, int64_t hd, int64_t vocab) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", hidden}, {"intermediate_size", ff},
          {"num_hidden_layers", 1}, {"num_attention_heads", heads}, {"num_key_value_heads", 1},
          {"head_dim", hd}, {"vocab_size", vocab}, {"rms_norm_eps", 1e-5}};
}

// Block-scaled FP8 (quantization_config.weight_block_size): a checkpoint of E4M3 codes
// with weight_scale_inv per block, and the same model in f32 holding exactly the values
// those codes and scales stand for (code x its block's scale, one rounding, the
// converter's own), convert to identical f32 GGUF tensors; partial blocks at the edges
// included (20 x 40 matrices in 8 x 16 blocks). Ridge's FP8 needs rows of whole
// 128-blocks: 40 is not, and says so when asked for.
TEST(HfCheckpoint, BlockScaledFp8ConvertsToTheValuesItStandsFor) {
  const int64_t hidden = 40, ff = 24, vocab = 6, heads = 2, hd = 20;
  const int64_t bs[2] = {8, 16};
  std::mt19937 rng(5);
  struct T {
    std::string name;
    std::vector<int64_t> shape;
    bool fp8;
  };
  const std::vector<T> ts = {{"model.embed_tokens.weight", {vocab, hidden}, false},
                             {"model.norm.weight", {hidden}, false},
                             {"lm_head.weight", {vocab, hidden}, false},
                             {"model.layers.0.input_layernorm.weight", {hidden}, false},
                             {"model.layers.0.post_attention_layernorm.weight", {hidden}, false},
                             {"model.layers.0.self_attn.q_proj.weight", {heads * hd, hidden}, true},
                             {"model.layers.0.self_attn.k_proj.weight", {hd, hidden}, true},
                             {"model.layers.0.self_attn.v_proj.weight", {hd, hidden}, true},
                             {"model.layers.0.self_attn.o_proj.weight", {hidden, heads * hd}, true},
                             {"model.layers.0.mlp.gate_proj.weight", {ff, hidden}, true},
                             {"model.layers.0.mlp.up_proj.weight", {ff, hidden}, true},
                             {"model.layers.0.mlp.down_proj.weight", {hidden, ff}, true}};
  Blobs fp8, f32;  // name -> (dtype, shape, bytes), for both checkpoints
  std::uniform_real_distribution<float> u(-1.f, 1.f), pos(0.01f, 2.f);
  for (const T& t : ts) {
    const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
    if (!t.fp8) {
      std::vector<float> v(size_t(rows * cols));
      for (float& x : v) x = u(rng);
      put_f32(fp8, t.name, t.shape, v);
      put_f32(f32, t.name, t.shape, v);
      continue;
    }
    const int64_t br = (rows + bs[0] - 1) / bs[0], bc = (cols + bs[1] - 1) / bs[1];
    std::vector<float> scale(size_t(br * bc)), vals(size_t(rows * cols));
    for (float& x : scale) x = pos(rng);
    Blob codes{"F8_E4M3", t.shape, std::vector<uint8_t>(size_t(rows * cols))};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t code = uint8_t(rng());
        if ((code & 0x7F) == 0x7F) code = 0x30;  // not NaN
        codes.bytes[size_t(r * cols + c)] = code;
        vals[size_t(r * cols + c)] = quant::fp8_e4m3_to_f32(code) * scale[size_t((r / bs[0]) * bc + c / bs[1])];
      }
    fp8[t.name] = std::move(codes);
    put_f32(fp8, t.name + "_scale_inv", {br, bc}, scale);
    put_f32(f32, t.name, t.shape, vals);
  }
  auto write_dir = [&](const std::string& dir, const Blobs& m, bool quantized) {
    nlohmann::json cfg = llama_config(hidden, ff, heads, hd, vocab);
    if (quantized) cfg["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {bs[0], bs[1]}}};
    write_checkpoint(dir, m, cfg);
  };
  const std::string d8 = tmp("fp8"), d32 = tmp("fp8_as_f32");
  write_dir(d8, fp8, true);
  write_dir(d32, f32, false);
  HfConvertOptions o;
  o.type = DType::F32;
  const auto a = open_hf_checkpoint(d8, o), b = open_hf_checkpoint(d32, o);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const auto& t : b->tensors()) {
    const auto* ta = a->find_tensor(t.name);
    ASSERT_NE(ta, nullptr) << t.name;
    ASSERT_EQ(ta->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(std::memcmp(ta->data, t.data, t.nbytes), 0) << t.name;
  }
  // Rows of 40 fit neither 128-blocks nor q8_0's 32: by default bf16; asked for, fp8 is
  // an error.
  EXPECT_EQ(open_hf_checkpoint(d8)->find_tensor("blk.0.attn_q.weight")->type, DType::BF16);
  try {
    HfConvertOptions f;
    f.type = DType::F8_E4M3_B128;
    open_hf_checkpoint(d8, f);
    ADD_FAILURE() << "fp8 rows of 40 loaded as ridge's fp8 (128-blocks)";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a whole number of fp8 blocks"), std::string::npos) << e.what();
  }
  // A tensor the mapping has no place for (a llama with attention biases) is an error,
  // not silently dropped.
  put_f32(f32, "model.layers.0.self_attn.q_proj.bias", {heads * hd}, std::vector<float>(size_t(heads * hd), 0.5f));
  fs::remove_all(d32);
  write_dir(d32, f32, false);
  try {
    open_hf_checkpoint(d32, o);
    ADD_FAILURE() << "a leftover tensor converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q_proj.bias' has no place"), std::string::npos) << e.what();
  }
  fs::remove_all(d8), fs::remove_all(d32);
}

// FP8 checkpoints load as ridge's FP8 weights, codes and scales as they are, for each way
// the checkpoints scale them: 128 x 128 tiles (fp8 with weight_block_size,
// weight_scale_inv), one per row (compressed-tensors, weight_scale [rows, 1], with a static
// input_scale that is not needed), one per tensor (fp8 without a block size, weight_scale
// []). Each matrix dequantizes to exactly the f32 values the codes and scales stand for
// (the same model written in f32), llama's Q/K rows moved with their scales; the model's
// logits agree with the f32 model's within f32 rounding (the FP8 kernel multiplies codes,
// then scales); a NaN code or a scale of the wrong shape is a clear error.
TEST(HfCheckpoint, Fp8CheckpointsLoadAsFp8Weights) {
  // Without the packed GEMM (an older CPU, or a forced path) FP8 matrices load as q8_0
  // (fp8_default), so there are no FP8 weights to check.
  if (!kernels::gemm_available(DType::F8_E4M3_B128)) GTEST_SKIP() << "no packed FP8 GEMM on this CPU path";
  const int64_t hidden = 128, ff = 256, vocab = 8, heads = 2, hd = 64;
  using Map = Blobs;
  auto write_dir = [&](const std::string& dir, const Map& m, const nlohmann::json& qc) {
    nlohmann::json cfg = llama_config(hidden, ff, heads, hd, vocab);
    if (!qc.is_null()) cfg["quantization_config"] = qc;
    write_checkpoint(dir, m, cfg);
  };
  const std::vector<std::pair<std::string, std::vector<int64_t>>> mats = {
      {"self_attn.q_proj", {heads * hd, hidden}}, {"self_attn.k_proj", {hd, hidden}},
      {"self_attn.v_proj", {hd, hidden}},         {"self_attn.o_proj", {hidden, heads * hd}},
      {"mlp.gate_proj", {ff, hidden}},            {"mlp.up_proj", {ff, hidden}},
      {"mlp.down_proj", {hidden, ff}}};
  enum Kind { Tile, Row, Whole };
  const nlohmann::json cfgs[] = {
      {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}},
      {{"quant_method", "compressed-tensors"},
       {"config_groups", {{"group_0", {{"weights", {{"type", "float"}, {"num_bits", 8}, {"strategy", "channel"}}}}}}}},
      {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}};
  const std::string d8 = tmp("fp8n"), d32 = tmp("fp8n_f32");
  for (const Kind kind : {Tile, Row, Whole}) {
    SCOPED_TRACE("kind " + std::to_string(int(kind)));
    std::mt19937 rng(7 + kind);
    std::uniform_real_distribution<float> u(-1.f, 1.f), pos(0.002f, 0.05f);
    Map fp8, f32;
    auto plain = [&](const std::string& n, std::vector<int64_t> shape) {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      std::vector<float> v(static_cast<size_t>(count));
      for (float& x : v) x = n.find("norm") != std::string::npos ? 1.f + 0.1f * u(rng) : u(rng);
      put_f32(fp8, n, shape, v);
      put_f32(f32, n, shape, v);
    };
    plain("model.embed_tokens.weight", {vocab, hidden});
    plain("lm_head.weight", {vocab, hidden});
    plain("model.norm.weight", {hidden});
    plain("model.layers.0.input_layernorm.weight", {hidden});
    plain("model.layers.0.post_attention_layernorm.weight", {hidden});
    for (const auto& [short_name, shape] : mats) {
      const std::string n = "model.layers.0." + short_name + ".weight";
      const int64_t rows = shape[0], cols = shape[1];
      const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
      // As a checkpoint's: codes of N(0, 1) x 100 (a few subnormal), scales that make the
      // weights about N(0, 1 / cols) (a model whose logits do not amplify rounding).
      std::vector<float> scale(size_t(kind == Tile ? br * bc : kind == Row ? rows : 1));
      for (float& x : scale) x = pos(rng) * 20.f / (100.f * std::sqrt(float(cols)));
      Blob codes{"F8_E4M3", shape, std::vector<uint8_t>(size_t(rows * cols))};
      std::vector<float> vals(size_t(rows * cols));
      std::normal_distribution<float> nd(0.f, 100.f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          uint8_t code = quant::f32_to_fp8_e4m3(nd(rng));
          if ((r + c) % 61 == 0) code = uint8_t(code & 0x87);  // subnormal (or zero)
          codes.bytes[size_t(r * cols + c)] = code;
          const float s = scale[size_t(kind == Tile ? (r / 128) * bc + c / 128 : kind == Row ? r : 0)];
          vals[size_t(r * cols + c)] = quant::fp8_e4m3_to_f32(code) * s;
        }
      fp8[n] = std::move(codes);
      if (kind == Tile) put_f32(fp8, n + "_scale_inv", {br, bc}, scale);
      if (kind == Row) {
        put_f32(fp8, n + "_scale", {rows, 1}, scale);
        put_f32(fp8, "model.layers.0." + short_name + ".input_scale", {1}, {0.5f});
      }
      if (kind == Whole) put_f32(fp8, n + "_scale", {}, scale);
      put_f32(f32, n, shape, vals);
    }
    write_dir(d8, fp8, cfgs[kind]);
    write_dir(d32, f32, nullptr);
    const auto a = open_hf_checkpoint(d8);
    const auto b = open_hf_checkpoint(d32);
    int n_fp8 = 0;
    for (const auto& t : b->tensors()) {
      const auto* ta = a->find_tensor(t.name);
      ASSERT_NE(ta, nullptr) << t.name;
      if (ta->type != DType::F8_E4M3_B128) {
        EXPECT_EQ(std::memcmp(ta->data, t.data, t.nbytes), 0) << t.name;
        continue;
      }
      ++n_fp8;
      const int64_t k = t.ne[0], rows = t.ne[1];
      std::vector<float> got(static_cast<size_t>(k));
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(DType::F8_E4M3_B128, ta->data + r * row_bytes(DType::F8_E4M3_B128, k), got.data(), k);
        ASSERT_EQ(std::memcmp(got.data(), t.data + r * k * 4, size_t(k) * 4), 0) << t.name << " row " << r;
      }
    }
    EXPECT_EQ(n_fp8, 7);
    const std::vector<int32_t> toks{1, 5, 2, 7, 3};
    const auto lb = logits(*Model::from_file(open_hf_checkpoint(d32)), toks);
    // ridge convert's default for llama.cpp: q8_0. Its logits' distance from the f32
    // model's (int8 activations) is the yardstick for the bf16 path's (bf16 activations).
    HfConvertOptions o;
    o.fp8_type = DType::Q8_0;
    EXPECT_EQ(open_hf_checkpoint(d8, o)->find_tensor("blk.0.ffn_up.weight")->type, DType::Q8_0);
    auto worst = [&](const std::vector<float>& l) {
      double w = 0;
      for (size_t i = 0; i < l.size(); ++i) w = std::max(w, std::fabs(double(l[i]) - lb[i]) / (1 + std::fabs(lb[i])));
      return w;
    };
    const double q8_err = worst(logits(*Model::from_file(open_hf_checkpoint(d8, o)), toks));
    const Fp8Path saved = fp8_path();
    for (const auto path : {Fp8Path::F16c, Fp8Path::Bf16}) {
      if (path == Fp8Path::Bf16 && !fp8_bf16_available()) continue;
      set_fp8_path(path);  // the model packs its panels for it
      const auto la = logits(*Model::from_file(open_hf_checkpoint(d8)), toks);
      set_fp8_path(saved);
      ASSERT_EQ(la.size(), lb.size());
      if (path == Fp8Path::F16c) EXPECT_LE(worst(la), 1e-3) << "f16c: exact products";
      else EXPECT_LE(worst(la), 2 * q8_err) << "bf16 activations, against q8_0's " << q8_err;
    }
    if (kind != Row) continue;
    // A NaN code: the loader names the tensor. A scale of another shape: the converter does.
    fp8["model.layers.0.mlp.up_proj.weight"].bytes[77] = 0xFF;
    write_dir(d8, fp8, cfgs[kind]);
    try {
      Model::from_file(open_hf_checkpoint(d8));
      ADD_FAILURE() << "a NaN code loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("up_proj.weight' holds an FP8 NaN code"), std::string::npos) << e.what();
    }
    fp8["model.layers.0.mlp.up_proj.weight"].bytes[77] = 0x10;
    put_f32(fp8, "model.layers.0.mlp.up_proj.weight_scale", {3}, {1.f, 1.f, 1.f});
    write_dir(d8, fp8, cfgs[kind]);
    try {
      open_hf_checkpoint(d8);
      ADD_FAILURE() << "a scale of 3 loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("up_proj.weight_scale' is [3]"), std::string::npos) << e.what();
    }
  }
  write_dir(d8, {}, {{"quant_method", "awq"}});
  try {
    open_hf_checkpoint(d8);
    ADD_FAILURE() << "awq accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not supported (FP8 weights"), std::string::npos) << e.what();
  }
  fs::remove_all(d8), fs::remove_all(d32);
}

}  // namespace
}  // namespace ridge
