#include "engine/spec_policy.h"

#include <bit>
#include <cstddef>

namespace ridge {

int SpecPolicy::bucket(int32_t n_decodes) {
  const int b = n_decodes <= 1 ? 0 : int(std::bit_width(uint32_t(n_decodes - 1)));
  return b < int(std::tuple_size_v<decltype(b_)>) ? b : int(std::tuple_size_v<decltype(b_)>) - 1;
}

bool SpecPolicy::speculate(int32_t n_decodes) {
  Bucket& k = b_[std::size_t(bucket(n_decodes))];
  const int64_t step = k.steps++;
  // Learn each choice once before comparing: speculation first, the configured choice.
  if (k.on.n == 0) return true;
  if (k.off.n == 0) return false;
  const bool better = k.on.rate >= k.off.rate;
  return step % kExplore == kExplore - 1 ? !better : better;
}

void SpecPolicy::observe(int32_t n_decodes, bool speculated, int64_t produced, double seconds) {
  if (seconds <= 0 || produced <= 0) return;
  Arm& a = speculated ? b_[std::size_t(bucket(n_decodes))].on : b_[std::size_t(bucket(n_decodes))].off;
  const double rate = double(produced) / seconds;
  a.rate = a.n == 0 ? rate : (1 - kWeight) * a.rate + kWeight * rate;
  ++a.n;
}

}  // namespace ridge
