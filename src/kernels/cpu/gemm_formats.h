// Internal: the 32-element block formats' panel layouts (packed.h) as the GEMM kernels of
// every ISA read them (gemm_avx512.cpp, gemm_avx2.cpp). No intrinsics: safe anywhere.
#pragma once
#include <cstdint>

namespace ridge::kernels::detail {

// The 32-element block formats with an int8 kernel.
enum class Fmt { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4 };

// Per 32-block of a panel: d[16] f16 (MXFP4: e[16], the E8M0 scale bytes), m[16] f16 (the
// _1 types), the codes (Q8_0: 8 groups of [16 rows][4 bytes]; the others: 4 groups of
// nibble pairs), then the Q5 types' vector of fifth bits ([16 rows][4 bytes], each row's
// qh).
template <Fmt F>
struct FmtInfo {
  static constexpr bool kNibbles = F != Fmt::Q8_0, kMin = F == Fmt::Q4_1 || F == Fmt::Q5_1;
  static constexpr bool kHigh = F == Fmt::Q5_0 || F == Fmt::Q5_1;
  // MXFP4's nibbles index its table of doubled E2M1 values (quant/blocks.h), looked up as
  // value + kOffset, and its scale is 2^(e - 128).
  static constexpr bool kLut = F == Fmt::MXFP4;
  static constexpr int64_t kBlockBytes =
      16 * (F == Fmt::Q8_0 ? 34 : kLut ? 17 : 18 + (kMin ? 2 : 0) + (kHigh ? 4 : 0));
  static constexpr int64_t kCodes = kMin ? 64 : kLut ? 16 : 32;  // nibbles (or Q8_0's codes) past d (and m)
  // What the unsigned codes carry on top of the value (the _1 types have none: m does it).
  static constexpr int32_t kOffset =
      F == Fmt::Q8_0 ? 128 : F == Fmt::Q4_0 ? 8 : F == Fmt::Q5_0 ? 16 : F == Fmt::MXFP4 ? 12 : 0;
};

}  // namespace ridge::kernels::detail
