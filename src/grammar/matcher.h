// Runs a Grammar (grammar.h) over generated tokens: which tokens may come next (a mask
// over the vocabulary) and the state after each accepted one.
//
// The state is a set of stacks of the grammar's pushdown automaton (pda.h). A mask is the
// union over the state's tops of what each top's token table allows (token_tables.h:
// precomputed per grammar position, whatever lies below), plus the few pending tokens
// whose bytes run past the table's unit, checked here against the real stack. The full
// walk of the vocabulary from the whole stacks (reference_mask) is the reference the
// tables are tested against and the fallback where a table could not be built.
#pragma once
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/pda.h"
#include "grammar/token_tables.h"

namespace ridge::grammar {

// The vocabulary as the matcher walks it: every token's bytes, in byte order with each
// one's common prefix with the one before, leaving out the tokens no grammar may produce
// (control tokens, empty pieces, bytes no UTF-8 text holds); end-of-generation tokens are
// allowed where the grammar may end. Built once per tokenizer and shared by every matcher.
class TokenTrie {
 public:
  // bytes[id]: the token's decoded bytes; excluded[id]: never produced by a grammar;
  // eog: the end-of-generation ids.
  TokenTrie(std::vector<std::string> bytes, const std::vector<bool>& excluded, std::vector<int32_t> eog);

  int32_t n_vocab() const { return int32_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool is_eog(int32_t id) const;
  bool producible(int32_t id) const { return producible_[size_t(id)]; }  // a byte string a grammar may match
  std::span<const int32_t> eog() const { return eog_; }
  std::span<const int32_t> order() const { return order_; }
  std::span<const uint16_t> lcp() const { return lcp_; }
  // [first[b], first[b + 1]) in order(): the tokens whose first byte is b (257 entries).
  std::span<const int32_t> first_index() const { return first_; }
  // The longest producible token whose bytes begin text (-1: none).
  int32_t longest_prefix(std::string_view text) const;
  // The token tables of a grammar over this vocabulary, shared by every matcher of it
  // (requests with the same schema); the least recently used grammars' go beyond the
  // budget. Thread-safe.
  std::shared_ptr<TokenTables> tables(const std::shared_ptr<const Grammar>& g) const;
  // The bytes of all token tables alive over this vocabulary (kept or still in use).
  size_t table_bytes() const { return table_bytes_.load(std::memory_order_relaxed); }
  void add_table_bytes(int64_t n) const { table_bytes_.fetch_add(size_t(n), std::memory_order_relaxed); }
  static constexpr size_t kTablesBudget = size_t(512) << 20;

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> order_;  // producible ids, sorted by bytes
  std::vector<uint16_t> lcp_;   // lcp_[k]: common prefix of order_[k] with order_[k - 1]
  std::vector<int32_t> eog_;
  std::vector<bool> producible_;
  std::vector<int32_t> first_;
  std::unordered_map<std::string_view, int32_t> by_bytes_;  // producible tokens (the lowest id per text)
  size_t max_len_ = 0;
  static constexpr size_t kMaxGrammars = 64;
  mutable std::atomic<size_t> table_bytes_{0};
  mutable std::mutex mu_;
  mutable std::list<std::pair<uint64_t, std::shared_ptr<TokenTables>>> tables_;  // most recent first
};

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> vocab);

  // The allowed tokens now, as bits (word id / 64, bit id % 64) over the vocabulary.
  const std::vector<uint64_t>& mask();
  // logits[n_vocab]: -inf on every token the grammar does not allow now.
  void apply_mask(float* logits);
  bool allowed(int32_t id) { return (mask()[size_t(id) >> 6] >> (id & 63)) & 1; }
  bool any_allowed();
  // The mask by the full walk of the vocabulary from the whole stacks (tests, fallback).
  std::vector<uint64_t> reference_mask();

  // Moves on by a token; false (and the state unchanged) when the grammar does not allow
  // it. An end-of-generation token is allowed only where the grammar may end.
  bool accept(int32_t id);
  // How many of tokens would be accepted one after the other from here (a proposal's
  // valid prefix); the state is unchanged.
  int32_t valid_prefix(std::span<const int32_t> tokens);
  bool accept_bytes(std::string_view bytes);  // tests and forced text
  // Jump-forward: the bytes the grammar forces from here (while one byte is all that can
  // come next and the grammar cannot end), at most max_bytes; the state is unchanged.
  std::string forced_bytes(size_t max_bytes);
  // Those bytes as tokens, each the longest token that begins what is left (at most
  // max_tokens; the tokens the grammar would take one after the other).
  void forced_tokens(int32_t max_tokens, std::vector<int32_t>& out);

  bool can_end() const { return cur_.accept; }       // the grammar is complete here
  bool must_end() const { return cur_.tops.empty(); }  // nothing can follow
  bool ended() const { return ended_; }             // an end-of-generation token was taken
  // The grammar cannot go on: a state grew past the automaton's budgets (pda.h), or a
  // token it did not allow was forced on it. The engine ends such a request.
  bool failed() const { return pda_.failed(); }
  void fail() { pda_.set_failed(true); }

  static constexpr size_t kMaxTops = Pda::kMaxTops;
  static constexpr size_t kMaxWalkNodes = Pda::kMaxWalkNodes;

  // Counters (metrics and benchmarks).
  int64_t masks_computed() const { return n_masks_; }  // masks put together from tables
  int64_t mask_cache_hits() const { return n_hits_; }  // masks of recent states reused

 private:
  struct StateHash {
    size_t operator()(const PdaState& s) const;
  };

  bool advance_token(const PdaState& s, std::string_view bytes, PdaState& out);
  void compute_mask(std::vector<uint64_t>& bits);
  void walk_mask(std::vector<uint64_t>& bits);
  // Indices of table t's pending tokens whose rest matches from node gp (cached).
  const std::vector<int32_t>& pending_pass(const TokenTable& t, int32_t gp);

  Pda pda_;
  std::shared_ptr<const TokenTrie> vocab_;
  std::shared_ptr<TokenTables> tables_;  // fetched on the first mask
  PdaState cur_;
  bool ended_ = false;
  std::vector<PdaState> depth_;  // a walk's states per prefix length (reused)

  struct PassKey {
    const TokenTable* table;
    int32_t gp;
    bool operator==(const PassKey&) const = default;
  };
  struct PassHash {
    size_t operator()(const PassKey& k) const {
      return std::hash<const void*>()(k.table) ^ (size_t(uint32_t(k.gp)) * 0x9E3779B97F4A7C15ull);
    }
  };
  static constexpr size_t kPassCache = 256;  // entries; cleared when full
  std::unordered_map<PassKey, std::vector<int32_t>, PassHash> pass_;

  // Masks of recent states, bounded (a new entry beyond kMaskCache evicts the oldest).
  static constexpr size_t kMaskCache = 64;
  std::unordered_map<PdaState, std::vector<uint64_t>, StateHash> cache_;
  std::vector<PdaState> cache_order_;
  size_t cache_next_ = 0;
  std::vector<uint64_t> mask_;  // of cur_ (valid while mask_ok_)
  bool mask_ok_ = false;
  int64_t n_masks_ = 0, n_hits_ = 0;
};

}  // namespace ridge::grammar
