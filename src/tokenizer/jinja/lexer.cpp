// A port of @huggingface/jinja's lexer.ts, byte for byte in its whitespace handling. The
// preprocessing passes rewrite the text (as the reference's regexes do) while keeping,
// for every byte left, its offset in the original source.
#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

const char* tok_name(Tok t) {
  static const char* names[] = {
      "Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen",
      "OpenStatement", "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket",
      "CloseSquareBracket", "OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe",
      "AdditiveBinaryOperator", "MultiplicativeBinaryOperator", "ExponentiationBinaryOperator",
      "ComparisonBinaryOperator", "UnaryOperator", "Comment"};
  return names[int(t)];
}

std::string SourceMap::where(uint32_t pos) const {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < pos && k < src_.size(); ++k) {
    if (src_[k] == '\n') { ++line; col = 1; }
    else if ((static_cast<unsigned char>(src_[k]) & 0xC0) != 0x80) ++col;
  }
  return fmt::format("line {}, column {}", line, col);
}

namespace {

// Text with the original offset of each byte.
struct Mapped {
  std::string s;
  std::vector<uint32_t> at;
  void push(char c, uint32_t p) { s += c; at.push_back(p); }
};

bool is_line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  unsigned char c = static_cast<unsigned char>(s[i - 1]);
  if (c == '\n' || c == '\r') return true;
  // U+2028 / U+2029 (E2 80 A8 / E2 80 A9) end lines for a JS /m regex too.
  return i >= 3 && static_cast<unsigned char>(s[i - 3]) == 0xE2 && static_cast<unsigned char>(s[i - 2]) == 0x80 &&
         (c == 0xA8 || c == 0xA9);
}

// The reference's preprocess(): drop one trailing newline; lstrip_blocks as
// /^[ \t]*({[#%-])/gm -> "$1"; trim_blocks as /([#%-]})\n/g -> "$1"; then remove the
// transformers-only {% generation %} / {% endgeneration %} tags.
Mapped preprocess(std::string_view src) {
  Mapped m;
  for (size_t k = 0; k < src.size(); ++k) m.push(src[k], uint32_t(k));
  if (!m.s.empty() && m.s.back() == '\n') { m.s.pop_back(); m.at.pop_back(); }

  Mapped l;  // lstrip_blocks
  for (size_t i = 0; i < m.s.size();) {
    if (is_line_start(m.s, i)) {
      size_t j = i;
      while (j < m.s.size() && (m.s[j] == ' ' || m.s[j] == '\t')) ++j;
      if (j + 1 < m.s.size() && m.s[j] == '{' && (m.s[j + 1] == '#' || m.s[j + 1] == '%' || m.s[j + 1] == '-')) i = j;
    }
    l.push(m.s[i], m.at[i]);
    ++i;
  }

  Mapped t;  // trim_blocks
  for (size_t i = 0; i < l.s.size();) {
    char c = l.s[i];
    if ((c == '#' || c == '%' || c == '-') && i + 2 < l.s.size() && l.s[i + 1] == '}' && l.s[i + 2] == '\n') {
      t.push(c, l.at[i]);
      t.push('}', l.at[i + 1]);
      i += 3;
      continue;
    }
    t.push(c, l.at[i]);
    ++i;
  }

  if (t.s.find("generation") == std::string::npos) return t;
  // /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs
  Mapped g;
  size_t protect = 0;  // output bytes that belong to an earlier match
  for (size_t i = 0; i < t.s.size();) {
    if (t.s.compare(i, 2, "{%") == 0) {
      size_t j = i + 2;
      bool lstrip = j < t.s.size() && t.s[j] == '-';
      if (lstrip) ++j;
      while (size_t n = js_space_at(t.s, j)) j += n;
      if (t.s.compare(j, 3, "end") == 0 && t.s.compare(j + 3, 10, "generation") == 0) j += 3;
      if (t.s.compare(j, 10, "generation") == 0) {
        j += 10;
        while (size_t n = js_space_at(t.s, j)) j += n;
        bool rstrip = j < t.s.size() && t.s[j] == '-';
        if (rstrip) ++j;
        if (t.s.compare(j, 2, "%}") == 0) {
          j += 2;
          if (lstrip) {
            while (g.s.size() > protect) {
              size_t p = g.s.size() - 1;
              while (p > protect && (static_cast<unsigned char>(g.s[p]) & 0xC0) == 0x80) --p;
              if (js_space_at(g.s, p) != g.s.size() - p) break;
              g.s.resize(p);
              g.at.resize(p);
            }
          }
          size_t k = j;
          while (size_t n = js_space_at(t.s, k)) k += n;
          if (!rstrip)
            for (size_t q = j; q < k; ++q) g.push(t.s[q], t.at[q]);
          i = k;
          protect = g.s.size();
          continue;
        }
      }
    }
    g.push(t.s[i], t.at[i]);
    ++i;
  }
  return g;
}

bool is_word(char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

struct Lexer {
  const Mapped& m;
  const SourceMap& map;
  std::vector<Token> tokens;
  size_t cur = 0;

  uint32_t orig(size_t p) const { return p < m.at.size() ? m.at[p] : (m.at.empty() ? 0 : m.at.back() + 1); }
  [[noreturn]] void fail_at(size_t p, const std::string& what) const {
    throw Error(fmt::format("chat template {}: {}", map.where(orig(p)), what));
  }
  char at(size_t p) const { return p < m.s.size() ? m.s[p] : '\0'; }
  bool starts(std::string_view seq) const { return m.s.compare(cur, seq.size(), seq) == 0; }
  void push(std::string v, Tok t, size_t start) { tokens.push_back(Token{std::move(v), t, orig(start)}); }

  // consumeWhile with the reference's escape handling (used for strings, numbers, words).
  template <typename Pred>
  std::string consume_while(Pred pred) {
    std::string str;
    while (cur < m.s.size() && pred(m.s[cur])) {
      if (m.s[cur] == '\\') {
        size_t start = cur;
        ++cur;
        if (cur >= m.s.size()) fail_at(start, "unexpected end of input after '\\'");
        char e = m.s[cur++];
        if (e == 'x' || e == 'u') {
          size_t len = e == 'x' ? 2 : 4;
          std::string hex = m.s.substr(cur, len);
          bool ok = hex.size() == len;
          for (char h : hex) ok = ok && isxdigit(static_cast<unsigned char>(h));
          if (!ok) fail_at(start, fmt::format("invalid hexadecimal escape sequence \\{}{}", e, hex));
          utf8_append(str, char32_t(std::stoul(hex, nullptr, 16)));
          cur += len;
          continue;
        }
        switch (e) {
          case 'n': str += '\n'; break;
          case 't': str += '\t'; break;
          case 'r': str += '\r'; break;
          case 'b': str += '\b'; break;
          case 'f': str += '\f'; break;
          case 'v': str += '\v'; break;
          case '\'': str += '\''; break;
          case '"': str += '"'; break;
          case '\\': str += '\\'; break;
          default: fail_at(start, fmt::format("unexpected escaped character '{}'", e));
        }
        continue;
      }
      str += m.s[cur++];
      if (cur >= m.s.size()) fail_at(cur, "unexpected end of input");
    }
    return str;
  }

  void strip_trailing_whitespace() {
    if (!tokens.empty() && tokens.back().type == Tok::Text) {
      tokens.back().value = js_trim(tokens.back().value, false, true);
      if (tokens.back().value.empty()) tokens.pop_back();
    }
  }
  void skip_leading_whitespace() {
    while (size_t n = js_space_at(m.s, cur)) cur += n;
  }

  void run() {
    int curly_depth = 0;
    static const std::pair<std::string_view, Tok> table[] = {
        {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression},
        {"}}", Tok::CloseExpression}, {"(", Tok::OpenParen}, {")", Tok::CloseParen},
        {"{", Tok::OpenCurlyBracket}, {"}", Tok::CloseCurlyBracket}, {"[", Tok::OpenSquareBracket},
        {"]", Tok::CloseSquareBracket}, {",", Tok::Comma}, {".", Tok::Dot}, {":", Tok::Colon},
        {"|", Tok::Pipe}, {"<=", Tok::ComparisonBinaryOperator}, {">=", Tok::ComparisonBinaryOperator},
        {"==", Tok::ComparisonBinaryOperator}, {"!=", Tok::ComparisonBinaryOperator},
        {"<", Tok::ComparisonBinaryOperator}, {">", Tok::ComparisonBinaryOperator},
        {"+", Tok::AdditiveBinaryOperator}, {"-", Tok::AdditiveBinaryOperator}, {"~", Tok::AdditiveBinaryOperator},
        {"**", Tok::ExponentiationBinaryOperator}, {"*", Tok::MultiplicativeBinaryOperator},
        {"//", Tok::MultiplicativeBinaryOperator}, {"/", Tok::MultiplicativeBinaryOperator},
        {"%", Tok::MultiplicativeBinaryOperator}, {"=", Tok::Equals}};
    while (cur < m.s.size()) {
      // Text outside of tags: only right after a tag (or at the start).
      if (tokens.empty() || tokens.back().type == Tok::CloseStatement || tokens.back().type == Tok::CloseExpression ||
          tokens.back().type == Tok::Comment) {
        size_t start = cur;
        while (cur < m.s.size() && !(m.s[cur] == '{' && (at(cur + 1) == '%' || at(cur + 1) == '{' || at(cur + 1) == '#')))
          ++cur;
        if (cur > start) {
          push(m.s.substr(start, cur - start), Tok::Text, start);
          continue;
        }
      }
      if (m.s[cur] == '{' && at(cur + 1) == '#') {
        size_t start = cur;
        cur += 2;
        bool strip_before = at(cur) == '-';
        if (strip_before) ++cur;
        std::string comment;
        while (at(cur) != '#' || at(cur + 1) != '}') {
          if (cur + 2 >= m.s.size()) fail_at(start, "missing end of comment tag '#}'");
          comment += m.s[cur++];
        }
        bool strip_after = !comment.empty() && comment.back() == '-';
        if (strip_after) comment.pop_back();
        if (strip_before) strip_trailing_whitespace();
        push(comment, Tok::Comment, start);
        cur += 2;
        if (strip_after) skip_leading_whitespace();
        continue;
      }
      if (starts("{%-")) {
        strip_trailing_whitespace();
        push("{%", Tok::OpenStatement, cur);
        cur += 3;
        continue;
      }
      if (starts("{{-")) {
        strip_trailing_whitespace();
        push("{{", Tok::OpenExpression, cur);
        curly_depth = 0;
        cur += 3;
        continue;
      }
      consume_while([](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; });
      skip_leading_whitespace();  // any Unicode spaces the ASCII pass left
      if (cur >= m.s.size()) break;
      if (starts("-%}")) {
        push("%}", Tok::CloseStatement, cur);
        cur += 3;
        skip_leading_whitespace();
        continue;
      }
      if (starts("-}}")) {
        push("}}", Tok::CloseExpression, cur);
        cur += 3;
        skip_leading_whitespace();
        continue;
      }
      char c = m.s[cur];
      if (c == '-' || c == '+') {
        Tok last = tokens.empty() ? Tok::Text : tokens.back().type;
        if (tokens.empty() || last == Tok::Text) fail_at(cur, fmt::format("unexpected character '{}'", c));
        if (!(last == Tok::Identifier || last == Tok::NumericLiteral || last == Tok::StringLiteral ||
              last == Tok::CloseParen || last == Tok::CloseSquareBracket)) {
          size_t start = cur++;
          std::string num = consume_while(is_digit);
          if (!num.empty() && at(cur) == '.' && is_digit(at(cur + 1))) {
            ++cur;
            num += "." + consume_while(is_digit);
          }
          push(std::string(1, c) + num, num.empty() ? Tok::UnaryOperator : Tok::NumericLiteral, start);
          continue;
        }
      }
      bool matched = false;
      for (const auto& [seq, type] : table) {
        if (seq == "}}" && curly_depth > 0) continue;
        if (starts(seq)) {
          push(std::string(seq), type, cur);
          if (type == Tok::OpenExpression) curly_depth = 0;
          else if (type == Tok::OpenCurlyBracket) ++curly_depth;
          else if (type == Tok::CloseCurlyBracket) --curly_depth;
          cur += seq.size();
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (c == '\'' || c == '"') {
        size_t start = cur++;
        std::string str = consume_while([c](char x) { return x != c; });
        if (cur >= m.s.size()) fail_at(start, "unterminated string literal");
        push(str, Tok::StringLiteral, start);
        ++cur;
        continue;
      }
      if (is_digit(c)) {
        size_t start = cur;
        std::string num = consume_while(is_digit);
        if ((tokens.empty() || tokens.back().type != Tok::Dot) && at(cur) == '.' && is_digit(at(cur + 1))) {
          ++cur;
          num += "." + consume_while(is_digit);
        }
        push(num, Tok::NumericLiteral, start);
        continue;
      }
      if (is_word(c)) {
        size_t start = cur;
        push(consume_while(is_word), Tok::Identifier, start);
        continue;
      }
      fail_at(cur, fmt::format("unexpected character '{}'", c));
    }
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const SourceMap& map) {
  Mapped m = preprocess(source);
  Lexer lx{m, map, {}, 0};
  lx.run();
  return std::move(lx.tokens);
}

}  // namespace ridge::jinja
