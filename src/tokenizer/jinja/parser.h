// Tokens -> syntax tree, with @huggingface/jinja's grammar and operator precedence
// (parser.ts): ternary < or < and < not < comparison/in < + - ~ < * / // % < ** < is-test
// < |filter < unary sign < call/member < primary. One Node type with a kind keeps the
// interpreter a single switch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/lexer.h"

namespace ridge::jinja {

enum class NodeKind {
  // statements
  Program, If, For, Set, Macro, CallStatement, FilterStatement, Break, Continue, Comment,
  // expressions
  IntegerLiteral, FloatLiteral, StringLiteral, ArrayLiteral, TupleLiteral, ObjectLiteral,
  Identifier, Member, Call, Unary, Binary, Filter, Test, Select, Ternary, Slice,
  KeywordArgument, Spread, KeywordSpread,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

// Children by kind (a = `kids`):
//   If: a[0] test, body, alt          For: a[0] loop var, a[1] iterable, body, alt (else)
//   Set: a[0] target, a[1] value or null (block set: body)
//   Macro: text = name, params, body  CallStatement: a[0] Call, params (caller args), body
//   FilterStatement: a[0] filter (Identifier or Call), body
//   Member: a[0] object, a[1] property, flag = computed ([...])
//   Call: a[0] callee, a[1..] arguments   Unary/Binary: text = operator, a = operands
//   Filter: a[0] operand, a[1] filter     Test: a[0] operand, text = test, flag = negated
//   Select: a[0] value, a[1] condition    Ternary: a[0] cond, a[1] if true, a[2] if false
//   Slice: a[0..2] start, stop, step (each may be null)
//   ObjectLiteral: a = key, value, key, value, ...
//   KeywordArgument: text = name, a[0] value   Spread/KeywordSpread: a[0]
struct Node {
  NodeKind kind;
  uint32_t pos = 0;  // byte offset in the template source
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  bool flag = false;
  std::vector<NodePtr> kids, body, alt, params;
};

// Throws ridge::Error("chat template line L, column C: ...").
NodePtr parse(const std::vector<Token>& tokens, const SourceMap& map);

}  // namespace ridge::jinja
