// The pieces of a Hugging Face `tokenizers` pipeline (tokenizer.json), reproduced step for
// step so ridge produces the ids the Rust library does: added-token extraction, normalizers,
// pre-tokenizers, the BPE model, and the per-token half of the decoders. hf_tokenizer.cpp
// reads the JSON into these; nothing here parses JSON, so the steps are testable alone.
//
// Order of one encode (tokenizers' AddedVocabulary::extract_and_normalize, then the rest):
//   1. cut the raw text at added tokens with normalized=false;
//   2. normalize each remaining section (so Prepend applies once per section);
//   3. cut the normalized sections at added tokens with normalized=true;
//   4. pre-tokenize each section into pieces; 5. BPE each piece.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace ridge::hf {

// ---- added tokens -------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false;  // the match also takes the whitespace before / after
  bool normalized = false;              // matched in normalized text instead of raw text
};

// Leftmost-longest matching of many literal strings (aho-corasick's LeftmostLongest in the
// Rust library), by a byte trie: at each position the longest token starting there wins.
class AddedTokenMatcher {
 public:
  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: plain text between tokens
  };
  void add(const AddedToken& t);
  bool empty() const { return tokens_.empty(); }
  // Appends the segments covering text in order (empty text segments are left out).
  // parse_special=false: a special token's text stays plain text, but its match still
  // consumes the span, as in the Rust library's encode_special_tokens mode.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

 private:
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<AddedToken> tokens_;
  std::vector<int32_t> terminal_{-1};                 // node -> index into tokens_, or -1
  std::unordered_map<uint64_t, int32_t> edges_;       // (node << 8 | byte) -> node
  bool first_[256] = {};                              // bytes that can start a token
};

// ---- normalizers --------------------------------------------------------------------

struct Normalizer {
  enum class Kind { NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend };
  Kind kind = Kind::NFC;
  std::string pattern;                   // Replace: the literal searched (when !regex)
  std::shared_ptr<RegexSplitter> regex;  // Replace with a Regex pattern
  std::string content;                   // Replace: the replacement; Prepend: the prefix
  bool strip_left = false, strip_right = false;
};
// Applies the chain in order (a Sequence is flattened into it).
void normalize(const std::vector<Normalizer>& chain, std::string& text);

// ---- pre-tokenizers -----------------------------------------------------------------

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace, Digits, Punctuation, WhitespaceSplit };
  enum class Prepend { Always, First, Never };
  Kind kind = Kind::Split;
  // Split: a regex or a literal; ByteLevel with use_regex: GPT-2's regex.
  std::shared_ptr<RegexSplitter> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;       // ByteLevel
  std::string replacement;             // Metaspace
  Prepend prepend = Prepend::Always;   // Metaspace
  bool split = true;                   // Metaspace
  bool individual_digits = false;      // Digits
};

// The regex the ByteLevel pre-tokenizer splits with when use_regex is true (GPT-2's).
extern const char* const kByteLevelRegex;

// One piece of text during pre-tokenization. at_start: it begins at offset 0 of the original
// text (Metaspace's prepend_scheme "first" only adds its space there).
struct Piece {
  std::string_view text;
  bool at_start;
};

// Runs the steps over one section; pieces point into the section or into arena.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view section, bool at_start,
                  std::deque<std::string>& arena, std::vector<Piece>& pieces);

// Cuts text at the (begin, end) matches by an HF split behaviour; invert swaps the roles of
// matches and gaps. Appends the non-empty pieces.
void split_by(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
              bool invert, bool at_start, std::vector<Piece>& out);

// ---- the model and the whole encoder ------------------------------------------------

struct ModelOptions {
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool byte_level = false;  // a ByteLevel pre-tokenizer maps every piece to the byte alphabet
};

// The encode half of an HF pipeline, plugged into the Tokenizer facade.
class HfEncoder final : public TextEncoder {
 public:
  HfEncoder(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges, ModelOptions model,
            std::vector<AddedToken> added, std::vector<Normalizer> normalizers, std::vector<PreTokenizerStep> pre);
  void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const override;

 private:
  void encode_section(std::string_view section, bool at_start, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_piece(std::string_view piece, std::vector<int32_t>& out) const;

  // Pieces repeat (words, spaces, punctuation), and BPE on one costs dozens of merge-rank
  // lookups, so results are memoized like the Rust library's word cache: piece -> a slice
  // of cache_ids_. Shared by all callers under a mutex; emptied when it reaches its cap.
  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, SvHash, std::equal_to<>> cache_;
  mutable std::vector<int32_t> cache_ids_;

  const Vocab& vocab_;
  BpeModel bpe_;
  ModelOptions opt_;
  AddedTokenMatcher raw_, normalized_;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizerStep> pre_;
};

// ---- decoders -----------------------------------------------------------------------

struct DecoderStep {
  enum class Kind { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip };
  Kind kind = Kind::ByteLevel;
  std::string pattern, content;  // Replace (literal); Metaspace: pattern = the replacement
  bool strip_first = false;      // Metaspace: prepend_scheme != never
  size_t start = 0, stop = 0;    // Strip: characters `content` removed at each end
};

// What the decoder chain makes of whole token sequences, expressed per token: the bytes
// each id decodes to (decode_table), and whether the first non-empty piece loses one
// leading space (the Tokenizer facade's add_space_prefix rule; check_decoders returns it).
// check_decoders throws ridge::Error, naming the step, for a chain that cannot be written
// that way. Special tokens decode to nothing, as with skip_special_tokens; other added
// tokens decode to their text.
bool check_decoders(const std::vector<DecoderStep>& steps);
std::vector<std::string> decode_table(const Vocab& vocab, const std::vector<DecoderStep>& steps);

}  // namespace ridge::hf
