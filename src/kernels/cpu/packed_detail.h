// Internal: the per-format packers of packed.cpp / packed_kquant.cpp. Each writes the
// `rows` (<= 16) rows of one panel; the caller zeroes the panel first.
#pragma once
#include <cstdint>

namespace ridge::kernels::detail {

void pack_q4_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst);
void pack_q5_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst);
void pack_q6_k(int64_t k, int64_t rows, const uint8_t* src, uint8_t* dst);

}  // namespace ridge::kernels::detail
