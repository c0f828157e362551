// Suffix decoding (Oliaro et al., "SuffixDecoding", vLLM's "suffix"): proposals from the
// text of all recent requests, not only the sequence's own. Agentic and templated
// workloads repeat other requests' text (the same tool call, the same JSON skeleton, the
// same answer to the same question), which prompt lookup cannot see.
//
// The store keeps the prompts and outputs of finished requests (least recently used
// evicted past a token bound) and indexes every position by the key tokens before it.
// A proposal matches the sequence's last tokens against the store and the sequence
// itself: the occurrences sharing the longest match (up to kMaxMatch tokens) vote, and
// the proposal follows their most frequent continuation token by token while its
// confidence (the product of each chosen token's share of the votes still agreeing)
// stays at or above min_token_prob. Where only one occurrence matches, it is prompt
// lookup; where a thousand agentic runs passed here, it is their consensus.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/proposer.h"

namespace ridge {

class SuffixProposer final : public Proposer {
 public:
  struct Options {
    int64_t max_cached_tokens = int64_t(1) << 20;  // prompt and output tokens the store keeps
    double min_token_prob = 0.1;                   // confidence below which a proposal stops
  };
  explicit SuffixProposer(Options o);

  void propose(std::span<const Ask> asks) override;
  // A finished request's prompt and output join the store (an aborted one's do not).
  void retire(int64_t seq, std::span<const int32_t> tokens) override;
  void add(std::span<const int32_t> tokens);

  // confidence (may be null): each proposed token's running product of vote shares.
  void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out,
                   std::vector<float>* confidence = nullptr);
  int64_t n_cached_tokens() const { return n_tokens_; }
  int64_t n_docs() const { return int64_t(docs_.size()); }

  static constexpr int32_t kKey = 2;         // tokens hashed to find occurrences
  static constexpr int32_t kMaxMatch = 32;   // longest match compared
  static constexpr size_t kMaxOccurrences = 256;  // per key, the most recent kept

 private:
  struct Doc {
    uint64_t id;
    std::vector<int32_t> tokens;
    uint64_t last_use;
  };
  // An occurrence of a key: tokens [pos - kKey, pos) of a document equal it, so what
  // follows starts at pos. doc = 0 is the asking sequence itself.
  struct Occ {
    uint64_t doc;
    int32_t pos;
  };
  static uint64_t key(const int32_t* t);
  std::span<const int32_t> text(uint64_t doc, std::span<const int32_t> self) const;
  void evict();

  Options o_;
  std::list<Doc> docs_;  // least recently used first
  std::unordered_map<uint64_t, std::list<Doc>::iterator> by_id_;
  std::unordered_map<uint64_t, std::vector<Occ>> index_;  // key -> occurrences, oldest first
  int64_t n_tokens_ = 0;
  uint64_t next_id_ = 1, clock_ = 0;
};

}  // namespace ridge
