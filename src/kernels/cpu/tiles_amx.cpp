#include <immintrin.h>

#include "kernels/cpu/tiles.h"

namespace ridge::kernels::detail {

void use_tile_config(const TileConfig& c) {
  thread_local const TileConfig* loaded = nullptr;
  if (loaded == &c) return;
  _tile_loadconfig(&c);
  loaded = &c;
}

}  // namespace ridge::kernels::detail
