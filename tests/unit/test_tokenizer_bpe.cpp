// Byte-level BPE and special tokens: llama.cpp's test vectors for every vocabulary in
// ../shared/vocab (SentencePiece ones too, through the same loop), round trips, the GPT-2
// byte alphabet, the regex splitter, the merge order on hand-made vocabularies, special
// token parsing, and the errors a bad BPE vocabulary gives.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "vocab_vectors.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

using test::read_all;
using test::read_inputs;
using test::read_outputs;
using test::show;

std::vector<std::string> vocab_files(const std::string& dir, const std::string& ext) {
  std::vector<std::string> r;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ggml-vocab-", 0) == 0 && name.size() > ext.size() &&
        name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      r.push_back(e.path().string());
  }
  std::sort(r.begin(), r.end());
  return r;
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto f = gguf::File::open(path);
  return Tokenizer::from_gguf(*f);
}

// As test-tokenizer-0 does: add_special = false, parse_special = false.
TEST(TokenizerBpe, AllVocabVectorsMatchLlamaCpp) {
  RIDGE_REQUIRE_SHARED(dir, "vocab");
  const auto inps = vocab_files(dir, ".gguf.inp");
  ASSERT_GE(inps.size(), 7u);
  for (const std::string& inp : inps) {
    const std::string gguf_path = inp.substr(0, inp.size() - 4);
    const std::string name = std::filesystem::path(gguf_path).filename().string();
    auto tok = load(gguf_path);
    const auto inputs = read_inputs(inp);
    const auto outputs = read_outputs(gguf_path + ".out");
    ASSERT_EQ(inputs.size(), outputs.size()) << name;
    size_t pass = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto got = tok->encode(inputs[i], /*add_bos=*/false, /*parse_special=*/false);
      if (got == outputs[i])
        ++pass;
      else
        ADD_FAILURE() << name << " case " << i << " '" << inputs[i] << "'\n  want" << show(outputs[i]) << "\n  got "
                      << show(got);
    }
    std::printf("[ vectors  ] %s: %zu / %zu inputs match llama.cpp\n", name.c_str(), pass, inputs.size());
    EXPECT_EQ(pass, inputs.size()) << name;
  }
}

TEST(TokenizerBpe, EveryVocabLoads) {
  RIDGE_REQUIRE_SHARED(dir, "vocab");
  const auto files = vocab_files(dir, ".gguf");
  ASSERT_GE(files.size(), 9u);
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    std::unique_ptr<Tokenizer> tok;
    ASSERT_NO_THROW(tok = load(path));
    EXPECT_GT(tok->n_vocab(), 1000);
    EXPECT_FALSE(tok->encode("Hello world", false).empty());
  }
}

const std::vector<std::string> kRoundTrip = {
    "Hello world",
    " leading space and trailing  ",
    "tabs\tand\nnewlines\r\n\n  indented",
    "数字 123456789 and 3.14159",
    "日本語のテキストと中文文本，한국어 텍스트",
    "emoji 🦙🔥👍🏽 and flags 🇫🇷 and ZWJ 👨‍👩‍👧",
    "mixed: café naïve Ωmega ß ﬁ",
    "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }",
    "don't won't it's I'LL we've",
    "   \t\t   \n",
    "<|endoftext|> not special when literal",
    "\xF0\x9F\xA6\x99\xE4\xBD\xA0",
};

TEST(TokenizerBpe, ByteLevelRoundTrip) {
  RIDGE_REQUIRE_SHARED(dir, "vocab");
  for (const char* name : {"gpt-2", "falcon", "mpt", "refact", "deepseek-llm", "gpt-neox"}) {
    auto tok = load(fmt::format("{}/ggml-vocab-{}.gguf", dir, name));
    ASSERT_TRUE(tok->is_bpe()) << name;
    EXPECT_FALSE(tok->add_space_prefix()) << name;
    for (const auto& s : kRoundTrip) {
      const auto ids = tok->encode(s, false);
      EXPECT_EQ(tok->decode(ids), s) << name << ": '" << s << "' ->" << show(ids);
      // Streaming gives the same text even when a character spans several tokens.
      StreamDecoder sd(*tok);
      std::string streamed;
      for (int32_t id : ids) streamed += sd.push(id);
      EXPECT_EQ(streamed + sd.flush(), s) << name;
    }
  }
}

TEST(TokenizerBpe, Gpt2PiecesAndSpecialTokens) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
  auto tok = load(path);
  EXPECT_EQ(tok->n_vocab(), 50257);
  EXPECT_EQ(tok->bos(), 50256);
  EXPECT_EQ(tok->eos(), 50256);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(50256));
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->piece(995), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(tok->piece_bytes(995), " world");
  EXPECT_EQ(tok->piece_bytes(50256), "");  // control: printed as nothing
  const std::string text = "a<|endoftext|>b";
  const auto literal = tok->encode(text, false, /*parse_special=*/false);
  const auto parsed = tok->encode(text, false, /*parse_special=*/true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_EQ(std::count(literal.begin(), literal.end(), 50256), 0);
  EXPECT_EQ(tok->decode(literal), text);
  // Back to back, at the edges, and a partial name.
  EXPECT_EQ(tok->encode("<|endoftext|><|endoftext|>", false, true), (std::vector<int32_t>{50256, 50256}));
  const auto partial = tok->encode("<|endoftext|", false, true);
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 50256), 0);
  // The two-argument form is the literal one.
  EXPECT_EQ(tok->encode(text, false), literal);
}

// Phi-3's special tokens swallow the whitespace after them (llama.cpp sets rstrip by the
// model name, as HF's added_tokens do); <s> does not.
TEST(TokenizerBpe, Phi3SpecialTokensStripRight) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-phi-3.gguf");
  auto tok = load(path);
  const int32_t user = tok->vocab().find("<|user|>");
  ASSERT_NE(user, Vocab::kNone);
  EXPECT_EQ(tok->encode("<|user|> \n", false, true), (std::vector<int32_t>{user}));
  const auto kept = tok->encode("<s> a", false, true);
  ASSERT_GE(kept.size(), 2u);
  EXPECT_EQ(kept[0], 1);
  EXPECT_EQ(tok->decode({kept.begin() + 1, kept.end()}), " a");
}

// Byte-level BPE: a character split across tokens comes out whole from the stream.
TEST(TokenizerBpe, StreamHoldsSplitCharacters) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
  auto tok = load(path);
  const auto ids = tok->encode("🦙", false);
  ASSERT_GT(ids.size(), 1u);  // GPT-2 has no token for it
  StreamDecoder sd(*tok);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(sd.push(ids[i]), "");
  EXPECT_EQ(sd.push(ids.back()), "🦙");
}

TEST(ByteUnicode, AlphabetRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  const std::string enc = bytes_to_unicode(all);
  EXPECT_EQ(unicode_to_bytes(enc), all);
  EXPECT_EQ(bytes_to_unicode(" "), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(bytes_to_unicode("\n"), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(bytes_to_unicode("A!~"), "A!~");
  EXPECT_EQ(bytes_to_unicode("\xAD"), "\xC5\x83");  // soft hyphen is the last remapped: U+0143
  // Outside the alphabet: passed through as its own bytes.
  EXPECT_EQ(unicode_to_bytes("x\xE4\xBD\xA0y"), "x\xE4\xBD\xA0y");
}

std::vector<std::string> split(const RegexSplitter& r, std::string_view text) {
  std::vector<std::string_view> v;
  r.split(text, v);
  return {v.begin(), v.end()};
}

TEST(RegexSplitter, MatchesAndGapsBecomePieces) {
  RegexSplitter digits(R"(\p{N}+)");
  EXPECT_EQ(split(digits, "ab12cd345"), (std::vector<std::string>{"ab", "12", "cd", "345"}));
  std::vector<std::pair<size_t, size_t>> m;
  digits.matches("ab12cd345", m);
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{2, 4}, {6, 9}}));
  EXPECT_TRUE(split(digits, "").empty());
  // \s is Unicode White_Space: U+3000 and U+0085 are, U+180E is not.
  RegexSplitter ws(R"(\s+)");
  EXPECT_EQ(split(ws, "a\xE3\x80\x80\xC2\x85"
                      "b\xE1\xA0\x8E"
                      "c"),
            (std::vector<std::string>{"a", "\xE3\x80\x80\xC2\x85", "b\xE1\xA0\x8E"
                                                                   "c"}));
  RegexSplitter in_class(R"([^\s\p{L}]+)");
  EXPECT_EQ(split(in_class, "ab!? cd"), (std::vector<std::string>{"ab", "!?", " cd"}));
  // Empty matches make no pieces and do not stall.
  RegexSplitter maybe(R"(x*)");
  EXPECT_EQ(split(maybe, "axxb"), (std::vector<std::string>{"a", "xx", "b"}));
  // Malformed UTF-8 neither matches nor throws.
  RegexSplitter letters(R"(\p{L}+)");
  EXPECT_EQ(split(letters, "ab\xFF"
                           "cd"),
            (std::vector<std::string>{"ab", "\xFF", "cd"}));
  EXPECT_THROW(RegexSplitter("(unclosed"), Error);
}

TEST(RegexSplitter, Gpt2PatternSplitsLikeGpt2) {
  PreTokenizer p(gguf_pre_regexes("gpt-2"));
  std::vector<std::string_view> v;
  p.split("Hello world's  3 apples!!\n", v);
  EXPECT_EQ(std::vector<std::string>(v.begin(), v.end()),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " 3", " apples", "!!", "\n"}));
}

TEST(GgufPre, KnownValuesCompileAndUnknownIsNamed) {
  for (const char* pre : {"default", "gpt2", "gpt-2", "llama-bpe", "llama3", "qwen2", "deepseek-llm", "deepseek-coder",
                          "deepseek-v3", "falcon", "starcoder", "refact", "mpt", "gpt-neox", "olmo", "tekken", "gpt-4o",
                          "poro-chat", "viking", "dbrx", "command-r"}) {
    SCOPED_TRACE(pre);
    const auto regexes = gguf_pre_regexes(pre);
    EXPECT_FALSE(regexes.empty());
    EXPECT_NO_THROW(PreTokenizer{regexes});
  }
  EXPECT_TRUE(gguf_pre("llama-bpe").ignore_merges);
  EXPECT_TRUE(gguf_pre("llama-bpe").add_bos);
  EXPECT_FALSE(gguf_pre("gpt-2").add_bos);
  try {
    gguf_pre("no-such-pre");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-pre'"), std::string::npos) << e.what();
  }
}

// A tiny byte-level vocabulary: the bytes of "abc " plus merged tokens.
Vocab tiny_vocab(std::vector<std::string> extra) {
  Vocab::Spec s;
  s.model = "gpt2";
  s.tokens = {"a", "b", "c", "\xC4\xA0"};
  for (auto& e : extra) s.tokens.push_back(std::move(e));
  s.bos = s.eos = s.unk = Vocab::kNone;
  s.add_bos = false, s.add_space_prefix = false;
  return Vocab::from_spec(std::move(s));
}

std::vector<int32_t> bpe(const BpeModel& m, std::string_view w) {
  std::vector<int32_t> out;
  m.encode(w, out);
  return out;
}

TEST(BpeModel, LowestRankFirstThenLeftmost) {
  const Vocab v = tiny_vocab({"ab", "bc", "abc", "aa"});  // ids 4 5 6 7
  // "b c" outranks "a b": "abc" -> a + bc, and "a bc" is no merge.
  BpeModel m1(v, {{"b", "c"}, {"a", "b"}}, {});
  EXPECT_EQ(bpe(m1, "abc"), (std::vector<int32_t>{0, 5}));
  BpeModel m2(v, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}, {});
  EXPECT_EQ(bpe(m2, "abc"), (std::vector<int32_t>{6}));
  // Equal pairs: the leftmost merges first.
  BpeModel m3(v, {{"a", "a"}}, {});
  EXPECT_EQ(bpe(m3, "aaa"), (std::vector<int32_t>{7, 0}));
  EXPECT_EQ(bpe(m3, "aaaa"), (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(m3.rank("a", "a"), 0);
  EXPECT_EQ(m3.rank("a", "b"), -1);
}

TEST(BpeModel, IgnoreMergesAndFallbacks) {
  const Vocab v = tiny_vocab({"abc", "<0x78>", "<0x79>"});  // 4 5 6
  BpeModel plain(v, {}, {});
  EXPECT_EQ(bpe(plain, "abc"), (std::vector<int32_t>{0, 1, 2}));
  BpeModel whole(v, {}, {.ignore_merges = true, .byte_fallback = false});
  EXPECT_EQ(bpe(whole, "abc"), (std::vector<int32_t>{4}));
  // Unknown symbol: dropped without byte fallback (llama.cpp), <0xNN> with it.
  EXPECT_EQ(bpe(plain, "axb"), (std::vector<int32_t>{0, 1}));
  BpeModel fb(v, {}, {.ignore_merges = false, .byte_fallback = true});
  EXPECT_EQ(bpe(fb, "axyb"), (std::vector<int32_t>{0, 5, 6, 1}));
}

// --- bad BPE vocabularies ---

gguf::Writer bpe_writer() {
  gguf::Writer w;
  w.set_str("general.architecture", "gpt2");
  w.set_str("tokenizer.ggml.model", "gpt2");
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b", "ab", "<|end|>"});
  w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 3});
  w.set_str_array("tokenizer.ggml.merges", {"a b"});
  w.set_u32("tokenizer.ggml.bos_token_id", 3);
  w.set_u32("tokenizer.ggml.eos_token_id", 3);
  return w;
}

std::unique_ptr<Tokenizer> load_writer(const gguf::Writer& w, const std::string& name) {
  const std::string path = fmt::format("{}/{}.gguf", testing::TempDir(), name);
  w.write(path);
  auto f = gguf::File::open(path);
  return Tokenizer::from_gguf(*f);
}

std::string load_error(const gguf::Writer& w, const std::string& name) {
  try {
    load_writer(w, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerBpe, HandMadeGgufAndPreDefaults) {
  auto w = bpe_writer();
  w.set_str("tokenizer.ggml.pre", "gpt-2");
  auto tok = load_writer(w, "bpe_ok");
  EXPECT_EQ(tok->encode("abab", true), (std::vector<int32_t>{2, 2}));
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->encode("ab<|end|>", true, true), (std::vector<int32_t>{2, 3}));
  // llama-bpe adds BOS unless the file says otherwise.
  w.set_str("tokenizer.ggml.pre", "llama-bpe");
  EXPECT_EQ(load_writer(w, "bpe_llama3")->encode("ab", true), (std::vector<int32_t>{3, 2}));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  EXPECT_EQ(load_writer(w, "bpe_llama3_nobos")->encode("ab", true), (std::vector<int32_t>{2}));
}

TEST(TokenizerBpe, UnknownPreIsNamed) {
  auto w = bpe_writer();
  w.set_str("tokenizer.ggml.pre", "martian-v9");
  const auto msg = load_error(w, "bpe_badpre");
  EXPECT_NE(msg.find("'martian-v9'"), std::string::npos) << msg;
}

TEST(TokenizerBpe, MissingOrBadMerges) {
  gguf::Writer w;
  w.set_str("tokenizer.ggml.model", "gpt2");
  w.set_str("tokenizer.ggml.pre", "gpt-2");
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b"});
  auto msg = load_error(w, "bpe_nomerges");
  EXPECT_NE(msg.find("tokenizer.ggml.merges"), std::string::npos) << msg;
  w.set_i32_array("tokenizer.ggml.merges", {1, 2});
  msg = load_error(w, "bpe_badmerges");
  EXPECT_NE(msg.find("tokenizer.ggml.merges"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ridge
