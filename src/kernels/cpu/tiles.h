// The thread's AMX tile configuration, shared by ridge's users of the tiles (gemm_amx.cpp,
// attention_avx512.cpp's FP8 path). A configuration stays loaded between calls: releasing
// the tiles after each call (TILERELEASE) took microseconds on the machine measured, and a
// thread holding its tile state costs only a larger save at a context switch. So each
// user names its configuration by address, and it is loaded only when another is in place.
#pragma once
#include <cstdint>

namespace ridge::kernels::detail {

// LDTILECFG's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Loads c on this thread unless it is the configuration loaded last. c must live as long
// as the program (a static): its address is its name. Call only where amx_active().
void use_tile_config(const TileConfig& c);

}  // namespace ridge::kernels::detail
