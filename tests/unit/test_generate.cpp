// End-to-end generation: the real stories260K model against its reference continuations,
// and the batch-invariance contract of the forward pass.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/generator.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "model/quantize_model.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

struct Case {
  std::string prompt;
  int n_predict;
  std::string expected;
};

std::vector<Case> read_tsv(const std::string& path) {
  std::ifstream in(path);
  std::vector<Case> out;
  for (std::string line; std::getline(in, line);) {
    const auto t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos) continue;
    Case c{line.substr(0, t1), std::stoi(line.substr(t1 + 1, t2 - t1 - 1)), ""};
    const std::string e = line.substr(t2 + 1);
    for (size_t i = 0; i < e.size(); ++i) {
      if (e[i] == '\\' && i + 1 < e.size() && e[i + 1] == 'n') {
        c.expected += '\n';
        ++i;
      } else {
        c.expected += e[i];
      }
    }
    out.push_back(c);
  }
  return out;
}

void check_stories(const std::string& model_path, const std::string& tsv, int threads) {
  auto model = Model::load(model_path);
  auto tok = Tokenizer::from_gguf(model->file());
  const auto cases = read_tsv(tsv);
  ASSERT_GE(cases.size(), 5u);
  GenOptions opt;
  opt.threads = threads;
  Generator gen(*model, tok.get(), opt);
  std::vector<GenRequest> reqs;
  for (const auto& c : cases) {
    GenRequest r;
    r.prompt = tok->encode(c.prompt, true);
    r.max_tokens = c.n_predict;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  // All prompts in one batch: the reference is per prompt, so this also checks that
  // batching changes nothing.
  const auto res = gen.run(reqs);
  for (size_t i = 0; i < cases.size(); ++i) {
    StreamDecoder d(*tok, false);
    std::string text;
    for (int32_t id : res[i].tokens) text += d.push(id);
    text += d.flush();
    EXPECT_EQ(text, cases[i].expected) << "prompt: " << cases[i].prompt;
  }
}

TEST(Stories260K, GreedyMatchesReferenceF32) {
  RIDGE_REQUIRE_SHARED(model, "models/stories260K.gguf");
  check_stories(model, test::shared_dir() + "/models/stories260K.greedy.tsv", 2);
}

TEST(Stories260K, GreedyMatchesReferenceF16) {
  RIDGE_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string f16 = testing::TempDir() + "/stories260K-f16.gguf";
  quantize_model(model, f16, DType::F16, 2);
  check_stories(f16, test::shared_dir() + "/models/stories260K.greedy.tsv", 1);
}

// --- batch invariance -----------------------------------------------------------------

std::vector<std::vector<int32_t>> eight_prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> t{1};
    for (int j = 0; j < 3 + 5 * i; ++j) t.push_back(3 + (i * 37 + j * 11) % 500);
    p.push_back(t);
  }
  return p;
}

std::vector<GenResult> run_prompts(const Model& m, const std::vector<std::vector<int32_t>>& prompts, int threads,
                                   int32_t batch_tokens) {
  GenOptions opt;
  opt.threads = threads;
  opt.max_num_batched_tokens = batch_tokens;
  Generator gen(m, nullptr, opt);
  std::vector<GenRequest> reqs;
  for (const auto& p : prompts) {
    GenRequest r;
    r.prompt = p;
    r.max_tokens = 6;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.capture_logits = true;
    reqs.push_back(r);
  }
  return gen.run(reqs);
}

void expect_bitwise(const GenResult& a, const GenResult& b, const std::string& what) {
  ASSERT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0) << what;
}

class BatchInvariance : public testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(BatchInvariance, EightPromptsAloneTogetherChunkedAndThreaded) {
  const auto [arch, dtype] = GetParam();
  const std::string path = testing::TempDir() + "/inv-" + arch + "-" + std::string(dtype_name(dtype)) + ".gguf";
  // "mixtral": the llama architecture with experts (mixtral-tiny); "deepseek2" V3's tiny
  // (low-rank q, grouped sigmoid routing), "deepseek2lite" V2-Lite's (direct q, YaRN),
  // "phi3" fused projections with LongRoPE; "gpt2" learned positions, LayerNorms, GELU;
  // "gemma3" windows of 8 positions (the prompts run to 39) in five of its six layers.
  const bool mixtral = arch == "mixtral", ds = arch.rfind("deepseek2", 0) == 0;
  const char* preset = mixtral                  ? "mixtral-tiny"
                       : arch == "qwen3moe"     ? "qwen3moe-tiny"
                       : arch == "deepseek2"    ? "deepseek-v3-tiny"
                       : arch == "deepseek2lite" ? "deepseek-v2-lite-tiny"
                       : arch == "phi3"          ? "phi3-longrope-tiny"
                       : arch == "gemma3"        ? "gemma3-tiny"
                                                : "tiny";
  make_model({mixtral ? "llama" : ds ? "deepseek2" : arch, preset, dtype, 7, "", 0, 2}, path);
  auto m = Model::load(path);
  const auto prompts = eight_prompts();
  const auto together = run_prompts(*m, prompts, 2, 512);
  const auto together_1t = run_prompts(*m, prompts, 1, 512);
  const auto chunked = run_prompts(*m, prompts, 2, 5);  // every prompt split into chunks
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = run_prompts(*m, {prompts[i]}, 2, 512);
    expect_bitwise(alone[0], together[i], "alone vs batch, prompt " + std::to_string(i));
    expect_bitwise(together[i], together_1t[i], "2 threads vs 1, prompt " + std::to_string(i));
    expect_bitwise(together[i], chunked[i], "whole vs chunked prefill, prompt " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, BatchInvariance,
                         testing::Values(std::make_tuple("llama", DType::F32), std::make_tuple("llama", DType::Q8_0),
                                         std::make_tuple("qwen2", DType::F16), std::make_tuple("qwen3", DType::Q4_0),
                                         std::make_tuple("qwen3moe", DType::Q8_0), std::make_tuple("mixtral", DType::F16),
                                         std::make_tuple("deepseek2", DType::Q8_0),
                                         std::make_tuple("deepseek2lite", DType::F16),
                                         std::make_tuple("phi3", DType::Q4_0), std::make_tuple("gpt2", DType::Q8_0),
                                         std::make_tuple("gemma3", DType::F16)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace ridge
