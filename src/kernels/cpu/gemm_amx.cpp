// The 32-block formats' GEMM at two or more activation rows with the integer dots on AMX
// tiles (core/cpu.h amx_active). Called from gemm_panels (gemm.cpp) only after the check.
//
// Why: at 2 to 48 rows (a decode batch, a verification step) and in prefill, the AVX-512
// kernels spend most of their vector ops on vpdpbusd and its broadcasts: 8 per activation
// row per 16 outputs per block. One tdpbssd does a whole block for 16 rows x 16 outputs on
// the tile unit, beside the vector ports, which are left only the float epilogue. So a
// 9-row step's arithmetic falls under its DRAM time and prefill leaves the VNNI roof.
//
// Bits: the integer sum of a block is exact on either unit, and the epilogue is
// kern_int8's, the same float operations in the same order per lane (gemm.h), so every
// output has the AVX-512 kernels' bits whatever the rows, and batch invariance holds
// against the one-row decode kernel.
//
// Operands of one block (K = 32):
//   A  [R rows][32 bytes]  the rows' ActQ8 codes in place (stride lda x 40 bytes)
//   B  [8][16 rows x 4]    the panel's codes as signed values (code - kOffset), which is
//                          the panels' own group order (packed.h): byte 4n + j of row g is
//                          element 4g + j of weight row n for g < 4 (the nibble formats'
//                          low nibbles; Q8_0 all 8 groups), 16 + 4(g - 4) + j after
//   C  [R][16] int32       tdpbssd(A, B): sum over k of a[r][k] x w[n][k]
// Signed codes make the offset correction (isum_offsets) unnecessary: the sum is the same
// integer.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512_common.h"
#include "kernels/cpu/gemm_formats.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/tiles.h"

namespace ridge::kernels::detail {
namespace {

// The tile registers, fixed (the intrinsics take their numbers as literals), two sets so
// that a block's dot runs on the tile unit while the vector ports take the one before:
//   tmm0, tmm1  A of blocks 2j, 2j + 1   (R rows x 32 bytes)
//   tmm2, tmm3  B of the same            (8 x 64 bytes)
//   tmm4, tmm5  C of the same            (R x 64 bytes)
constexpr TileConfig tile_config(int r) {
  TileConfig c;
  for (int t : {0, 1}) c.rows[t] = uint8_t(r), c.colsb[t] = 32;
  for (int t : {2, 3}) c.rows[t] = 8, c.colsb[t] = 64;
  for (int t : {4, 5}) c.rows[t] = uint8_t(r), c.colsb[t] = 64;
  return c;
}

// Every row count's configuration in memory: GCC's _tile_loadconfig tells the compiler of
// only 8 of the 64 bytes it reads, so a configuration on the stack could be half written.
template <int... Rs>
constexpr auto tile_configs(std::integer_sequence<int, Rs...>) {
  return std::array<TileConfig, sizeof...(Rs)>{tile_config(Rs)...};
}
alignas(64) constexpr auto kTileConfigs = tile_configs(std::make_integer_sequence<int, 17>{});

// The thread's tiles shaped for R rows (tiles.h: loaded only when another is in place).
inline void use_tiles(int r) { use_tile_config(kTileConfigs[size_t(r)]); }

// Blocks of signed codes made per chunk: 16 KiB, in L1 while every row group of the call
// passes over them.
inline constexpr int64_t kChunk = 32;
using Codes = int8_t[8][64];

// Blocks [b0, b1) of a panel (w: its start) as signed codes. Q8_0 stores q + 128: the
// sign bit flipped gives q. The nibble formats: nibble_codes, less the offset.
template <Fmt F>
inline void make_codes(const uint8_t* w, int64_t b0, int64_t b1, Codes* codes) {
  using I = FmtInfo<F>;
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* wb = w + b * I::kBlockBytes + I::kCodes;
    Codes& c = codes[b - b0];
    if constexpr (F == Fmt::Q8_0) {
      const __m512i flip = _mm512_set1_epi8(int8_t(0x80));
      for (int g = 0; g < 8; ++g) _mm512_store_si512(c[g], _mm512_xor_si512(_mm512_loadu_si512(wb + g * 64), flip));
    } else {
      const __m512i hb = I::kHigh ? _mm512_loadu_si512(wb + 256) : _mm512_setzero_si512();
      const __m512i off = _mm512_set1_epi8(int8_t(I::kOffset));
      for (int g = 0; g < 4; ++g) {
        __m512i lo, hi;
        nibble_codes<I::kHigh, I::kLut>(_mm512_loadu_si512(wb + g * 64), hb, g, lo, hi);
        _mm512_store_si512(c[g], _mm512_sub_epi8(lo, off));
        _mm512_store_si512(c[4 + g], _mm512_sub_epi8(hi, off));
      }
    }
  }
}

// C = A x B of one block into c ([R][16] int32), on tile set K. GCC's tile load and store
// intrinsics declare no memory operands: the compiler barriers keep the stores of the
// codes before the loads and the reads of c after the store.
template <int K>
inline __attribute__((always_inline)) void block_dot(const int8_t* a, int64_t stride, const Codes& b, int32_t* c) {
  asm volatile("" ::: "memory");
  if constexpr (K == 0) {
    _tile_loadd(0, a, stride);
    _tile_loadd(2, b, 64);
    _tile_zero(4);
    _tile_dpbssd(4, 0, 2);
    _tile_stored(4, c, 64);
  } else {
    _tile_loadd(1, a, stride);
    _tile_loadd(3, b, 64);
    _tile_zero(5);
    _tile_dpbssd(5, 1, 3);
    _tile_stored(5, c, 64);
  }
  asm volatile("" ::: "memory");
}

// R activation rows (a: their first, stride lda blocks) against one panel over blocks
// [b0, b1) (codes: those blocks, w: the panel's start, for the scales): kern_int8's float
// epilogue per block, the sums in registers, continued from y when b0 > 0. Rows before
// `skip` are another group's (the last group overlaps the one before it so that every
// group has R rows: one tile shape per call) and are neither read nor written in y.
template <Fmt F, int R>
void row_group(const uint8_t* w, const Codes* codes, const ActQ8* a, int64_t lda, int64_t b0, int64_t b1, float* y,
               int64_t ldy, __mmask16 last, PassPrefetch& pf, int skip) {
  using I = FmtInfo<F>;
  __m512 acc[R];
  for (int i = 0; i < R; ++i)
    acc[i] = b0 == 0 || i < skip ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(last, y + i * ldy);
  alignas(64) int32_t c[2][16][16];
  const int64_t stride = lda * int64_t(sizeof(ActQ8));
  auto dot = [&](int64_t b) {
    if ((b - b0) & 1) block_dot<1>(a[b].qs, stride, codes[b - b0], c[1][0]);
    else block_dot<0>(a[b].qs, stride, codes[b - b0], c[0][0]);
  };
  dot(b0);
  for (int64_t b = b0; b < b1; ++b) {
    pf.step();
    if (b + 1 < b1) dot(b + 1);
    const int32_t(*cb)[16] = c[(b - b0) & 1];
    const uint8_t* sc = w + b * I::kBlockBytes;
    const __m512 dw = block_scales<F>(sc);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (I::kMin) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
    for (int i = 0; i < R; ++i) {
      const ActQ8& q = a[i * lda + b];
      const __m512 t = _mm512_cvtepi32_ps(_mm512_load_si512(cb[i]));
      acc[i] = _mm512_fmadd_ps(t, _mm512_mul_ps(dw, _mm512_set1_ps(q.d)), acc[i]);
      if constexpr (I::kMin) acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(q.d * float(q.sum())), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i)
    if (i >= skip) _mm512_mask_storeu_ps(y + i * ldy, last, acc[i]);
}

// Rows [m0, m1) x panels [p0, p1) in groups of R rows (R = rows_per_group, a template
// argument): per panel, chunks of kChunk blocks made into signed codes once, then every
// row group over the chunk. A decode batch (g.stream) prefetches the next chunk while
// the row groups run over this one, so the stream and the arithmetic overlap.
template <Fmt F, int R>
void amx_panels(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  using I = FmtInfo<F>;
  const int64_t ps = panel_bytes(g.type, g.k), nb = g.k / 32;
  const int64_t n_panels = (g.n_out + kPanelRows - 1) / kPanelRows;
  const int64_t rows = m1 - m0, groups = (rows + R - 1) / R;
  const auto* a = static_cast<const ActQ8*>(g.act) + m0 * g.lda;
  use_tiles(R);
  alignas(64) Codes codes[kChunk];
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* w = g.packed + p * ps;
    float* y = g.y + m0 * g.ldy + p * kPanelRows;
    const __mmask16 last = p + 1 == n_panels ? lane_mask(g.n_out - p * kPanelRows) : __mmask16(0xFFFF);
    for (int64_t c0 = 0; c0 < nb; c0 += kChunk) {
      const int64_t c1 = std::min(nb, c0 + kChunk);
      make_codes<F>(w, c0, c1, codes);
      PassPrefetch pf;
      const uint8_t* next = c1 < nb ? w + c1 * I::kBlockBytes : p + 1 < p1 ? w + ps : nullptr;
      if (g.stream && next) {
        const int64_t len = (c1 < nb ? std::min(nb - c1, kChunk) : std::min(nb, kChunk)) * I::kBlockBytes;
        pf.at = reinterpret_cast<const char*>(next);
        pf.end = pf.at + len;
        pf.lines = int32_t((len / 64 + (c1 - c0) - 1) / (c1 - c0));
      }
      for (int64_t gi = 0; gi < groups; ++gi) {
        const int64_t r0 = std::min(gi * R, rows - R);
        row_group<F, R>(w, codes, a + r0 * g.lda, g.lda, c0, c1, y + r0 * g.ldy, g.ldy, last, pf, int(gi * R - r0));
      }
    }
  }
}

// Rows per group: as few groups of at most 16 as the rows allow, all of one size.
template <Fmt F, int... Rs>
void amx_rows(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1, std::integer_sequence<int, Rs...>) {
  const int64_t rows = m1 - m0, groups = (rows + 15) / 16;
  const int r = int((rows + groups - 1) / groups);
  ((r == Rs + 1 ? amx_panels<F, Rs + 1>(g, m0, m1, p0, p1) : void()), ...);
}

template <Fmt F>
void amx_call(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  amx_rows<F>(g, m0, m1, p0, p1, std::make_integer_sequence<int, 16>{});
}

}  // namespace

bool gemm_amx_has(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::MXFP4: return true;
    default: return false;
  }
}

void gemm_panels_amx(const GemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  switch (g.type) {
    case DType::Q8_0: return amx_call<Fmt::Q8_0>(g, m0, m1, p0, p1);
    case DType::Q4_0: return amx_call<Fmt::Q4_0>(g, m0, m1, p0, p1);
    case DType::Q4_1: return amx_call<Fmt::Q4_1>(g, m0, m1, p0, p1);
    case DType::Q5_0: return amx_call<Fmt::Q5_0>(g, m0, m1, p0, p1);
    case DType::Q5_1: return amx_call<Fmt::Q5_1>(g, m0, m1, p0, p1);
    case DType::MXFP4: return amx_call<Fmt::MXFP4>(g, m0, m1, p0, p1);
    default: return;
  }
}

}  // namespace ridge::kernels::detail
