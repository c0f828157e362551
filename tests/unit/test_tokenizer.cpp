// SentencePiece tokenizer: llama.cpp's test vectors for real vocabularies, round trips on
// stories260K, the merge order on hand-made vocabularies, streaming detokenization, and
// the errors a bad vocabulary gives.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "vocab_vectors.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

using test::read_all;
using test::read_inputs;
using test::read_outputs;
using test::show;

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = uint8_t(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t j = 1; j < n; ++j)
      if ((uint8_t(s[i + j]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Encodes every test input and compares with llama.cpp's ids; returns the passing count.
void check_vectors(const std::string& name) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-" + name + ".gguf");
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->get_str("tokenizer.ggml.model").value_or(""), "llama");
  EXPECT_TRUE(f->tensors().empty());
  auto tok = Tokenizer::from_gguf(*f);
  const auto inputs = read_inputs(path + ".inp");
  const auto outputs = read_outputs(path + ".out");
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_GT(inputs.size(), 40u);
  size_t pass = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto got = tok->encode(inputs[i], /*add_bos=*/false);
    if (got == outputs[i])
      ++pass;
    else
      ADD_FAILURE() << name << " case " << i << " '" << inputs[i] << "'\n  want" << show(outputs[i]) << "\n  got "
                    << show(got);
  }
  std::printf("[ vectors  ] %s: %zu / %zu inputs match llama.cpp\n", name.c_str(), pass, inputs.size());
  EXPECT_EQ(pass, inputs.size());
}

TEST(Tokenizer, LlamaSpmVectors) { check_vectors("llama-spm"); }
TEST(Tokenizer, Phi3Vectors) { check_vectors("phi-3"); }

TEST(Tokenizer, LlamaSpmPiecesAndFlags) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_EQ(tok->piece(1), "<s>");
  EXPECT_EQ(tok->piece_bytes(1), "");   // control
  EXPECT_EQ(tok->piece_bytes(0), "");   // unknown
  EXPECT_EQ(tok->piece_bytes(13), "\n");  // <0x0A>
  EXPECT_EQ(tok->piece_bytes(15043), " Hello");
  const auto ids = tok->encode("Hello world", true);
  ASSERT_EQ(ids, (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->decode(ids), "Hello world");
  EXPECT_TRUE(tok->encode("", true) == std::vector<int32_t>{1});
  EXPECT_TRUE(tok->encode("", false).empty());
  EXPECT_THROW(tok->piece_bytes(32000), Error);
}

TEST(Tokenizer, Phi3EndOfTurn) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-phi-3.gguf");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  const int32_t end = tok->vocab().find("<|end|>");
  ASSERT_NE(end, Vocab::kNone);
  EXPECT_TRUE(tok->is_eog(end));  // found by its text, as llama.cpp does
  const int32_t eot = tok->vocab().find("<|endoftext|>");
  ASSERT_NE(eot, Vocab::kNone);
  EXPECT_TRUE(tok->is_eog(eot));
  EXPECT_TRUE(tok->is_eog(tok->eos()));
  EXPECT_FALSE(tok->is_eog(tok->vocab().find("<|user|>")));
}

TEST(Tokenizer, Stories260KRoundTrip) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok->n_vocab(), 512);
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "She liked to play outside in the park with her dog, Max!",
      "  two leading spaces, and a trailing one ",
      "Numbers 12345 and symbols #@%^&*() [] {} <> ~`|\\",
      "Line one\nLine two\n\n\ttabbed",
      "Tom said: \"Why?\" Mom said, 'Because.'",
      "x",
      "The END",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",  // byte fallback
  };
  for (const auto& t : texts) {
    const auto with_bos = tok->encode(t, true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], tok->bos());
    EXPECT_EQ(tok->decode(with_bos), t) << show(with_bos);
    EXPECT_EQ(tok->decode(tok->encode(t, false)), t);
  }
}

// A hand-made vocabulary: the byte tokens, control tokens and a few merges with chosen
// scores, to pin down the merge order independently of any real file.
Vocab toy_vocab(std::vector<std::pair<std::string, float>> merges) {
  Vocab::Spec s;
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    s.tokens.push_back(name);
    s.types.push_back(6);
  }
  for (const char* c : {"\xE2\x96\x81", "a", "b", "c", "d"}) {
    s.tokens.push_back(c);
    s.types.push_back(1);
  }
  for (auto& [t, sc] : merges) {
    s.tokens.push_back(t);
    s.types.push_back(1);
  }
  s.scores.assign(s.tokens.size(), -1000.0f);
  for (size_t i = 0; i < merges.size(); ++i) s.scores[s.tokens.size() - merges.size() + i] = merges[i].second;
  s.add_space_prefix = false;
  return Vocab::from_spec(std::move(s));
}

std::vector<std::string> pieces(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> r;
  for (int32_t id : tok.encode(text, false)) r.push_back(tok.piece(id));
  return r;
}

TEST(Tokenizer, MergeOrderByScoreThenLeftmost) {
  using V = std::vector<std::string>;
  {
    auto tok = Tokenizer::from_vocab(toy_vocab({{"ab", -1}, {"bc", -1}}));
    EXPECT_EQ(pieces(*tok, "abc"), (V{"ab", "c"}));  // equal scores: the leftmost pair
  }
  {
    auto tok = Tokenizer::from_vocab(toy_vocab({{"ab", -2}, {"bc", -1}}));
    EXPECT_EQ(pieces(*tok, "abc"), (V{"a", "bc"}));  // the higher score wins
  }
  {
    // "abcd": ab and cd merge, then abcd (only reachable through both).
    auto tok = Tokenizer::from_vocab(toy_vocab({{"ab", -1}, {"cd", -2}, {"abcd", -3}, {"bc", -5}}));
    EXPECT_EQ(pieces(*tok, "abcd"), (V{"abcd"}));
  }
  {
    // Not in the vocabulary: one byte token per UTF-8 byte.
    auto tok = Tokenizer::from_vocab(toy_vocab({}));
    EXPECT_EQ(pieces(*tok, "a\xC3\xA9"), (V{"a", "<0xC3>", "<0xA9>"}));
    EXPECT_EQ(tok->decode(tok->encode("a\xC3\xA9", false)), "a\xC3\xA9");
  }
}

TEST(StreamDecoder, NeverEmitsHalfCharacters) {
  RIDGE_REQUIRE_SHARED(path, "models/stories260K.gguf");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  for (std::string text : {"caf\xC3\xA9!", "\xE6\x97\xA5\xE6\x9C\xAC", "hi \xF0\x9F\x98\x80 there",
                           "\xC3\xA9\xE6\x97\xA5\xF0\x9F\xA6\x99", "plain ascii"}) {
    const auto ids = tok->encode(text, true);
    StreamDecoder sd(*tok);
    std::string all;
    for (int32_t id : ids) {
      const std::string part = sd.push(id);
      EXPECT_TRUE(valid_utf8(part)) << "half a character emitted for '" << text << "'";
      all += part;
    }
    all += sd.flush();
    EXPECT_EQ(all, tok->decode(ids));
    EXPECT_EQ(all, text);
  }
  // The multi-byte characters above really were split over byte tokens.
  const auto ids = tok->encode("\xE6\x97\xA5", false);
  int bytes = 0;
  for (int32_t id : ids) bytes += tok->vocab().type(id) == TokenType::Byte;
  EXPECT_EQ(bytes, 3);
}

TEST(StreamDecoder, HoldsIncompleteAndReplacesInvalid) {
  auto tok = Tokenizer::from_vocab(toy_vocab({}));
  auto byte = [&](uint8_t b) { return tok->vocab().byte_token(b); };
  {
    StreamDecoder sd(*tok);
    EXPECT_EQ(sd.push(byte(0xE6)), "");
    EXPECT_EQ(sd.push(byte(0x97)), "");
    EXPECT_EQ(sd.push(byte(0xA5)), "\xE6\x97\xA5");
    EXPECT_EQ(sd.flush(), "");
  }
  {
    StreamDecoder sd(*tok);
    EXPECT_EQ(sd.push(byte(0xE6)), "");
    EXPECT_EQ(sd.push(byte(0x97)), "");
    EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");  // the held tail at the end: one U+FFFD
  }
  {
    StreamDecoder sd(*tok);
    EXPECT_EQ(sd.push(byte(0xFF)), "\xEF\xBF\xBD");  // can never start a character
    EXPECT_EQ(sd.push(byte(0xE6)), "");
    EXPECT_EQ(sd.push(tok->vocab().find("a")), "\xEF\xBF\xBD" "a");  // broken sequence
    EXPECT_EQ(sd.push(byte(0xED)), "");
    EXPECT_EQ(sd.push(byte(0xA0)), "\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: ill-formed
    EXPECT_EQ(sd.flush(), "");
  }
}

TEST(StreamDecoder, LeadingSpace) {
  RIDGE_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  auto f = gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  const auto ids = tok->encode("Hello world", true);
  StreamDecoder a(*tok), b(*tok, /*strip_leading_space=*/false);
  std::string sa, sb;
  for (int32_t id : ids) sa += a.push(id), sb += b.push(id);
  EXPECT_EQ(sa + a.flush(), "Hello world");
  EXPECT_EQ(sb + b.flush(), " Hello world");
}

// --- bad vocabularies ---

gguf::Writer base_writer(int n) {
  gguf::Writer w;
  w.set_str("general.architecture", "llama");
  w.set_str("tokenizer.ggml.model", "llama");
  std::vector<std::string> toks;
  for (int i = 0; i < n; ++i) toks.push_back(fmt::format("t{}", i));
  w.set_str_array("tokenizer.ggml.tokens", toks);
  return w;
}

std::string load_error(const gguf::Writer& w, const std::string& name) {
  const std::string path = fmt::format("{}/{}.gguf", testing::TempDir(), name);
  w.write(path);
  auto f = gguf::File::open(path);
  try {
    Tokenizer::from_gguf(*f);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Vocab, ValidFileLoads) {
  auto w = base_writer(8);
  w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(8, 0.0f));
  w.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>(8, 1));
  w.set_u32("tokenizer.ggml.bos_token_id", 3);
  EXPECT_EQ(load_error(w, "ok"), "(no error)");
}

TEST(Vocab, MissingTokens) {
  gguf::Writer w;
  w.set_str("tokenizer.ggml.model", "llama");
  EXPECT_NE(load_error(w, "notok").find("tokenizer.ggml.tokens"), std::string::npos);
}

TEST(Vocab, MissingModel) {
  gguf::Writer w;
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  EXPECT_NE(load_error(w, "nomodel").find("tokenizer.ggml.model"), std::string::npos);
}

TEST(Vocab, MismatchedScores) {
  auto w = base_writer(8);
  w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(7, 0.0f));
  const auto msg = load_error(w, "scores");
  EXPECT_NE(msg.find("tokenizer.ggml.scores"), std::string::npos) << msg;
}

TEST(Vocab, MismatchedTokenTypes) {
  auto w = base_writer(8);
  w.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>(9, 1));
  const auto msg = load_error(w, "types");
  EXPECT_NE(msg.find("tokenizer.ggml.token_type"), std::string::npos) << msg;
}

TEST(Vocab, BosOutOfRange) {
  auto w = base_writer(8);
  w.set_u32("tokenizer.ggml.bos_token_id", 8);
  const auto msg = load_error(w, "bos");
  EXPECT_NE(msg.find("tokenizer.ggml.bos_token_id"), std::string::npos) << msg;
}

TEST(Vocab, EosOutOfRange) {
  auto w = base_writer(8);
  w.set_u32("tokenizer.ggml.eos_token_id", 1000);
  const auto msg = load_error(w, "eos");
  EXPECT_NE(msg.find("tokenizer.ggml.eos_token_id"), std::string::npos) << msg;
}

TEST(Vocab, DuplicateToken) {
  gguf::Writer w;
  w.set_str("tokenizer.ggml.model", "llama");
  w.set_str_array("tokenizer.ggml.tokens", {"a", "b", "a"});
  const auto msg = load_error(w, "dup");
  EXPECT_NE(msg.find("duplicate token 'a'"), std::string::npos) << msg;
}

TEST(Vocab, UnsupportedModelNamesIt) {
  auto w = base_writer(8);
  w.set_str("tokenizer.ggml.model", "gpt2");
  const auto msg = load_error(w, "gpt2");
  EXPECT_NE(msg.find("'gpt2'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ridge
