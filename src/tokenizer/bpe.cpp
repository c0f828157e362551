#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

#include <fmt/format.h>

#include <queue>

namespace ridge {

namespace {

struct Symbol {
  int prev, next;   // neighbours in the live chain; -1 at the ends
  uint32_t off, n;  // bytes of the word; n == 0 once merged into the left neighbour
};

struct Bigram {
  int32_t rank;
  int left, right;
  uint32_t size;  // bytes of the merged text; a different sum later marks the entry stale
};

// Min-heap order: the lowest rank first; on equal ranks the leftmost pair first.
struct BigramGreater {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

void make_key(std::string& key, std::string_view a, std::string_view b) {
  key.assign(a);
  key += '\xFF';
  key += b;
}

}  // namespace

BpeModel::BpeModel(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options o)
    : vocab_(vocab), opt_(o) {
  ranks_.reserve(merges.size());
  std::string key;
  for (size_t i = 0; i < merges.size(); ++i) {
    make_key(key, merges[i].first, merges[i].second);
    ranks_.emplace(key, static_cast<int32_t>(i));
  }
}

int32_t BpeModel::rank(std::string_view a, std::string_view b) const {
  // One reusable buffer per thread: lookups are the hot loop and must not allocate.
  thread_local std::string key;
  make_key(key, a, b);
  auto it = ranks_.find(std::string_view(key));
  return it == ranks_.end() ? -1 : it->second;
}

void BpeModel::emit(std::string_view sym, std::vector<int32_t>& out) const {
  const int32_t id = vocab_.find(sym);
  if (id != Vocab::kNone) {
    out.push_back(id);
    return;
  }
  if (opt_.byte_fallback) {
    const size_t mark = out.size();
    for (unsigned char b : sym) {
      const int32_t bt = vocab_.find(fmt::format("<0x{:02X}>", b));
      if (bt == Vocab::kNone) {
        out.resize(mark);
        if (vocab_.unk() != Vocab::kNone) out.push_back(vocab_.unk());
        return;
      }
      out.push_back(bt);
    }
    return;
  }
  for (char c : sym) {
    const int32_t bt = vocab_.find(std::string_view(&c, 1));
    if (bt != Vocab::kNone) out.push_back(bt);
  }
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    const int32_t id = vocab_.find(word);
    if (id != Vocab::kNone) {
      out.push_back(id);
      return;
    }
  }

  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const uint32_t n = uint32_t(std::min(word.size() - off, utf8_len(uint8_t(word[off]))));
    const int idx = int(sym.size());
    sym.push_back({idx - 1, off + n == word.size() ? -1 : idx + 1, uint32_t(off), n});
    off += n;
  }
  auto text = [&](int i) { return word.substr(sym[size_t(i)].off, sym[size_t(i)].n); };

  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int32_t r = rank(text(left), text(right));
    if (r >= 0) queue.push({r, left, right, sym[size_t(left)].n + sym[size_t(right)].n});
  };
  for (int i = 1; i < int(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(bg.left)];
    Symbol& r = sym[size_t(bg.right)];
    // Symbols only grow, so an unchanged byte sum means both sides are as when queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }

  for (int i = 0; i != -1; i = sym[size_t(i)].next) emit(text(i), out);
}

}  // namespace ridge
