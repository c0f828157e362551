#include "tokenizer/hf_pipeline.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"

namespace ridge::hf {

// The pattern of tokenizers' ByteLevel pre-tokenizer (pre_tokenizers/byte_level.rs).
const char* const kByteLevelRegex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// One code point at text[i]; *len gets its byte length. Malformed UTF-8 yields -1 with
// length 1, so callers step over a bad byte like any character.
int32_t decode_at(std::string_view text, size_t i, size_t* len) {
  utf8proc_int32_t cp = -1;
  const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
                                              utf8proc_ssize_t(text.size() - i), &cp);
  *len = n > 0 ? size_t(n) : 1;
  return n > 0 ? cp : -1;
}

void append_utf8(std::string& out, int32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_white_space(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Rust's char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(int32_t c) {
  if (c < 0) return false;
  const utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

// tokenizers' Punctuation pre-tokenizer: ASCII punctuation (which includes symbols like
// '$' and '+') or a Unicode P* category.
bool is_punctuation(int32_t c) {
  if (c < 0) return false;
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO: return true;
    default: return false;
  }
}

// Every character satisfying pred is its own match, as a Rust `Fn(char) -> bool` pattern.
template <typename Pred>
void char_matches(std::string_view text, Pred pred, std::vector<std::pair<size_t, size_t>>& out) {
  for (size_t i = 0, n; i < text.size(); i += n)
    if (pred(decode_at(text, i, &n))) out.emplace_back(i, i + n);
}

// All non-overlapping occurrences of a non-empty literal, left to right.
void literal_matches(std::string_view text, std::string_view lit, std::vector<std::pair<size_t, size_t>>& out) {
  for (size_t i = text.find(lit); i != std::string_view::npos; i = text.find(lit, i + lit.size()))
    out.emplace_back(i, i + lit.size());
}

bool all_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// Appends the normalized form of s; malformed UTF-8 (which Rust strings cannot hold) is
// appended as it is rather than refused.
void utf8proc_append(std::string_view s, int options, std::string& out) {
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &dst, utf8proc_option_t(options));
  if (n >= 0)
    out.append(reinterpret_cast<const char*>(dst), size_t(n));
  else
    out += s;
  std::free(dst);
}

// Characters before which NFC text can be cut and normalized piece by piece: combining
// class 0, unchanged by NFC, and never the second half of a canonical composition (so
// neither reordering nor composition crosses them). Checked against Python 3.11's
// unicodedata (Unicode 14): the common scripts' blocks, so typical text needs no utf8proc.
bool nfc_boundary(int32_t c) {
  static constexpr int32_t kRanges[][2] = {
      {0x0, 0x2FF},       {0x3A3, 0x482},     {0x48A, 0x52F},     {0x531, 0x556},   {0x620, 0x64A},
      {0x2002, 0x2064},   {0x2190, 0x2328},   {0x2460, 0x2ADB},   {0x3000, 0x3029}, {0x3041, 0x3096},
      {0x309B, 0x30FF},   {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},   {0xFF01, 0xFFBE}, {0x1F300, 0x1F6D7},
      {0x1F900, 0x1FA53}};
  for (const auto& r : kRanges)
    if (c >= r[0] && c <= r[1]) return true;
  return false;
}

void unicode_normalize(std::string& text, int options) {
  if (all_ascii(text)) return;  // every normalization form leaves ASCII alone
  if (options != (UTF8PROC_STABLE | UTF8PROC_COMPOSE)) {
    std::string r;
    utf8proc_append(text, options, r);
    text = std::move(r);
    return;
  }
  // NFC: only the stretches between boundary characters that hold something else go
  // through utf8proc (each from the boundary character before it, which may compose).
  std::string r;
  size_t copied = 0, seg = 0, n;
  bool dirty = false, changed = false;
  auto flush = [&](size_t end) {
    if (!dirty) return;
    r.append(text, copied, seg - copied);
    utf8proc_append(std::string_view(text).substr(seg, end - seg), options, r);
    copied = end;
    changed = true;
  };
  for (size_t i = 0; i < text.size(); i += n) {
    const int32_t c = uint8_t(text[i]) < 0x80 ? (n = 1, text[i]) : decode_at(text, i, &n);
    if (c >= 0 && nfc_boundary(c)) {
      flush(i);
      seg = i;
      dirty = false;
    } else {
      dirty = true;
    }
  }
  flush(text.size());
  if (!changed) return;
  r.append(text, copied);
  text = std::move(r);
}

void lowercase(std::string& text) {
  std::string r;
  r.reserve(text.size());
  for (size_t i = 0, n; i < text.size(); i += n) {
    const int32_t c = decode_at(text, i, &n);
    if (c < 0) {
      r += text[i];
    } else if (c == 0x130) {
      r += "i\xCC\x87";  // Rust's to_lowercase: İ -> i + combining dot, its one multi-char mapping
    } else {
      append_utf8(r, utf8proc_tolower(c));
    }
  }
  text = std::move(r);
}

void replace_all(std::string& text, const std::vector<std::pair<size_t, size_t>>& m, std::string_view with) {
  if (m.empty()) return;
  std::string r;
  r.reserve(text.size());
  size_t prev = 0;
  for (auto [b, e] : m) {
    r.append(text, prev, b - prev);
    r += with;
    prev = e;
  }
  r.append(text, prev);
  text = std::move(r);
}

}  // namespace

// ---- added tokens -------------------------------------------------------------------

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  auto it = edges_.find(uint64_t(node) << 8 | b);
  return it == edges_.end() ? -1 : it->second;
}

void AddedTokenMatcher::add(const AddedToken& t) {
  if (t.content.empty()) return;  // the Rust library ignores empty added tokens too
  int32_t node = 0;
  for (unsigned char b : t.content) {
    int32_t next = child(node, b);
    if (next < 0) {
      next = int32_t(terminal_.size());
      terminal_.push_back(-1);
      edges_.emplace(uint64_t(node) << 8 | b, next);
    }
    node = next;
  }
  // The same text twice keeps the first token, as a map from content would.
  if (terminal_[size_t(node)] < 0) terminal_[size_t(node)] = int32_t(tokens_.size());
  tokens_.push_back(t);
  first_[uint8_t(t.content[0])] = true;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment>& out) const {
  size_t done = 0;  // end of the last segment emitted
  for (size_t pos = 0; pos < text.size();) {
    int32_t best = -1;
    size_t best_end = 0;
    if (first_[uint8_t(text[pos])]) {
      int32_t node = 0;
      for (size_t j = pos; j < text.size() && (node = child(node, uint8_t(text[j]))) >= 0; ++j)
        if (terminal_[size_t(node)] >= 0) best = terminal_[size_t(node)], best_end = j + 1;
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[size_t(best)];
    if (t.special && !parse_special) {  // stays text; the span is consumed all the same
      pos = best_end;
      continue;
    }
    size_t b = pos, e = best_end;
    size_t n;
    if (t.lstrip) {
      // Back over whitespace, but never into what an earlier token already took.
      while (b > done) {
        size_t k = b - 1;
        while (k > done && (uint8_t(text[k]) & 0xC0) == 0x80) --k;
        if (!is_white_space(decode_at(text, k, &n))) break;
        b = k;
      }
    }
    if (t.rstrip)
      while (e < text.size() && is_white_space(decode_at(text, e, &n))) e += n;
    if (b > done) out.push_back({done, b, -1});
    out.push_back({b, e, t.id});
    done = pos = e;
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

// ---- normalizers --------------------------------------------------------------------

void normalize(const std::vector<Normalizer>& chain, std::string& text) {
  std::vector<std::pair<size_t, size_t>> m;
  for (const Normalizer& s : chain) {
    switch (s.kind) {
      case Normalizer::Kind::NFC: unicode_normalize(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE); break;
      case Normalizer::Kind::NFD: unicode_normalize(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
      case Normalizer::Kind::NFKC: unicode_normalize(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case Normalizer::Kind::NFKD: unicode_normalize(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case Normalizer::Kind::Lowercase: lowercase(text); break;
      case Normalizer::Kind::Strip: {
        size_t b = 0, e = text.size(), n;
        if (s.strip_left)
          while (b < e && is_white_space(decode_at(text, b, &n))) b += n;
        if (s.strip_right)
          while (e > b) {
            size_t k = e - 1;
            while (k > b && (uint8_t(text[k]) & 0xC0) == 0x80) --k;
            if (!is_white_space(decode_at(text, k, &n))) break;
            e = k;
          }
        text = text.substr(b, e - b);
        break;
      }
      case Normalizer::Kind::Replace:
        m.clear();
        if (s.regex)
          s.regex->matches(text, m);
        else
          literal_matches(text, s.pattern, m);
        replace_all(text, m, s.content);
        break;
      case Normalizer::Kind::Prepend:
        if (!text.empty()) text.insert(0, s.content);
        break;
    }
  }
}

// ---- pre-tokenizers -----------------------------------------------------------------

// NormalizedString::split in the Rust library: the text becomes alternating gap / match
// segments (empty matches included: they still cut), the behaviour groups them, and empty
// pieces are dropped.
void split_by(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
              bool invert, bool at_start, std::vector<Piece>& out) {
  struct Seg {
    size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  segs.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) segs.push_back({prev, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> keep;
  keep.reserve(segs.size());
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Seg& s : segs)
        if (!s.match) keep.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::Isolated:
      for (const Seg& s : segs) keep.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::MergedWithPrevious:  // a match joins the non-match before it
      for (const Seg& s : segs) {
        if (s.match && !prev_match && !keep.empty())
          keep.back().second = s.e;
        else
          keep.emplace_back(s.b, s.e);
        prev_match = s.match;
      }
      break;
    case SplitBehavior::MergedWithNext:  // a match joins the non-match after it (scan backwards)
      for (size_t i = segs.size(); i-- > 0;) {
        const Seg& s = segs[i];
        if (s.match && !prev_match && !keep.empty())
          keep.back().first = s.b;
        else
          keep.emplace_back(s.b, s.e);
        prev_match = s.match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    case SplitBehavior::Contiguous:  // runs of matches and runs of non-matches
      for (size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].match == prev_match)
          keep.back().second = segs[i].e;
        else
          keep.emplace_back(segs[i].b, segs[i].e);
        prev_match = segs[i].match;
      }
      break;
  }
  for (auto [b, e] : keep)
    if (e > b) out.push_back({text.substr(b, e - b), at_start && b == 0});
}

namespace {

void apply_step(const PreTokenizerStep& s, Piece p, std::deque<std::string>& arena, std::vector<Piece>& out) {
  std::vector<std::pair<size_t, size_t>> m;
  switch (s.kind) {
    case PreTokenizerStep::Kind::Split:
      if (s.regex)
        s.regex->matches(p.text, m);
      else
        literal_matches(p.text, s.literal, m);
      split_by(p.text, m, s.behavior, s.invert, p.at_start, out);
      return;
    case PreTokenizerStep::Kind::Digits:
      char_matches(p.text, is_numeric, m);
      split_by(p.text, m, s.individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false,
               p.at_start, out);
      return;
    case PreTokenizerStep::Kind::Punctuation:
      char_matches(p.text, is_punctuation, m);
      split_by(p.text, m, s.behavior, false, p.at_start, out);
      return;
    case PreTokenizerStep::Kind::WhitespaceSplit:
      char_matches(p.text, is_white_space, m);
      split_by(p.text, m, SplitBehavior::Removed, false, p.at_start, out);
      return;
    case PreTokenizerStep::Kind::ByteLevel: {
      std::string_view t = p.text;
      if (s.add_prefix_space && (t.empty() || t[0] != ' ')) {
        std::string& q = arena.emplace_back();
        q.reserve(t.size() + 1);
        q += ' ';
        q += t;  // (not " " + std::string(t): GCC 12 misreports that as -Wrestrict)
        t = q;
      }
      if (!s.regex) {  // the usual case (after a Split): one piece, mapped in place
        std::string& q = arena.emplace_back();
        bytes_to_unicode(t, q);
        out.push_back({q, p.at_start});
        return;
      }
      std::vector<Piece> parts;
      s.regex->matches(t, m);
      split_by(t, m, SplitBehavior::Isolated, false, p.at_start, parts);
      for (const Piece& q : parts) out.push_back({arena.emplace_back(bytes_to_unicode(q.text)), q.at_start});
      return;
    }
    case PreTokenizerStep::Kind::Metaspace: {
      std::string& t = arena.emplace_back();
      for (char c : p.text) {
        if (c == ' ')
          t += s.replacement;
        else
          t += c;
      }
      const bool prepend = s.prepend == PreTokenizerStep::Prepend::Always ||
                           (s.prepend == PreTokenizerStep::Prepend::First && p.at_start);
      if (prepend && t.compare(0, s.replacement.size(), s.replacement) != 0) t.insert(0, s.replacement);
      if (s.split) {
        literal_matches(t, s.replacement, m);
        split_by(t, m, SplitBehavior::MergedWithNext, false, p.at_start, out);
      } else if (!t.empty()) {
        out.push_back({t, p.at_start});
      }
      return;
    }
  }
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view section, bool at_start,
                  std::deque<std::string>& arena, std::vector<Piece>& pieces) {
  std::vector<Piece> cur{{section, at_start}}, next;
  for (const PreTokenizerStep& s : steps) {
    next.clear();
    for (const Piece& p : cur) apply_step(s, p, arena, next);
    cur.swap(next);
  }
  pieces.insert(pieces.end(), cur.begin(), cur.end());
}

// ---- encoder ------------------------------------------------------------------------

HfEncoder::HfEncoder(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                     ModelOptions model, std::vector<AddedToken> added, std::vector<Normalizer> normalizers,
                     std::vector<PreTokenizerStep> pre)
    : vocab_(vocab),
      bpe_(vocab, merges, BpeModel::Options{model.ignore_merges, model.byte_fallback}),
      opt_(model),
      normalizers_(std::move(normalizers)),
      pre_(std::move(pre)) {
  for (const AddedToken& t : added) (t.normalized && !normalizers_.empty() ? normalized_ : raw_).add(t);
}

void HfEncoder::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  constexpr size_t kMaxCachedBytes = 256, kMaxCacheEntries = 1 << 16;
  const bool cacheable = piece.size() <= kMaxCachedBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      const auto [off, n] = it->second;
      out.insert(out.end(), cache_ids_.begin() + off, cache_ids_.begin() + off + n);
      return;
    }
  }
  const size_t mark = out.size();
  bpe_piece(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) {
      cache_.clear();
      cache_ids_.clear();
    }
    if (cache_.emplace(piece, std::pair{uint32_t(cache_ids_.size()), uint32_t(out.size() - mark)}).second)
      cache_ids_.insert(cache_ids_.end(), out.begin() + ptrdiff_t(mark), out.end());
  }
}

void HfEncoder::bpe_piece(std::string_view piece, std::vector<int32_t>& out) const {
  // Byte-level pieces only hold alphabet characters and byte fallback covers every byte,
  // so BpeModel sees no unknown character. Otherwise an unknown character becomes UNK
  // (consecutive ones fused into one with fuse_unk), and the known runs around it are BPE'd
  // apart: in the Rust library UNK is a symbol no merge joins.
  if (opt_.byte_level || opt_.byte_fallback) {
    bpe_.encode(piece, out);
    return;
  }
  size_t run = 0, n;
  bool last_unk = false;
  for (size_t i = 0; i < piece.size(); i += n) {
    const int32_t c = decode_at(piece, i, &n);
    if (vocab_.find(piece.substr(i, n)) != Vocab::kNone) continue;
    if (vocab_.unk() == Vocab::kNone)
      fail("tokenizer.json: character U+{:04X} is not in the vocabulary and the BPE model has no unk_token", c);
    bpe_.encode(piece.substr(run, i - run), out);
    if (!(opt_.fuse_unk && last_unk && i == run)) out.push_back(vocab_.unk());
    last_unk = true;
    run = i + n;
  }
  bpe_.encode(piece.substr(run), out);
}

void HfEncoder::encode_section(std::string_view section, bool at_start, std::vector<int32_t>& out) const {
  std::string text(section);
  normalize(normalizers_, text);
  if (text.empty()) return;
  std::vector<AddedTokenMatcher::Segment> segs;
  if (normalized_.empty())
    segs.push_back({0, text.size(), -1});
  else
    normalized_.split(text, true, segs);
  std::deque<std::string> arena;
  std::vector<Piece> pieces;
  for (const auto& s : segs) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    pieces.clear();
    pre_tokenize(pre_, std::string_view(text).substr(s.begin, s.end - s.begin), at_start && s.begin == 0, arena,
                 pieces);
    for (const Piece& p : pieces) encode_piece(p.text, out);
  }
}

void HfEncoder::encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
  if (raw_.empty()) {
    if (!text.empty()) encode_section(text, true, out);
    return;
  }
  std::vector<AddedTokenMatcher::Segment> segs;
  raw_.split(text, parse_special, segs);
  for (const auto& s : segs) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      encode_section(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
  }
}

// ---- decoders -----------------------------------------------------------------------

namespace {

void replace_literal(std::string& s, std::string_view from, std::string_view to) {
  std::vector<std::pair<size_t, size_t>> m;
  literal_matches(s, from, m);
  replace_all(s, m, to);
}

const char* decoder_name(DecoderStep::Kind k) {
  switch (k) {
    case DecoderStep::Kind::ByteLevel: return "ByteLevel";
    case DecoderStep::Kind::Metaspace: return "Metaspace";
    case DecoderStep::Kind::Replace: return "Replace";
    case DecoderStep::Kind::ByteFallback: return "ByteFallback";
    case DecoderStep::Kind::Fuse: return "Fuse";
    case DecoderStep::Kind::Strip: return "Strip";
  }
  return "?";
}

}  // namespace

bool check_decoders(const std::vector<DecoderStep>& steps) {
  // Every step before a Fuse works token by token; after it only a Strip of one leading
  // space can be said per token (as "the first piece loses its space").
  bool strip = false, fused = false;
  for (const DecoderStep& s : steps) {
    if (fused) {
      if (s.kind != DecoderStep::Kind::Strip || s.content != " " || s.start > 1 || s.stop != 0)
        fail("tokenizer.json: decoder {} after Fuse is not supported (only Strip of one leading ' ')",
             decoder_name(s.kind));
      if (s.start == 1) strip = true;
    }
    if (s.kind == DecoderStep::Kind::Fuse) fused = true;
    if (s.kind == DecoderStep::Kind::Metaspace && s.strip_first) {
      if (strip) fail("tokenizer.json: decoder Metaspace after a Strip of the first space is not supported");
      strip = true;
    }
  }
  return strip;
}

std::vector<std::string> decode_table(const Vocab& vocab, const std::vector<DecoderStep>& steps) {
  size_t fuse = 0;
  while (fuse < steps.size() && steps[fuse].kind != DecoderStep::Kind::Fuse) ++fuse;
  std::vector<std::string> t(size_t(vocab.size()));
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType type = vocab.type(id);
    // Special tokens decode to nothing (skip_special_tokens); ids no token has, too.
    if (type == TokenType::Control || type == TokenType::Unused) continue;
    std::string s = vocab.text(id);
    for (size_t i = 0; i < fuse; ++i) {
      const DecoderStep& d = steps[i];
      switch (d.kind) {
        case DecoderStep::Kind::ByteLevel:
          // Added tokens keep their text (transformers' rule); normal ones are bytes.
          if (type != TokenType::UserDefined) s = unicode_to_bytes(s);
          break;
        case DecoderStep::Kind::Replace: replace_literal(s, d.pattern, d.content); break;
        case DecoderStep::Kind::Metaspace: replace_literal(s, d.pattern, " "); break;
        case DecoderStep::Kind::ByteFallback:
          if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>') {
            const std::string hex = s.substr(3, 2);  // outlives `end`, which points into it
            char* end = nullptr;
            const long v = std::strtol(hex.c_str(), &end, 16);
            if (end && *end == '\0') s.assign(1, char(v));
          }
          break;
        case DecoderStep::Kind::Strip: {
          size_t b = 0, e = s.size();
          const std::string_view c = d.content;
          for (size_t k = 0; k < d.start && s.compare(b, c.size(), c) == 0 && b < e; ++k) b += c.size();
          for (size_t k = 0; k < d.stop && e >= b + c.size() && s.compare(e - c.size(), c.size(), c) == 0; ++k)
            e -= c.size();
          s = s.substr(b, e - b);
          break;
        }
        case DecoderStep::Kind::Fuse: break;
      }
    }
    t[size_t(id)] = std::move(s);
  }
  return t;
}

}  // namespace ridge::hf
