// Token tables (grammar/token_tables.h): masks put together from per-position tables must
// equal the full walk of the vocabulary from the whole stacks (the reference), on random
// vocabularies, for grammars with counted repetitions, nesting, alternatives and
// recursion, at every step of random documents; and counted repetitions must keep their
// bounds exactly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace ridge::grammar {
namespace {

// Pieces over an alphabet that JSON and the grammars below use (letters, digits,
// punctuation, whitespace, escapes, multi-byte characters, and bytes cut inside one),
// plus every ASCII byte so that any text stays reachable.
std::shared_ptr<TokenTrie> random_vocab(std::mt19937_64& rng, int n_pieces, int32_t& eos) {
  const std::vector<std::string> atoms = {"{", "}", "[", "]", ",", ":", "\"", "\\", " ", "\n", "\t", "0", "1", "7",
                                          "9", ".", "-", "+", "e", "a", "b", "c", "x", "z", "A", "Q", "@", "_",
                                          "t", "r", "u", "f", "l", "s", "n", "\xC3\xA9", "\xE2\x82\xAC", "\xC3",
                                          "\xA9", "\xF0\x9F\x98\x80", "name", "age", "\": \"", "\",", "\"}", "true"};
  std::vector<std::string> pieces;
  for (int c = 0; c < 128; ++c) pieces.push_back(std::string(1, char(c)));
  for (int k = 0; k < n_pieces; ++k) {
    std::string p;
    const int len = 1 + int(rng() % 8);
    for (int j = 0; j < len; ++j) p += atoms[rng() % atoms.size()];
    pieces.push_back(p);
  }
  pieces.push_back("<eos>");
  eos = int32_t(pieces.size()) - 1;
  return std::make_shared<TokenTrie>(pieces, std::vector<bool>(pieces.size(), false), std::vector<int32_t>{eos});
}

std::vector<std::string> grammars() {
  auto schema = [](const char* s) { return json_schema_to_gbnf(nlohmann::ordered_json::parse(s)); };
  return {
      schema(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 7},
          "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array",
          "items": {"type": "string", "minLength": 2, "maxLength": 4}, "maxItems": 3}}, "required": ["name"]})"),
      schema(R"({"type": "object", "properties": {"mail": {"type": "string", "format": "email"},
          "when": {"type": "string", "format": "date"}, "id": {"type": "string", "pattern": "^[A-Z]{2,3}-[0-9]{1,4}$"}}})"),
      schema(R"({"$defs": {"n": {"type": "object", "properties": {"l": {"type": "string", "maxLength": 3},
          "c": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 2}}, "required": ["l"]}}, "$ref": "#/$defs/n"})"),
      schema(R"({"anyOf": [{"type": "number"}, {"type": "string", "maxLength": 5}, {"enum": ["x", "xy", 17, null]},
          {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}]})"),
      json_value_gbnf(true),
      "root ::= " + regex_to_gbnf("(ab|c){2,6}[0-9]{0,3}x?", false).expr,
      // Hand-written: a repetition last in the root, nested repetitions, a nullable body,
      // repetitions with a lower bound.
      "root ::= (\"a\" | \"bc\"){1,5} (\" \" [a-z]{0,3}){0,4}",
      "root ::= (\"x\"? \"y\"?){0,6} \"!\"",
      "root ::= item (\",\" item){2,4}\nitem ::= [0-9]{2,4} | \"\\\"\" [^\"]{0,6} \"\\\"\"",
      // Recursion through a repetition, a tail call right after one, a lower bound.
      "root ::= r \".\"\nr ::= \"a\" r{0,3} | \"b\"",
      "root ::= x{1,3} y\nx ::= \"ab\" | \"a\"\ny ::= \"b\"{3,5} | \"c\" root",
  };
}

TEST(TokenTables, MasksEqualTheFullWalk) {
  std::mt19937_64 rng(5);
  int64_t positions = 0;
  for (const std::string& text : grammars()) {
    const auto g = compile_gbnf(text);
    for (int trial = 0; trial < 3; ++trial) {
      int32_t eos = 0;
      auto vocab = random_vocab(rng, 700, eos);
      for (int doc = 0; doc < 4; ++doc) {
        Matcher m(g, vocab);
        for (int step = 0; step < 60 && !m.ended(); ++step) {
          const std::vector<uint64_t> got = m.mask();
          const std::vector<uint64_t> ref = m.reference_mask();
          ++positions;
          if (got != ref) {
            for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
              const bool a = (got[size_t(id) >> 6] >> (id & 63)) & 1, b = (ref[size_t(id) >> 6] >> (id & 63)) & 1;
              ASSERT_EQ(a, b) << "token '" << vocab->bytes(id) << "' step " << step << " doc " << doc << "\n" << text;
            }
          }
          // Mostly long tokens (they cross the tables' units), the end now and then.
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab->n_vocab(); ++id)
            if ((ref[size_t(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
          if (allowed.empty()) break;
          int32_t pick = allowed[rng() % allowed.size()];
          for (int k = 0; k < 3; ++k) {
            const int32_t other = allowed[rng() % allowed.size()];
            if (vocab->bytes(other).size() > vocab->bytes(pick).size()) pick = other;
          }
          if (m.can_end() && rng() % 8 == 0) pick = eos;
          ASSERT_TRUE(m.accept(pick));
        }
      }
    }
  }
  EXPECT_GT(positions, 500);
}

TEST(TokenTables, PreparedTablesGiveTheSameMasks) {
  std::mt19937_64 rng(9);
  int32_t eos = 0;
  auto vocab = random_vocab(rng, 500, eos);
  const auto g = compile_gbnf(grammars()[0]);
  EXPECT_GT(vocab->tables(g)->prepare(), 20);
  Matcher m(g, vocab);
  for (int step = 0; step < 40 && !m.must_end(); ++step) {
    ASSERT_EQ(m.mask(), m.reference_mask()) << "step " << step;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->n_vocab(); ++id)
      if (id != eos && m.allowed(id)) allowed.push_back(id);
    if (allowed.empty()) break;
    ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()]));
  }
}

// x{m,n} as one counted element: exactly m..n repetitions, also of a nullable body and
// of a group holding another repetition.
TEST(TokenTables, CountedRepetitionsKeepTheirBounds) {
  std::vector<std::string> b;
  for (int c = 0; c < 256; ++c) b.push_back(std::string(1, char(c)));
  auto bytes = std::make_shared<TokenTrie>(b, std::vector<bool>(b.size(), false), std::vector<int32_t>{});
  auto matches = [&](const std::string& gbnf, const std::string& text) {
    Matcher m(compile_gbnf(gbnf), bytes);
    return m.accept_bytes(text) && m.can_end();
  };
  for (int n = 0; n <= 12; ++n) {
    const std::string s(size_t(n), 'a');
    EXPECT_EQ(matches("root ::= \"a\"{3,9}", s), n >= 3 && n <= 9) << n;
    EXPECT_EQ(matches("root ::= \"a\"{0,5} \"b\"", s + "b"), n <= 5) << n;
    EXPECT_EQ(matches("root ::= (\"a\"?){2,4}", s), n <= 4) << n;
    EXPECT_EQ(matches("root ::= (\"a\" \"a\"{0,2}){1,3}", s), n >= 1 && n <= 9) << n;
  }
  const auto g = compile_gbnf("root ::= [a-c]{2,40}");
  EXPECT_NE(g->to_string().find("{2,40}"), std::string::npos) << g->to_string();
}

}  // namespace
}  // namespace ridge::grammar
