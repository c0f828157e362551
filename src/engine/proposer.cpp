#include "engine/proposer.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  RIDGE_CHECK(min_n >= 1 && min_n <= max_n, "prompt lookup: need 1 <= min ({}) <= max ({})", min_n, max_n);
}

void NgramProposer::propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const {
  const int64_t L = int64_t(tokens.size());
  if (max_tokens <= 0) return;
  // The longest suffix first: a longer match is more specific, so what followed it is
  // likelier to follow again. The latest match first: recent text predicts best.
  for (int64_t n = std::min<int64_t>(max_n_, L - 1); n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + (L - n);
    for (int64_t s = L - n - 1; s >= 0; --s) {
      if (!std::equal(suffix, suffix + n, tokens.data() + s)) continue;
      const int64_t from = s + n, to = std::min(L, from + max_tokens);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

}  // namespace ridge
