// HF tokenizer.json pipelines on small hand-made files: each normalizer, pre-tokenizer and
// split behaviour as the Rust `tokenizers` library defines it, added-token rules, BOS/EOS
// from the post-processor and the config, decoding, and the errors for unsupported
// components. The real files are checked against the npm reference by
// tests/tokenizers/run_hf_tests.sh.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/hf_tokenizer.h"

namespace ridge {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

// SentencePiece-style BPE (Mistral, Gemma): <unk> <s> </s>, 256 byte tokens, then a few
// pieces; byte_fallback; normalizer Prepend + Replace; decoder Replace, ByteFallback,
// Fuse, Strip.
constexpr int32_t kByte0 = 3, kSp = 259, kA = 260, kB = 261, kSpA = 262, kAB = 263, kSpAB = 264, kC = 265;

json spm_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = kByte0 + b;
  vocab["\xE2\x96\x81"] = kSp;
  vocab["a"] = kA;
  vocab["b"] = kB;
  vocab["\xE2\x96\x81" "a"] = kSpA;
  vocab["ab"] = kAB;
  vocab["\xE2\x96\x81" "ab"] = kSpAB;
  vocab["c"] = kC;
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"}, {"byte_fallback", true},
                {"fuse_unk", true}, {"merges", {"\xE2\x96\x81 a", "a b", "\xE2\x96\x81" "a b"}}};
  j["added_tokens"] = {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                       {{"id", 1}, {"content", "<s>"}, {"special", true}},
                       {{"id", 2}, {"content", "</s>"}, {"special", true}}};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return j;
}

// Byte-level BPE (GPT-2 / Llama 3 / Qwen): the 256 alphabet characters as ids 0..255 in
// byte order, then merged tokens.
json byte_level_json() {
  json vocab;
  for (int b = 0; b < 256; ++b) vocab[std::string(byte_to_unicode(uint8_t(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["llo"] = 258;
  vocab["hello"] = 259;
  vocab["\xC4\xA0w"] = 260;       // "Ġw"
  vocab["\xC4\xA0world"] = 261;   // reachable only whole (ignore_merges)
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab},
                {"merges", json::array({json::array({"h", "e"}), json::array({"l", "l"}), json::array({"ll", "o"}),
                                        json::array({"he", "llo"}), json::array({"\xC4\xA0", "w"})})}};
  j["added_tokens"] = {{{"id", 262}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
                       {{"id", 263}, {"content", "<tool>"}, {"special", false}, {"normalized", false}}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

std::unique_ptr<Tokenizer> load(const json& j, const json& cfg = nullptr) {
  return load_hf_tokenizer(j.dump(), cfg.is_null() ? "" : cfg.dump());
}

// A default step of the given kind (aggregate init would warn about the other fields).
template <typename T, typename K>
T mk(K kind) {
  T t;
  t.kind = kind;
  return t;
}

Ids bytes_of(std::string_view s) {
  Ids r;
  for (unsigned char c : s) r.push_back(c);
  return r;
}

TEST(HfTokenizer, SentencePieceStyleBpeWithByteFallback) {
  auto tok = load(spm_json());
  // "ab c" -> "▁ab▁c": ▁+a, then ▁a+b; "▁c" is no merge.
  EXPECT_EQ(tok->encode("ab c", false), (Ids{kSpAB, kSp, kC}));
  EXPECT_EQ(tok->encode("ab c", true), (Ids{1, kSpAB, kSp, kC}));
  // é is not a token: its UTF-8 bytes become <0xC3> <0xA9>.
  EXPECT_EQ(tok->encode("\xC3\xA9", false), (Ids{kSp, kByte0 + 0xC3, kByte0 + 0xA9}));
  EXPECT_EQ(tok->decode({1, kSpAB, kSp, kC}), "ab c");  // BOS prints nothing, Strip drops one space
  EXPECT_EQ(tok->decode({kSp, kByte0 + 0xC3, kByte0 + 0xA9}), "\xC3\xA9");
  EXPECT_EQ(tok->encode("", true), (Ids{1}));
  // Special tokens: text unless parse_special.
  EXPECT_EQ(tok->encode("a</s>", false, true), (Ids{kSpA, 2}));
  EXPECT_NE(tok->encode("a</s>", false, false), (Ids{kSpA, 2}));
}

TEST(HfTokenizer, UnknownCharacterWithoutByteFallbackIsFusedUnk) {
  json j = spm_json();
  j["model"]["byte_fallback"] = false;
  auto tok = load(j);
  // Two unknown characters in a row: one UNK (fuse_unk); the known runs are BPE'd apart.
  EXPECT_EQ(tok->encode("a\xC3\xA9\xC3\xA9" "b", false), (Ids{kSpA, 0, kB}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(j)->encode("a\xC3\xA9\xC3\xA9" "b", false), (Ids{kSpA, 0, 0, kB}));
}

TEST(HfTokenizer, ByteLevelBpe) {
  auto tok = load(byte_level_json());
  const int32_t o = 'o', r = 'r', l = 'l', d = 'd';
  EXPECT_EQ(tok->encode("hello world", false), (Ids{259, 260, o, r, l, d}));
  EXPECT_EQ(tok->decode({259, 260, o, r, l, d}), "hello world");
  EXPECT_EQ(tok->decode(bytes_of("\xF0\x9F\x98\x80 \t\n")), "\xF0\x9F\x98\x80 \t\n");  // every byte round-trips
  // ignore_merges: a pre-token that is a token is taken whole.
  json j = byte_level_json();
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode("hello world", false), (Ids{259, 261}));
  // add_prefix_space: the first piece gets a space too.
  j = byte_level_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(load(j)->encode("hello", false), (Ids{' ', 259}));  // Ġ is byte 0x20's character
}

TEST(HfTokenizer, AddedTokens) {
  auto tok = load(byte_level_json());
  // Non-special added tokens are always split out; special ones only with parse_special.
  EXPECT_EQ(tok->encode("a<tool>b", false), (Ids{'a', 263, 'b'}));
  EXPECT_EQ(tok->encode("a<|end|>", false, true), (Ids{'a', 262}));
  EXPECT_EQ(tok->encode("<|end|>", false, false), bytes_of("<|end|>"));
  EXPECT_EQ(tok->decode({'a', 263, 262}), "a<tool>");  // special: nothing; added: its text
  // lstrip / rstrip take the whitespace around the match.
  json j = byte_level_json();
  j["added_tokens"][1]["lstrip"] = true;
  j["added_tokens"][1]["rstrip"] = true;
  EXPECT_EQ(load(j)->encode("a  <tool> \tb", false), (Ids{'a', 263, 'b'}));
  // Leftmost-longest: the longer token wins where both start.
  j = byte_level_json();
  j["added_tokens"].push_back({{"id", 264}, {"content", "<tool>x"}, {"special", false}});
  EXPECT_EQ(load(j)->encode("<tool>x<tool>", false), (Ids{264, 263}));
}

std::vector<std::string> split(std::string_view text, std::vector<std::pair<size_t, size_t>> m,
                               hf::SplitBehavior b, bool invert = false) {
  std::vector<hf::Piece> out;
  hf::split_by(text, m, b, invert, true, out);
  std::vector<std::string> r;
  for (const auto& p : out) r.emplace_back(p.text);
  return r;
}

TEST(HfTokenizer, SplitBehaviours) {
  // "a-b--c", matches: the three '-'.
  const std::vector<std::pair<size_t, size_t>> m = {{1, 2}, {3, 4}, {4, 5}};
  using B = hf::SplitBehavior;
  using V = std::vector<std::string>;
  EXPECT_EQ(split("a-b--c", m, B::Removed), (V{"a", "b", "c"}));
  EXPECT_EQ(split("a-b--c", m, B::Isolated), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split("a-b--c", m, B::MergedWithPrevious), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(split("a-b--c", m, B::MergedWithNext), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split("a-b--c", m, B::Contiguous), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(split("a-b--c", m, B::Removed, /*invert=*/true), (V{"-", "-", "-"}));
}

TEST(HfTokenizer, Normalizers) {
  auto run = [](std::vector<hf::Normalizer> chain, std::string s) {
    hf::normalize(chain, s);
    return s;
  };
  using N = hf::Normalizer;
  EXPECT_EQ(run({mk<N>(N::Kind::NFC)}, "e\xCC\x81 \xE1\x84\x80\xE1\x85\xA1"), "\xC3\xA9 \xEA\xB0\x80");  // é, 가
  EXPECT_EQ(run({mk<N>(N::Kind::NFKC)}, "\xEF\xAC\x81 \xE2\x91\xA0"), "fi 1");
  EXPECT_EQ(run({mk<N>(N::Kind::NFD)}, "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(run({mk<N>(N::Kind::Lowercase)}, "AbC \xC4\xB0"), "abc i\xCC\x87");  // İ -> i + U+0307, as Rust
  N strip = mk<N>(N::Kind::Strip);
  strip.strip_left = strip.strip_right = true;
  EXPECT_EQ(run({strip}, " \t\xE3\x80\x80x y\n "), "x y");  // U+3000 is whitespace too
  N rep = mk<N>(N::Kind::Replace);
  rep.pattern = " ";
  rep.content = "\xE2\x96\x81";
  N pre = mk<N>(N::Kind::Prepend);
  pre.content = "\xE2\x96\x81";
  EXPECT_EQ(run({pre, rep}, "a b"), "\xE2\x96\x81" "a\xE2\x96\x81" "b");
  EXPECT_EQ(run({pre}, ""), "");  // nothing is prepended to nothing
  N rx = mk<N>(N::Kind::Replace);
  rx.regex = std::make_shared<RegexSplitter>(" {2,}");
  rx.content = " ";
  EXPECT_EQ(run({rx}, "a    b  c d"), "a b c d");
  // NFC across the text, including the stretches the fast path leaves to utf8proc.
  EXPECT_EQ(run({mk<N>(N::Kind::NFC)}, "x\xE3\x81\x8B\xE3\x82\x99 A\xCC\x8A\xE4\xB8\xAD"), "x\xE3\x81\x8C \xC3\x85\xE4\xB8\xAD");
}

TEST(HfTokenizer, PreTokenizers) {
  using S = hf::PreTokenizerStep;
  auto run = [](std::vector<S> steps, std::string_view text, bool at_start = true) {
    std::deque<std::string> arena;
    std::vector<hf::Piece> pieces;
    hf::pre_tokenize(steps, text, at_start, arena, pieces);
    std::vector<std::string> r;
    for (const auto& p : pieces) r.emplace_back(p.text);
    return r;
  };
  using V = std::vector<std::string>;
  const std::string m = "\xE2\x96\x81";  // ▁
  S meta = mk<S>(S::Kind::Metaspace);
  meta.replacement = m;
  EXPECT_EQ(run({meta}, "hi there"), (V{m + "hi", m + "there"}));
  meta.prepend = S::Prepend::First;
  EXPECT_EQ(run({meta}, "hi", /*at_start=*/false), (V{"hi"}));
  EXPECT_EQ(run({meta}, "hi", /*at_start=*/true), (V{m + "hi"}));
  meta.split = false;
  EXPECT_EQ(run({meta}, "a b", true), (V{m + "a" + m + "b"}));
  S digits = mk<S>(S::Kind::Digits);
  EXPECT_EQ(run({digits}, "ab123c4"), (V{"ab", "123", "c", "4"}));
  digits.individual_digits = true;
  EXPECT_EQ(run({digits}, "x12"), (V{"x", "1", "2"}));
  S punct = mk<S>(S::Kind::Punctuation);
  EXPECT_EQ(run({punct}, "hi!?x\xE3\x80\x82"), (V{"hi", "!", "?", "x", "\xE3\x80\x82"}));
  S ws = mk<S>(S::Kind::WhitespaceSplit);
  EXPECT_EQ(run({ws}, " a\t b\n"), (V{"a", "b"}));
  S bl = mk<S>(S::Kind::ByteLevel);
  bl.regex = std::make_shared<RegexSplitter>(hf::kByteLevelRegex);
  EXPECT_EQ(run({bl}, "I'm ok"), (V{"I", "'m", "\xC4\xA0ok"}));
  // A regex Split, then ByteLevel without its own regex (the Llama 3 / Qwen layout).
  S sp = mk<S>(S::Kind::Split);
  sp.regex = std::make_shared<RegexSplitter>("\\p{N}{1,3}");
  S bl2 = mk<S>(S::Kind::ByteLevel);
  EXPECT_EQ(run({sp, bl2}, "a12345 b"), (V{"a", "123", "45", "\xC4\xA0" "b"}));
}

TEST(HfTokenizer, BosEosFromConfigOverrideTheTemplate) {
  json cfg = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}}}, {"eos_token", "</s>"},
              {"add_bos_token", false}, {"add_eos_token", true}, {"chat_template", "{{ messages }}"}};
  auto tok = load(spm_json(), cfg);
  EXPECT_EQ(tok->encode("c", true), (Ids{kSp, kC, 2}));
  EXPECT_EQ(tok->encode("c", false), (Ids{kSp, kC}));
  EXPECT_EQ(tok->eos(), 2);
  const HfTokenizerConfig c = parse_hf_tokenizer_config(cfg.dump());
  EXPECT_EQ(c.chat_template, "{{ messages }}");
  EXPECT_EQ(c.bos_token, "<s>");
  json list = {{"chat_template", {{{"name", "default"}, {"template", "A"}}, {{"name", "tool_use"}, {"template", "B"}}}}};
  const HfTokenizerConfig l = parse_hf_tokenizer_config(list.dump());
  EXPECT_EQ(l.chat_template, "A");
  EXPECT_EQ(l.chat_templates.at("tool_use"), "B");
}

void expect_error(const json& j, const std::string& needle) {
  try {
    load(j);
    ADD_FAILURE() << "no error; wanted one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, UnsupportedComponentsAreErrorsNamingThem) {
  json j = spm_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error(j, "BertNormalizer");
  j = spm_json();
  j["normalizer"]["normalizers"][1] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_error(j, "Precompiled");
  j = spm_json();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_error(j, "BertPreTokenizer");
  j = spm_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_error(j, "Sideways");
  j = spm_json();
  j["model"]["type"] = "WordPiece";
  expect_error(j, "WordPiece");
  j = spm_json();
  j["model"]["type"] = "Unigram";
  expect_error(j, "Unigram");
  j = spm_json();
  j["decoder"] = {{"type", "CTC"}};
  expect_error(j, "CTC");
  j = spm_json();
  j["decoder"]["decoders"][3]["start"] = 2;
  expect_error(j, "Strip");
  j = spm_json();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_error(j, "RobertaProcessing");
  j = spm_json();
  j["added_tokens"][0]["single_word"] = true;
  expect_error(j, "single_word");
  j = spm_json();
  j["truncation"] = {{"max_length", 8}};
  expect_error(j, "truncation");
  j = spm_json();
  j["model"]["dropout"] = 0.1;
  expect_error(j, "dropout");
  j = spm_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}};
  expect_error(j, "pre_tokenizer");
  expect_error(json::array(), "not a JSON object");
  EXPECT_THROW(load_hf_tokenizer("{not json", ""), Error);
  EXPECT_THROW(load_hf_tokenizer(spm_json().dump(), "{\"bos_token\": \"<nope>\"}"), Error);
}

}  // namespace
}  // namespace ridge
