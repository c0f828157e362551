// Runs a Grammar (grammar.h) over generated tokens: which tokens may come next (a mask
// over the vocabulary) and the state after each accepted one.
//
// The state is a set of stacks of a pushdown automaton over bytes, as in llama.cpp's and
// XGrammar's matchers: a stack is the position in the grammar that must match next (a
// byte set) and, below it, where to continue after each enclosing rule ends. Stacks are
// persistent: nodes (position, parent) are hash-consed in an arena, so a stack is one
// node id, two equal stacks are one id, and a state is a sorted list of ids (its tops)
// plus whether the grammar may end here. Advancing by a byte moves every top whose set
// holds it one element on and expands references and rule ends until each new top is a
// byte set again.
//
// A mask walks the vocabulary in byte order (TokenTrie): tokens sharing a prefix share
// its advances, and a prefix no stack survives skips every token under it. Nodes a walk
// creates are dropped after it (the arena only keeps what accepted tokens made), and the
// masks of recent states are cached: inside a JSON string or number the state repeats.
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

namespace ridge::grammar {

// The vocabulary as the matcher walks it: every token's bytes, in byte order with each
// one's common prefix with the one before, leaving out the tokens no grammar may produce
// (control tokens, empty pieces, bytes no UTF-8 text holds); end-of-generation tokens are
// allowed where the grammar may end. Built once per tokenizer and shared by every matcher.
class TokenTrie {
 public:
  // Masks by grammar and state, shared by every matcher over this vocabulary: requests
  // with the same schema go through the same states, and a state's mask costs a walk of
  // the whole vocabulary the first time. Keyed by the grammar's id and the state's
  // stacks as positions (node ids are each matcher's own); least recently used entries go
  // beyond the byte budget. Thread-safe.
  class MaskCache {
   public:
    using Bits = std::shared_ptr<const std::vector<uint64_t>>;
    explicit MaskCache(size_t budget_bytes) : budget_(budget_bytes) {}
    Bits find(uint64_t grammar, const std::vector<int32_t>& key);
    void insert(uint64_t grammar, const std::vector<int32_t>& key, Bits bits);
    int64_t hits() const { return hits_; }

   private:
    struct Key {
      uint64_t grammar;
      std::vector<int32_t> key;
      bool operator==(const Key&) const = default;
    };
    struct KeyHash {
      size_t operator()(const Key& k) const;
    };
    using Lru = std::list<std::pair<Key, Bits>>;
    std::mutex mu_;
    size_t budget_, bytes_ = 0;
    Lru lru_;
    std::unordered_map<Key, Lru::iterator, KeyHash> index_;
    std::atomic<int64_t> hits_{0};
  };

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
  MaskCache& masks() const { return masks_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> order_;  // producible ids, sorted by bytes
  std::vector<uint16_t> lcp_;   // lcp_[k]: common prefix of order_[k] with order_[k - 1]
  std::vector<int32_t> eog_;
  std::vector<bool> producible_;
  mutable MaskCache masks_{size_t(256) << 20};
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

  // Moves on by a token; false (and the state unchanged) when the grammar does not allow
  // it. An end-of-generation token is allowed only where the grammar may end.
  bool accept(int32_t id);
  // How many of tokens would be accepted one after the other from here (a proposal's
  // valid prefix); the state is unchanged.
  int32_t valid_prefix(std::span<const int32_t> tokens);
  bool accept_bytes(std::string_view bytes);  // tests and forced text

  bool can_end() const { return cur_.accept; }       // the grammar is complete here
  bool must_end() const { return cur_.tops.empty(); }  // nothing can follow
  bool ended() const { return ended_; }             // an end-of-generation token was taken
  // The grammar cannot go on: a state grew past the budgets below, or a token it did not
  // allow was forced on it. The engine ends such a request.
  bool failed() const { return failed_; }
  void fail() { failed_ = true; }

  // What one state may hold and one mask or token may build: a grammar that is ambiguous
  // enough to need more (stacks doubling at every bracket) fails instead of taking the
  // machine's memory. compile_gbnf checks the start state against them.
  static constexpr size_t kMaxTops = 4096;
  static constexpr size_t kMaxWalkNodes = size_t(1) << 20;

  // Counters (metrics and benchmarks).
  int64_t masks_computed() const { return n_masks_; }  // walks of the vocabulary
  int64_t mask_cache_hits() const { return n_hits_; }  // this matcher's or the vocabulary's cache

 private:
  struct Node {
    int32_t pos, parent;
  };
  struct State {
    std::vector<int32_t> tops;  // sorted node ids whose position is a byte set
    bool accept = false;
    bool operator==(const State&) const = default;
  };
  struct StateHash {
    size_t operator()(const State& s) const;
  };

  int32_t node(int32_t pos, int32_t parent);
  void state_key(const State& s, std::vector<int32_t>& key) const;  // stacks as positions
  void rollback(size_t n_nodes);  // drops nodes made since the arena had n_nodes
  void close(int32_t id, State& out);
  void start(State& out);
  bool advance(const State& s, uint8_t b, State& out);  // false: out has no stack and cannot end
  bool advance_token(const State& s, const std::string& bytes, State& out);
  void compute_mask(std::vector<uint64_t>& bits);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<uint64_t> stamp_;  // per node: the closure generation that visited it
  uint64_t gen_ = 0;
  size_t walk_mark_ = 0;  // nodes before the walk in hand (its budget counts from here)
  bool failed_ = false;
  std::vector<int32_t> work_;
  State cur_;
  bool ended_ = false;
  std::vector<State> depth_;  // the walk's states per prefix length (reused)
  std::vector<int32_t> key_;  // state_key's (reused)

  // Masks of recent states, bounded (a new entry beyond kMaskCache evicts the oldest).
  static constexpr size_t kMaskCache = 64;
  std::unordered_map<State, std::vector<uint64_t>, StateHash> cache_;
  std::vector<State> cache_order_;
  size_t cache_next_ = 0;
  std::vector<uint64_t> mask_;  // of cur_ (valid while mask_ok_)
  bool mask_ok_ = false;
  int64_t n_masks_ = 0, n_hits_ = 0;
};

}  // namespace ridge::grammar
