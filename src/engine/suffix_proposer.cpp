#include "engine/suffix_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

static_assert(SuffixProposer::kKey == 2, "key() packs two tokens into 64 bits: exact, no collisions");

SuffixProposer::SuffixProposer(Options o) : o_(o) {
  RIDGE_CHECK(o.max_cached_tokens >= 0, "suffix cache of {} tokens", o.max_cached_tokens);
  RIDGE_CHECK(o.min_token_prob >= 0 && o.min_token_prob <= 1, "suffix min_token_prob {} is not in [0, 1]",
              o.min_token_prob);
}

uint64_t SuffixProposer::key(const int32_t* t) { return uint64_t(uint32_t(t[0])) << 32 | uint32_t(t[1]); }

std::span<const int32_t> SuffixProposer::text(uint64_t doc, std::span<const int32_t> self) const {
  return doc == 0 ? self : std::span<const int32_t>(by_id_.at(doc)->tokens);
}

void SuffixProposer::retire(int64_t, std::span<const int32_t> tokens) {
  if (!tokens.empty()) add(tokens);
}

void SuffixProposer::add(std::span<const int32_t> tokens) {
  const int64_t n = int64_t(tokens.size());
  if (n <= kKey || n > o_.max_cached_tokens) return;
  const uint64_t id = next_id_++;
  docs_.push_back({id, std::vector<int32_t>(tokens.begin(), tokens.end()), ++clock_});
  by_id_[id] = std::prev(docs_.end());
  const int32_t* t = docs_.back().tokens.data();
  // Positions with a token after them: the key ends at pos, the continuation starts there.
  for (int32_t pos = kKey; pos < n; ++pos) {
    std::vector<Occ>& occ = index_[key(t + pos - kKey)];
    if (occ.size() == kMaxOccurrences) occ.erase(occ.begin());
    occ.push_back({id, pos});
  }
  n_tokens_ += n;
  while (n_tokens_ > o_.max_cached_tokens) evict();
}

void SuffixProposer::evict() {
  const Doc& d = docs_.front();
  const int32_t* t = d.tokens.data();
  for (int32_t pos = kKey; pos < int32_t(d.tokens.size()); ++pos) {
    auto it = index_.find(key(t + pos - kKey));
    if (it == index_.end()) continue;
    std::erase_if(it->second, [&](const Occ& o) { return o.doc == d.id; });
    if (it->second.empty()) index_.erase(it);
  }
  n_tokens_ -= int64_t(d.tokens.size());
  by_id_.erase(d.id);
  docs_.pop_front();
}

void SuffixProposer::propose(std::span<const Ask> asks) {
  for (const Ask& a : asks) propose_one(a.tokens, a.max_tokens, *a.out, a.confidence);
}

void SuffixProposer::propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out,
                                 std::vector<float>* confidence) {
  const int32_t L = int32_t(tokens.size());
  if (L <= kKey || max_tokens <= 0) return;
  const uint64_t k = key(tokens.data() + L - kKey);
  // Candidates, most recent first: the sequence's own earlier occurrences, then the
  // store's newest. Ties in the vote go to the first.
  std::vector<Occ> cand;
  for (int32_t pos = L - 1; pos >= kKey && cand.size() < kMaxOccurrences; --pos)
    if (key(tokens.data() + pos - kKey) == k) cand.push_back({0, pos});
  if (auto it = index_.find(k); it != index_.end())
    for (auto o = it->second.rbegin(); o != it->second.rend(); ++o) cand.push_back(*o);
  if (cand.empty()) return;
  // The occurrences sharing the longest match with the sequence's end vote.
  std::vector<int32_t> match(cand.size());
  int32_t best = 0;
  for (size_t i = 0; i < cand.size(); ++i) {
    const std::span<const int32_t> t = text(cand[i].doc, tokens);
    const int32_t lim = std::min({kMaxMatch, cand[i].pos, L});
    int32_t m = 0;
    while (m < lim && t[size_t(cand[i].pos - 1 - m)] == tokens[size_t(L - 1 - m)]) ++m;
    match[i] = m;
    best = std::max(best, m);
  }
  std::vector<Occ> active;
  for (size_t i = 0; i < cand.size(); ++i)
    if (match[i] == best) active.push_back(cand[i]);

  double conf = 1;
  std::vector<std::pair<int32_t, int32_t>> votes;  // (token, count), in first-seen order
  for (int32_t depth = 0; depth < max_tokens; ++depth) {
    votes.clear();
    int32_t total = 0;
    for (const Occ& o : active) {
      const std::span<const int32_t> t = text(o.doc, tokens);
      if (size_t(o.pos + depth) >= t.size()) continue;
      const int32_t tok = t[size_t(o.pos + depth)];
      auto v = std::find_if(votes.begin(), votes.end(), [&](const auto& p) { return p.first == tok; });
      if (v == votes.end()) votes.push_back({tok, 1});
      else ++v->second;
      ++total;
    }
    if (total == 0) break;
    const auto win = std::max_element(votes.begin(), votes.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
    conf *= double(win->second) / double(total);
    if (conf < o_.min_token_prob) break;
    const int32_t tok = win->first;
    out.push_back(tok);
    if (confidence) confidence->push_back(float(conf));
    std::erase_if(active, [&](const Occ& o) {
      const std::span<const int32_t> t = text(o.doc, tokens);
      return size_t(o.pos + depth) >= t.size() || t[size_t(o.pos + depth)] != tok;
    });
    if (depth == 0)  // the documents that proposed are in use: least recently used last
      for (const Occ& o : active)
        if (o.doc != 0)
          if (auto d = by_id_.find(o.doc); d != by_id_.end() && d->second->last_use != clock_ + 1) {
            d->second->last_use = clock_ + 1;
            docs_.splice(docs_.end(), docs_, d->second);
          }
  }
  ++clock_;
}

}  // namespace ridge
