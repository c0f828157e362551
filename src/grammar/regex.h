// Regular expressions (the ECMAScript subset JSON Schema's "pattern" and vLLM's
// guided_regex use) as a GBNF expression (grammar.h).
//
// Supported: literals and escapes (\d \D \w \W \s \S \n \t \r \f \v \0 \xHH \uHHHH and
// escaped punctuation), classes with ranges and negation, ., groups ((...), (?:...),
// (?<name>...)), |, * + ? {m} {m,} {m,n} (a trailing ? or + on a quantifier is accepted:
// laziness does not change the language), ^ and $ around top-level alternatives. Refused with a
// GrammarError naming the offset: backreferences, lookaround, \b, anchors anywhere but at
// the start and end of a top-level alternative, and repetition beyond Limits::max_repeat.
#pragma once
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace ridge::grammar {

struct RegexGbnf {
  std::string expr;       // one GBNF expression (parenthesized alternatives)
  bool uses_json_escapes = false;  // expr refers to the rules json_escape_rules() defines
};

// json_string: the regex describes a JSON string's decoded value, so characters that JSON
// must escape (", \, U+0000-U+001F) come out as their escapes.
// search: a GBNF expression for "any text", put on each top-level alternative's sides
// that ^ or $ does not anchor (ECMAScript's search: JSON Schema's pattern). Empty: the
// whole text must match (vLLM's guided_regex), and the anchors change nothing.
RegexGbnf regex_to_gbnf(std::string_view pattern, bool json_string, std::string_view search = "",
                        const Limits& limits = {});

// The rules a json_string expression may refer to.
std::string json_escape_rules();

// s as a GBNF string literal (with its quotes).
std::string gbnf_literal(std::string_view s);

}  // namespace ridge::grammar
