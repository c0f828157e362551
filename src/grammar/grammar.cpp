#include "grammar/grammar.h"

#include <fmt/format.h>

#include <algorithm>

namespace ridge::grammar {
namespace {

// [lo, hi] within one encoded length, split until each byte position of the encodings
// is a contiguous range independent of the others (the classic UTF-8 range split: the
// continuation bytes of the part below a boundary of 6 bits run 80-BF, and only the
// first and last parts are partial).
void split_range(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteSet>>& out) {
  uint8_t a[4], b[4];
  const int n = utf8_encode(lo, a);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) return split_range(lo, lo | m, out), split_range((lo | m) + 1, hi, out);
      if ((hi & m) != m) return split_range(lo, (hi & ~m) - 1, out), split_range(hi & ~m, hi, out);
    }
  }
  utf8_encode(hi, b);
  std::vector<ByteSet> seq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) seq[size_t(i)].add_range(a[i], b[i]);
  out.push_back(std::move(seq));
}

std::string byte_text(uint8_t b, bool in_class) {
  if (b == '\\' || b == '"' || (in_class && (b == ']' || b == '-' || b == '^'))) return fmt::format("\\{}", char(b));
  if (b >= 0x20 && b < 0x7F) return std::string(1, char(b));
  return fmt::format("\\x{:02X}", b);
}

}  // namespace

int utf8_encode(uint32_t c, uint8_t* out) {
  if (c < 0x80) return out[0] = uint8_t(c), 1;
  if (c < 0x800) return out[0] = uint8_t(0xC0 | c >> 6), out[1] = uint8_t(0x80 | (c & 0x3F)), 2;
  if (c < 0x10000) {
    out[0] = uint8_t(0xE0 | c >> 12), out[1] = uint8_t(0x80 | (c >> 6 & 0x3F)), out[2] = uint8_t(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = uint8_t(0xF0 | c >> 18), out[1] = uint8_t(0x80 | (c >> 12 & 0x3F));
  out[2] = uint8_t(0x80 | (c >> 6 & 0x3F)), out[3] = uint8_t(0x80 | (c & 0x3F));
  return 4;
}

std::vector<std::vector<ByteSet>> utf8_class(const std::vector<std::pair<uint32_t, uint32_t>>& in) {
  // Sorted and merged first: overlapping ranges would give a character two encodings.
  std::vector<std::pair<uint32_t, uint32_t>> ranges(in);
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
    else merged.push_back(r);
  }
  std::vector<std::vector<ByteSet>> seqs;
  ByteSet ascii;
  for (auto [lo, hi] : merged) {
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    // Surrogates are no characters: cut them out of the range.
    std::vector<std::pair<uint32_t, uint32_t>> parts;
    if (lo < 0xD800 && hi >= 0xD800) {
      parts.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) parts.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) parts.push_back({0xE000, hi});
    } else {
      parts.push_back({lo, hi});
    }
    for (auto [l, h] : parts) {
      for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu, 0x10FFFFu}) {
        if (l > h) break;
        if (l > edge) continue;
        const uint32_t top = h < edge ? h : edge;
        if (edge == 0x7F) ascii.add_range(uint8_t(l), uint8_t(top));
        else split_range(l, top, seqs);
        l = top + 1;
      }
    }
  }
  if (!ascii.empty()) seqs.insert(seqs.begin(), std::vector<ByteSet>{ascii});
  return seqs;
}

std::string Grammar::to_string() const {
  std::string s;
  for (int32_t r = 0; r < n_rules(); ++r) {
    s += names[size_t(r)] + " ::=";
    for (size_t a = 0; a < alts[size_t(r)].size(); ++a) {
      if (a > 0) s += " |";
      for (int32_t p = alts[size_t(r)][a]; elems[size_t(p)].kind != Elem::End; ++p) {
        const Elem& e = elems[size_t(p)];
        if (e.kind == Elem::Ref) {
          s += " " + names[size_t(e.arg)];
          continue;
        }
        if (e.kind == Elem::Repeat) {
          s += fmt::format(" {}{{{},{}}}", names[size_t(e.arg)], e.lo, e.hi);
          continue;
        }
        const ByteSet& bs = sets[size_t(e.arg)];
        int n = 0, one = 0;
        for (int b = 0; b < 256; ++b)
          if (bs.has(uint8_t(b))) ++n, one = b;
        if (n == 1) {
          s += " \"" + byte_text(uint8_t(one), false) + "\"";
          continue;
        }
        s += " [";
        for (int b = 0; b < 256; ++b) {
          if (!bs.has(uint8_t(b))) continue;
          int e2 = b;
          while (e2 + 1 < 256 && bs.has(uint8_t(e2 + 1))) ++e2;
          s += byte_text(uint8_t(b), true);
          if (e2 > b) s += "-" + byte_text(uint8_t(e2), true);
          b = e2;
        }
        s += "]";
      }
      if (elems[size_t(alts[size_t(r)][a])].kind == Elem::End) s += " \"\"";
    }
    s += "\n";
  }
  return s;
}

}  // namespace ridge::grammar
