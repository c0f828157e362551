// Pre-tokenization by regular expressions (PCRE2, JIT, Unicode): the text is cut into
// pieces before BPE, so merges never cross a word, number or punctuation boundary.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;  // pcre2.h's pcre2_code (with PCRE2_CODE_UNIT_WIDTH 8)

namespace ridge {

class RegexSplitter {
 public:
  // Compiled once with PCRE2_UTF | PCRE2_UCP (\p{..} classes over all of Unicode),
  // PCRE2_MATCH_INVALID_UTF (malformed UTF-8 never matches and never errors) and
  // PCRE2_DOLLAR_ENDONLY ('$' is the end of the piece, as in ECMAScript, Rust and Python),
  // then JIT-compiled. One rewrite: \s and \S mean Unicode White_Space, as in Rust's
  // regex, Python and llama.cpp; PCRE2 10.42's \s also takes U+180E and nothing else would.
  // Throws ridge::Error naming the pattern and the offset when it does not compile.
  explicit RegexSplitter(const std::string& pcre2_pattern);

  // llama.cpp semantics: every match becomes a piece and every unmatched gap between
  // matches becomes a piece too, in order, so the pieces concatenate to text; empty
  // matches make no piece. Appends views into text.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  // The raw matches, leftmost-first and non-overlapping, as [begin, end) byte offsets into
  // text (empty matches included; after one the search moves on by a character, as Perl
  // and PCRE2 do). Appends. For callers with other gap/match behaviours (HF Split).
  void matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::shared_ptr<pcre2_real_code_8> code_;  // shared: pcre2_match on one code is thread-safe
};

// A sequence of regexes applied as llama.cpp does: each splits every piece of the
// previous one (a lookahead never sees past the end of its piece).
class PreTokenizer {
 public:
  explicit PreTokenizer(const std::vector<std::string>& patterns);
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;  // appends
  bool empty() const { return splitters_.empty(); }

 private:
  std::vector<RegexSplitter> splitters_;
};

// What a GGUF tokenizer.ggml.pre value means, as llama.cpp reads it.
struct GgufPre {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // a pre-token that is already a token is emitted whole (Llama 3)
  bool add_bos = false;        // the default for add_bos_token when the file does not say
};

// Throws ridge::Error naming an unknown value. The regexes are llama.cpp's, adjusted where
// llama.cpp's std::regex emulation treats a character differently from the pattern's
// literal meaning (commented at each site), so that PCRE2 reproduces its pieces.
GgufPre gguf_pre(std::string_view pre);
std::vector<std::string> gguf_pre_regexes(std::string_view pre);

}  // namespace ridge
