#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <limits>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"

namespace ridge::kernels {

namespace {
std::atomic<int32_t> g_tile_keys{kDefaultAttnTileKeys};
}  // namespace

int32_t attention_tile_keys() { return g_tile_keys.load(std::memory_order_relaxed); }

void set_attention_tile_keys(int32_t keys) {
  RIDGE_CHECK(std::find(std::begin(kAttnTileKeys), std::end(kAttnTileKeys), keys) != std::end(kAttnTileKeys),
              "attention tile keys: {} is not one of 64, 128", keys);
  static_assert(kAttnTileKeys[1] == detail::kMaxTileKeys);
  g_tile_keys.store(keys, std::memory_order_relaxed);
}

int32_t detail::attention_tile_blocks(int32_t block_size, int32_t keys) {
  return block_size >= keys ? 1 : keys / block_size;
}

int32_t detail::attention_tile_lanes(int32_t block_size, int32_t keys) {
  return attention_tile_blocks(block_size, keys) * ((block_size + 15) / 16) * 16;
}

namespace {
// The elements of a block's values in a V tile's layout (v_element), the scalar path's
// copy of a latent cache's (int8: whole four-slot quads).
int64_t values_tile_elements(const KVLayout& l) {
  return int64_t(l.dtype == DType::I8 ? (l.block_size + 3) / 4 * 4 : l.block_size) * l.head_dim_v;
}
// Int8, v_in_k, AVX-512: one block's values in vt, codes ([ceil(bs / 4)][dv][4]) then the
// slots' scales, to a multiple of 64 bytes.
int64_t values_i8_block_bytes(const KVLayout& l) {
  return (values_tile_elements(l) + 4 * int64_t(l.block_size) + 63) / 64 * 64;
}
}  // namespace

// Floats of scratch, for whichever path runs, with bsp = block_size and dkp = head_dim_k
// rounded up to 16, and 16 floats of room to align the start to 64 bytes:
//   kf [max(bsp, tile lanes) * dkp]  one K tile in f32 (scalar path: a block; AVX2: a
//                                    tile of attention_tile_blocks blocks)
//   vf [tile blocks][vn, to 16]      its V tiles in f32 (same): vn = block_size * dv, or a
//                                    scaled dtype's V codes (their padding included)
//   sc [n_q][max(bsp, tile lanes)]   each row's scores, then its probabilities
//   m, l, cr [n_q]                   per row: running max, sum of exp, this tile's rescale
//   [2][tile lanes]                  AVX2, scaled dtypes: the tile's K and V scales
//   [n_q][dk4], [n_q], [n_q]         int8, AVX-512: the query rows' codes (dk4 = head_dim_k
//                                    rounded up to 4, over 4), their corrections and scales,
//   [n_q][tile lanes / 4],           and a tile's 8-bit weights (probabilities times the
//   [n_q][tile lanes / 64, up]       values' scales), their steps (one per kChunkLanes, 128; counted per 64)
//   [dk / 2][n_q], [n_q][128 / 2]    bf16 on AVX512-BF16 (AttnView::bf16_dots): the query rows
//                                    in bf16 pairs, a tile's probabilities in bf16 (16 floats
//                                    of room to align them); F16 on AVX512-FP16
//   [n_q], [n_q]                     (f16_dots) the same in halves, then the rows' factors
//                                    and (E4M3) their weights' factors
// The AVX-512 path's tiles span several blocks: attention_tile_lanes.
int64_t attention_scratch_floats(const KVLayout& l, int32_t n_q) {
  const int64_t bs = l.block_size, bsp = (bs + 15) / 16 * 16, dkp = (l.head_dim_k + 15) / 16 * 16;
  const int64_t lanes = detail::attention_tile_lanes(l.block_size, detail::kMaxTileKeys), row = std::max<int64_t>(bsp, lanes);
  const int64_t vn = l.v_in_k ? values_tile_elements(l) : l.scaled() ? l.v_codes_bytes() : bs * l.head_dim_v;
  const int64_t i8 = l.dtype == DType::I8 ? int64_t(n_q) * ((l.head_dim_k + 3) / 4 + 2 + lanes / 4 + (lanes + 63) / 64) : 0;
  const int64_t tb = detail::attention_tile_blocks(l.block_size, detail::kMaxTileKeys);
  const bool is_fp8 = l.dtype == DType::F8_E4M3 || l.dtype == DType::F8_E5M2;
  const int64_t fp8 = is_fp8 ? detail::fp8_tiles_bytes(l, n_q) / 4 + 16 : 0;  // AMX tiles
  // The vector ways' query pairs and bf16 probabilities (BF16 and FP8).
  const int64_t b16 = l.dtype == DType::BF16 || is_fp8 || l.dtype == DType::F16
                          ? int64_t(n_q) * ((l.head_dim_k + 1) / 2 + detail::kMaxTileKeys / 2 + 2) + 16
                          : 0;
  return 16 + row * dkp + tb * ((vn + 15) / 16 * 16) + int64_t(n_q) * row + 3 * int64_t(n_q) + 2 * lanes + i8 + b16 + fp8 +
         segment_fold_floats(l, n_q) + values_from_keys_floats(l, n_q);
}

namespace {
// RIDGE_ATTN_F16=1 opts in (attention.h says why it is not on by default). Read on first
// use: the KV cache's construction, on the thread that builds the engine (so a bad value
// is an error there, not a worker's throw).
bool f16_arith_from_env() {
  const char* e = std::getenv("RIDGE_ATTN_F16");
  if (!e || !*e) return false;
  const std::string_view v(e);
  RIDGE_CHECK(v == "0" || v == "1", "RIDGE_ATTN_F16={} is not one of 0, 1", v);
  RIDGE_CHECK(v == "0" || (cpu_features().avx512fp16 && active_isa() == Isa::Avx512),
              "RIDGE_ATTN_F16=1 but this CPU path lacks AVX512-FP16 (or RIDGE_ISA is below avx512)");
  RIDGE_CHECK(v == "0" || detail::attention_f16_built(), "RIDGE_ATTN_F16=1 but this build's compiler had no half intrinsics");
  return v == "1";
}
std::atomic<int> g_f16_arith{-1};
}  // namespace
bool detail::attention_f16_arith() {
  int v = g_f16_arith.load(std::memory_order_relaxed);
  if (v < 0) g_f16_arith.store(v = f16_arith_from_env(), std::memory_order_relaxed);
  return v == 1;
}
void detail::set_attention_f16_arith(bool on) { g_f16_arith.store(on, std::memory_order_relaxed); }

detail::AttnDots detail::attention_dots(const KVLayout& l) {
  // The F16 way (opted in) takes an F16 cache, and an E4M3 one where no AMX tiles run.
  const auto halves = [&] {
    return !l.v_in_k && l.block_size % 16 == 0 && l.block_size <= kMaxTileKeys && l.head_dim_k % 32 == 0 &&
           l.head_dim_v % 32 == 0 && active_isa() == Isa::Avx512 && cpu_features().avx512fp16 &&
           attention_f16_built() && attention_f16_arith();
  };
  if (l.dtype == DType::F16) return halves() ? AttnDots::F16 : AttnDots::F32;
  if (l.dtype == DType::F8_E4M3 && !amx_bf16_active() && halves()) return AttnDots::F16;
  const bool fp8 = l.dtype == DType::F8_E4M3 || l.dtype == DType::F8_E5M2;
  const bool shape = (fp8 || l.dtype == DType::BF16) && l.block_size % 16 == 0 && l.head_dim_k % 32 == 0 &&
                     l.head_dim_v % 32 == 0 && active_isa() == Isa::Avx512;
  if (!shape) return AttnDots::F32;
  // (No AMX tiles for a bf16 cache, nor for values in the keys: kv_layout_for keeps FP8's
  // values apart where the tiles run.)
  if (fp8 && amx_bf16_active()) return l.v_in_k ? AttnDots::F32 : AttnDots::Amx;
  // Vectors: a tile's bf16 probabilities have a fixed row stride of kMaxTileKeys.
  return l.block_size <= kMaxTileKeys && fp8_path() == Fp8Path::Bf16 && !amx_bf16_active() ? AttnDots::Bf16
                                                                                             : AttnDots::F32;
}

namespace {
std::atomic<bool> g_fp8_lookup{true};
}
bool detail::fp8_lookup_f32() { return g_fp8_lookup.load(std::memory_order_relaxed) && cpu_features().avx512vbmi; }
void detail::set_fp8_lookup_f32(bool on) { g_fp8_lookup.store(on, std::memory_order_relaxed); }

bool attention_dots_in_bf16(const KVLayout& l) {
  const detail::AttnDots d = detail::attention_dots(l);
  return d == detail::AttnDots::Amx || d == detail::AttnDots::Bf16;
}
bool attention_dots_in_f16(const KVLayout& l) { return detail::attention_dots(l) == detail::AttnDots::F16; }

bool attention_latent_lanes(const KVLayout& l) {
  return l.v_in_k && !(l.dtype == DType::I8) && detail::attention_dots(l) == detail::AttnDots::Bf16;
}

// The tile path's scratch (attention_avx512.cpp, fp8_tiles_*), each part 64-byte aligned:
//   queries [n_q][3][dk] bf16         each row's three parts
//   codes   max(4 groups of [dk / 2][16][2], [lanes / 32][dv / 16][16][2][16]) bf16
//                                     a tile's K of 4 groups of keys, or a head's V, in tile rows
//   probs   [16][2][lanes] bf16       a head's rows' probabilities, two parts
//   sums    [4][16][16] f32           the C tiles stored
// lanes: the tile's score lanes rounded up to 32 (one tile row per pair of keys).
int64_t detail::fp8_tiles_bytes(const KVLayout& l, int32_t n_q) {
  const auto up64 = [](int64_t b) { return (b + 63) / 64 * 64; };
  const int64_t lanes = (detail::attention_tile_lanes(l.block_size, detail::kMaxTileKeys) + 31) / 32 * 32;
  const int64_t dk = l.head_dim_k, dv = l.head_dim_v;
  return 64 + up64(int64_t(n_q) * 3 * dk * 2) + up64(std::max(4 * dk * 32, lanes * dv * 2)) + 16 * 2 * lanes * 2 +
         4 * 16 * 64;
}

bool attention_shares_positions(const KVLayout& l) { return active_isa() == Isa::Avx512 && !l.scaled(); }

void attention_fold(float* o, float* L, const float* oc, float lc, int32_t dv) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (lc == kNegInf) return;
  if (*L == kNegInf) {
    std::copy(oc, oc + dv, o);
    *L = lc;
    return;
  }
  const float m = std::max(*L, lc), a = std::exp(*L - m), b = std::exp(lc - m), sum = a + b;
  const float wa = a / sum, wb = b / sum;
  for (int32_t d = 0; d < dv; ++d) o[d] = o[d] * wa + oc[d] * wb;
  *L = m + std::log(sum);
}

int32_t attention_segment_keys(const KVLayout& l) {
  if (!l.v_in_k) return 0;
  const int32_t keys = std::max(kAttnSegmentKeys, l.block_size);
  for (const int32_t t : kAttnTileKeys)  // whole tiles at every tile size
    if (keys % (l.block_size * detail::attention_tile_blocks(l.block_size, t)) != 0) return 0;
  return keys;
}

int64_t segment_fold_floats(const KVLayout& l, int32_t n_q) {
  return l.v_in_k ? int64_t(n_q) * (l.head_dim_v + 1) + 16 : 0;
}

float* segment_fold_rows(const KVLayout& l, int32_t n_q, float* scratch) {
  const int64_t at = attention_scratch_floats(l, n_q) - values_from_keys_floats(l, n_q) - segment_fold_floats(l, n_q);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch + at) + 63) & ~uintptr_t(63));
}

// v_in_k, AVX-512, at the scratch's end, 64-byte aligned: a tile's values transposed out
// of its K tiles ([tile blocks][block_size][head_dim_v] f32; int8: [tile blocks] of
// values_i8_block_bytes, the V tiles' layout), or for a BF16 or FP8 cache, which may take
// the lanes' P.V (attention_bf16_avx512.h pv_latent), its running outputs ([ceil(n_q /
// 16)][head_dim_v][16] f32) and a tile's probability pairs ([kMaxTileKeys / 2][16]
// words) (FP8: and its latent rows in bf16), whichever is larger.
int64_t values_from_keys_floats(const KVLayout& l, int32_t n_q) {
  if (!l.v_in_k) return 0;
  const int64_t tb = detail::attention_tile_blocks(l.block_size, detail::kMaxTileKeys);
  const int64_t tile = l.dtype == DType::I8 ? tb * values_i8_block_bytes(l) / 4 : tb * l.block_size * l.head_dim_v;
  const bool fp8 = l.dtype == DType::F8_E4M3 || l.dtype == DType::F8_E5M2;
  // FP8's lanes: then a tile's latent rows in bf16 ([tile blocks][dv][block_size]), 64-byte aligned.
  const int64_t lanes = l.dtype == DType::BF16 || fp8
                            ? int64_t(n_q + 15) / 16 * 16 * l.head_dim_v + detail::kMaxTileKeys / 2 * 16 +
                                  (fp8 ? tb * l.block_size * l.head_dim_v / 2 + 16 : 0)
                            : 0;
  return std::max(tile, lanes) + 16;
}

namespace {

// The reference: per row, exactly the arithmetic of a lone row (sequential dot, std::exp),
// with each tile converted once for all rows.
// Segments (AttnArgs::segment): seg_rows the whole call's rows (seg_out's and seg_lse's
// stride per segment, a.seg_out/seg_lse/fold at this head's first row), fold [n_q][dv]
// then [n_q] lse of the call's rows.
void attention_group_scalar(const AttnArgs& a, int32_t kv_head, int32_t n_q, const float* q, int64_t ldq,
                            float* out, int64_t ldo, float* scratch, int32_t seg_rows = 0, float* fold = nullptr,
                            float* fold_lse = nullptr) {
  const KVLayout& l = a.kv->layout();
  const int32_t dk = l.head_dim_k, dv = l.head_dim_v, bs = l.block_size;
  const int64_t esz = int64_t(dtype_info(l.dtype).type_size);
  const int64_t kn = l.k_codes_bytes() / esz;  // elements of a tile
  const int64_t vn = l.v_in_k ? values_tile_elements(l) : l.v_codes_bytes() / esz;
  float* kf = scratch;                  // the cache's K tile layout (k_element)
  float* vf = kf + kn;                  // and V's (v_element)
  float* s = vf + vn;                   // [bs]
  float* m = s + (bs + 15) / 16 * 16;   // [n_q]
  float* sum = m + n_q;                 // [n_q]

  for (int32_t i = 0; i < n_q; ++i) {
    m[i] = -std::numeric_limits<float>::infinity();
    sum[i] = 0.f;
    for (int32_t d = 0; d < dv; ++d) out[i * ldo + d] = 0.f;
  }

  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Normalizes the rows of segment c (the whole context's when there are none) and keeps
  // or folds them (AttnArgs::segment); last: the call's final ones.
  const auto finish = [&](int32_t c, bool last) {
    for (int32_t i = 0; i < n_q; ++i) {
      float inv = sum[i] > 0.f ? 1.f / sum[i] : 0.f;
      if (a.sinks) {  // the sink's term in the denominator, all taken relative to the larger max
        const float mx = std::max(m[i], a.sinks[i]), c = std::exp(m[i] - mx);
        inv = c / (sum[i] * c + std::exp(a.sinks[i] - mx));
      }
      float* o = out + i * ldo;
      for (int32_t d = 0; d < dv; ++d) o[d] *= inv;
      const float lse = sum[i] > 0.f ? m[i] + std::log(sum[i]) : kNegInf;
      if (a.segment > 0 && a.seg_out) {
        std::copy(o, o + dv, a.seg_out + (int64_t(c) * seg_rows + i) * dv);
        a.seg_lse[int64_t(c) * seg_rows + i] = lse;
      } else if (a.segment > 0 && (c > 0 || !last)) {
        if (c == 0) std::copy(o, o + dv, fold + int64_t(i) * dv), fold_lse[i] = lse;
        else attention_fold(fold + int64_t(i) * dv, fold_lse + i, o, lse, dv);
        if (last) std::copy(fold + int64_t(i) * dv, fold + int64_t(i + 1) * dv, o);
      }
      if (a.lse) a.lse[i] = a.segment > 0 && !a.seg_out && c > 0 ? fold_lse[i] : lse;
      if (!last) {
        m[i] = kNegInf, sum[i] = 0.f;
        for (int32_t d = 0; d < dv; ++d) o[d] = 0.f;
      }
    }
  };
  const int32_t n_tiles = (a.n_ctx + bs - 1) / bs;
  const int32_t lo = a.window > 0 ? std::max(0, a.n_ctx - a.window) : 0;  // the window's first position
  const int32_t seg_blocks = a.segment > 0 ? a.segment / bs : 0;
  for (int32_t t = lo / bs; t < n_tiles; ++t) {
    if (seg_blocks > 0 && t > 0 && t % seg_blocks == 0) finish(t / seg_blocks - 1, false);
    const int32_t block = a.block_table[size_t(t)];
    const int32_t n = std::min(bs, a.n_ctx - t * bs);
    const int32_t j0 = std::max(0, lo - t * bs);  // keys before it are not attended
    // A head's tiles are contiguous: one conversion each (slots past n too, unread).
    to_f32(l.dtype, a.kv->k_tile(a.layer, block, kv_head), kf, kn);
    if (l.v_in_k) {  // the values are the keys' last dv dimensions
      for (int32_t j = 0; j < n; ++j)
        for (int32_t d = 0; d < dv; ++d) vf[l.v_element(j, d)] = kf[l.k_element(l.v_dim0() + d, j)];
    } else {
      to_f32(l.dtype, a.kv->v_tile(a.layer, block, kv_head), vf, vn);
    }
    if (l.scaled()) {  // codes times their position's scale (kv_view.h)
      const float* sk = a.kv->k_scales(a.layer, block, kv_head);
      const float* sv = a.kv->v_scales(a.layer, block, kv_head);
      for (int32_t d = 0; d < dk; ++d)
        for (int32_t j = 0; j < n; ++j) kf[l.k_element(d, j)] *= sk[j];
      for (int32_t j = 0; j < n; ++j)
        for (int32_t d = 0; d < dv; ++d) vf[l.v_element(j, d)] *= sv[j];
    }
    for (int32_t i = 0; i < n_q; ++i) {
      const float* qi = q + i * ldq;
      float* o = out + i * ldo;
      float tile_max = -std::numeric_limits<float>::infinity();
      for (int32_t j = j0; j < n; ++j) {
        float dot = 0.f;
        for (int32_t d = 0; d < dk; ++d) dot += qi[d] * kf[l.k_element(d, j)];
        s[j] = dot * a.scale;
        tile_max = std::max(tile_max, s[j]);
      }
      const float m_new = std::max(m[i], tile_max);
      const float corr = std::exp(m[i] - m_new);  // 0 on the first tile (m = -inf)
      sum[i] *= corr;
      for (int32_t d = 0; d < dv; ++d) o[d] *= corr;
      for (int32_t j = j0; j < n; ++j) {
        const float p = std::exp(s[j] - m_new);
        sum[i] += p;
        for (int32_t d = 0; d < dv; ++d) o[d] += p * vf[l.v_element(j, d)];
      }
      m[i] = m_new;
    }
  }
  finish(seg_blocks > 0 && n_tiles > 0 ? (n_tiles - 1) / seg_blocks : 0, true);
}

// The K pieces of the first tile `a` reads (its first row's window start on), as
// group<> in attention_avx512.cpp tiles it with v's tile keys.
void next_first_keys(const AttnArgs& a, int32_t kv_head, int32_t n_heads, detail::AttnView& v) {
  const KVLayout& l = a.kv->layout();
  const int32_t bs = l.block_size, ctx0 = a.row_ctx.empty() ? a.n_ctx : a.row_ctx.front();
  const int32_t first = a.window > 0 ? std::max(0, ctx0 - a.window) : 0;
  const int32_t n_blk = std::min<int32_t>((a.n_ctx + bs - 1) / bs, int32_t(a.block_table.size()));
  const int32_t tb = detail::attention_tile_blocks(bs, v.tile_keys), live = first / bs;
  v.next_k0 = a.kv->k_tile(a.layer, 0, kv_head);
  v.next_blocks = a.block_table.data();
  v.next_k_block_stride = a.kv->k_block_bytes();
  v.next_k_bytes = int64_t(n_heads) * a.kv->k_head_bytes();
  v.next_b0 = std::min(live, n_blk);
  v.next_b1 = std::max(v.next_b0, std::min((live / tb + 1) * tb, n_blk));
}

}  // namespace

void attention_heads(const AttnArgs& a, int32_t kv_head, int32_t n_heads, int32_t group, const float* q, int64_t ldq,
                     float* out, int64_t ldo, float* scratch, const AttnNext& next) {
  const KVLayout& l = a.kv->layout();
  RIDGE_CHECK(a.n_ctx >= 0 && int64_t(a.block_table.size()) * l.block_size >= a.n_ctx,
              "attention: {} positions but the block table covers {}", a.n_ctx,
              int64_t(a.block_table.size()) * l.block_size);
  RIDGE_CHECK(kv_head >= 0 && n_heads >= 1 && kv_head + n_heads <= l.n_kv_head && group >= 1,
              "attention: KV heads [{}, {}) of {}", kv_head, kv_head + n_heads, l.n_kv_head);
  RIDGE_CHECK(a.window >= 0, "attention: window {} is negative", a.window);
  RIDGE_CHECK(!(a.lse && a.sinks), "attention: a part's log-sum-exp with attention sinks");
  RIDGE_CHECK(a.segment == 0 || (a.segment == attention_segment_keys(l) && a.window == 0 && a.row_ctx.empty() && !a.sinks),
              "attention: segments of {} positions (this layout's: {}) with a window, row contexts or sinks", a.segment,
              attention_segment_keys(l));
  RIDGE_CHECK(!a.seg_out == !a.seg_lse, "attention: a segment's rows kept without their log-sum-exp");
  const Isa isa = active_isa();
  if (!a.row_ctx.empty()) {
    RIDGE_CHECK(int32_t(a.row_ctx.size()) == group && a.row_ctx.back() == a.n_ctx && a.row_ctx.front() >= 1 &&
                    std::is_sorted(a.row_ctx.begin(), a.row_ctx.end()),
                "attention: row contexts must be {} ascending counts ending at {}", group, a.n_ctx);
    if (!attention_shares_positions(l)) {
      AttnArgs one = a;
      one.row_ctx = {};
      for (int32_t h = 0; h < n_heads; ++h)
        for (int32_t i = 0; i < group; ++i) {
          one.n_ctx = a.row_ctx[size_t(i)];
          const int64_t r = int64_t(h) * group + i;
          if (a.sinks) one.sinks = a.sinks + r;
          if (a.lse) one.lse = a.lse + r;
          attention_heads(one, kv_head + h, 1, 1, q + r * ldq, ldq, out + r * ldo, ldo, scratch);
        }
      return;
    }
  }
  // Values kept in the keys have an AVX-512 kernel; on AVX2 they run the portable path.
  if (isa == Isa::Scalar || (isa == Isa::Avx2 && l.v_in_k)) {
    const int32_t rows = n_heads * group;
    float* fold = a.segment > 0 ? segment_fold_rows(l, rows, scratch) : nullptr;
    for (int32_t h = 0; h < n_heads; ++h) {
      AttnArgs ah = a;
      const int64_t r0 = int64_t(h) * group;
      if (a.sinks) ah.sinks = a.sinks + r0;
      if (a.lse) ah.lse = a.lse + r0;
      if (a.seg_out) ah.seg_out = a.seg_out + r0 * l.head_dim_v, ah.seg_lse = a.seg_lse + r0;
      attention_group_scalar(ah, kv_head + h, group, q + r0 * ldq, ldq, out + r0 * ldo, ldo, scratch, rows,
                             fold ? fold + r0 * l.head_dim_v : nullptr, fold ? fold + int64_t(rows) * l.head_dim_v + r0 : nullptr);
    }
    return;
  }
  detail::AttnView v;
  v.k0 = a.kv->k_tile(a.layer, 0, kv_head);
  v.v0 = a.kv->v_tile(a.layer, 0, kv_head);
  v.k_block_stride = a.kv->k_block_bytes();
  v.v_block_stride = a.kv->v_block_bytes();
  v.k_head_stride = a.kv->k_head_bytes();
  v.v_head_stride = a.kv->v_head_bytes();
  v.k_scales_off = a.kv->k_codes_bytes();
  v.v_scales_off = a.kv->v_codes_bytes();
  v.blocks = a.block_table.data();
  v.n_ctx = a.n_ctx;
  v.block_size = l.block_size;
  v.dk = l.head_dim_k;
  v.dv = l.head_dim_v;
  v.dtype = l.dtype;
  v.tile_keys = attention_tile_keys();
  v.scale = a.scale;
  v.first = a.window > 0 ? std::max(0, a.n_ctx - a.window) : 0;
  v.window = a.window;
  if (l.v_in_k) {
    v.v_dim0 = l.v_dim0();
    const int64_t tail = attention_scratch_floats(l, n_heads * group) - values_from_keys_floats(l, n_heads * group);
    v.vt = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch + tail) + 63) & ~uintptr_t(63));
    v.vt_block_bytes = l.dtype == DType::I8 ? values_i8_block_bytes(l) : 0;
  }
  if (isa == Isa::Avx512) {
    const detail::AttnDots dots = detail::attention_dots(l);
    v.bf16_dots = dots == detail::AttnDots::Bf16;
    v.f16_dots = dots == detail::AttnDots::F16;
    v.fp8_lookup = dots == detail::AttnDots::F32 && detail::fp8_lookup_f32();
    if (dots == detail::AttnDots::Amx) {
      const int64_t at = attention_scratch_floats(l, n_heads * group) - values_from_keys_floats(l, n_heads * group) -
                         segment_fold_floats(l, n_heads * group) - (detail::fp8_tiles_bytes(l, n_heads * group) / 4 + 16);
      v.tiles = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch + at) + 63) & ~uintptr_t(63));
    }
    v.n_heads = n_heads;
    v.row_ctx = a.row_ctx.empty() ? nullptr : a.row_ctx.data();
    v.sinks = a.sinks;
    v.lse = a.lse;
    if (a.segment > 0) {
      v.seg_tiles = a.segment / (l.block_size * detail::attention_tile_blocks(l.block_size, v.tile_keys));
      v.seg_out = a.seg_out, v.seg_lse = a.seg_lse, v.seg_rows = n_heads * group;
      v.fold = segment_fold_rows(l, n_heads * group, scratch);
    }
    if (next.args) next_first_keys(*next.args, next.kv_head, next.n_heads, v);
    return detail::attention_group_avx512(v, n_heads * group, q, ldq, out, ldo, scratch);
  }
  for (int32_t h = 0; h < n_heads; ++h) {  // one head per call on AVX2
    v.sinks = a.sinks ? a.sinks + int64_t(h) * group : nullptr;
    v.lse = a.lse ? a.lse + int64_t(h) * group : nullptr;
    detail::attention_group_avx2(v, group, q + int64_t(h) * group * ldq, ldq, out + int64_t(h) * group * ldo, ldo,
                                 scratch);
    v.k0 += v.k_head_stride;
    v.v0 += v.v_head_stride;
  }
}

void attention_group(const AttnArgs& a, int32_t kv_head, int32_t n_q, const float* q, int64_t ldq, float* out,
                     int64_t ldo, float* scratch) {
  attention_heads(a, kv_head, 1, n_q, q, ldq, out, ldo, scratch);
}

AttnHeadRuns attention_head_runs(int64_t tokens, int32_t n_kv_head, int32_t threads) {
  // Heads cost the same, so the split only has to make the task count a multiple of the
  // threads (even shares), or large enough that the uneven last round is small. Runs of
  // ceil(n_kv_head / s) heads make exactly s tasks only for some s: walk the run lengths.
  const int64_t t = std::max<int64_t>(tokens, 1), th = std::max(threads, 1);
  const int32_t nkv = std::max(n_kv_head, 1);
  for (int32_t run = nkv; run > 1; --run) {
    const int32_t s = (nkv + run - 1) / run;
    if ((t * s) % th == 0 || t * s >= 4 * th) return {s, (nkv + s - 1) / s};
  }
  return {nkv, 1};
}

AttnQuerySplit attention_query_split(const AttnHeadRuns& hr, int64_t tokens, int32_t group, int32_t threads) {
  const int64_t tasks = std::max<int64_t>(tokens * hr.splits, 1);
  const int32_t want = hr.run == 1 && tasks < threads && group > 1
                           ? int32_t(std::min<int64_t>(group, (threads + tasks - 1) / tasks))
                           : 1;
  const int32_t rows = (group + want - 1) / want;
  return {(group + rows - 1) / rows, rows};
}

AttnTasks::AttnTasks(int64_t tokens_, int32_t n_kv_head_, int32_t group_, int32_t threads)
    : hr(attention_head_runs(tokens_, n_kv_head_, threads)),
      qs(attention_query_split(hr, tokens_, group_, threads)),
      tokens(tokens_),
      n_kv_head(n_kv_head_),
      group(group_) {}

AttnTasks::Task AttnTasks::operator[](int64_t task) const {
  const int32_t part = int32_t(task % qs.parts);
  const int32_t h0 = int32_t(task / qs.parts % hr.splits) * hr.run;
  // qs.parts > 1: one KV head h0, query heads [part * qs.rows, +rows) of its group
  const int32_t r0 = qs.parts > 1 ? part * qs.rows : 0, rows = qs.parts > 1 ? std::min(qs.rows, group - r0) : group;
  return Task{task / qs.parts / hr.splits, h0, qs.parts > 1 ? 1 : std::min(hr.run, n_kv_head - h0), r0, rows};
}

void attention_row(const AttnArgs& a, int32_t kv_head, const float* q, float* out, float* scratch) {
  attention_group(a, kv_head, 1, q, 0, out, 0, scratch);
}

}  // namespace ridge::kernels
