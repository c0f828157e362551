#include "engine/kv_events.h"

namespace ridge {

namespace {
uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t kv_block_hash(std::optional<uint64_t> parent, std::span<const int32_t> key) {
  // The root's "hash" differs from every block's (those have the top bit clear).
  uint64_t h = parent ? *parent : 0xFFFFFFFFFFFFFFFFull;
  h = splitmix(h ^ uint64_t(key.size()));
  for (int32_t t : key) h = splitmix(h ^ uint64_t(uint32_t(t)));
  return h & 0x7FFFFFFFFFFFFFFFull;
}

}  // namespace ridge
