// ridge perplexity on the real stories260K model, scored on text the model itself wrote
// (its reference greedy continuations), where it must be confident.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "model/model.h"
#include "model/perplexity.h"
#include "model/quantize_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

std::string stories_text() {
  std::ifstream in(test::shared_dir() + "/models/stories260K.greedy.tsv");
  std::string text;
  for (std::string line; std::getline(in, line);) {
    const auto t2 = line.find('\t', line.find('\t') + 1);
    if (t2 == std::string::npos) continue;
    text += line.substr(0, line.find('\t')) + line.substr(t2 + 1) + "\n";
  }
  return text;
}

TEST(Perplexity, Stories260KOnItsOwnTextChunkingAndF16) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto m = Model::load(path);
  auto tok = Tokenizer::from_gguf(m->file());
  const auto tokens = tok->encode(stories_text(), true);
  ThreadPool pool(2);
  PerplexityOptions o;
  o.n_ctx = 64;
  o.bos = tok->bos();
  const PerplexityResult whole = perplexity(*m, pool, tokens, o);
  EXPECT_GE(whole.n_chunks, 5);
  EXPECT_EQ(whole.n_scored, whole.n_chunks * (o.n_ctx / 2 - 1));
  // Text the model itself wrote: far more likely than chance (a 512-token vocabulary
  // gives ~512 for noise); windows straddle the seams between stories, so not near 1.
  // Measured: 4.49.
  EXPECT_GT(whole.ppl, 1.0);
  EXPECT_LT(whole.ppl, 8.0) << "ppl " << whole.ppl;
  std::printf("stories260K ppl on its own text (ctx 64): %.4f +/- %.4f\n", whole.ppl, whole.ppl_err);

  // Windows evaluated in chunks of 7 tokens: the batch-invariant forward gives the same
  // logits, so the same value to the last bit.
  o.batch_tokens = 7;
  EXPECT_EQ(perplexity(*m, pool, tokens, o).ppl, whole.ppl);

  // f16 weights: within 1% of f32.
  const std::string f16 = testing::TempDir() + "/ppl-f16.gguf";
  quantize_model(path, f16, DType::F16, 2);
  auto m16 = Model::load(f16);
  o.batch_tokens = 512;
  const double p16 = perplexity(*m16, pool, tokens, o).ppl;
  EXPECT_NEAR(p16, whole.ppl, 0.01 * whole.ppl);

  // q8_0 weights with 8-bit activations (the packed int8 GEMM on AVX-512, the per-row
  // int8 dots elsewhere): within 1% of f32. Measured: 4.5045 vs 4.4916 (+0.29%).
  const std::string q8 = testing::TempDir() + "/ppl-q8_0.gguf";
  quantize_model(path, q8, DType::Q8_0, 2);
  auto m8 = Model::load(q8);
  const double p8 = perplexity(*m8, pool, tokens, o).ppl;
  std::printf("stories260K ppl q8_0 (8-bit activations): %.4f (%+.2f%% vs f32)\n", p8, 100 * (p8 / whole.ppl - 1));
  EXPECT_NEAR(p8, whole.ppl, 0.01 * whole.ppl);

  o.n_ctx = int64_t(tokens.size());  // fewer than 2 x ctx tokens: a clear error
  EXPECT_THROW(perplexity(*m, pool, tokens, o), Error);
}

}  // namespace
}  // namespace ridge
