// The BPE merge algorithm over one pre-token, shared by GGUF ("gpt2" vocabularies) and HF
// tokenizer.json loaders: the word is split into UTF-8 characters, then the adjacent pair
// with the lowest merge rank is merged, again and again (ties: the leftmost pair), and the
// final symbols are looked up in the vocabulary. Merges are by text, as in llama.cpp: a
// merge applies whenever both sides' texts match, even if a side is not itself a token.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace ridge {

class BpeModel {
 public:
  struct Options {
    bool ignore_merges = false;  // a word that is already a token is emitted whole (Llama 3)
    bool byte_fallback = false;  // an unknown symbol becomes <0xNN> tokens (SentencePiece-BPE)
  };

  // vocab must outlive the model. Later duplicates of a merge keep the first (lowest) rank.
  BpeModel(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options o);

  // word: one pre-token, already in the vocabulary's alphabet (for byte-level vocabularies:
  // mapped by bytes_to_unicode). Appends ids. A final symbol that is not a token becomes,
  // with byte_fallback, one <0xNN> token per byte (UNK if one is missing, as HF does);
  // without it, one token per byte whose one-byte text is a token, the rest dropped
  // (llama.cpp's rule; byte-level vocabularies never get there).
  void encode(std::string_view word, std::vector<int32_t>& out) const;

  size_t n_merges() const { return ranks_.size(); }
  // The rank of merging a and b; -1 when there is no such merge.
  int32_t rank(std::string_view a, std::string_view b) const;

 private:
  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void emit(std::string_view sym, std::vector<int32_t>& out) const;

  const Vocab& vocab_;
  Options opt_;
  // Key: left + '\xFF' + right. 0xFF never occurs in UTF-8, so no two pairs collide.
  std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>> ranks_;
};

}  // namespace ridge
