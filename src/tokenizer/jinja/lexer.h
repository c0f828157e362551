// Template source -> tokens, as @huggingface/jinja's lexer.ts does it (which is where
// the whitespace rules live: trim_blocks and lstrip_blocks are applied to the source text
// before tokenizing, and {%- -%} strip while tokenizing). Tokens keep the byte offset of
// their start in the original source, so every error can name a line and column.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::jinja {

enum class Tok {
  Text, NumericLiteral, StringLiteral, Identifier, Equals, OpenParen, CloseParen,
  OpenStatement, CloseStatement, OpenExpression, CloseExpression, OpenSquareBracket,
  CloseSquareBracket, OpenCurlyBracket, CloseCurlyBracket, Comma, Dot, Colon, Pipe,
  AdditiveBinaryOperator, MultiplicativeBinaryOperator, ExponentiationBinaryOperator,
  ComparisonBinaryOperator, UnaryOperator, Comment,
};
const char* tok_name(Tok t);

struct Token {
  std::string value;
  Tok type;
  uint32_t pos;  // byte offset in the original source
};

// Maps byte offsets of the original source to "line L, column C" (1-based, columns in
// code points).
class SourceMap {
 public:
  explicit SourceMap(std::string_view src) : src_(src) {}
  std::string where(uint32_t pos) const;

 private:
  std::string src_;
};

// Throws ridge::Error naming the position of what it could not read.
std::vector<Token> tokenize(std::string_view source, const SourceMap& map);

}  // namespace ridge::jinja
