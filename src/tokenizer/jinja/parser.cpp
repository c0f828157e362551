// A port of @huggingface/jinja's parser.ts. The function names follow the reference so
// the two can be read side by side; where the reference would crash on a missing token
// (reading past the end), this parser reports "unexpected end of template" instead.
#include "tokenizer/jinja/parser.h"

#include <fmt/format.h>

#include <cstdlib>
#include <set>

#include "core/error.h"

namespace ridge::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting bound: a hostile template must not overflow the stack

struct Parser {
  const std::vector<Token>& t;
  const SourceMap& map;
  size_t cur = 0;
  int depth = 0;

  [[noreturn]] void fail_at(size_t k, const std::string& what) const {
    uint32_t pos = k < t.size() ? t[k].pos : (t.empty() ? 0 : t.back().pos);
    throw Error(fmt::format("chat template {}: {}", map.where(pos), what));
  }
  const Token& tok(size_t k) const {
    if (k >= t.size()) fail_at(k, "unexpected end of template");
    return t[k];
  }
  NodePtr node(NodeKind k, uint32_t pos) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->pos = pos;
    return n;
  }
  bool is(Tok a) const { return cur < t.size() && t[cur].type == a; }
  bool is2(Tok a, Tok b) const { return cur + 1 < t.size() && t[cur].type == a && t[cur + 1].type == b; }
  bool is_ident(std::string_view name, size_t off = 0) const {
    return cur + off < t.size() && t[cur + off].type == Tok::Identifier && t[cur + off].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!(cur + 1 < t.size() && t[cur].type == Tok::OpenStatement && t[cur + 1].type == Tok::Identifier)) return false;
    for (auto n : names)
      if (t[cur + 1].value == n) return true;
    return false;
  }
  const Token& expect(Tok type, const char* what) {
    const Token& k = tok(cur);
    if (k.type != type) fail_at(cur, fmt::format("{} (found {} '{}')", what, tok_name(k.type), k.value));
    ++cur;
    return k;
  }
  void expect_ident(std::string_view name) {
    if (!is_ident(name)) fail_at(cur, fmt::format("expected '{}'", name));
    ++cur;
  }
  // Parses statements until one of `names` opens; reports the block that was left open.
  void parse_until(std::vector<NodePtr>& out, std::initializer_list<std::string_view> names, const char* block,
                   size_t opened_at) {
    while (!is_statement(names)) {
      if (cur >= t.size()) fail_at(opened_at, fmt::format("'{}' block is never closed", block));
      out.push_back(parse_any());
    }
  }

  NodePtr parse_any() {
    const Token& k = tok(cur);
    switch (k.type) {
      case Tok::Comment: { auto n = node(NodeKind::Comment, k.pos); ++cur; return n; }
      case Tok::Text: { auto n = node(NodeKind::StringLiteral, k.pos); n->text = k.value; ++cur; return n; }
      case Tok::OpenStatement: return parse_statement();
      case Tok::OpenExpression: {
        ++cur;
        auto e = parse_expression();
        expect(Tok::CloseExpression, "expected '}}' to close the expression");
        return e;
      }
      default: fail_at(cur, fmt::format("unexpected {} '{}'", tok_name(k.type), k.value));
    }
  }

  NodePtr parse_statement() {
    size_t open = cur;
    expect(Tok::OpenStatement, "expected '{%'");
    const Token& k = tok(cur);
    if (k.type != Tok::Identifier) fail_at(cur, fmt::format("expected a statement name, found {}", tok_name(k.type)));
    const std::string name = k.value;
    const uint32_t pos = t[open].pos;
    auto close_with = [&](const char* end) {
      expect(Tok::OpenStatement, "expected '{%'");
      expect_ident(end);
      expect(Tok::CloseStatement, "expected '%}'");
    };
    if (name == "set") { ++cur; return parse_set(pos, open); }
    if (name == "if") { ++cur; auto r = parse_if(pos, open); close_with("endif"); return r; }
    if (name == "for") { ++cur; auto r = parse_for(pos, open); close_with("endfor"); return r; }
    if (name == "macro") {
      ++cur;
      auto r = node(NodeKind::Macro, pos);
      auto id = parse_primary();
      if (id->kind != NodeKind::Identifier) fail_at(cur - 1, "expected a macro name");
      r->text = id->text;
      parse_args(r->params, true);
      expect(Tok::CloseStatement, "expected '%}'");
      parse_until(r->body, {"endmacro"}, "macro", open);
      close_with("endmacro");
      return r;
    }
    if (name == "call") {
      ++cur;
      auto r = node(NodeKind::CallStatement, pos);
      if (is(Tok::OpenParen)) parse_args(r->params, true);
      auto callee = parse_primary();
      if (callee->kind != NodeKind::Identifier) fail_at(cur - 1, "expected a macro name after 'call'");
      auto call = node(NodeKind::Call, callee->pos);
      call->kids.push_back(std::move(callee));
      parse_args(call->kids, false);
      expect(Tok::CloseStatement, "expected '%}'");
      r->kids.push_back(std::move(call));
      parse_until(r->body, {"endcall"}, "call", open);
      close_with("endcall");
      return r;
    }
    if (name == "break" || name == "continue") {
      ++cur;
      expect(Tok::CloseStatement, "expected '%}'");
      return node(name == "break" ? NodeKind::Break : NodeKind::Continue, pos);
    }
    if (name == "filter") {
      ++cur;
      auto r = node(NodeKind::FilterStatement, pos);
      auto f = parse_primary();
      if (f->kind == NodeKind::Identifier && is(Tok::OpenParen)) f = parse_call(std::move(f));
      r->kids.push_back(std::move(f));
      expect(Tok::CloseStatement, "expected '%}'");
      parse_until(r->body, {"endfilter"}, "filter", open);
      close_with("endfilter");
      return r;
    }
    fail_at(open + 1, fmt::format("unsupported statement '{}'", name));
  }

  NodePtr parse_set(uint32_t pos, size_t open) {
    auto r = node(NodeKind::Set, pos);
    r->kids.push_back(parse_sequence(false));
    if (is(Tok::Equals)) {
      ++cur;
      r->kids.push_back(parse_sequence(false));
    } else {
      r->kids.push_back(nullptr);
      expect(Tok::CloseStatement, "expected '=' or '%}' in set");
      parse_until(r->body, {"endset"}, "set", open);
      expect(Tok::OpenStatement, "expected '{%'");
      expect_ident("endset");
    }
    expect(Tok::CloseStatement, "expected '%}'");
    return r;
  }

  NodePtr parse_if(uint32_t pos, size_t open) {
    auto r = node(NodeKind::If, pos);
    r->kids.push_back(parse_expression());
    expect(Tok::CloseStatement, "expected '%}' after the if condition");
    parse_until(r->body, {"elif", "else", "endif"}, "if", open);
    if (is_statement({"elif"})) {
      size_t elif = cur;
      cur += 2;
      r->alt.push_back(parse_if(t[elif].pos, elif));
    } else if (is_statement({"else"})) {
      cur += 2;
      expect(Tok::CloseStatement, "expected '%}' after else");
      parse_until(r->alt, {"endif"}, "if", open);
    }
    return r;
  }

  NodePtr parse_for(uint32_t pos, size_t open) {
    auto r = node(NodeKind::For, pos);
    auto var = parse_sequence(true);
    if (var->kind != NodeKind::Identifier && var->kind != NodeKind::TupleLiteral)
      fail_at(cur - 1, "expected a loop variable name or tuple");
    if (!is_ident("in")) fail_at(cur, "expected 'in' after the loop variable");
    ++cur;
    r->kids.push_back(std::move(var));
    r->kids.push_back(parse_expression());
    expect(Tok::CloseStatement, "expected '%}' after the for header");
    parse_until(r->body, {"endfor", "else"}, "for", open);
    if (is_statement({"else"})) {
      cur += 2;
      expect(Tok::CloseStatement, "expected '%}' after else");
      parse_until(r->alt, {"endfor"}, "for", open);
    }
    return r;
  }

  NodePtr parse_sequence(bool primary) {
    uint32_t pos = tok(cur).pos;
    std::vector<NodePtr> list;
    list.push_back(primary ? parse_primary() : parse_expression());
    bool tuple = is(Tok::Comma);
    while (tuple) {
      ++cur;
      list.push_back(primary ? parse_primary() : parse_expression());
      if (!is(Tok::Comma)) break;
    }
    if (!tuple) return std::move(list[0]);
    auto r = node(NodeKind::TupleLiteral, pos);
    r->kids = std::move(list);
    return r;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& q) : p(q) {
      if (++p.depth > kMaxDepth) p.fail_at(p.cur, "expression nested too deeply");
    }
    ~DepthGuard() { --p.depth; }
  };

  NodePtr parse_expression() {
    DepthGuard g(*this);
    return parse_if_expression();
  }

  NodePtr parse_if_expression() {
    auto a = parse_or();
    if (is_ident("if")) {
      uint32_t pos = t[cur].pos;
      ++cur;
      auto test = parse_or();
      if (is_ident("else")) {
        ++cur;
        auto r = node(NodeKind::Ternary, pos);
        auto f = parse_if_expression();
        r->kids.push_back(std::move(test));
        r->kids.push_back(std::move(a));
        r->kids.push_back(std::move(f));
        return r;
      }
      auto r = node(NodeKind::Select, pos);
      r->kids.push_back(std::move(a));
      r->kids.push_back(std::move(test));
      return r;
    }
    return a;
  }

  NodePtr binary(std::string op, uint32_t pos, NodePtr l, NodePtr r) {
    auto n = node(NodeKind::Binary, pos);
    n->text = std::move(op);
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return n;
  }

  NodePtr parse_or() {
    auto left = parse_and();
    while (is_ident("or")) {
      uint32_t pos = t[cur++].pos;
      left = binary("or", pos, std::move(left), parse_and());
    }
    return left;
  }
  NodePtr parse_and() {
    auto left = parse_not();
    while (is_ident("and")) {
      uint32_t pos = t[cur++].pos;
      left = binary("and", pos, std::move(left), parse_not());
    }
    return left;
  }
  NodePtr parse_not() {
    if (is_ident("not")) {
      DepthGuard g(*this);
      auto n = node(NodeKind::Unary, t[cur].pos);
      n->text = "not";
      ++cur;
      n->kids.push_back(parse_not());
      return n;
    }
    return parse_comparison();
  }
  NodePtr parse_comparison() {
    auto left = parse_additive();
    for (;;) {
      std::string op;
      uint32_t pos = cur < t.size() ? t[cur].pos : 0;
      if (is_ident("not") && is_ident("in", 1)) { op = "not in"; cur += 2; }
      else if (is_ident("in")) { op = "in"; ++cur; }
      else if (is(Tok::ComparisonBinaryOperator)) op = t[cur++].value;
      else break;
      left = binary(op, pos, std::move(left), parse_additive());
    }
    return left;
  }
  NodePtr parse_additive() {
    auto left = parse_multiplicative();
    while (is(Tok::AdditiveBinaryOperator)) {
      const Token& op = t[cur++];
      left = binary(op.value, op.pos, std::move(left), parse_multiplicative());
    }
    return left;
  }
  NodePtr parse_multiplicative() {
    auto left = parse_power();
    while (is(Tok::MultiplicativeBinaryOperator)) {
      const Token& op = t[cur++];
      left = binary(op.value, op.pos, std::move(left), parse_power());
    }
    return left;
  }
  NodePtr parse_power() {
    auto left = parse_test();
    while (is(Tok::ExponentiationBinaryOperator)) {
      const Token& op = t[cur++];
      left = binary(op.value, op.pos, std::move(left), parse_test());
    }
    return left;
  }
  NodePtr parse_test() {
    auto operand = parse_filter();
    while (is_ident("is")) {
      uint32_t pos = t[cur++].pos;
      bool negate = is_ident("not");
      if (negate) ++cur;
      auto name = parse_primary();
      if (name->kind != NodeKind::Identifier) fail_at(cur - 1, "expected a test name after 'is'");
      auto n = node(NodeKind::Test, pos);
      n->text = name->text;
      n->flag = negate;
      n->kids.push_back(std::move(operand));
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr parse_filter() {
    auto operand = parse_unary_sign();
    while (is(Tok::Pipe)) {
      uint32_t pos = t[cur++].pos;
      auto f = parse_primary();
      if (f->kind != NodeKind::Identifier) fail_at(cur - 1, "expected a filter name after '|'");
      if (is(Tok::OpenParen)) f = parse_call(std::move(f));
      auto n = node(NodeKind::Filter, pos);
      n->kids.push_back(std::move(operand));
      n->kids.push_back(std::move(f));
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr parse_unary_sign() {
    if (cur < t.size() && (t[cur].type == Tok::UnaryOperator || t[cur].type == Tok::AdditiveBinaryOperator) &&
        (t[cur].value == "-" || t[cur].value == "+")) {
      DepthGuard g(*this);
      auto n = node(NodeKind::Unary, t[cur].pos);
      n->text = t[cur++].value;
      n->kids.push_back(parse_unary_sign());
      return n;
    }
    auto member = parse_member(parse_primary());
    if (is(Tok::OpenParen)) return parse_call(std::move(member));
    return member;
  }
  NodePtr parse_call(NodePtr callee) {
    DepthGuard g(*this);
    auto n = node(NodeKind::Call, callee->pos);
    n->kids.push_back(std::move(callee));
    parse_args(n->kids, false);
    NodePtr e = parse_member(std::move(n));
    if (is(Tok::OpenParen)) e = parse_call(std::move(e));
    return e;
  }
  // "call" mode (params=false) allows *x and **x; "parameters" mode checks names.
  void parse_args(std::vector<NodePtr>& out, bool params) {
    expect(Tok::OpenParen, "expected '('");
    std::set<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!is(Tok::CloseParen)) {
      if (cur >= t.size()) fail_at(cur, "unexpected end of template in an argument list");
      bool kw_spread = is(Tok::ExponentiationBinaryOperator);
      bool pos_spread = is(Tok::MultiplicativeBinaryOperator) && t[cur].value == "*";
      if (params && (kw_spread || pos_spread)) fail_at(cur, "argument unpacking is not allowed in parameter declarations");
      if (kw_spread) {
        auto n = node(NodeKind::KeywordSpread, t[cur++].pos);
        n->kids.push_back(parse_expression());
        out.push_back(std::move(n));
        if (is(Tok::Comma)) ++cur;
        if (!is(Tok::CloseParen)) fail_at(cur, "'**' must be applied to the final argument");
        break;
      }
      NodePtr arg;
      if (pos_spread) {
        if (saw_spread) fail_at(cur, "only one '*' argument unpacking is allowed");
        saw_spread = true;
        arg = node(NodeKind::Spread, t[cur++].pos);
        arg->kids.push_back(parse_expression());
      } else {
        size_t at = cur;
        arg = parse_expression();
        if (is(Tok::Equals)) {
          ++cur;
          if (arg->kind != NodeKind::Identifier)
            fail_at(at, params ? "expected a parameter name" : "expected a keyword argument name");
          auto kw = node(NodeKind::KeywordArgument, arg->pos);
          kw->text = arg->text;
          kw->kids.push_back(parse_expression());
          arg = std::move(kw);
        }
        if (params) {
          if (arg->kind != NodeKind::Identifier && arg->kind != NodeKind::KeywordArgument)
            fail_at(at, "expected a parameter name");
          if (!names.insert(arg->text).second) fail_at(at, fmt::format("duplicate parameter name '{}'", arg->text));
        }
        if (arg->kind == NodeKind::KeywordArgument) saw_keyword = true;
        else if (saw_keyword)
          fail_at(at, params ? "non-default argument follows default argument"
                             : "positional arguments must come before keyword arguments");
        else if (saw_spread) fail_at(at, "positional arguments must not follow '*' argument unpacking");
      }
      out.push_back(std::move(arg));
      if (is(Tok::Comma)) ++cur;
    }
    ++cur;  // ')'
  }
  NodePtr parse_subscript() {
    // [x], or a slice [a:b:c] with any part omitted.
    uint32_t pos = tok(cur).pos;
    std::vector<NodePtr> parts;
    bool slice = false;
    while (!is(Tok::CloseSquareBracket)) {
      if (cur >= t.size()) fail_at(cur, "unexpected end of template in '[...]'");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++cur;
        slice = true;
      } else {
        parts.push_back(parse_expression());
        if (is(Tok::Colon)) { ++cur; slice = true; }
      }
    }
    if (parts.empty()) fail_at(cur, "expected an index or slice inside '[]'");
    if (!slice) return std::move(parts[0]);
    if (parts.size() > 3) fail_at(cur, "a slice takes at most 3 parts");
    auto n = node(NodeKind::Slice, pos);
    parts.resize(3);
    n->kids = std::move(parts);
    return n;
  }
  NodePtr parse_member(NodePtr object) {
    while (is(Tok::Dot) || is(Tok::OpenSquareBracket)) {
      bool computed = t[cur].type == Tok::OpenSquareBracket;
      auto n = node(NodeKind::Member, t[cur].pos);
      ++cur;
      NodePtr prop;
      if (computed) {
        prop = parse_subscript();
        expect(Tok::CloseSquareBracket, "expected ']'");
      } else {
        prop = parse_primary();
        if (prop->kind != NodeKind::Identifier && prop->kind != NodeKind::IntegerLiteral)
          fail_at(cur - 1, "expected a name or integer after '.'");
      }
      n->flag = computed;
      n->kids.push_back(std::move(object));
      n->kids.push_back(std::move(prop));
      object = std::move(n);
    }
    return object;
  }
  NodePtr parse_primary() {
    DepthGuard g(*this);
    const Token& k = tok(cur++);
    switch (k.type) {
      case Tok::NumericLiteral: {
        if (k.value.find('.') != std::string::npos) {
          auto n = node(NodeKind::FloatLiteral, k.pos);
          n->fval = std::strtod(k.value.c_str(), nullptr);
          return n;
        }
        auto n = node(NodeKind::IntegerLiteral, k.pos);
        errno = 0;
        n->ival = std::strtoll(k.value.c_str(), nullptr, 10);
        if (errno == ERANGE) fail_at(cur - 1, fmt::format("integer literal {} is out of range", k.value));
        return n;
      }
      case Tok::StringLiteral: {
        auto n = node(NodeKind::StringLiteral, k.pos);
        n->text = k.value;
        while (is(Tok::StringLiteral)) n->text += t[cur++].value;  // adjacent literals concatenate
        return n;
      }
      case Tok::Identifier: {
        auto n = node(NodeKind::Identifier, k.pos);
        n->text = k.value;
        return n;
      }
      case Tok::OpenParen: {
        auto e = parse_sequence(false);
        expect(Tok::CloseParen, "expected ')'");
        return e;
      }
      case Tok::OpenSquareBracket: {
        auto n = node(NodeKind::ArrayLiteral, k.pos);
        while (!is(Tok::CloseSquareBracket)) {
          if (cur >= t.size()) fail_at(cur, "unexpected end of template in a list literal");
          n->kids.push_back(parse_expression());
          if (is(Tok::Comma)) ++cur;
        }
        ++cur;
        return n;
      }
      case Tok::OpenCurlyBracket: {
        auto n = node(NodeKind::ObjectLiteral, k.pos);
        while (!is(Tok::CloseCurlyBracket)) {
          if (cur >= t.size()) fail_at(cur, "unexpected end of template in a dict literal");
          n->kids.push_back(parse_expression());
          expect(Tok::Colon, "expected ':' between key and value");
          n->kids.push_back(parse_expression());
          if (is(Tok::Comma)) ++cur;
        }
        ++cur;
        return n;
      }
      default: fail_at(cur - 1, fmt::format("unexpected {} '{}'", tok_name(k.type), k.value));
    }
  }
};

}  // namespace

NodePtr parse(const std::vector<Token>& tokens, const SourceMap& map) {
  Parser p{tokens, map};
  auto prog = std::make_unique<Node>();
  prog->kind = NodeKind::Program;
  while (p.cur < tokens.size()) prog->body.push_back(p.parse_any());
  return prog;
}

}  // namespace ridge::jinja
