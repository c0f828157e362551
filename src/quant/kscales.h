// The 6-bit scale and min of K-quant sub-block j (0..7), packed into 12 bytes as ggml's
// get_scale_min_k4 reads them: bytes 0..3 hold scales 0..3 (low 6 bits) and the top 2
// bits of scales 4..7; bytes 4..7 the same for the mins; bytes 8..11 the low 4 bits of
// scale (low nibble) and min (high nibble) 4..7.
// static: internal linkage, so each file (baseline or ISA-flagged) keeps its own copy and
// the linker never swaps an AVX2-compiled body into baseline code (see blocks.h).
#pragma once
#include <cstdint>

namespace ridge::quant {

static inline void k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace ridge::quant
