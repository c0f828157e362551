// The pushdown automaton a Grammar (grammar.h) runs as, over bytes, as in llama.cpp's and
// XGrammar's matchers: a stack is the position in the grammar that must match next (a
// byte set) and, below it, where to continue after each enclosing rule ends. Stacks are
// persistent: nodes (position, count, parent) are hash-consed in an arena, so a stack is
// one node id and two equal stacks are one id. A state is the sorted ids of its stacks'
// tops plus whether the grammar may end there. Advancing by a byte moves every top whose
// set holds it one element on and expands references, repetitions and rule ends until
// each new top is a byte set again.
//
// Token tables (token_tables.h) run the same automaton over a stack whose bottom is
// unknown: a sentinel frame stands for it, and a rule end that reaches it is recorded in
// the state (`pops`) instead of continuing. The repetition frame right above the sentinel
// may count relatively (iterations since the table's start, the real count being added
// at run time); leaving it records that count in the sentinel it continues over.
#pragma once
#include <cstdint>
#include <algorithm>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace ridge::grammar {

struct PdaState {
  std::vector<int32_t> tops;  // sorted node ids whose position is a byte set
  bool accept = false;        // the grammar may end here
  // Sentinel frames a rule end reached (their counts, sorted, unique); token tables only.
  std::vector<int32_t> pops;
  bool operator==(const PdaState&) const = default;
};

class Pda {
 public:
  struct Node {
    int32_t pos;     // an element (or kSentinel)
    int32_t count;   // a Repeat frame: iterations done when the child under it ends
    int32_t parent;  // node id, -1 at the bottom
  };
  static constexpr int32_t kSentinel = -2;       // pos of the frame standing for an unknown stack
  static constexpr int32_t kRelative = 1 << 24;  // counts from here on are relative (kRelative + j)

  // What one closure or walk may build: a grammar ambiguous enough to need more (stacks
  // doubling at every bracket) fails instead of taking the machine's memory.
  static constexpr size_t kMaxTops = 4096;
  static constexpr size_t kMaxWalkNodes = size_t(1) << 20;

  explicit Pda(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {}
  const Grammar& grammar() const { return *g_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return g_; }

  int32_t node(int32_t pos, int32_t count, int32_t parent);
  const Node& at(int32_t id) const { return nodes_[size_t(id)]; }
  size_t size() const { return nodes_.size(); }
  // Drops the nodes made since the arena had n (a walk's), and starts the budget there.
  void rollback(size_t n);
  void begin_walk() { walk_mark_ = nodes_.size(); }

  void start(PdaState& out);                   // the root's alternatives
  void close_from(int32_t id, PdaState& out);  // one stack, expanded to byte-set tops
  // false: out has no stack, cannot end and popped nothing.
  bool advance(const PdaState& s, uint8_t b, PdaState& out);

  bool failed() const { return failed_; }
  void set_failed(bool f) { failed_ = f; }

  // Runs strings sorted by bytes, k in [begin, end), from the state in depth[0]: str(k)
  // is string k and lcp(k) the bytes it shares with string k - 1. Each string advances
  // depth[d] to depth[d + 1] byte by byte while the state has a top, starting from the
  // states of the prefix it shares with the string before (a vocabulary in byte order
  // shares most of its advances). done(k, s, d): d bytes of s advanced, depth[0..d] its
  // states. Stops when the budget fails.
  template <class Str, class Lcp, class Done>
  void walk_sorted(std::vector<PdaState>& depth, int32_t begin, int32_t end, Str str, Lcp lcp, Done done) {
    size_t valid = 0;
    for (int32_t k = begin; k < end; ++k) {
      const std::string_view s = str(k);
      size_t d = k == begin ? 0 : std::min<size_t>(valid, lcp(k));
      if (depth.size() < s.size() + 1) depth.resize(s.size() + 1);
      while (d < s.size() && !depth[d].tops.empty()) {
        advance(depth[d], uint8_t(s[d]), depth[d + 1]);
        ++d;
        if (failed_) return;
      }
      valid = d;
      done(k, s, d);
    }
  }

 private:
  void close(int32_t id, PdaState& out);
  void finish(PdaState& out);

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  struct KeyHash {
    size_t operator()(const Node& n) const {
      uint64_t h = (uint64_t(uint32_t(n.pos)) << 32 | uint32_t(n.parent)) * 0x9E3779B97F4A7C15ull;
      return size_t((h ^ uint32_t(n.count) * 0xC2B2AE3D27D4EB4Full) ^ (h >> 29));
    }
  };
  struct KeyEq {
    bool operator()(const Node& a, const Node& b) const {
      return a.pos == b.pos && a.count == b.count && a.parent == b.parent;
    }
  };
  std::unordered_map<Node, int32_t, KeyHash, KeyEq> index_;
  std::vector<uint64_t> stamp_;  // per node: the closure generation that visited it
  uint64_t gen_ = 0;
  size_t walk_mark_ = 0;  // nodes before the walk in hand (its budget counts from here)
  bool failed_ = false;
  std::vector<int32_t> work_;
};

}  // namespace ridge::grammar
