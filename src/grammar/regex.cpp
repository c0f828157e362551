// A recursive-descent regex parser that writes GBNF as it goes: alternation, then
// concatenation, then atoms with their quantifiers. Classes are kept as code-point ranges
// so JSON mode can take the characters JSON escapes out of them.
#include "grammar/regex.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace ridge::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.push_back({lo, hi});
  }
  return out;
}

Ranges negate(const Ranges& in) {
  Ranges r = normalize(in), out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::string class_char(uint32_t c) {
  if (c == '\\' || c == ']' || c == '-' || c == '^' || c == '"' || c == '[') return fmt::format("\\{}", char(c));
  if (c < 0x20 || c == 0x7F) return fmt::format("\\x{:02X}", c);
  if (c < 0x80) return std::string(1, char(c));
  return c <= 0xFFFF ? fmt::format("\\u{:04X}", c) : fmt::format("\\U{:08X}", c);
}

std::string class_text(const Ranges& r) {
  std::string s = "[";
  for (auto [lo, hi] : r) {
    s += class_char(lo);
    if (hi > lo) s += "-" + class_char(hi);
  }
  return s + "]";
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

class RegexParser {
 public:
  RegexParser(std::string_view p, bool json, std::string_view search, const Limits& lim)
      : s_(p), json_(json), search_(search), lim_(lim) {}

  RegexGbnf run() {
    // Top-level alternatives, each with its own anchors: ^a|b$ is "starts with a, or
    // ends with b".
    std::string out;
    do {
      const bool start = eat('^');
      std::string e = concatenation();
      const bool end = eat('$');
      if (more() && s_[i_] != '|') fail(s_[i_] == ')' ? "unbalanced )" : "unexpected character");
      if (!search_.empty()) e = std::string(start ? "" : std::string(search_) + " ") + e + (end ? "" : " " + std::string(search_));
      out += (out.empty() ? "" : " | ") + e;
    } while (eat('|'));
    RegexGbnf r;
    r.expr = "(" + out + ")";
    r.uses_json_escapes = used_escapes_;
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(fmt::format("regex at offset {}: {}", i_, what));
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool more() const { return i_ < s_.size(); }

  std::string alternation() {
    std::string out = concatenation();
    while (eat('|')) out += " | " + concatenation();
    return out;
  }

  std::string concatenation() {
    std::string out;
    while (more() && s_[i_] != '|' && s_[i_] != ')') {
      if (s_[i_] == '$') {
        // The end anchor of a top-level alternative, taken by run().
        if (depth_ == 0 && (i_ + 1 == s_.size() || s_[i_ + 1] == '|')) break;
        fail("$ is supported only at the end of a top-level alternative");
      }
      std::string a = atom();
      a = quantified(a);
      if (!out.empty()) out += " ";
      out += a;
    }
    return out.empty() ? "\"\"" : out;
  }

  std::string quantified(const std::string& a) {
    if (!more()) return a;
    const char c = s_[i_];
    int64_t lo, hi;
    if (c == '*') lo = 0, hi = -1, ++i_;
    else if (c == '+') lo = 1, hi = -1, ++i_;
    else if (c == '?') lo = 0, hi = 1, ++i_;
    else if (c == '{' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
      ++i_;
      lo = number();
      hi = lo;
      if (eat(',')) hi = more() && std::isdigit(static_cast<unsigned char>(s_[i_])) ? number() : -1;
      if (!eat('}')) fail("expected } in a repetition");
      if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
    } else {
      return a;
    }
    if (lo > lim_.max_repeat || hi > lim_.max_repeat) fail(fmt::format("repetition count over {}", lim_.max_repeat));
    if (more() && (s_[i_] == '?' || s_[i_] == '+')) ++i_;  // lazy / possessive: the same language
    if (more() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{')) fail("nested quantifier");
    const std::string g = "(" + a + ")";
    if (lo == 0 && hi == -1) return g + "*";
    if (lo == 1 && hi == -1) return g + "+";
    if (lo == 0 && hi == 1) return g + "?";
    if (hi == -1) return fmt::format("{}{{{},}}", g, lo);
    if (hi == lo) return fmt::format("{}{{{}}}", g, lo);
    return fmt::format("{}{{{},{}}}", g, lo, hi);
  }

  int64_t number() {
    int64_t v = 0;
    if (!more() || !std::isdigit(static_cast<unsigned char>(s_[i_]))) fail("expected a number");
    while (more() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + (s_[i_++] - '0');
      if (v > 1'000'000'000) fail("number too large");
    }
    return v;
  }

  std::string atom() {
    const char c = s_[i_];
    if (c == '(') {
      if (++depth_ > kMaxDepth) fail(fmt::format("groups nested deeper than {}", kMaxDepth));
      ++i_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (eat('<') && more() && s_[i_] != '=' && s_[i_] != '!') {
          while (more() && s_[i_] != '>') ++i_;
          if (!eat('>')) fail("unterminated group name");
        } else {
          fail("lookaround and inline flags are not supported");
        }
      }
      std::string e = alternation();
      if (!eat(')')) fail("missing )");
      --depth_;
      return "(" + e + ")";
    }
    if (c == '[') return chars(bracket());
    if (c == '.') {
      ++i_;
      return chars({{0, 9}, {11, 0x10FFFF}});  // every character but a line feed
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("quantifier without anything to repeat");
    if (c == '^') fail("^ is supported only at the start of a top-level alternative");
    if (c == '\\') {
      ++i_;
      return chars(escape(false));
    }
    const uint32_t ch = utf8_char();
    return chars({{ch, ch}});
  }

  // One code point of the pattern (UTF-8).
  uint32_t utf8_char() {
    const auto u = static_cast<unsigned char>(s_[i_]);
    const int n = u < 0x80 ? 1 : (u >> 5) == 6 ? 2 : (u >> 4) == 14 ? 3 : (u >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + size_t(n) > s_.size()) fail("invalid UTF-8");
    uint32_t c = n == 1 ? u : n == 2 ? u & 0x1F : n == 3 ? u & 0x0F : u & 0x07;
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + size_t(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      c = c << 6 | (b & 0x3F);
    }
    i_ += size_t(n);
    return c;
  }

  // After a backslash: the class it names, or the one character it escapes.
  Ranges escape(bool in_class) {
    if (!more()) fail("pattern ends in a backslash");
    const char e = s_[i_++];
    switch (e) {
      case 'd': return kDigit;
      case 'D': return negate(kDigit);
      case 'w': return kWord;
      case 'W': return negate(kWord);
      case 's': return kSpace;
      case 'S': return negate(kSpace);
      case 'n': return {{'\n', '\n'}};
      case 't': return {{'\t', '\t'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': {
        const uint32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        const uint32_t v = hex(4);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{8, 8}};
        fail("\\b (word boundary) is not supported");
      case 'B': fail("\\B is not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) fail("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(e))) fail(fmt::format("unknown escape \\{}", e));
        --i_;
        {
          const uint32_t c = utf8_char();
          return {{c, c}};
        }
    }
  }
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!more() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) fail(fmt::format("expected {} hex digits", n));
      const char h = s_[i_++];
      v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  Ranges bracket() {
    ++i_;  // [
    const bool neg = eat('^');
    Ranges r;
    bool first = true;
    while (more() && (s_[i_] != ']' || first)) {
      first = false;
      Ranges lo_set;
      if (s_[i_] == '\\') {
        ++i_;
        lo_set = escape(true);
      } else {
        const uint32_t c = utf8_char();
        lo_set = {{c, c}};
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && i_ + 1 < s_.size() && s_[i_] == '-' &&
          s_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        if (s_[i_] == '\\') {
          ++i_;
          const Ranges h = escape(true);
          if (h.size() != 1 || h[0].first != h[0].second) fail("a class cannot end a range");
          hi = h[0].first;
        } else {
          hi = utf8_char();
        }
        if (hi < lo_set[0].first) fail("character range out of order");
        r.push_back({lo_set[0].first, hi});
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    if (!eat(']')) fail("unterminated character class");
    return neg ? negate(r) : normalize(r);
  }

  // A set of characters as GBNF: a class, and in JSON mode the escapes of the characters
  // JSON cannot hold raw.
  std::string chars(Ranges r) {
    r = normalize(r);
    if (!json_) return class_text(r);
    bool quote = false, backslash = false;
    uint32_t controls = 0;  // bit c: U+00c is in the class
    Ranges safe;
    for (auto [lo, hi] : r) {
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x1F); ++c) controls |= 1u << c;
      if (lo <= '"' && hi >= '"') quote = true;
      if (lo <= '\\' && hi >= '\\') backslash = true;
    }
    for (auto [lo, hi] : r) {  // minus controls, " and backslash
      uint32_t l = std::max<uint32_t>(lo, 0x20);
      for (uint32_t cut : {uint32_t('"'), uint32_t('\\')}) {
        if (l <= cut && hi >= cut) {
          if (cut > l) safe.push_back({l, cut - 1});
          l = cut + 1;
        }
      }
      if (l <= hi) safe.push_back({l, hi});
    }
    std::vector<std::string> alts;
    if (!safe.empty()) alts.push_back(class_text(safe));
    if (quote) alts.push_back("json-quote");
    if (backslash) alts.push_back("json-backslash");
    if (controls == 0xFFFFFFFFu) {
      alts.push_back("json-control");
    } else {
      // Exactly the class's controls: \u00XX in either case of hex digit, and the short
      // escape where JSON has one.
      for (uint32_t c = 0; c < 32; ++c) {
        if (!(controls >> c & 1)) continue;
        const char* hex = "0123456789abcdef";
        const char lo = hex[c & 15];
        std::string e = fmt::format("\"\\\\u00{}\" ", c >> 4) +
                        (lo >= 'a' ? fmt::format("[{}{}]", lo, char(lo - 'a' + 'A')) : fmt::format("\"{}\"", lo));
        const char* shorts = c == 8 ? "b" : c == 9 ? "t" : c == 10 ? "n" : c == 12 ? "f" : c == 13 ? "r" : nullptr;
        if (shorts) e = "(" + e + " | \"\\\\" + shorts + "\")";
        alts.push_back(e);
      }
    }
    used_escapes_ |= quote || backslash || controls == 0xFFFFFFFFu;
    if (alts.empty()) fail("character class matches nothing");
    if (alts.size() == 1) return alts[0];
    std::string s = "(";
    for (size_t k = 0; k < alts.size(); ++k) s += (k ? " | " : "") + alts[k];
    return s + ")";
  }

  std::string_view s_;
  bool json_;
  std::string_view search_;
  const Limits& lim_;
  size_t i_ = 0;
  bool used_escapes_ = false;
  static constexpr int kMaxDepth = 256;  // the parser recurses once per group
  int depth_ = 0;
};

}  // namespace

RegexGbnf regex_to_gbnf(std::string_view pattern, bool json_string, std::string_view search, const Limits& limits) {
  return RegexParser(pattern, json_string, search, limits).run();
}

std::string json_escape_rules() {
  return "json-quote ::= \"\\\\\\\"\"\n"
         "json-backslash ::= \"\\\\\\\\\"\n"
         "json-control ::= \"\\\\\" ([bfnrt] | \"u00\" [01] [0-9a-fA-F])\n";
}

std::string gbnf_literal(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02X}", c);
    else out += char(c);
  }
  return out + "\"";
}

}  // namespace ridge::grammar
