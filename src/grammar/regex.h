// Regular expressions (the ECMAScript subset JSON Schema's "pattern" and vLLM's
// guided_regex use) as a GBNF expression (grammar.h).
//
// Supported: literals and escapes (\d \D \w \W \s \S \n \t \r \f \v \0 \xHH \uHHHH and
// escaped punctuation), classes with ranges and negation, ., groups ((...), (?:...),
// (?<name>...)), |, * + ? {m} {m,} {m,n} (a trailing ? or + on a quantifier is accepted:
// laziness does not change the language), ^ at the start and $ at the end. Refused with a
// GrammarError naming the offset: backreferences, lookaround, \b, anchors elsewhere, and
// repetition beyond Limits::max_repeat.
#pragma once
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace ridge::grammar {

struct RegexGbnf {
  std::string expr;       // one GBNF expression (parenthesized alternatives)
  bool anchored_start = false, anchored_end = false;
  bool uses_json_escapes = false;  // expr refers to the rules json_escape_rules() defines
};

// json_string: the regex describes a JSON string's decoded value, so characters that JSON
// must escape (", \, U+0000-U+001F) come out as their escapes.
RegexGbnf regex_to_gbnf(std::string_view pattern, bool json_string, const Limits& limits = {});

// The rules a json_string expression may refer to.
std::string json_escape_rules();

// s as a GBNF string literal (with its quotes).
std::string gbnf_literal(std::string_view s);

}  // namespace ridge::grammar
