#include "engine/proposer.h"

#include <algorithm>

#include "core/error.h"

namespace ridge {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  RIDGE_CHECK(min_n >= 1 && min_n <= max_n, "prompt lookup: need 1 <= min ({}) <= max ({})", min_n, max_n);
}

void NgramProposer::propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const {
  const int64_t L = int64_t(tokens.size());
  if (max_tokens <= 0 || L < 2) return;
  // The longest suffix first: a longer match is more specific, so what followed it is
  // likelier to follow again. The latest match first: recent text predicts best. One
  // pass from the end over the places the last token occurred before, each extended
  // backwards, finds both: on a small model a search per length was a share of the step.
  const int32_t* t = tokens.data();
  const int32_t last = t[L - 1];
  int64_t best_end = -1, best_n = min_n_ - 1;
  for (int64_t e = L - 2; e >= 0; --e) {
    if (t[e] != last) continue;
    const int64_t cap = std::min<int64_t>(max_n_, e + 1);
    int64_t n = 1;
    while (n < cap && t[e - n] == t[L - 1 - n]) ++n;
    if (n > best_n) {
      best_n = n, best_end = e;
      if (n == max_n_) break;
    }
  }
  if (best_end < 0) return;
  const int64_t from = best_end + 1, to = std::min(L, from + max_tokens);
  out.insert(out.end(), tokens.begin() + from, tokens.begin() + to);
}

}  // namespace ridge
