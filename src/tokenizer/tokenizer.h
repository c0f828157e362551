// The tokenizer facade: text <-> token ids for a model's vocabulary. Today it serves GGUF
// "llama" (SentencePiece-style) vocabularies; byte-level BPE arrives behind the same API.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace ridge {

class Tokenizer {
 public:
  // Throws ridge::Error for a missing or unsupported tokenizer.ggml.model (naming the
  // value) and for an invalid vocabulary (naming the key).
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  static std::unique_ptr<Tokenizer> from_vocab(Vocab vocab);

  explicit Tokenizer(Vocab vocab);
  Tokenizer(const Tokenizer&) = delete;  // the encoder refers to vocab_
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Literal text (special-token names are not parsed) -> ids. add_bos: prepend BOS when
  // the vocabulary asks for it (add_bos_token); EOS likewise when add_eos_token is set.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;

  // The raw bytes a token stands for: U+2581 -> ' ', <0xNN> -> that byte, control,
  // unknown and unused tokens -> "" (user-defined tokens: their text).
  const std::string& piece_bytes(int32_t id) const;
  // The concatenated bytes of ids, without the space SentencePiece put before the first
  // word (the leading space of the first non-empty piece, BOS or not before it).
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_vocab() const { return vocab_.size(); }
  int32_t bos() const { return vocab_.bos(); }
  int32_t eos() const { return vocab_.eos(); }
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_space_prefix() const { return vocab_.add_space_prefix(); }
  bool is_eog(int32_t id) const { return vocab_.is_eog(id); }
  const std::string& piece(int32_t id) const;  // the token text as stored
  const Vocab& vocab() const { return vocab_; }

 private:
  void check_id(int32_t id) const;

  Vocab vocab_;
  SpmEncoder spm_;
  std::vector<std::string> bytes_;  // piece_bytes for every id, computed once
};

}  // namespace ridge
