// A tokenizer's vocabulary as structured output's matcher walks it (grammar/matcher.h):
// every token's bytes, the control tokens left out (never text), the end-of-generation
// tokens marked. The engine makes one per tokenizer; the tools and the CLI make theirs.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "grammar/matcher.h"

namespace ridge {
class Tokenizer;

// also_excluded: ids to leave out besides the control tokens (a comparison's ignore list).
std::shared_ptr<const grammar::TokenTrie> grammar_vocabulary(const Tokenizer& tok,
                                                             std::span<const int32_t> also_excluded = {});

}  // namespace ridge
