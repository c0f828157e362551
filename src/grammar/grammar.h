// A context-free grammar over bytes, the form every constraint compiles to (GBNF text,
// JSON Schema, regular expressions) and the one the matcher runs (grammar/matcher.h).
//
// Rules are alternations of sequences; an element of a sequence is a set of bytes, a
// reference to a rule, or the end of the sequence. Characters are matched as their UTF-8
// bytes: a class of code points becomes alternatives of byte-set sequences (utf8_class),
// so a token that ends inside a multi-byte character needs no special case, which is
// what a byte-level vocabulary needs. Repetition and grouping become generated rules.
//
// Left recursion (a rule that can reach itself without consuming a byte) is refused at
// compile time: the matcher expands references eagerly and would never stop.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ridge::grammar {

// A constraint that cannot be compiled: the message names the place (line:column of the
// text, or the JSON pointer of a schema) and what is wrong. Servers answer it with a 400.
struct GrammarError : Error {
  using Error::Error;
};

struct ByteSet {
  std::array<uint64_t, 4> w{};
  bool has(uint8_t b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { w[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(uint8_t(b));
  }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

// A Repeat matches rule `arg` lo..hi times with one element and a count on its stack
// frame instead of hi - lo nested rules: a string of at most 40 characters stays one
// grammar position however far into it generation is, so what a position allows can be
// worked out once (token_tables.h).
struct Elem {
  enum Kind : uint8_t { Bytes, Ref, Repeat, End };
  Kind kind;
  int32_t arg;  // Bytes: index into sets; Ref, Repeat: rule index; End: the rule it ends
  int32_t lo = 0, hi = 0;  // Repeat: the bounds (0 <= lo <= hi)
};

// The limits of one compiled grammar: whatever a request sends, compiling it takes
// bounded time and memory.
struct Limits {
  int64_t max_elems = 1 << 20;  // elements, after repetitions are expanded
  int32_t max_rules = 1 << 16;
  int32_t max_repeat = 10000;   // the largest m or n of x{m,n}
};

class Grammar {
 public:
  // Rules in order; elements of rule r's alternatives start at alts[r][i] and run to an End.
  std::vector<Elem> elems;
  std::vector<ByteSet> sets;
  std::vector<std::vector<int32_t>> alts;
  std::vector<std::string> names;
  int32_t root = 0;
  uint64_t id = 0;  // unique per compiled grammar in this process (caches key on it)

  int32_t n_rules() const { return int32_t(alts.size()); }
  // The grammar as GBNF text (generated rules included), for errors and tests.
  std::string to_string() const;
};

// Compiles GBNF: llama.cpp's grammar format (rules `name ::= ...`, "literals" with C-style
// and \xHH \uHHHH \UHHHHHHHH escapes, [classes] with ranges and ^, ., ( ), |, * + ?,
// {m} {m,} {m,n}, # comments), which also reads the EBNF XGrammar prints (its lookahead
// assertions "(= ...)" are parsed and dropped). A rule may continue over lines. Throws
// GrammarError naming line:column.
std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, std::string_view root = "root",
                                            const Limits& limits = {});

// Code point c as UTF-8 into out[0..3]; returns the byte count.
int utf8_encode(uint32_t c, uint8_t* out);

// The byte-set sequences whose UTF-8 encodings are exactly the code points of the
// (inclusive) ranges: each sequence is 1-4 sets, one per byte. Surrogates
// (U+D800-U+DFFF) are never encoded.
std::vector<std::vector<ByteSet>> utf8_class(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

}  // namespace ridge::grammar
