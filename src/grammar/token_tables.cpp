#include "grammar/token_tables.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <string_view>
#include <tuple>

#include "grammar/matcher.h"

namespace ridge::grammar {
namespace {

inline void set_bit(std::vector<uint64_t>& bits, int32_t id) { bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63); }

inline void or_bits(std::vector<uint64_t>& dst, const std::vector<uint64_t>& src) {
  for (size_t w = 0; w < src.size(); ++w) dst[w] |= src[w];
}

struct StateHash {
  size_t operator()(const PdaState& s) const {
    uint64_t h = s.accept ? 0x9E3779B97F4A7C15ull : 0;
    for (int32_t t : s.tops) h = (h ^ uint32_t(t)) * 0x100000001B3ull + (h >> 29);
    for (int32_t j : s.pops) h = (h ^ uint32_t(j) ^ 0xABCDu) * 0x100000001B3ull + (h >> 29);
    return size_t(h);
  }
};

// Whether a token that ends with a stack is accepted, and on what condition.
struct Cond {
  enum Kind : uint8_t { None, Upto, Exit } kind;
  int32_t j;
};

}  // namespace

void TokenTable::apply(int32_t c0, int32_t lo, int32_t hi, std::vector<uint64_t>& bits) const {
  if (!always_bits.empty()) or_bits(bits, always_bits);
  for (int32_t id : always_ids) set_bit(bits, id);
  const int32_t limit = hi - c0;
  if (!upto_bits.empty()) {
    const auto it = std::upper_bound(upto_j.begin(), upto_j.end(), limit);
    if (it != upto_j.begin()) or_bits(bits, upto_bits[size_t(it - upto_j.begin()) - 1]);
  }
  for (const auto& [j, id] : upto_ids) {
    if (j > limit) break;
    set_bit(bits, id);
  }
  for (const auto& [id, j] : exits)
    if (c0 + j >= lo && c0 + j <= hi) set_bit(bits, id);
}

size_t TokenTable::bytes() const {
  size_t n = sizeof(*this) + always_bits.size() * 8 + always_ids.size() * 4 + upto_j.size() * 4 +
             upto_ids.size() * 8 + exits.size() * 8 + pending.size() * 14 + first.size() * 4;
  for (const auto& b : upto_bits) n += b.size() * 8;
  return n;
}

// FIRST and nullable of every rule, then FOLLOW: after a reference to R comes what can
// start the rest of its alternative (and what follows that rule, if the rest can be
// empty); after a repetition of R, also R again.
TokenTables::TokenTables(std::shared_ptr<const Grammar> g, const TokenTrie& vocab)
    : g_(std::move(g)), vocab_(vocab), pda_(g_) {
  const Grammar& gr = *g_;
  const size_t n = size_t(gr.n_rules());
  rule_of_.assign(gr.elems.size(), -1);
  for (size_t r = 0; r < n; ++r)
    for (int32_t a : gr.alts[r])
      for (int32_t pos = a;; ++pos) {
        rule_of_[size_t(pos)] = int32_t(r);
        if (gr.elems[size_t(pos)].kind == Elem::End) break;
      }
  std::vector<ByteSet> first(n);
  std::vector<char> nullable(n, 0);
  auto merge = [](ByteSet& dst, const ByteSet& src) {
    bool grew = false;
    for (size_t w = 0; w < 4; ++w) {
      const uint64_t v = dst.w[w] | src.w[w];
      grew |= v != dst.w[w];
      dst.w[w] = v;
    }
    return grew;
  };
  // What the elements from pos on can start with; whether they can all be empty.
  auto seq_first = [&](int32_t pos, ByteSet& out) {
    for (;; ++pos) {
      const Elem& e = gr.elems[size_t(pos)];
      if (e.kind == Elem::End) return true;
      if (e.kind == Elem::Bytes) return merge(out, gr.sets[size_t(e.arg)]), false;
      merge(out, first[size_t(e.arg)]);
      if (!nullable[size_t(e.arg)] && !(e.kind == Elem::Repeat && e.lo == 0)) return false;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r)
      for (int32_t a : gr.alts[r]) {
        ByteSet f;
        const bool empty = seq_first(a, f);
        changed |= merge(first[r], f);
        if (empty && !nullable[r]) nullable[r] = 1, changed = true;
      }
  }
  follow_.assign(n, ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r)
      for (int32_t a : gr.alts[r])
        for (int32_t pos = a; gr.elems[size_t(pos)].kind != Elem::End; ++pos) {
          const Elem& e = gr.elems[size_t(pos)];
          if (e.kind == Elem::Bytes) continue;
          ByteSet f;
          if (seq_first(pos + 1, f)) merge(f, follow_[r]);
          if (e.kind == Elem::Repeat && e.hi >= 2) merge(f, first[size_t(e.arg)]);
          changed |= merge(follow_[size_t(e.arg)], f);
        }
  }
}

TokenTables::~TokenTables() { vocab_.add_table_bytes(-int64_t(bytes_.load())); }

const TokenTable& TokenTables::get(int32_t p, int32_t q) {
  const uint64_t key = uint64_t(uint32_t(p)) << 32 | uint32_t(q);
  std::lock_guard lock(mu_);
  auto it = tables_.find(key);
  if (it == tables_.end()) {
    if (bytes_ > kMaxBytes || vocab_.table_bytes() > TokenTrie::kTablesBudget) {
      static const TokenTable over = [] {
        TokenTable t;
        t.failed = true;
        return t;
      }();
      return over;
    }
    auto t = std::make_unique<const TokenTable>(build(p, q));
    bytes_ += t->bytes();
    vocab_.add_table_bytes(int64_t(t->bytes()));
    ++built_;
    it = tables_.emplace(key, std::move(t)).first;
  }
  return *it->second;
}

// The parent positions each rule's alternatives can run over: the element after a
// reference (none for a reference last in its alternative: the caller's parents), the
// repetition itself, -1 under the root.
int64_t TokenTables::prepare(double budget_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const Grammar& g = *g_;
  const int32_t n = g.n_rules();
  std::vector<std::vector<int32_t>> parents(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> tail_callers(static_cast<size_t>(n));  // rules whose parents flow into r
  auto add = [&](int32_t r, int32_t q) {
    auto& v = parents[size_t(r)];
    if (std::find(v.begin(), v.end(), q) == v.end()) v.push_back(q);
  };
  add(g.root, -1);
  for (int32_t r = 0; r < n; ++r)
    for (int32_t a : g.alts[size_t(r)])
      for (int32_t pos = a; g.elems[size_t(pos)].kind != Elem::End; ++pos) {
        const Elem& e = g.elems[size_t(pos)];
        if (e.kind == Elem::Repeat) add(e.arg, pos);
        else if (e.kind == Elem::Ref) {
          if (g.elems[size_t(pos) + 1].kind == Elem::End) tail_callers[size_t(e.arg)].push_back(r);
          else add(e.arg, pos + 1);
        }
      }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r)
      for (int32_t c : tail_callers[size_t(r)])
        for (size_t k = 0; k < parents[size_t(c)].size(); ++k) {
          const int32_t q = parents[size_t(c)][k];
          auto& v = parents[size_t(r)];
          if (std::find(v.begin(), v.end(), q) == v.end()) v.push_back(q), changed = true;
        }
  }
  int64_t count = 0;
  for (int32_t r = 0; r < n; ++r)
    for (int32_t a : g.alts[size_t(r)])
      for (int32_t pos = a; g.elems[size_t(pos)].kind != Elem::End; ++pos)
        if (g.elems[size_t(pos)].kind == Elem::Bytes)
          for (int32_t q : parents[size_t(r)]) {
            if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) return count;
            get(pos, q), ++count;
          }
  return count;
}

// The walk over the vocabulary in byte order from [p, q, sentinel] (Pda::walk_sorted),
// over the tokens whose first byte p's set holds.
TokenTable TokenTables::build(int32_t p, int32_t q) {
  const Grammar& g = *g_;
  TokenTable t;
  Pda& pda = pda_;
  pda.rollback(0);
  pda.set_failed(false);
  const int32_t sentinel = pda.node(Pda::kSentinel, -1, -1);
  const bool counted = q >= 0 && g.elems[size_t(q)].kind == Elem::Repeat;
  const int32_t parent = q < 0 ? sentinel : pda.node(q, counted ? Pda::kRelative : 0, sentinel);
  // With lo = 0 leaving after j iterations needs c0 + j <= hi only: the same condition
  // as staying in, so one list serves both (lo > 0 keeps its exits apart).
  const bool exit_is_upto = counted && g.elems[size_t(q)].lo == 0;
  // The walk's states, interned, and their transitions by byte: the tokens that reach
  // one state at some depth (a string's content after any character) share every
  // advance from it, so a table costs its distinct states times their bytes, not the
  // vocabulary's bytes.
  std::vector<PdaState> states;
  std::unordered_map<PdaState, int32_t, StateHash> ids;
  std::vector<std::array<int32_t, 256>> next;  // -1: not advanced yet
  auto intern = [&](PdaState&& st) {
    auto [it, added] = ids.try_emplace(st, int32_t(states.size()));
    if (added) {
      states.push_back(std::move(st));
      next.emplace_back().fill(-1);
    }
    return it->second;
  };
  PdaState start;
  pda.close_from(pda.node(p, 0, parent), start);
  std::vector<int32_t> depth{intern(std::move(start))};  // depth[d]: the state after d bytes
  PdaState scratch;
  auto step = [&](int32_t from, uint8_t b) {
    if (next[size_t(from)][b] < 0) {
      if (states.size() >= kMaxWalkStates) pda.set_failed(true);  // the table fails: masks take the full walk
      pda.advance(states[size_t(from)], b, scratch);
      const int32_t to = intern(std::move(scratch));
      next[size_t(from)][b] = to;
    }
    return next[size_t(from)][b];
  };

  auto cond_of = [&](int32_t n) -> Cond {
    for (;;) {
      const Pda::Node& nd = pda.at(n);
      if (nd.pos == Pda::kSentinel) return nd.count < 0 ? Cond{Cond::None, 0} : Cond{Cond::Exit, nd.count};
      if (nd.count >= Pda::kRelative)
        return nd.count == Pda::kRelative ? Cond{Cond::None, 0} : Cond{Cond::Upto, nd.count - Pda::kRelative};
      n = nd.parent;
    }
  };

  std::vector<int32_t> always;
  std::vector<TokenTable::Pending> mine;
  const auto order = vocab_.order();
  const auto lcp = vocab_.lcp();
  const auto first = vocab_.first_index();
  const ByteSet& set0 = g.sets[size_t(g.elems[size_t(p)].arg)];
  const ByteSet follow = q >= 0 ? follow_[size_t(rule_of_[size_t(q)])] : ByteSet{};
  // Accepted: on no condition, else the weakest count bound, else the exits.
  auto classify = [&](int32_t k, std::string_view s, size_t d) {
    const int32_t id = order[size_t(k)];
    bool none = false;
    int32_t upto = INT32_MAX;
    const size_t n_exits = t.exits.size();
    if (d == s.size()) {
      auto take = [&](Cond c) {
        if (c.kind == Cond::Exit && exit_is_upto) c.kind = Cond::Upto;
        if (c.kind == Cond::None || (c.kind == Cond::Upto && c.j == 0)) none = true;  // c0 <= hi holds
        else if (c.kind == Cond::Upto) upto = std::min(upto, c.j);
        else t.exits.push_back({id, c.j});
      };
      for (int32_t top : states[size_t(depth[d])].tops) take(cond_of(top));
      for (int32_t j : states[size_t(depth[d])].pops) take(j < 0 ? Cond{Cond::None, 0} : Cond{Cond::Exit, j});
    }
    if (none) {
      t.exits.resize(n_exits);
      always.push_back(id);
      return;
    }
    if (upto != INT32_MAX) t.upto_ids.push_back({upto, id});
    if (t.exits.size() > n_exits) {  // one entry per distinct j not implied by upto (j >= upto)
      auto b0 = t.exits.begin() + int64_t(n_exits);
      t.exits.erase(std::remove_if(b0, t.exits.end(), [&](const auto& e) { return e.second >= upto; }), t.exits.end());
      std::sort(b0, t.exits.end());
      t.exits.erase(std::unique(b0, t.exits.end()), t.exits.end());
    }
    // Pending: every point before its last byte where the token reached the sentinel,
    // with a byte next that can follow q's rule somewhere (none can without a q).
    if (q >= 0)
      for (size_t i = 1; i <= std::min(d, s.size() - 1); ++i)
        if (!states[size_t(depth[i])].pops.empty() && follow.has(uint8_t(s[i])))
          for (int32_t j : states[size_t(depth[i])].pops) mine.push_back({id, int32_t(i), j});
  };
  for (int b = 0; b < 256 && !pda.failed(); ++b) {
    if (!set0.has(uint8_t(b))) continue;
    size_t valid = 0;
    for (int32_t k = first[size_t(b)]; k < first[size_t(b) + 1] && !pda.failed(); ++k) {
      const std::string_view s = vocab_.bytes(order[size_t(k)]);
      size_t d = k == first[size_t(b)] ? 0 : std::min<size_t>(valid, lcp[size_t(k)]);
      if (depth.size() < s.size() + 1) depth.resize(s.size() + 1);
      for (; d < s.size() && !states[size_t(depth[d])].tops.empty() && !pda.failed(); ++d)
        depth[d + 1] = step(depth[d], uint8_t(s[d]));
      valid = d;
      classify(k, s, d);
    }
  }
  pda.rollback(0);
  if (pda.failed()) {
    pda.set_failed(false);
    t = TokenTable{};
    t.failed = true;
    return t;
  }

  const int32_t n_vocab = vocab_.n_vocab();
  const size_t words = size_t(n_vocab + 63) / 64;
  if (always.size() * 32 >= size_t(n_vocab)) {  // bits beat ids
    t.always_bits.assign(words, 0);
    for (int32_t id : always) set_bit(t.always_bits, id);
  } else {
    std::sort(always.begin(), always.end());
    t.always_ids = std::move(always);
  }
  std::sort(t.upto_ids.begin(), t.upto_ids.end());
  if (t.upto_ids.size() * 32 >= size_t(n_vocab)) {
    std::vector<uint64_t> acc(words, 0);
    for (size_t i = 0; i < t.upto_ids.size(); ++i) {
      set_bit(acc, t.upto_ids[i].second);
      if (i + 1 == t.upto_ids.size() || t.upto_ids[i + 1].first != t.upto_ids[i].first) {
        t.upto_j.push_back(t.upto_ids[i].first);
        t.upto_bits.push_back(acc);
      }
    }
    t.upto_ids.clear();
  }
  auto rest = [&](const TokenTable::Pending& e) {
    return std::string_view(vocab_.bytes(e.token)).substr(size_t(e.at));
  };
  std::sort(mine.begin(), mine.end(), [&](const auto& a, const auto& b) {
    const auto ra = rest(a), rb = rest(b);
    if (ra != rb) return ra < rb;
    return std::tie(a.token, a.at, a.j) < std::tie(b.token, b.at, b.j);
  });
  t.pending = std::move(mine);
  t.rest_lcp.assign(t.pending.size(), 0);
  t.first.assign(257, 0);
  for (size_t k = 0; k < t.pending.size(); ++k) {
    const auto r = rest(t.pending[k]);
    ++t.first[size_t(uint8_t(r[0])) + 1];
    if (k == 0) continue;
    const auto r0 = rest(t.pending[k - 1]);
    size_t m = 0;
    while (m < r0.size() && m < r.size() && r0[m] == r[m] && m < 0xFFFF) ++m;
    t.rest_lcp[k] = uint16_t(m);
  }
  for (int b = 0; b < 256; ++b) t.first[size_t(b) + 1] += t.first[size_t(b)];
  return t;
}

}  // namespace ridge::grammar
