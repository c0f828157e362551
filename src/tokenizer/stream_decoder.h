// Streaming-safe detokenization. Byte-fallback tokens split a multi-byte character across
// several tokens, so a stream that printed each token's bytes as they came would emit half
// characters (invalid UTF-8 in an SSE event). push() returns only whole characters and holds
// an incomplete tail until later tokens complete it; bytes that can never form a character
// become U+FFFD at once; flush() ends the stream, turning a held incomplete tail into U+FFFD.
// The output is always valid UTF-8; for a sequence whose decode() is valid UTF-8 the pushes
// plus flush concatenate to exactly decode().
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ridge {

class StreamDecoder {
 public:
  // strip_leading_space: drop the space SentencePiece put before the first word (the
  // stream starts at the beginning of the text, as decode() assumes); pass false when
  // the stream continues text that was already shown, e.g. generation after a prompt.
  // show_control: control tokens print as their text (`[TOOL_CALLS]`, `<|channel|>`) for
  // a parser that reads a model's markup; end-of-generation tokens still print nothing.
  explicit StreamDecoder(const Tokenizer& tok, bool strip_leading_space = true, bool show_control = false);

  std::string push(int32_t id);
  std::string flush();

 private:
  std::string drain(bool final);

  const Tokenizer& tok_;
  bool strip_;           // the next non-empty piece still owes its leading space
  bool show_control_;
  std::string pending_;  // bytes of an incomplete character, held back
};

}  // namespace ridge
