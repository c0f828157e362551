#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"

#include <queue>

namespace ridge {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

struct Symbol {
  int prev, next;   // neighbours in the live chain; -1 at the ends
  uint32_t off, n;  // bytes of the text; n == 0 once merged into the left neighbour
};

struct Bigram {
  float score;
  int left, right;
  uint32_t size;  // bytes of the merged text; a mismatch later marks the entry stale
};

// Max-heap order: the higher score first; on equal scores the leftmost pair first.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string esc;
  esc.reserve(text.size() + text.size() / 2 + 3);
  if (vocab_.add_space_prefix()) esc += kSpace;
  for (char c : text) {
    if (c == ' ')
      esc += kSpace;
    else
      esc += c;
  }
  encode_escaped(esc, out);
}

void SpmEncoder::encode_escaped(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_len(uint8_t(text[off])), text.size() - off);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, off + n == text.size() ? -1 : idx + 1, uint32_t(off), uint32_t(n)});
    off += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = sym[size_t(left)].n + sym[size_t(right)].n;
    const int32_t id = vocab_.find(text.substr(sym[size_t(left)].off, size));
    if (id == Vocab::kNone) return;
    queue.push({vocab_.score(id), left, right, size});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    // Either side merged since this entry was queued: it no longer describes the text.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merge produced a token, so only unmerged characters can miss the vocabulary
  // (llama.cpp's rev_merge re-split never triggers); those become byte tokens.
  for (int i = 0; i != -1; i = sym[size_t(i)].next) {
    const Symbol& s = sym[size_t(i)];
    const std::string_view piece = text.substr(s.off, s.n);
    const int32_t id = vocab_.find(piece);
    if (id != Vocab::kNone) {
      out.push_back(id);
      continue;
    }
    bool all_bytes = true;
    for (char c : piece) all_bytes = all_bytes && vocab_.byte_token(uint8_t(c)) != Vocab::kNone;
    if (all_bytes) {
      for (char c : piece) out.push_back(vocab_.byte_token(uint8_t(c)));
    } else if (vocab_.unk() != Vocab::kNone) {
      out.push_back(vocab_.unk());  // no byte fallback: one UNK per character, as SentencePiece does
    }
  }
}

}  // namespace ridge
