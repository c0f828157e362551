#include "tokenizer/byte_unicode.h"

#include <array>
#include <cstdint>

namespace ridge {

namespace {

// Code points below 0x144 cover the whole alphabet: the printable Latin-1 bytes keep their
// own code point and the remaining 68 bytes take 0x100 + n in byte order.
constexpr uint32_t kAlphabetEnd = 0x144;

struct Tables {
  std::array<std::string, 256> enc;    // byte -> UTF-8
  std::array<int, kAlphabetEnd> dec{};  // code point -> byte, -1 outside the alphabet

  Tables() {
    dec.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? uint32_t(b) : 0x100 + n++;
      // Every code point here is below 0x800: one or two UTF-8 bytes.
      enc[size_t(b)] = cp < 0x80 ? std::string(1, char(cp))
                                 : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
      dec[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view byte_to_unicode(unsigned char b) { return tables().enc[b]; }

void bytes_to_unicode(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  out.reserve(out.size() + bytes.size() * 2);
  for (unsigned char b : bytes) out += t.enc[b];
}

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  bytes_to_unicode(bytes, out);
  return out;
}

std::string unicode_to_bytes(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b0 = uint8_t(text[i]);
    uint32_t cp = kAlphabetEnd;  // "not in the alphabet" unless decoded below
    size_t len = 1;
    if (b0 < 0x80) {
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() && (uint8_t(text[i + 1]) & 0xC0) == 0x80) {
      cp = (uint32_t(b0 & 0x1F) << 6) | (uint8_t(text[i + 1]) & 0x3F);
      len = 2;
    } else {
      // Longer (or malformed) sequences are never in the alphabet: copy the whole character.
      const size_t want = (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 1;
      while (len < want && i + len < text.size() && (uint8_t(text[i + len]) & 0xC0) == 0x80) ++len;
    }
    const int b = cp < kAlphabetEnd ? t.dec[cp] : -1;
    if (b >= 0)
      out += char(b);
    else
      out.append(text, i, len);
    i += len;
  }
  return out;
}

}  // namespace ridge
