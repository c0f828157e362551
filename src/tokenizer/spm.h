// SentencePiece-style (BPE-by-score) encoder over a GGUF "llama" vocabulary, reproducing
// llama.cpp's llm_tokenizer_spm: the text is split into UTF-8 characters, then the adjacent
// pair whose concatenation is a vocabulary token with the highest score is merged, again
// and again (ties: the leftmost pair); what remains is looked up, and a symbol that is not a
// token falls back to one <0xNN> token per byte (or UNK when the vocabulary has no byte tokens).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace ridge {

class SpmEncoder {
 public:
  explicit SpmEncoder(const Vocab& vocab) : vocab_(vocab) {}

  // Encodes literal text (no special-token parsing), appending ids to out. Applies the
  // vocabulary's preprocessing: a leading space when add_space_prefix, and ' ' -> U+2581.
  // Empty text encodes to nothing (no lone space prefix), as in llama.cpp.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  // The merge algorithm alone, on already-escaped text.
  void encode_escaped(std::string_view text, std::vector<int32_t>& out) const;

 private:
  const Vocab& vocab_;
};

}  // namespace ridge
