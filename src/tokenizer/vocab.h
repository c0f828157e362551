// A tokenizer vocabulary read from GGUF metadata (tokenizer.ggml.*): token texts, scores,
// types, the special ids and the add-BOS / add-EOS / space-prefix flags. Validated on load:
// array lengths agree and every special id is in range; errors name the offending key.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"

namespace ridge {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

class Vocab {
 public:
  static constexpr int32_t kNone = -1;

  // Reads the vocabulary; tokenizer.ggml.model decides the defaults (llama: BOS 1, EOS 2,
  // UNK 0, add BOS, no EOS, space prefix). Throws ridge::Error naming the key on bad input.
  static Vocab from_gguf(const gguf::File& f);

  const std::string& model() const { return model_; }
  int32_t size() const { return static_cast<int32_t>(text_.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  const std::string& text(int32_t id) const { return text_[static_cast<size_t>(id)]; }
  float score(int32_t id) const { return score_[static_cast<size_t>(id)]; }
  TokenType type(int32_t id) const { return type_[static_cast<size_t>(id)]; }

  // Exact text -> id over every token (control ones included, as llama.cpp does); kNone if absent.
  int32_t find(std::string_view text) const;
  // The byte-fallback token for a byte: "<0xNN>", else the one-byte token; kNone if neither.
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }
  // The byte a Byte-type token stands for ("<0xNN>"); -1 when the text is not of that form.
  int byte_value(int32_t id) const;

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t unk() const { return unk_; }
  int32_t pad() const { return pad_; }
  int32_t eot() const { return eot_; }
  int32_t eom() const { return eom_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // End of generation: EOS, EOT, EOM, and tokens named like an end-of-turn marker.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  // For tests and tools that build a vocabulary without a file.
  struct Spec {
    std::string model = "llama";
    std::vector<std::string> tokens;
    std::vector<float> scores;  // empty: all 0
    std::vector<int32_t> types; // empty: all Normal
    int32_t bos = 1, eos = 2, unk = 0, pad = kNone, eot = kNone, eom = kNone;
    bool add_bos = true, add_eos = false, add_space_prefix = true;
  };
  static Vocab from_spec(Spec spec);

 private:
  // Heterogeneous lookup: find(string_view) without building a std::string.
  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void build_index();  // text -> id map and the byte table; throws on duplicate texts
  void build_eog();

  std::string model_;
  std::vector<std::string> text_;
  std::vector<float> score_;
  std::vector<TokenType> type_;
  std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>> index_;
  std::array<int32_t, 256> byte_token_{};
  std::vector<int32_t> eog_;  // a handful of ids, so a linear scan
  int32_t bos_ = kNone, eos_ = kNone, unk_ = kNone, pad_ = kNone, eot_ = kNone, eom_ = kNone;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
};

}  // namespace ridge
