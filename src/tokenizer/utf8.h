// UTF-8 helpers shared by the tokenizers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ridge {

// Bytes in the UTF-8 character a lead byte starts, by its high nibble. Continuation and
// invalid bytes count as one character, exactly as llama.cpp's unicode_len_utf8 does, so
// malformed input splits the same way.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

}  // namespace ridge
