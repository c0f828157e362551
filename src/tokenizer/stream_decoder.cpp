#include "tokenizer/stream_decoder.h"

namespace ridge {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the character a lead byte starts and the valid range of its second byte
// (Unicode's well-formed UTF-8 table: this rules out overlong forms, surrogates and code
// points past U+10FFFF); len 0 for a byte that cannot start a character.
struct Lead {
  int len;
  uint8_t lo, hi;
};
Lead lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool strip_leading_space, bool show_control)
    : tok_(tok), strip_(strip_leading_space && tok.add_space_prefix()), show_control_(show_control) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string& b =
      show_control_ && tok_.is_control(id) && !tok_.is_eog(id) ? tok_.piece(id) : tok_.piece_bytes(id);
  if (b.empty()) return {};
  if (strip_ && b[0] == ' ')
    pending_.append(b, 1);
  else
    pending_ += b;
  strip_ = false;
  return drain(false);
}

std::string StreamDecoder::flush() { return drain(true); }

// Emits every whole character of pending_; an ill-formed run becomes one U+FFFD per
// maximal subpart (the Unicode-recommended substitution, as browsers and Python do).
std::string StreamDecoder::drain(bool final) {
  std::string out;
  const std::string& p = pending_;
  size_t i = 0;
  while (i < p.size()) {
    const uint8_t b = uint8_t(p[i]);
    const Lead lead = lead_info(b);
    if (lead.len == 1) {
      out += char(b);
      ++i;
      continue;
    }
    if (lead.len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t j = 1;
    bool bad = false, incomplete = false;
    for (; j < size_t(lead.len); ++j) {
      if (i + j >= p.size()) {
        incomplete = true;
        break;
      }
      const uint8_t c = uint8_t(p[i + j]);
      const uint8_t lo = j == 1 ? lead.lo : 0x80, hi = j == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) {
        bad = true;
        break;
      }
    }
    if (incomplete && !final) break;  // hold the tail: later tokens may complete it
    if (incomplete || bad) {
      out += kReplacement;
      i += j;  // the valid prefix seen so far is the maximal subpart
      continue;
    }
    out.append(p, i, size_t(lead.len));
    i += size_t(lead.len);
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace ridge
