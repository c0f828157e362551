// What each grammar position allows of the vocabulary whatever lies deeper in the stack:
// XGrammar's adaptive token mask cache, on ridge's automaton (pda.h).
//
// A top of a state is a byte-set position p over a parent frame at position q (or none).
// Run the automaton from the stack [p, q, sentinel]: what a token does there is fixed by
// p and q alone until a rule end reaches the sentinel (the unknown rest of the stack). So
// per (p, q), once per grammar and vocabulary, every token is
//   - accepted: it ends inside the unit (p's rule, then q's);
//   - pending: it reaches the sentinel after `at` of its bytes; at run time the rest of
//     its bytes must match from the real frame below q (few tokens: a string's content
//     ends at a quote, and what follows is the next rule's);
//   - or rejected (everything else, never looked at again).
// When q is a repetition (a string of at most 40 characters) the real count c0 is left
// out of the key: the walk counts iterations relatively, and a token accepted after j of
// them is kept with j (allowed while c0 + j <= hi, or lo <= c0 + j <= hi once it left
// the repetition), so one table serves every count.
//
// A state's mask is then the union over its tops of the accepted sets (bit operations)
// and the pending tokens whose rest matches (cached per real frame by the matcher).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/pda.h"

namespace ridge::grammar {

class TokenTrie;

struct TokenTable {
  // Tokens accepted whatever the count: bits over the vocabulary when many, else ids.
  std::vector<uint64_t> always_bits;
  std::vector<int32_t> always_ids;
  // Accepted while c0 + j <= hi: the distinct j (ascending) and, per j, the tokens with
  // that j or less (cumulative bits when many tokens, else ids with their j ascending).
  std::vector<int32_t> upto_j;
  std::vector<std::vector<uint64_t>> upto_bits;
  std::vector<std::pair<int32_t, int32_t>> upto_ids;  // (j, token)
  std::vector<std::pair<int32_t, int32_t>> exits;     // (token, j): lo <= c0 + j <= hi
  struct Pending {
    int32_t token, at, j;  // j < 0: no condition; else an exit after j iterations
  };
  std::vector<Pending> pending;    // sorted by the rest of the token (bytes from `at`)
  std::vector<uint16_t> rest_lcp;  // common prefix of each rest with the one before
  std::vector<int32_t> first;      // 257: pending with rests starting at byte b: [first[b], first[b+1])
  bool failed = false;  // the walk went past the automaton's budgets: masks take the full walk

  // Sets the accepted tokens for real count c0 of a repetition lo..hi (0, 0, 0 if none).
  void apply(int32_t c0, int32_t lo, int32_t hi, std::vector<uint64_t>& bits) const;
  bool pending_allowed(const Pending& p, int32_t c0, int32_t lo, int32_t hi) const {
    return p.j < 0 || (c0 + p.j >= lo && c0 + p.j <= hi);
  }
  size_t bytes() const;
};

// The tables of one grammar over one vocabulary, built on first use (or all at once by
// prepare()). Thread-safe: matchers of many requests share them.
class TokenTables {
 public:
  TokenTables(std::shared_ptr<const Grammar> g, const TokenTrie& vocab);
  ~TokenTables();
  TokenTables(const TokenTables&) = delete;
  TokenTables& operator=(const TokenTables&) = delete;

  // The table of byte-set position p over a parent frame at q (-1: none). Past the memory
  // budgets (this grammar's, or the vocabulary's over all its grammars' tables alive) a
  // table marked failed: masks then take the full walk, slow but still exact.
  const TokenTable& get(int32_t p, int32_t q);
  // Builds every table the grammar can need (its positions times their possible parent
  // positions), until `budget_s` seconds have gone (the rest are built on first use);
  // returns how many were built.
  int64_t prepare(double budget_s = 1e9);
  static constexpr size_t kMaxBytes = size_t(128) << 20;
  static constexpr size_t kMaxWalkStates = size_t(1) << 16;  // distinct states one table's walk may intern
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }  // read beside builds
  int64_t built() const { return built_.load(std::memory_order_relaxed); }

 private:
  TokenTable build(int32_t p, int32_t q);

  std::shared_ptr<const Grammar> g_;
  const TokenTrie& vocab_;
  // Per rule: the bytes that can come right after it ends, in any context. A pending
  // token whose rest starts with another byte is rejected when its table is built.
  std::vector<ByteSet> follow_;
  std::vector<int32_t> rule_of_;  // per element: its rule
  std::mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<const TokenTable>> tables_;
  Pda pda_;  // the builder's automaton (only under mu_)
  std::atomic<size_t> bytes_{0};
  std::atomic<int64_t> built_{0};
};

}  // namespace ridge::grammar
