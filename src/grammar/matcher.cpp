#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>

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
  for (int32_t id : order_) {  // order_ sorts equal texts by id: the first is the lowest
    by_bytes_.try_emplace(std::string_view(bytes_[size_t(id)]), id);
    max_len_ = std::max(max_len_, bytes_[size_t(id)].size());
  }
  first_.assign(257, 0);
  for (int32_t id : order_) ++first_[size_t(uint8_t(bytes_[size_t(id)][0])) + 1];
  for (int b = 0; b < 256; ++b) first_[size_t(b) + 1] += first_[size_t(b)];
}

int32_t TokenTrie::longest_prefix(std::string_view text) const {
  for (size_t n = std::min(text.size(), max_len_); n > 0; --n)
    if (auto it = by_bytes_.find(text.substr(0, n)); it != by_bytes_.end()) return it->second;
  return -1;
}

bool TokenTrie::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

std::shared_ptr<TokenTables> TokenTrie::tables(const std::shared_ptr<const Grammar>& g) const {
  std::lock_guard lock(mu_);
  for (auto it = tables_.begin(); it != tables_.end(); ++it)
    if (it->first == g->id) {
      tables_.splice(tables_.begin(), tables_, it);
      return tables_.front().second;
    }
  tables_.emplace_front(g->id, std::make_shared<TokenTables>(g, *this));
  size_t total = 0, kept = 0;
  for (auto it = tables_.begin(); it != tables_.end(); ++it, ++kept) {
    total += it->second->bytes();
    if (kept > 0 && (kept >= kMaxGrammars || total > kTablesBudget)) {
      tables_.erase(it, tables_.end());  // matchers still running hold theirs
      break;
    }
  }
  return tables_.front().second;
}

size_t Matcher::StateHash::operator()(const PdaState& s) const {
  uint64_t h = s.accept ? 0x9E3779B97F4A7C15ull : 0;
  for (int32_t t : s.tops) h = (h ^ uint32_t(t)) * 0x100000001B3ull + (h >> 29);
  return size_t(h);
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> vocab)
    : pda_(std::move(g)), vocab_(std::move(vocab)) {
  pda_.start(cur_);
}

bool Matcher::advance_token(const PdaState& s, std::string_view bytes, PdaState& out) {
  PdaState a = s, b;
  for (char c : bytes) {
    if (a.tops.empty() || !pda_.advance(a, uint8_t(c), b)) return false;
    std::swap(a, b);
  }
  out = std::move(a);
  return true;
}

// The union over the tops of their tables: a top at position p over a parent frame at q
// (count c0 when q is a repetition) takes table (p, q) at c0, and the pending tokens
// whose rest matches from the frame below q.
void Matcher::compute_mask(std::vector<uint64_t>& bits) {
  const TokenTrie& v = *vocab_;
  const Grammar& g = pda_.grammar();
  bits.assign(size_t(v.n_vocab() + 63) / 64, 0);
  if (cur_.accept)
    for (int32_t id : v.eog()) bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
  if (cur_.tops.empty() || pda_.failed()) return;
  if (!tables_) tables_ = v.tables(pda_.grammar_ptr());
  for (int32_t top : cur_.tops) {
    const Pda::Node nd = pda_.at(top);
    const int32_t pn = nd.parent;
    const int32_t q = pn < 0 ? -1 : pda_.at(pn).pos;
    const TokenTable& t = tables_->get(nd.pos, q);
    if (t.failed) return walk_mask(bits);
    int32_t c0 = 0, lo = 0, hi = 0;
    if (q >= 0 && g.elems[size_t(q)].kind == Elem::Repeat) {
      c0 = pda_.at(pn).count;
      lo = g.elems[size_t(q)].lo;
      hi = g.elems[size_t(q)].hi;
    }
    t.apply(c0, lo, hi, bits);
    const int32_t gp = pn < 0 ? -1 : pda_.at(pn).parent;
    if (t.pending.empty() || gp < 0) continue;  // nothing below q: a rest has nothing to match
    for (int32_t k : pending_pass(t, gp)) {
      const TokenTable::Pending& e = t.pending[size_t(k)];
      if (t.pending_allowed(e, c0, lo, hi)) bits[size_t(e.token) >> 6] |= uint64_t(1) << (e.token & 63);
    }
    if (pda_.failed()) break;
  }
  if (pda_.failed()) std::fill(bits.begin(), bits.end(), 0);  // a failed matcher allows nothing
}

// The rests of t's pending tokens (sorted, so shared prefixes advance once) from the
// stacks node gp expands to; only rests whose first byte one of those tops takes.
const std::vector<int32_t>& Matcher::pending_pass(const TokenTable& t, int32_t gp) {
  const PassKey key{&t, gp};
  if (auto it = pass_.find(key); it != pass_.end()) return it->second;
  if (pass_.size() >= kPassCache) pass_.clear();
  std::vector<int32_t>& out = pass_[key];
  const size_t mark = pda_.size();
  pda_.begin_walk();
  if (depth_.empty()) depth_.resize(1);
  pda_.close_from(gp, depth_[0]);
  ByteSet firsts;
  for (int32_t top : depth_[0].tops) {
    const ByteSet& s = pda_.grammar().sets[size_t(pda_.grammar().elems[size_t(pda_.at(top).pos)].arg)];
    for (int w = 0; w < 4; ++w) firsts.w[size_t(w)] |= s.w[size_t(w)];
  }
  auto rest = [&](int32_t k) {
    const TokenTable::Pending& e = t.pending[size_t(k)];
    return std::string_view(vocab_->bytes(e.token)).substr(size_t(e.at));
  };
  for (int b = 0; b < 256 && !pda_.failed(); ++b)
    if (firsts.has(uint8_t(b)))
      pda_.walk_sorted(depth_, t.first[size_t(b)], t.first[size_t(b) + 1], rest,
                       [&](int32_t k) { return t.rest_lcp[size_t(k)]; },
                       [&](int32_t k, std::string_view r, size_t d) {
                         if (d == r.size() && (!depth_[d].tops.empty() || depth_[d].accept)) out.push_back(k);
                       });
  pda_.rollback(mark);
  return out;
}

// The whole vocabulary in byte order from the full stacks (Pda::walk_sorted): a token is
// allowed when all its bytes advance to a state with a stack or the grammar's end.
void Matcher::walk_mask(std::vector<uint64_t>& bits) {
  const TokenTrie& v = *vocab_;
  bits.assign(size_t(v.n_vocab() + 63) / 64, 0);
  auto set = [&](int32_t id) { bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63); };
  if (cur_.accept)
    for (int32_t id : v.eog()) set(id);
  if (cur_.tops.empty() || pda_.failed()) return;
  const size_t mark = pda_.size();
  pda_.begin_walk();
  const auto order = v.order();
  const auto lcp = v.lcp();
  if (depth_.empty()) depth_.resize(1);
  depth_[0] = cur_;
  pda_.walk_sorted(
      depth_, 0, int32_t(order.size()), [&](int32_t k) { return std::string_view(v.bytes(order[size_t(k)])); },
      [&](int32_t k) { return lcp[size_t(k)]; },
      [&](int32_t k, std::string_view t, size_t d) {
        if (d == t.size() && (!depth_[d].tops.empty() || depth_[d].accept)) set(order[size_t(k)]);
      });
  pda_.rollback(mark);
  if (pda_.failed()) std::fill(bits.begin(), bits.end(), 0);
}

std::vector<uint64_t> Matcher::reference_mask() {
  std::vector<uint64_t> bits;
  walk_mask(bits);
  return bits;
}

const std::vector<uint64_t>& Matcher::mask() {
  if (mask_ok_) return mask_;
  mask_ok_ = true;
  auto it = cache_.find(cur_);
  if (it != cache_.end()) {
    ++n_hits_;
    return mask_ = it->second;
  }
  compute_mask(mask_);
  ++n_masks_;
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
  return accept_bytes(vocab_->bytes(id));
}

int32_t Matcher::valid_prefix(std::span<const int32_t> tokens) {
  const size_t mark = pda_.size();
  pda_.begin_walk();
  const bool was_failed = pda_.failed();
  PdaState s = cur_, next;
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
  pda_.rollback(mark);
  if (pda_.failed() && !was_failed) {  // a proposal that blows the budget is cut, the matcher lives on
    pda_.set_failed(false);
    return 0;
  }
  return n;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  PdaState next;
  pda_.begin_walk();
  if (!advance_token(cur_, bytes, next)) return false;
  cur_ = std::move(next);
  mask_ok_ = false;
  return true;
}

std::string Matcher::forced_bytes(size_t max_bytes) {
  std::string out;
  if (ended_ || pda_.failed()) return out;
  const size_t mark = pda_.size();
  pda_.begin_walk();
  const Grammar& g = pda_.grammar();
  PdaState s = cur_, next;
  while (out.size() < max_bytes && !s.accept && !s.tops.empty()) {
    ByteSet next_bytes;
    for (int32_t t : s.tops) {
      const ByteSet& b = g.sets[size_t(g.elems[size_t(pda_.at(t).pos)].arg)];
      for (size_t w = 0; w < 4; ++w) next_bytes.w[w] |= b.w[w];
    }
    int n = 0, only = 0;
    for (size_t w = 0; w < 4 && n < 2; ++w) {
      n += __builtin_popcountll(next_bytes.w[w]);
      if (next_bytes.w[w]) only = int(w * 64) + __builtin_ctzll(next_bytes.w[w]);
    }
    if (n != 1 || !pda_.advance(s, uint8_t(only), next) || pda_.failed()) break;
    out.push_back(char(only));
    std::swap(s, next);
  }
  pda_.rollback(mark);
  pda_.set_failed(false);  // a walk past the budget ends the span, the matcher lives on
  return out;
}

void Matcher::forced_tokens(int32_t max_tokens, std::vector<int32_t>& out) {
  out.clear();
  const std::string text = forced_bytes(256);
  std::string_view rest = text;
  while (!rest.empty() && int32_t(out.size()) < max_tokens) {
    const int32_t id = vocab_->longest_prefix(rest);
    if (id < 0) break;
    out.push_back(id);
    rest.remove_prefix(vocab_->bytes(id).size());
  }
}

}  // namespace ridge::grammar
