// The tokenizer facade: text <-> token ids for a model's vocabulary. GGUF "llama"
// (SentencePiece-style) and "gpt2" (byte-level BPE with regex pre-tokenization)
// vocabularies behind one API; special-token parsing as llama.cpp does it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace ridge {

// An encoder that replaces the vocabulary's own: a whole external pipeline (an HF
// tokenizer.json) that splits out its own added tokens. Text -> ids, without BOS/EOS.
class TextEncoder {
 public:
  virtual ~TextEncoder() = default;
  virtual void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const = 0;
};

class Tokenizer {
 public:
  // What a BPE tokenizer needs beyond the vocabulary (GGUF: tokenizer.ggml.merges and
  // tokenizer.ggml.pre; tokenizer.json: model.merges and the pre-tokenizer).
  struct BpeSetup {
    std::vector<std::pair<std::string, std::string>> merges;
    std::vector<std::string> pre_regexes;  // applied in sequence (PreTokenizer)
    BpeModel::Options options;
    bool byte_level = true;  // text bytes go through bytes_to_unicode before BPE
  };

  // Throws ridge::Error for a missing or unsupported tokenizer.ggml.model or
  // tokenizer.ggml.pre (naming the value) and for an invalid vocabulary (naming the key).
  // A gpt2 vocabulary without tokenizer.ggml.pre uses "default" with a warning on stderr.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& f);
  static std::unique_ptr<Tokenizer> from_vocab(Vocab vocab);  // SentencePiece
  static std::unique_ptr<Tokenizer> from_bpe(Vocab vocab, BpeSetup bpe);
  // encode runs the encoder make_encoder builds against this Tokenizer's own vocabulary (at
  // its final address, which the encoder may keep); piece_bytes: each id's decoded bytes.
  // BOS/EOS come from the vocabulary's flags; decode strips the first piece's leading
  // space when the vocabulary's add_space_prefix is set.
  static std::unique_ptr<Tokenizer> from_pipeline(
      Vocab vocab, const std::function<std::unique_ptr<TextEncoder>(const Vocab&)>& make_encoder,
      std::vector<std::string> piece_bytes);

  explicit Tokenizer(Vocab vocab);  // SentencePiece
  Tokenizer(Vocab vocab, BpeSetup bpe);
  Tokenizer(const Tokenizer&) = delete;  // the encoders refer to vocab_
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text -> ids. add_bos: prepend BOS when the vocabulary asks for it (add_bos_token);
  // EOS likewise when add_eos_token is set. User-defined tokens' texts always become their
  // ids (llama.cpp and HF split them out before anything else); control (and unknown)
  // tokens' texts only when parse_special, else they are literal text. Among special
  // texts the longest is split out first, as llama.cpp's tokenizer_st_partition does.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const { return encode(text, add_bos, false); }
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // The raw bytes a token stands for: SentencePiece U+2581 -> ' ', byte-level BPE
  // characters -> their bytes, <0xNN> -> that byte, control, unknown and unused tokens ->
  // "" (user-defined tokens: their text).
  const std::string& piece_bytes(int32_t id) const;
  // The concatenated bytes of ids; for SentencePiece without the space it put before the
  // first word (the leading space of the first non-empty piece). BPE strips nothing.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t n_vocab() const { return vocab_.size(); }
  int32_t bos() const { return vocab_.bos(); }
  int32_t eos() const { return vocab_.eos(); }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // SentencePiece's leading space (the encoder adds it, decoders strip it); never for BPE.
  bool add_space_prefix() const { return !is_bpe() && vocab_.add_space_prefix(); }
  bool is_bpe() const { return bpe_ != nullptr; }
  bool is_eog(int32_t id) const { return vocab_.is_eog(id); }
  // Control-like: printed as nothing, split out of text only with parse_special.
  bool is_control(int32_t id) const;
  const std::string& piece(int32_t id) const;  // the token text as stored
  const Vocab& vocab() const { return vocab_; }

 private:
  struct Special {
    std::string_view text;  // into vocab_
    int32_t id;
    bool always;  // user-defined: split out even without parse_special
    bool lstrip = false, rstrip = false;  // swallow the whitespace before / after it
  };
  // llama.cpp's per-model token attributes, which GGUF files do not carry.
  void apply_strip_rules(std::string_view model_name, std::string_view pre);
  void init_common();
  void check_id(int32_t id) const;
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;  // one fragment

  Vocab vocab_;
  SpmEncoder spm_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<TextEncoder> encoder_;  // from_pipeline: replaces everything above
  bool byte_level_ = false;
  bool add_bos_ = false, add_eos_ = false;
  std::vector<std::string> bytes_;   // piece_bytes for every id, computed once
  std::vector<Special> specials_;    // longest text first
  std::vector<uint8_t> control_;     // per id: 1 when control-like
};

}  // namespace ridge
