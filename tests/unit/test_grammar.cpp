// The constrained-decoding grammar: GBNF compilation and its errors, UTF-8 classes, the
// matcher's masks against a token-by-token reference, regular expressions against
// std::regex, integer ranges, and JSON Schema grammars.
// GCC 12 at -O1 with the sanitizers (the ASan build) reports std::regex's internal
// std::function as maybe-uninitialized: a false positive inside libstdc++.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace ridge::grammar {
namespace {

// A vocabulary of single bytes only: the matcher then sees every byte as a token.
std::shared_ptr<const TokenTrie> byte_vocab() {
  std::vector<std::string> b;
  for (int c = 0; c < 256; ++c) b.push_back(std::string(1, char(c)));
  b.push_back("");  // an empty piece: never producible
  b.push_back("</s>");
  return std::make_shared<TokenTrie>(b, std::vector<bool>(b.size(), false), std::vector<int32_t>{257});
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, byte_vocab());
  return m.accept_bytes(text) && m.can_end();
}

std::string error_of(std::string_view text) {
  try {
    compile_gbnf(text);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(Grammar, GbnfLiteralsClassesAndRepetition) {
  auto g = compile_gbnf(R"(root ::= "a" [b-d]+ x? "\x41" ("-" x){2,3} # comment
x ::= [^a-z\n] | "é")");
  EXPECT_TRUE(matches(g, "abA-1-2"));
  EXPECT_TRUE(matches(g, "accdZA-é-é-Q"));
  EXPECT_FALSE(matches(g, "aA-1-2"));      // [b-d]+ needs one
  EXPECT_FALSE(matches(g, "abA-1"));       // {2,3}
  EXPECT_FALSE(matches(g, "abA-1-2-3-4"));
  EXPECT_FALSE(matches(g, "abA-q-2"));     // [^a-z]
  EXPECT_TRUE(matches(g, "abA-\xF0\x9F\x98\x80-2"));  // a 4-byte character is one x
}

TEST(Grammar, GeneratedRulesNeverTakeADefinedName) {
  // The group and class here make rules of their own; the grammar then defines names a
  // counter-based scheme would have given them.
  auto g = compile_gbnf("root ::= (\"a\" [x-z]) root-1 root-2\nroot-1 ::= \"b\"\nroot-2 ::= \"c\"");
  EXPECT_TRUE(matches(g, "axbc"));
}

TEST(Grammar, RulesMayContinueOverLines) {
  auto g = compile_gbnf("root ::= a\n  | b\nb ::= \"b\"\na ::= \"a\" (\n \"x\"\n | \"y\" )");
  EXPECT_TRUE(matches(g, "b"));
  EXPECT_TRUE(matches(g, "ax"));
  EXPECT_TRUE(matches(g, "ay"));
  EXPECT_FALSE(matches(g, "a"));
}

TEST(Grammar, ErrorsNameThePlace) {
  EXPECT_NE(error_of("root ::= foo").find("1:10: rule 'foo' is not defined"), std::string::npos) << error_of("root ::= foo");
  EXPECT_NE(error_of("root ::= \"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("root ::= [a-").find("1:"), std::string::npos);
  EXPECT_NE(error_of("root ::= a\na ::= a \"x\" | \"y\"").find("left-recursive"), std::string::npos);
  // Through a nullable prefix and another rule.
  EXPECT_NE(error_of("root ::= n b\nn ::= \"x\"?\nb ::= root \"y\" | \"z\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("x ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{5,2}").find("n < m"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{100000}").find("repetition count"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("2:1: rule 'root' is defined twice"), std::string::npos);
  EXPECT_NE(error_of("").find("empty grammar"), std::string::npos);
  // Grammars past the element limit; counted repetitions are one element each.
  Limits small;
  small.max_elems = 8000;
  EXPECT_THROW(compile_gbnf("root ::= \"" + std::string(9000, 'a') + "\"", "root", small), GrammarError);
  EXPECT_NO_THROW(compile_gbnf("root ::= ((\"a\"{9000}){9000}){9000}", "root", small));
  EXPECT_EQ(error_of("root ::= \"a\" root | \"\""), "");  // right recursion is fine
  // A way back to a rule with nothing left to match after it expands to a fixed point.
  EXPECT_TRUE(matches(compile_gbnf("root ::= root | \"a\""), "a"));
  EXPECT_TRUE(matches(compile_gbnf("root ::= (\"a\"? \"b\"?)* \"c\""), "abbac"));
  EXPECT_NE(error_of("root ::= x\nx ::= y \"z\"\ny ::= x | \"q\"").find("left-recursive"), std::string::npos);
}

TEST(Grammar, Utf8ClassEncodesExactlyTheRanges) {
  std::mt19937_64 rng(7);
  auto enc = [](uint32_t c) {
    std::string s;
    if (c < 0x80) s += char(c);
    else if (c < 0x800) s += char(0xC0 | c >> 6), s += char(0x80 | (c & 0x3F));
    else if (c < 0x10000) s += char(0xE0 | c >> 12), s += char(0x80 | (c >> 6 & 0x3F)), s += char(0x80 | (c & 0x3F));
    else
      s += char(0xF0 | c >> 18), s += char(0x80 | (c >> 12 & 0x3F)), s += char(0x80 | (c >> 6 & 0x3F)),
          s += char(0x80 | (c & 0x3F));
    return s;
  };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for (int k = 0; k < 3; ++k) {
      uint32_t a = uint32_t(rng() % 0x110000), b = uint32_t(rng() % 0x110000);
      if (trial % 2) a %= 0x900, b %= 0x11000;  // around the length boundaries
      if (a > b) std::swap(a, b);
      ranges.push_back({a, b});
    }
    const auto seqs = utf8_class(ranges);
    auto in = [&](uint32_t c) {
      for (auto [a, b] : ranges)
        if (c >= a && c <= b) return true;
      return false;
    };
    for (int probe = 0; probe < 3000; ++probe) {
      uint32_t c = probe < 1000 ? uint32_t(rng() % 0x110000) : ranges[size_t(probe % 3)].first + uint32_t(rng() % 300) - 150;
      if (c >= 0x110000 || (c >= 0xD800 && c <= 0xDFFF)) continue;
      const std::string e = enc(c);
      int hits = 0;
      for (const auto& s : seqs) {
        if (s.size() != e.size()) continue;
        bool ok = true;
        for (size_t i = 0; i < e.size(); ++i) ok &= s[i].has(uint8_t(e[i]));
        hits += ok;
      }
      ASSERT_EQ(hits, in(c) ? 1 : 0) << "code point " << c << " trial " << trial;
    }
  }
}

// The trie walk's mask against trying every token from the state on its own, on random
// vocabularies (shared prefixes, multi-byte pieces, pieces cut inside a character) and
// states reached by random allowed tokens.
TEST(Grammar, MaskEqualsTryingEveryToken) {
  const auto g = compile_gbnf(json_value_gbnf(false));
  std::mt19937_64 rng(11);
  const std::string alphabet = "{}[],:\"\\ \n\t0123456789.-+eEtruefalsnbxyz\xC3\xA9\xE2\x82\xAC";
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<std::string> pieces;
    for (int c = 0; c < 128; ++c) pieces.push_back(std::string(1, char(c)));  // every ASCII byte
    for (int k = 0; k < 600; ++k) {
      std::string p;
      const int len = 1 + int(rng() % 6);
      for (int j = 0; j < len; ++j) p += alphabet[rng() % alphabet.size()];
      pieces.push_back(p);
    }
    pieces.push_back("<eos>");
    const int32_t eos = int32_t(pieces.size()) - 1;
    auto vocab = std::make_shared<TokenTrie>(pieces, std::vector<bool>(pieces.size(), false), std::vector<int32_t>{eos});
    Matcher m(g, vocab);
    for (int step = 0; step < 60 && !m.ended(); ++step) {
      const std::vector<uint64_t> mask = m.mask();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
        bool ref;
        if (id == eos) {
          ref = m.can_end();
        } else {
          Matcher copy = m;
          ref = copy.accept_bytes(pieces[size_t(id)]);
        }
        const bool got = (mask[size_t(id) >> 6] >> (id & 63)) & 1;
        ASSERT_EQ(got, ref) << "trial " << trial << " step " << step << " token '" << pieces[size_t(id)] << "'";
        if (got) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_EQ(m.valid_prefix(std::vector<int32_t>{pick}), 1);
      ASSERT_TRUE(m.accept(pick));
    }
  }
}

TEST(Grammar, EndOfGenerationOnlyWhereTheGrammarEnds) {
  auto g = compile_gbnf(R"(root ::= "ab" | "abc")");
  auto v = byte_vocab();
  Matcher m(g, v);
  EXPECT_FALSE(m.accept(257));  // </s> before anything
  EXPECT_TRUE(m.accept('a'));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept('x'));  // refused: the state is unchanged
  EXPECT_TRUE(m.accept('b'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  EXPECT_TRUE(m.allowed(257));
  EXPECT_TRUE(m.allowed('c'));
  EXPECT_FALSE(m.allowed(256));  // the empty piece
  EXPECT_TRUE(m.accept('c'));
  EXPECT_TRUE(m.must_end());
  for (int id = 0; id < 256; ++id) EXPECT_FALSE(m.allowed(id));
  EXPECT_TRUE(m.accept(257));
  EXPECT_TRUE(m.ended());
}

TEST(Grammar, ValidPrefixLeavesTheStateAlone) {
  auto g = compile_gbnf(R"(root ::= "abc")");
  Matcher m(g, byte_vocab());
  const std::vector<int32_t> toks = {'a', 'b', 'x', 'c'};
  EXPECT_EQ(m.valid_prefix(toks), 2);
  EXPECT_EQ(m.valid_prefix(std::vector<int32_t>{'a', 'b', 'c', 257}), 4);
  EXPECT_TRUE(m.accept('a'));
  EXPECT_EQ(m.valid_prefix(std::vector<int32_t>{'b', 'c'}), 2);
}

// Regexes against std::regex (ECMAScript) on random strings over a small alphabet.
TEST(Grammar, RegexAgreesWithStdRegex) {
  // (ours, std::regex's: it has no named groups)
  const std::vector<std::pair<std::string, std::string>> patterns = {
      {"a*b", ""}, {"(ab|c)+d?", ""}, {"[a-c]{2,4}", ""}, {"x(?:yz)*", ""}, {"\\d+(\\.\\d{1,2})?", ""},
      {"[^ab]c", ""}, {"(a|b)*abb", ""}, {"a{3}", ""}, {"a{2,}b", ""}, {"(?<n>[0-9]{2})-[a-f]+", "([0-9]{2})-[a-f]+"},
      {".x.", ""}, {"\\w\\W\\s", ""}, {"[\\d.]+", ""}, {"(a*)*b", ""}, {"a+?b{1,2}?", ""}};
  const std::string alphabet = "abcdxyz0129.- _\t";
  std::mt19937_64 rng(3);
  for (const auto& [p, std_p] : patterns) {
    const RegexGbnf rx = regex_to_gbnf(p, false);  // whole-text match, as std::regex_match
    auto g = compile_gbnf("root ::= " + rx.expr);
    const std::regex re(std_p.empty() ? p : std_p, std::regex::ECMAScript);
    int agree = 0;
    for (int k = 0; k < 3000; ++k) {
      std::string s;
      const int len = int(rng() % 7);
      for (int j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_match(s, re);
      ASSERT_EQ(matches(g, s), want) << "pattern " << p << " on '" << s << "'";
      agree += want;
    }
    (void)agree;
  }
  for (const char* bad : {"a(?=b)", "(a)\\1", "a\\b", "a**", "(ab", "a{99999}", "[z-a]"}) {
    EXPECT_THROW(regex_to_gbnf(bad, false), GrammarError) << bad;
  }
}

TEST(Grammar, RegexInJsonStringsEscapes) {
  const RegexGbnf rx = regex_to_gbnf("^[^x]$", true);
  EXPECT_TRUE(rx.uses_json_escapes);
  auto g = compile_gbnf("root ::= \"\\\"\" " + rx.expr + " \"\\\"\"\n" + json_escape_rules());
  EXPECT_TRUE(matches(g, "\"a\""));
  EXPECT_TRUE(matches(g, "\"\\\"\""));   // a quote, escaped
  EXPECT_TRUE(matches(g, "\"\\\\\""));   // a backslash, escaped
  EXPECT_TRUE(matches(g, "\"\\n\""));    // a line feed, escaped
  EXPECT_FALSE(matches(g, "\"\"\""));    // a raw quote
  EXPECT_FALSE(matches(g, "\"x\""));
}

std::shared_ptr<const Grammar> schema_grammar(const char* schema) {
  return compile_gbnf(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema)));
}

TEST(Grammar, IntegerRangesAreExact) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{0, 0}, {-5, 5}, {7, 123}, {-250, -17}, {10, 99}, {-1, 1000}, {99, 101}};
  for (auto [lo, hi] : cases) {
    const std::string sc = nlohmann::json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}.dump();
    auto g = schema_grammar(sc.c_str());
    for (int64_t v = -1100; v <= 1100; ++v) ASSERT_EQ(matches(g, std::to_string(v)), v >= lo && v <= hi) << sc << " at " << v;
    EXPECT_FALSE(matches(g, "-0"));
    EXPECT_FALSE(matches(g, "007"));
  }
  // Exclusive bounds (2020-12 numbers and draft 4 booleans) and one-sided ones.
  auto g = schema_grammar(R"({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 6})");
  EXPECT_FALSE(matches(g, "3"));
  EXPECT_TRUE(matches(g, "4"));
  EXPECT_TRUE(matches(g, "5"));
  EXPECT_FALSE(matches(g, "6"));
  g = schema_grammar(R"({"type": "integer", "minimum": 3, "exclusiveMinimum": true})");
  EXPECT_FALSE(matches(g, "3"));
  EXPECT_TRUE(matches(g, "4"));
  g = schema_grammar(R"({"type": "integer", "minimum": -2})");
  EXPECT_TRUE(matches(g, "9999999999999999"));
  EXPECT_FALSE(matches(g, "10000000000000000"));  // 17 digits
  EXPECT_FALSE(matches(g, "-3"));
}

TEST(Grammar, JsonSchemaObjects) {
  auto g = schema_grammar(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2}}, "required": ["name"]})");
  EXPECT_TRUE(matches(g, R"({"name": "x"})"));
  EXPECT_TRUE(matches(g, R"({"name":"x","age":3,"tags":["a",3]})"));
  EXPECT_TRUE(matches(g, "{\n \"name\": \"x\",\n \"tags\": []\n}"));
  EXPECT_FALSE(matches(g, "{\n   \"name\": \"x\"}"));  // three in a row
  EXPECT_FALSE(matches(g, R"({"age": 3})"));                    // name is required
  EXPECT_FALSE(matches(g, R"({"name": "x", "other": 1})"));     // no additional properties
  EXPECT_FALSE(matches(g, R"({"name": "x", "tags": ["a", "b", "a"]})"));  // maxItems
  EXPECT_FALSE(matches(g, R"({"name": "x", "tags": ["c"]})"));  // enum
  EXPECT_FALSE(matches(g, R"({"name": 1})"));
  EXPECT_FALSE(matches(g, "{\"name\":    \"x\"}"));              // at most two whitespace characters
  EXPECT_FALSE(matches(g, R"( {"name": "x"})"));                // none before the value
}

TEST(Grammar, JsonSchemaRefsAnyOfArraysStrings) {
  auto g = schema_grammar(R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(matches(g, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(matches(g, R"({"v": 1, "next": {"v": 2}})"));
  g = schema_grammar(R"({"type": "array", "prefixItems": [{"type": "boolean"}, {"const": "k"}], "items": {"type": "number"}, "minItems": 1, "maxItems": 4})");
  EXPECT_TRUE(matches(g, "[true]"));
  EXPECT_TRUE(matches(g, R"([false, "k", 1.5e3, -2])"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, R"([false, "k", 1, 2, 3])"));
  EXPECT_FALSE(matches(g, R"([1])"));
  g = schema_grammar(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(matches(g, R"("ab")"));
  EXPECT_TRUE(matches(g, R"("a\"c")"));  // an escape is one character
  EXPECT_FALSE(matches(g, R"("a")"));
  EXPECT_FALSE(matches(g, R"("abcd")"));
  g = schema_grammar(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})");
  EXPECT_TRUE(matches(g, R"("AB-12")"));
  EXPECT_FALSE(matches(g, R"("AB-")"));
  g = schema_grammar(R"({"type": "string", "pattern": "x\\d"})");  // unanchored: anywhere
  EXPECT_TRUE(matches(g, R"("abx1yz")"));
  EXPECT_FALSE(matches(g, R"("abxyz")"));
  g = schema_grammar(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(matches(g, R"("2026-12-02T15:04:05Z")"));
  EXPECT_FALSE(matches(g, R"("2026-13-02T15:04:05Z")"));
  g = schema_grammar(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(matches(g, R"("2026-02-29")"));
  EXPECT_TRUE(matches(g, R"("2026-12-31")"));
  EXPECT_FALSE(matches(g, R"("2026-04-31")"));
  EXPECT_FALSE(matches(g, R"("2026-02-30")"));
  EXPECT_FALSE(matches(g, R"("2026-00-10")"));
  g = schema_grammar(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(matches(g, "null"));
  EXPECT_TRUE(matches(g, "-12"));
  EXPECT_FALSE(matches(g, "1.5"));
  g = schema_grammar(R"({"type": "object"})");
  EXPECT_TRUE(matches(g, R"({"any": [1, {"x": null}]})"));
}

// JSON Schema's own meanings where they differ from generation's defaults: no "type" allows
// every type (each held to its keywords); not strict, other properties are allowed but
// never under a listed name.
TEST(Grammar, JsonSchemaUntypedAndNotStrict) {
  auto g = schema_grammar(R"({"maxLength": 2})");
  EXPECT_TRUE(matches(g, R"("ab")"));
  EXPECT_FALSE(matches(g, R"("abc")"));
  EXPECT_TRUE(matches(g, "12"));
  EXPECT_TRUE(matches(g, R"({"x": [1]})"));
  JsonSchemaLimits loose;
  loose.strict = false;
  g = compile_gbnf(json_schema_to_gbnf(
      nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"foo": {"type": "integer"}, "fo": {"type": "string"}}})"), loose));
  EXPECT_TRUE(matches(g, R"({"foo": 1, "other": [true], "f": 2, "fooo": 3})"));
  EXPECT_FALSE(matches(g, R"({"foo": "x"})"));          // foo is an integer, and not another property either
  EXPECT_FALSE(matches(g, R"({"foo": 1, "fo": 2})"));    // fo is a string
  EXPECT_TRUE(matches(g, R"({"foo": 1, "fo": "s"})"));
  EXPECT_FALSE(matches(g, R"({"x": 1, "foo": 1})"));     // listed properties first, in order
  // Strict (the default): nothing but the listed properties.
  EXPECT_FALSE(matches(schema_grammar(R"({"type": "object", "properties": {"a": {}}})"), R"({"b": 1})"));
}

// What a request could send to exhaust the machine is refused or fails the request, never
// hangs it: ambiguity that doubles the stacks, nesting that would recurse the parsers.
TEST(Grammar, BudgetsAndDepthsHold) {
  std::string g = "root ::= a0\n";
  for (int i = 0; i < 40; ++i) g += fmt::format("a{} ::= a{} \"x\" | a{} \"y\"\n", i, i + 1, i + 1);
  g += "a40 ::= \"z\"\n";
  EXPECT_NE(error_of(g).find("too ambiguous"), std::string::npos) << error_of(g);
  // Stacks that double at every bracket: the matcher fails (a state past its budget).
  auto dbl = schema_grammar(R"({"anyOf": [{"type": "array", "items": {"$ref": "#"}}, {"type": "array", "items": {"$ref": "#"}}]})");
  Matcher m(dbl, byte_vocab());
  bool refused = false;
  for (int i = 0; i < 40 && !refused; ++i) refused = !m.accept('[');
  EXPECT_TRUE(refused);
  EXPECT_TRUE(m.failed());
  EXPECT_FALSE(m.any_allowed());
  EXPECT_NE(error_of("root ::= " + std::string(600, '(') + "\"a\"" + std::string(600, ')')).find("nested deeper"),
            std::string::npos);
  EXPECT_THROW(regex_to_gbnf(std::string(300, '(') + "a" + std::string(300, ')'), false), GrammarError);
  EXPECT_NO_THROW(regex_to_gbnf(std::string(200, '(') + "a" + std::string(200, ')'), false));
}

TEST(Grammar, JsonSchemaEdges) {
  // Objects with no listed properties take any number of them.
  EXPECT_TRUE(matches(schema_grammar(R"({"type": "object"})"), R"({"a": 1, "b": [2], "c": {}})"));
  auto g = schema_grammar(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(matches(g, R"({"a": 1, "b": 2, "c": 3})"));
  EXPECT_FALSE(matches(g, R"({"a": 1, "b": "x"})"));
  // maxItems below the prefix's length cuts the prefix.
  g = schema_grammar(R"({"type": "array", "prefixItems": [{}, {}, {}], "maxItems": 1})");
  EXPECT_TRUE(matches(g, "[1]"));
  EXPECT_FALSE(matches(g, "[1, 2]"));
  // A pattern is a search, each top-level alternative with its own anchors.
  g = schema_grammar(R"({"type": "string", "pattern": "^a|b$"})");
  EXPECT_TRUE(matches(g, R"("axx")"));
  EXPECT_TRUE(matches(g, R"("xxb")"));
  EXPECT_FALSE(matches(g, R"("xax")"));
  // . is no line feed, not even escaped; other controls come as their escapes.
  g = schema_grammar(R"({"type": "string", "pattern": "^.$"})");
  EXPECT_TRUE(matches(g, R"("\t")"));
  EXPECT_TRUE(matches(g, R"("\u001B")"));
  EXPECT_TRUE(matches(g, R"("\u001b")"));
  EXPECT_FALSE(matches(g, R"("\n")"));
  EXPECT_FALSE(matches(g, R"("\u000a")"));
  // Integer bounds near the 16-digit limit, and a repeated type.
  g = schema_grammar(R"({"type": ["integer", "integer"], "maximum": 1e300})");
  EXPECT_TRUE(matches(g, "9999999999999999"));
  EXPECT_FALSE(matches(g, "10000000000000000"));
}

TEST(Grammar, JsonSchemaErrorsNameTheKeywordAndPlace) {
  auto err = [](const char* s) {
    try {
      json_schema_to_gbnf(nlohmann::ordered_json::parse(s));
    } catch (const GrammarError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err(R"({"type": "object", "properties": {"a": {"not": {}}}})").find("#/properties/a: unsupported keyword 'not'"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/$defs/missing"})").find("points at nothing"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "http://x/y"})").find("only references within"), std::string::npos);
  EXPECT_NE(err(R"j({"type": "string", "pattern": "a(?=b)"})j").find("#/pattern"), std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "uniqueItems": true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(err(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"), std::string::npos);
  EXPECT_NE(err(R"({"type": "string", "format": "hostname-ish"})").find("unsupported format"), std::string::npos);
  std::string deep = "{\"type\": \"integer\"}";
  for (int k = 0; k < 80; ++k) deep = "{\"type\": \"array\", \"items\": " + deep + "}";
  EXPECT_NE(err(deep.c_str()).find("nested deeper"), std::string::npos);
  EXPECT_EQ(err(R"({"type": "object", "title": "t", "description": "d", "properties": {}})"), "");
}

// Random walks through schema grammars give JSON that parses and keeps its constraints.
TEST(Grammar, RandomDocumentsParse) {
  const char* schema = R"({"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 500},
      "name": {"type": "string", "maxLength": 8}, "score": {"type": "number"}, "ok": {"type": "boolean"},
      "kids": {"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["x", "y"]}}, "required": ["k"]}, "maxItems": 3}},
      "required": ["id", "kids"]})";
  auto g = schema_grammar(schema);
  auto v = byte_vocab();
  std::mt19937_64 rng(5);
  for (int doc = 0; doc < 100; ++doc) {
    Matcher m(g, v);
    std::string text;
    while (!m.ended() && text.size() < 4000) {
      const auto& mask = m.mask();
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < v->n_vocab(); ++id)
        if ((mask[size_t(id) >> 6] >> (id & 63)) & 1) ok.push_back(id);
      ASSERT_FALSE(ok.empty()) << text;
      // Prefer ending once possible, so documents stay short.
      int32_t pick = ok[rng() % ok.size()];
      if (m.can_end() && rng() % 2) pick = 257;
      if (pick != 257) text += char(pick);
      ASSERT_TRUE(m.accept(pick));
    }
    ASSERT_TRUE(m.ended()) << text;
    const nlohmann::json j = nlohmann::json::parse(text);
    ASSERT_TRUE(j.is_object());
    ASSERT_TRUE(j.contains("id") && j["id"].is_number_integer()) << text;
    EXPECT_GE(j["id"].get<int64_t>(), 1);
    EXPECT_LE(j["id"].get<int64_t>(), 500);
    ASSERT_TRUE(j["kids"].is_array());
    EXPECT_LE(j["kids"].size(), 3u);
    if (j.contains("name")) {
      EXPECT_LE(j["name"].get<std::string>().size(), 8u * 4);  // 8 characters of up to 4 bytes
    }
  }
}

}  // namespace
}  // namespace ridge::grammar

namespace ridge::grammar {
namespace {

// Jump-forward's span: the bytes the grammar forces (one possible byte at a time, and no
// end), spelled by the longest tokens; the state unchanged.
TEST(Grammar, ForcedBytesAndTokens) {
  const auto g = compile_gbnf("root ::= \"{\\\"name\\\": \" [0-9]+ \"}\" | \"{\\\"name\\\": null}\"");
  std::vector<std::string> pieces = {"{", "\"", "name", "{\"", "\": ", ":", " ", "n", "a", "m", "e", "1", "}"};
  auto vocab = std::make_shared<TokenTrie>(pieces, std::vector<bool>(pieces.size(), false), std::vector<int32_t>{});
  Matcher m(g, vocab);
  EXPECT_EQ(m.forced_bytes(100), "{\"name\": ");
  EXPECT_EQ(m.forced_bytes(3), "{\"n");
  std::vector<int32_t> toks;
  m.forced_tokens(10, toks);
  EXPECT_EQ(toks, (std::vector<int32_t>{3, 2, 4}));  // {" name ":<space>
  m.forced_tokens(2, toks);
  EXPECT_EQ(toks.size(), 2u);
  EXPECT_TRUE(m.accept_bytes("{\"name\": 1"));
  EXPECT_EQ(m.forced_bytes(100), "");  // a digit or the brace
  EXPECT_TRUE(m.accept_bytes("}"));
  EXPECT_EQ(m.forced_bytes(100), "");  // the grammar may end
  Matcher n(g, vocab);
  EXPECT_TRUE(n.accept_bytes("{\"name\": n"));
  EXPECT_EQ(n.forced_bytes(100), "ull}");
}

}  // namespace
}  // namespace ridge::grammar
