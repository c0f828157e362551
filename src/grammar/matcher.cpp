#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ridge::grammar {

TokenTrie::TokenTrie(std::vector<std::string> bytes, const std::vector<bool>& excluded, std::vector<int32_t> eog)
    : bytes_(std::move(bytes)), eog_(std::move(eog)) {
  std::erase_if(eog_, [&](int32_t id) { return id < 0 || id >= int32_t(bytes_.size()); });  // masks hold ids < n_vocab
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  // Bytes no UTF-8 text holds (overlong leads C0 C1, leads past U+10FFFF F5-FF): a grammar
  // matches characters, so a token with one can never be part of what it allows.
  auto utf8_possible = [](const std::string& b) {
    for (char c : b) {
      const auto u = static_cast<unsigned char>(c);
      if (u == 0xC0 || u == 0xC1 || u >= 0xF5) return false;
    }
    return true;
  };
  producible_.assign(bytes_.size(), false);
  for (int32_t id = 0; id < int32_t(bytes_.size()); ++id)
    if (!bytes_[size_t(id)].empty() && !(size_t(id) < excluded.size() && excluded[size_t(id)]) && !is_eog(id) &&
        utf8_possible(bytes_[size_t(id)])) {
      order_.push_back(id);
      producible_[size_t(id)] = true;
    }
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  lcp_.assign(order_.size(), 0);
  for (size_t k = 1; k < order_.size(); ++k) {
    const std::string& a = bytes_[size_t(order_[k - 1])];
    const std::string& b = bytes_[size_t(order_[k])];
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n] && n < 0xFFFF) ++n;
    lcp_[k] = uint16_t(n);
  }
}

bool TokenTrie::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

size_t TokenTrie::MaskCache::KeyHash::operator()(const Key& k) const {
  uint64_t h = k.grammar * 0x9E3779B97F4A7C15ull;
  for (int32_t v : k.key) h = (h ^ uint32_t(v)) * 0x100000001B3ull;
  return size_t(h ^ (h >> 31));
}

TokenTrie::MaskCache::Bits TokenTrie::MaskCache::find(uint64_t grammar, const std::vector<int32_t>& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(Key{grammar, key});
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->second;
}

void TokenTrie::MaskCache::insert(uint64_t grammar, const std::vector<int32_t>& key, Bits bits) {
  const size_t cost = bits->size() * 8 + key.size() * 4 + 64;
  if (cost > budget_ / 8) return;  // one entry never crowds out the rest
  std::lock_guard lock(mu_);
  Key k{grammar, key};
  if (index_.count(k)) return;
  lru_.emplace_front(k, std::move(bits));
  index_.emplace(std::move(k), lru_.begin());
  bytes_ += cost;
  while (bytes_ > budget_ && lru_.size() > 1) {
    auto& back = lru_.back();
    bytes_ -= back.second->size() * 8 + back.first.key.size() * 4 + 64;
    index_.erase(back.first);
    lru_.pop_back();
  }
}

size_t Matcher::StateHash::operator()(const State& s) const {
  uint64_t h = s.accept ? 0x9E3779B97F4A7C15ull : 0;
  for (int32_t t : s.tops) h = (h ^ uint32_t(t)) * 0x100000001B3ull + (h >> 29);
  return size_t(h);
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)) {
  start(cur_);
}

int32_t Matcher::node(int32_t pos, int32_t parent) {
  const uint64_t key = uint64_t(uint32_t(pos)) << 32 | uint32_t(parent + 1);
  auto [it, added] = index_.try_emplace(key, int32_t(nodes_.size()));
  if (added) {
    nodes_.push_back(Node{pos, parent});
    stamp_.push_back(0);
  }
  return it->second;
}

void Matcher::rollback(size_t n_nodes) {
  for (size_t i = n_nodes; i < nodes_.size(); ++i)
    index_.erase(uint64_t(uint32_t(nodes_[i].pos)) << 32 | uint32_t(nodes_[i].parent + 1));
  nodes_.resize(n_nodes);
  stamp_.resize(n_nodes);
}

// Expands node id until every stack's top is a byte set: a reference pushes the rule's
// alternatives over the element after it, the end of an alternative pops to its parent
// (the end of the root: the grammar may end here). Nodes already seen in this closure
// are skipped, so ambiguous grammars cost their distinct stacks only.
void Matcher::close(int32_t id, State& out) {
  work_.push_back(id);
  while (!work_.empty()) {
    if (out.tops.size() > kMaxTops || nodes_.size() - walk_mark_ > kMaxWalkNodes) {
      failed_ = true;  // past the budget: the caller sees an empty state
      work_.clear();
      out.tops.clear();
      out.accept = false;
      return;
    }
    const int32_t n = work_.back();
    work_.pop_back();
    if (stamp_[size_t(n)] == gen_) continue;
    stamp_[size_t(n)] = gen_;
    const Node nd = nodes_[size_t(n)];
    const Elem& e = g_->elems[size_t(nd.pos)];
    switch (e.kind) {
      case Elem::Bytes: out.tops.push_back(n); break;
      case Elem::Ref: {
        // A reference last in its alternative continues where the alternative would:
        // no frame for it (x* and other right recursion keep flat stacks, and a nullable
        // x under * comes back to a node already seen instead of growing forever).
        const int32_t cont =
            g_->elems[size_t(nd.pos) + 1].kind == Elem::End ? nd.parent : node(nd.pos + 1, nd.parent);
        const auto& alts = g_->alts[size_t(e.arg)];
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back(node(*it, cont));
        break;
      }
      case Elem::End:
        if (nd.parent < 0) out.accept = true;
        else work_.push_back(nd.parent);
        break;
    }
  }
}

void Matcher::start(State& out) {
  out.tops.clear();
  out.accept = false;
  ++gen_;
  walk_mark_ = nodes_.size();
  for (int32_t a : g_->alts[size_t(g_->root)]) close(node(a, -1), out);
  std::sort(out.tops.begin(), out.tops.end());
}

bool Matcher::advance(const State& s, uint8_t b, State& out) {
  out.tops.clear();
  out.accept = false;
  ++gen_;
  for (int32_t t : s.tops) {
    const Node nd = nodes_[size_t(t)];
    if (g_->sets[size_t(g_->elems[size_t(nd.pos)].arg)].has(b)) close(node(nd.pos + 1, nd.parent), out);
    if (failed_) return false;
  }
  std::sort(out.tops.begin(), out.tops.end());
  return !out.tops.empty() || out.accept;
}

bool Matcher::advance_token(const State& s, const std::string& bytes, State& out) {
  State a = s, b;
  for (char c : bytes) {
    if (a.tops.empty() || !advance(a, uint8_t(c), b)) return false;
    std::swap(a, b);
  }
  out = std::move(a);
  return true;
}

// The trie walk: depth_[d] is the state after the first d bytes of the token in hand,
// valid up to `valid` for the next token's shared prefix; a prefix that leaves no stack
// (dead) rules out every token under it.
void Matcher::compute_mask(std::vector<uint64_t>& bits) {
  const TokenTrie& v = *vocab_;
  bits.assign(size_t(v.n_vocab() + 63) / 64, 0);
  auto set = [&](int32_t id) { bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63); };
  if (cur_.accept)
    for (int32_t id : v.eog()) set(id);
  if (cur_.tops.empty() || failed_) return;
  const size_t mark = nodes_.size();
  walk_mark_ = mark;
  const auto order = v.order();
  const auto lcp = v.lcp();
  if (depth_.empty()) depth_.resize(1);
  depth_[0] = cur_;
  size_t valid = 0, dead = SIZE_MAX;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t shared = lcp[k];
    if (shared >= dead) continue;  // under a dead prefix
    dead = SIZE_MAX;
    const std::string& t = v.bytes(order[k]);
    size_t d = std::min(valid, shared);
    if (depth_.size() < t.size() + 1) depth_.resize(t.size() + 1);
    bool ok = true;
    while (d < t.size()) {
      if (depth_[d].tops.empty()) {
        ok = false;
        break;
      }
      ok = advance(depth_[d], uint8_t(t[d]), depth_[d + 1]);
      ++d;
      if (!ok) break;
    }
    valid = d;
    if (failed_) break;
    if (ok) set(order[k]);
    else dead = d;  // the first d bytes leave nothing
  }
  rollback(mark);
  if (failed_) std::fill(bits.begin(), bits.end(), 0);  // a failed matcher allows nothing
}

// Each top's stack as its positions from the top down, -1 after each; the tops in order of
// those sequences; then whether the grammar may end.
void Matcher::state_key(const State& s, std::vector<int32_t>& key) const {
  thread_local std::vector<std::vector<int32_t>> stacks;
  stacks.resize(s.tops.size());
  for (size_t i = 0; i < s.tops.size(); ++i) {
    stacks[i].clear();
    for (int32_t n = s.tops[i]; n >= 0; n = nodes_[size_t(n)].parent) stacks[i].push_back(nodes_[size_t(n)].pos);
  }
  std::sort(stacks.begin(), stacks.begin() + int64_t(s.tops.size()));
  key.clear();
  for (size_t i = 0; i < s.tops.size(); ++i) {
    key.insert(key.end(), stacks[i].begin(), stacks[i].end());
    key.push_back(-1);
  }
  key.push_back(s.accept ? 1 : 0);
}

const std::vector<uint64_t>& Matcher::mask() {
  if (mask_ok_) return mask_;
  mask_ok_ = true;
  auto it = cache_.find(cur_);
  if (it != cache_.end()) {
    ++n_hits_;
    return mask_ = it->second;
  }
  TokenTrie::MaskCache& shared = vocab_->masks();
  state_key(cur_, key_);
  if (auto bits = shared.find(g_->id, key_)) {
    ++n_hits_;
    mask_ = *bits;
  } else {
    compute_mask(mask_);
    ++n_masks_;
    if (!failed_) shared.insert(g_->id, key_, std::make_shared<const std::vector<uint64_t>>(mask_));
  }
  if (cache_order_.size() < kMaskCache) {
    cache_order_.push_back(cur_);
  } else {
    cache_.erase(cache_order_[cache_next_]);
    cache_order_[cache_next_] = cur_;
    cache_next_ = (cache_next_ + 1) % kMaskCache;
  }
  cache_.emplace(cur_, mask_);
  return mask_;
}

bool Matcher::any_allowed() {
  for (uint64_t w : mask())
    if (w) return true;
  return false;
}

void Matcher::apply_mask(float* logits) {
  const std::vector<uint64_t>& m = mask();
  const int32_t n = vocab_->n_vocab();
  for (int32_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = m[size_t(w)];
    if (bits == ~uint64_t(0)) continue;
    const int32_t end = std::min(n, w * 64 + 64);
    for (int32_t id = w * 64; id < end; ++id)
      if (!((bits >> (id - w * 64)) & 1)) logits[id] = -INFINITY;
  }
}

bool Matcher::accept(int32_t id) {
  if (id < 0 || id >= vocab_->n_vocab() || ended_) return false;
  if (vocab_->is_eog(id)) {
    if (!cur_.accept) return false;
    ended_ = true;
    mask_ok_ = false;
    return true;
  }
  if (!vocab_->producible(id)) return false;
  State next;
  walk_mark_ = nodes_.size();
  if (!advance_token(cur_, vocab_->bytes(id), next)) return false;
  cur_ = std::move(next);
  mask_ok_ = false;
  return true;
}

int32_t Matcher::valid_prefix(std::span<const int32_t> tokens) {
  const size_t mark = nodes_.size();
  walk_mark_ = mark;
  const bool was_failed = failed_;
  State s = cur_, next;
  int32_t n = 0;
  bool end = ended_;
  for (int32_t id : tokens) {
    if (end || id < 0 || id >= vocab_->n_vocab()) break;
    if (vocab_->is_eog(id)) {
      if (!s.accept) break;
      end = true;
    } else if (!vocab_->producible(id) || !advance_token(s, vocab_->bytes(id), next)) {
      break;
    } else {
      s = std::move(next);
    }
    ++n;
  }
  rollback(mark);
  if (failed_ && !was_failed) {  // a proposal that blows the budget is cut, the matcher lives on
    failed_ = false;
    return 0;
  }
  return n;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  State next;
  walk_mark_ = nodes_.size();
  if (!advance_token(cur_, std::string(bytes), next)) return false;
  cur_ = std::move(next);
  mask_ok_ = false;
  return true;
}

}  // namespace ridge::grammar
