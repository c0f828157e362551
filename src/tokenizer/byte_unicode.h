// GPT-2's byte <-> unicode alphabet (bytes_to_unicode in openai/gpt-2 encoder.py). Byte-level
// BPE vocabularies store every token as printable characters: each byte of the UTF-8 text is
// replaced by one character of a 256-letter alphabet (printable Latin-1 bytes stand for
// themselves, the other 68 bytes map to U+0100..U+0143), so no token contains a space or a
// control character and every byte string has a spelling.
#pragma once
#include <string>
#include <string_view>

namespace ridge {

// Each byte -> the UTF-8 of its alphabet character.
std::string bytes_to_unicode(std::string_view bytes);
void bytes_to_unicode(std::string_view bytes, std::string& out);  // appends

// The inverse: each alphabet character -> its byte. A character outside the alphabet (a
// hand-added token, a malformed vocabulary) is passed through as its own UTF-8 bytes rather
// than thrown on: decoding a model's output must never fail. (llama.cpp inserts an
// "[UNK_BYTE_0x..]" marker there instead; the text itself is the more useful choice.)
std::string unicode_to_bytes(std::string_view text);

// The alphabet character's UTF-8 for one byte (a view of a static table).
std::string_view byte_to_unicode(unsigned char b);

}  // namespace ridge
