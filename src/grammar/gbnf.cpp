// GBNF text to a Grammar (grammar.h): a recursive-descent parser that emits each rule's
// alternatives as element sequences, then flattens them, resolves names and refuses
// left recursion.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace ridge::grammar {
namespace {

using Seq = std::vector<Elem>;

struct Builder {
  const Limits& lim;
  std::vector<std::vector<Seq>> rules;  // alternatives per rule
  std::vector<std::string> names;
  std::vector<bool> defined;
  std::unordered_map<std::string, int32_t> by_name;
  std::vector<ByteSet> sets;
  std::map<std::array<uint64_t, 4>, int32_t> set_ids;
  int64_t n_elems = 0;

  explicit Builder(const Limits& l) : lim(l) {}

  int32_t rule(const std::string& name) {
    auto it = by_name.find(name);
    if (it != by_name.end()) return it->second;
    if (int32_t(rules.size()) >= lim.max_rules) throw GrammarError(fmt::format("grammar has more than {} rules", lim.max_rules));
    const int32_t id = int32_t(rules.size());
    rules.emplace_back();
    names.push_back(name);
    defined.push_back(false);
    by_name.emplace(name, id);
    return id;
  }
  // A generated rule (a group, a class, a repetition): referenced by id, never by name,
  // so its name (for messages) is kept out of the name table and cannot take a name the
  // grammar defines further down.
  int32_t fresh(const std::string& base) {
    if (int32_t(rules.size()) >= lim.max_rules) throw GrammarError(fmt::format("grammar has more than {} rules", lim.max_rules));
    const int32_t id = int32_t(rules.size());
    rules.emplace_back();
    names.push_back(fmt::format("{}~{}", base, id));
    defined.push_back(true);
    return id;
  }
  Elem bytes(const ByteSet& s) {
    auto [it, added] = set_ids.emplace(s.w, int32_t(sets.size()));
    if (added) sets.push_back(s);
    return Elem{Elem::Bytes, it->second};
  }
  void count(int64_t n) {
    n_elems += n;
    if (n_elems > lim.max_elems)
      throw GrammarError(fmt::format("grammar expands to more than {} elements", lim.max_elems));
  }
  void add_alt(int32_t r, Seq s) {
    count(int64_t(s.size()) + 1);
    rules[size_t(r)].push_back(std::move(s));
  }
};

class Parser {
 public:
  Parser(std::string_view text, Builder& b) : s_(text), b_(b) {}

  void parse() {
    skip();
    if (at_end()) fail("empty grammar: no rules");
    while (!at_end()) {
      const size_t start = i_;
      const std::string name = ident();
      if (name.empty()) fail("expected a rule name");
      skip();
      if (!eat("::=")) fail(fmt::format("expected ::= after rule name '{}'", name));
      const int32_t r = b_.rule(name);
      if (b_.defined[size_t(r)]) fail_at(start, fmt::format("rule '{}' is defined twice", name));
      b_.defined[size_t(r)] = true;
      alternates(r, name, false);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(i_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    int line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    throw GrammarError(fmt::format("grammar {}:{}: {}", line, col, what));
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek(size_t k = 0) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  bool eat(std::string_view t) {
    if (s_.substr(i_, t.size()) != t) return false;
    i_ += t.size();
    return true;
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  void skip() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++i_;
      else if (c == '#')
        while (!at_end() && peek() != '\n') ++i_;
      else break;
    }
  }
  std::string ident() {
    const size_t a = i_;
    while (!at_end() && name_char(peek())) ++i_;
    return std::string(s_.substr(a, i_ - a));
  }
  // Whether a rule definition starts here (a name, then ::=): the end of the rule before.
  bool rule_starts() const {
    size_t k = i_;
    while (k < s_.size() && name_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
    return s_.substr(k, 3) == "::=";
  }

  void alternates(int32_t r, const std::string& base, bool nested) {
    for (;;) {
      Seq seq = sequence(base, nested);
      b_.add_alt(r, std::move(seq));
      skip();
      if (!eat("|")) break;
    }
    if (nested) {
      skip();
      if (!eat(")")) fail("expected )");
    }
  }

  Seq sequence(const std::string& base, bool nested) {
    Seq seq;
    size_t last = 0;  // where the last term's elements start
    for (;;) {
      skip();
      if (at_end()) break;
      const char c = peek();
      if (c == '|' || (c == ')' && nested)) break;
      if (c == ')') fail("unexpected )");
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.size() == last && seq.empty()) fail(fmt::format("'{}' repeats nothing", c));
        repeat(seq, last, base);
        continue;
      }
      if (!nested && rule_starts()) break;
      last = seq.size();
      term(seq, base);
    }
    return seq;
  }

  void term(Seq& seq, const std::string& base) {
    const char c = peek();
    if (c == '"') {
      ++i_;
      while (!at_end() && peek() != '"') {
        uint8_t buf[4];
        const int n = utf8_encode(literal_char(), buf);
        for (int k = 0; k < n; ++k) {
          ByteSet s;
          s.add(buf[k]);
          seq.push_back(b_.bytes(s));
        }
        b_.count(n);
      }
      if (!eat("\"")) fail("unterminated string literal");
    } else if (c == '[') {
      ++i_;
      const bool neg = eat("^");
      std::vector<std::pair<uint32_t, uint32_t>> rs;
      while (!at_end() && peek() != ']') {
        const uint32_t lo = literal_char();
        uint32_t hi = lo;
        if (peek() == '-' && peek(1) != ']' && i_ + 1 < s_.size()) {
          ++i_;
          hi = literal_char();
          if (hi < lo) fail("character range out of order");
        }
        rs.push_back({lo, hi});
      }
      if (!eat("]")) fail("unterminated character class");
      chars(seq, neg ? negate(rs) : rs, base);
    } else if (c == '.') {
      ++i_;
      chars(seq, {{0, 0x10FFFF}}, base);
    } else if (c == '(' && peek(1) == '=') {
      // A lookahead assertion (XGrammar's EBNF: "(= ...)" after a rule's body): parsed,
      // then dropped. XGrammar uses it to settle tokens that run past a rule's end; every
      // context a JSON grammar puts such a rule in already requires what it asserts.
      if (++depth_ > kMaxDepth) fail(fmt::format("parentheses nested deeper than {}", kMaxDepth));
      i_ += 2;
      const int32_t r = b_.fresh(base + "-lookahead");
      alternates(r, base, true);
      --depth_;
    } else if (c == '(') {
      if (++depth_ > kMaxDepth) fail(fmt::format("parentheses nested deeper than {}", kMaxDepth));
      ++i_;
      const int32_t r = b_.fresh(base);
      alternates(r, base, true);
      --depth_;
      seq.push_back(Elem{Elem::Ref, r});
      b_.count(1);
    } else if (name_char(c)) {
      const std::string n = ident();
      refs_.push_back({n, i_ - n.size()});
      seq.push_back(Elem{Elem::Ref, b_.rule(n)});
      b_.count(1);
    } else {
      fail(fmt::format("unexpected character '{}'", c));
    }
  }

  static std::vector<std::pair<uint32_t, uint32_t>> negate(std::vector<std::pair<uint32_t, uint32_t>> rs) {
    std::sort(rs.begin(), rs.end());
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t next = 0;
    for (auto [lo, hi] : rs) {
      if (lo > next) out.push_back({next, lo - 1});
      if (hi + 1 > next) next = hi + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
  }

  // A class as one byte-set element where it is single bytes, else a generated rule of
  // its UTF-8 sequences.
  void chars(Seq& seq, const std::vector<std::pair<uint32_t, uint32_t>>& rs, const std::string& base) {
    std::vector<std::vector<ByteSet>> alts = utf8_class(rs);
    if (alts.empty()) fail("character class matches nothing");
    if (alts.size() == 1 && alts[0].size() == 1) {
      seq.push_back(b_.bytes(alts[0][0]));
      b_.count(1);
      return;
    }
    const int32_t r = b_.fresh(base);
    for (auto& a : alts) {
      Seq s;
      for (auto& bs : a) s.push_back(b_.bytes(bs));
      b_.add_alt(r, std::move(s));
    }
    seq.push_back(Elem{Elem::Ref, r});
    b_.count(1);
  }

  // The elements from `last` on become one generated rule (unless they are one element),
  // then *, +, ?, {m}, {m,}, {m,n} repeat it.
  void repeat(Seq& seq, size_t last, const std::string& base) {
    const size_t at = i_;
    int64_t lo = 0, hi = -1;  // hi < 0: unbounded
    const char c = peek();
    ++i_;
    if (c == '*') lo = 0, hi = -1;
    else if (c == '+') lo = 1, hi = -1;
    else if (c == '?') lo = 0, hi = 1;
    else {
      skip();
      lo = number();
      skip();
      hi = lo;
      if (eat(",")) {
        skip();
        hi = std::isdigit(static_cast<unsigned char>(peek())) ? number() : -1;
        skip();
      }
      if (!eat("}")) fail("expected } in a repetition");
      if (hi >= 0 && hi < lo) fail_at(at, "repetition {m,n} with n < m");
    }
    if (seq.size() == last) fail_at(at, "repetition of nothing");
    if (lo > b_.lim.max_repeat || hi > b_.lim.max_repeat)
      fail_at(at, fmt::format("repetition count over {}", b_.lim.max_repeat));
    Elem x = seq[last];
    if (seq.size() - last > 1) {
      const int32_t r = b_.fresh(base);
      b_.add_alt(r, Seq(seq.begin() + int64_t(last), seq.end()));
      x = Elem{Elem::Ref, r};
    }
    seq.resize(last);
    // A counted element over a rule of x (one grammar position for any count: what
    // token tables need) where there is a count to keep; short fixed runs and x?, x*, x+
    // as plain elements and rules.
    auto counted = [&](int64_t m, int64_t n) {
      int32_t body = x.arg;
      if (x.kind != Elem::Ref) {
        body = b_.fresh(base);
        b_.add_alt(body, {x});
      }
      seq.push_back(Elem{Elem::Repeat, body, int32_t(m), int32_t(n)});
      b_.count(1);
    };
    if (hi >= 2 && !(hi == lo && lo <= 4)) return counted(lo, hi);
    if (hi < 0 && lo > 4) counted(lo, lo);
    else {
      for (int64_t k = 0; k < lo; ++k) seq.push_back(x);
      b_.count(lo);
    }
    if (hi < 0) {  // x*: star ::= x star | ""
      const int32_t star = b_.fresh(base);
      b_.add_alt(star, {x, Elem{Elem::Ref, star}});
      b_.add_alt(star, {});
      seq.push_back(Elem{Elem::Ref, star});
    } else if (hi == lo + 1) {  // x?: opt ::= x | ""
      const int32_t opt = b_.fresh(base);
      b_.add_alt(opt, {x});
      b_.add_alt(opt, {});
      seq.push_back(Elem{Elem::Ref, opt});
    }
    b_.count(1);
  }

  int64_t number() {
    int64_t v = 0;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a number");
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > 1'000'000'000) fail("number too large");
      ++i_;
    }
    return v;
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  uint32_t literal_char() {
    if (at_end()) fail("unexpected end of grammar");
    const auto u = static_cast<unsigned char>(peek());
    if (u == '\\') {
      ++i_;
      const char e = peek();
      ++i_;
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': case '.': case '*': case '+':
        case '?': case '(': case ')': case '{': case '}': case '|': case '$':
          return uint32_t(e);
        default: fail(fmt::format("unknown escape \\{}", e));
      }
    }
    // UTF-8 decode (invalid bytes are taken as themselves: the text came from a user).
    int n = u < 0x80 ? 1 : (u >> 5) == 6 ? 2 : (u >> 4) == 14 ? 3 : (u >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + size_t(n) > s_.size()) fail("invalid UTF-8 in grammar");
    uint32_t c = n == 1 ? u : n == 2 ? u & 0x1F : n == 3 ? u & 0x0F : u & 0x07;
    for (int k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(s_[i_ + size_t(k)]);
      if ((cb & 0xC0) != 0x80) fail("invalid UTF-8 in grammar");
      c = c << 6 | (cb & 0x3F);
    }
    i_ += size_t(n);
    return c;
  }
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const char h = peek();
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) fail(fmt::format("expected {} hex digits", n));
      v = v * 16 + uint32_t(d);
      ++i_;
    }
    if (v > 0x10FFFF) fail("code point above U+10FFFF");
    return v;
  }
 public:
  // Every name used, with where (an undefined one is reported at its first use).
  std::vector<std::pair<std::string, size_t>> refs_;
  void check_defined() const {
    for (auto& [n, at] : refs_)
      if (!b_.defined[size_t(b_.by_name.at(n))]) fail_at(at, fmt::format("rule '{}' is not defined", n));
  }

 private:
  std::string_view s_;
  Builder& b_;
  size_t i_ = 0;
  static constexpr int kMaxDepth = 512;  // the parser recurses once per parenthesis
  int depth_ = 0;
};

// Refuses a rule that can reach itself before consuming a byte with something left to
// match after the way back (through references at the start of an alternative, past
// nullable ones): the matcher's stacks would grow without end. A way back made only of
// references last in their alternatives is fine: the matcher keeps no frame for those
// (matcher.cpp), so x* with a nullable x, or r ::= r | "a", expand to a fixed point.
void check_left_recursion(const Grammar& g) {
  const int32_t n = g.n_rules();
  std::vector<char> nullable(size_t(n), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (nullable[size_t(r)]) continue;
      for (int32_t a : g.alts[size_t(r)]) {
        bool all = true;
        for (int32_t p = a; g.elems[size_t(p)].kind != Elem::End && all; ++p)
          all = (g.elems[size_t(p)].kind == Elem::Ref && nullable[size_t(g.elems[size_t(p)].arg)]) ||
                (g.elems[size_t(p)].kind == Elem::Repeat && (g.elems[size_t(p)].lo == 0 || nullable[size_t(g.elems[size_t(p)].arg)]));
        if (all) {
          nullable[size_t(r)] = 1, changed = true;
          break;
        }
      }
    }
  }
  struct Edge {
    int32_t to;
    bool tail;  // the reference is last in its alternative
  };
  std::vector<std::vector<Edge>> first(static_cast<size_t>(n));  // rules reachable at the start
  for (int32_t r = 0; r < n; ++r)
    for (int32_t a : g.alts[size_t(r)])
      for (int32_t p = a; g.elems[size_t(p)].kind == Elem::Ref || g.elems[size_t(p)].kind == Elem::Repeat; ++p) {
        // A repetition keeps its frame (the count) even when last: never a tail.
        const Elem& e = g.elems[size_t(p)];
        first[size_t(r)].push_back({e.arg, e.kind == Elem::Ref && g.elems[size_t(p) + 1].kind == Elem::End});
        if (!nullable[size_t(e.arg)] && !(e.kind == Elem::Repeat && e.lo == 0)) break;
      }
  // Strongly connected components (Tarjan, iterative); a non-tail edge inside one is a
  // way back with something left after it.
  std::vector<int32_t> index(size_t(n), -1), low(size_t(n), 0), comp(size_t(n), -1), st;
  std::vector<char> on(size_t(n), 0);
  std::vector<std::pair<int32_t, size_t>> call;
  int32_t next = 0, n_comp = 0;
  for (int32_t s0 = 0; s0 < n; ++s0) {
    if (index[size_t(s0)] >= 0) continue;
    call.push_back({s0, 0});
    index[size_t(s0)] = low[size_t(s0)] = next++;
    st.push_back(s0);
    on[size_t(s0)] = 1;
    while (!call.empty()) {
      auto& [v, k] = call.back();
      if (k < first[size_t(v)].size()) {
        const int32_t w = first[size_t(v)][k++].to;
        if (index[size_t(w)] < 0) {
          index[size_t(w)] = low[size_t(w)] = next++;
          st.push_back(w);
          on[size_t(w)] = 1;
          call.push_back({w, 0});
        } else if (on[size_t(w)]) {
          low[size_t(v)] = std::min(low[size_t(v)], index[size_t(w)]);
        }
        continue;
      }
      const int32_t done = v;
      call.pop_back();
      if (!call.empty()) low[size_t(call.back().first)] = std::min(low[size_t(call.back().first)], low[size_t(done)]);
      if (low[size_t(done)] == index[size_t(done)]) {
        for (;;) {
          const int32_t w = st.back();
          st.pop_back();
          on[size_t(w)] = 0;
          comp[size_t(w)] = n_comp;
          if (w == done) break;
        }
        ++n_comp;
      }
    }
  }
  for (int32_t r = 0; r < n; ++r)
    for (const Edge& e : first[size_t(r)])
      if (!e.tail && comp[size_t(e.to)] == comp[size_t(r)])
        throw GrammarError(fmt::format("grammar: rule '{}' is left-recursive (it reaches itself through '{}' before "
                                       "matching anything, with more to match after)",
                                       g.names[size_t(e.to)], g.names[size_t(r)]));
}

}  // namespace

std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, std::string_view root, const Limits& limits) {
  Builder b(limits);
  Parser p(text, b);
  p.parse();
  p.check_defined();
  auto it = b.by_name.find(std::string(root));
  if (it == b.by_name.end() || !b.defined[size_t(it->second)])
    throw GrammarError(fmt::format("grammar has no rule '{}' to start from", root));
  static std::atomic<uint64_t> next_id{1};
  auto g = std::make_shared<Grammar>();
  g->id = next_id++;
  g->sets = std::move(b.sets);
  g->names = std::move(b.names);
  g->root = it->second;
  g->alts.resize(b.rules.size());
  g->elems.reserve(size_t(b.n_elems));
  for (size_t r = 0; r < b.rules.size(); ++r)
    for (Seq& s : b.rules[r]) {
      g->alts[r].push_back(int32_t(g->elems.size()));
      g->elems.insert(g->elems.end(), s.begin(), s.end());
      g->elems.push_back(Elem{Elem::End, int32_t(r)});
    }
  check_left_recursion(*g);
  // The start state within the matcher's budgets (an ambiguous grammar can need 2^n
  // stacks before its first byte): refused here, with the request, not mid-generation.
  static const auto no_vocab = std::make_shared<const TokenTrie>(std::vector<std::string>{}, std::vector<bool>{},
                                                                 std::vector<int32_t>{});
  if (Matcher(g, no_vocab).failed())
    throw GrammarError(fmt::format("grammar: its start needs more than {} stacks or {} nodes (too ambiguous)",
                                   Matcher::kMaxTops, Matcher::kMaxWalkNodes));
  return g;
}

}  // namespace ridge::grammar
