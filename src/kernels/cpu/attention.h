// Attention of query rows over a sequence's paged K/V, tiled by KV block with an online
// softmax (FlashAttention-style: no score row longer than a block is ever held).
// Tiles are the cache blocks themselves, aligned to absolute positions (a window's start
// from its first block), and the query reads exactly positions [0, n_ctx) (or its
// window's): a prefill row and a decode row at the same position run the same arithmetic
// in the same order, bit for bit.
//
// The query heads of one GQA group share a call, so each K/V tile is read from the cache
// and converted to f32 once for all of them. A row's arithmetic never depends on how many
// rows share the call or which: on one ISA, attention_group over n_q rows gives the same
// bits as n_q calls with one row each. Across ISAs (RIDGE_ISA) results agree within
// rounding only (summation order and exp differ; int8 on AVX-512 quantizes the queries
// and the probabilities too).
#pragma once
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/kv_view.h"

namespace ridge::kernels {

struct AttnArgs {
  const KVView* kv = nullptr;
  int32_t layer = 0;
  std::span<const int32_t> block_table;
  int32_t n_ctx = 0;   // attend to positions [0, n_ctx)
  float scale = 1.f;   // 1/sqrt(head_dim)
  // A block of one sequence's consecutive prompt positions in one call: row i of every
  // head attends to [0, row_ctx[i]) (ascending; the last is n_ctx), so each K/V tile is
  // read once for all of them (prefill without shared query heads: multi-head attention).
  // A row's bits are those of a lone row with n_ctx = row_ctx[i] (while the cache holds
  // finite values: a later position's Inf or NaN value, weighted by a probability of 0,
  // would reach the earlier rows of its block). Empty: every row n_ctx.
  std::span<const int32_t> row_ctx;
  // A sliding window: a row attends only to its last `window` positions, [max(0, n_ctx -
  // window), n_ctx) (llama.cpp's standard window: key p0 is masked from query p1 when
  // p1 - p0 >= window); 0: every position. With row_ctx each row has its own window
  // (AVX-512; elsewhere such calls run row by row). A row's bits are those of its lone
  // call while the cache holds finite values (the rows sharing a tile read the keys of
  // the earliest window among them, weighted 0 for the later ones).
  int32_t window = 0;
  // Attention sinks (gpt-oss): a learned logit per query head, a key without a value in
  // every row's softmax: out = sum_j e^(s_j - M) v_j / (sum_j e^(s_j - M) + e^(sink - M)),
  // M the larger of the row's max score and its sink (the sink is not scaled). [rows of
  // the call, in q's order] or null.
  const float* sinks = nullptr;
  // Each row's log-sum-exp of its scaled scores, m + ln(sum e^(s_j - m)) (-inf where
  // the sum is 0), written beside the normalized output: what a part of a context's
  // result needs to be folded with the other parts' (attention_step.h). [rows of the
  // call, in q's order] or null. Not with sinks (a sink belongs to the whole context).
  float* lse = nullptr;
  // Segments (latent attention, attention_step.h): the call's context cut every `segment`
  // positions from its first, each segment its own softmax from an empty state, exactly
  // as a call over that segment alone. 0: one. Without seg_out the segments' rows are
  // folded into out in position order (attention_fold; lse the fold's); with it each
  // segment's normalized rows are kept, segment c's at seg_out + c x rows x dv (rows of
  // the call, dv apart) and its lse at seg_lse + c x rows, and out is scratch. A whole
  // number of tiles for every tile size (attention_segment_keys); no window, row
  // contexts or sinks.
  int32_t segment = 0;
  float* seg_out = nullptr;
  float* seg_lse = nullptr;
};

// Positions per segment of this layout's latent attention (AttnArgs::segment): a whole
// number of tiles at every tile size (kAttnTileKeys); 0: no segments (values in their
// own tiles, or a block size whose tiles do not divide them).
inline constexpr int32_t kAttnSegmentKeys = 512;
int32_t attention_segment_keys(const KVLayout& l);

// Row o (with L, the log-sum-exp of its scores) folded with a later segment's row oc (lc):
// both rescaled to their joint normalizer, L updated. A segment with no weight (lc =
// -inf) leaves it; an o with none takes oc. Portable and out of line, so every path and
// plan runs the same instructions in the same order.
void attention_fold(float* o, float* L, const float* oc, float lc, int32_t dv);

// Whether a call with AttnArgs::row_ctx shares each tile among its rows on the active
// ISA (AVX-512, unscaled dtypes); elsewhere it runs row by row, and callers do better
// with their own per-row tasks.
bool attention_shares_positions(const KVLayout& l);

// Whether the active ISA's attention multiplies this layout's codes in bf16 pairs
// (detail::attention_dots: AVX512-BF16 vectors or AMX-BF16 tiles) rather than in f32
// FMAs: its arithmetic's roof is then the bf16 dot peak (the roofline's op class).
bool attention_dots_in_bf16(const KVLayout& l);
// Whether it multiplies them in halves on AVX512-FP16 (detail::AttnDots::F16): the roof
// is then the fp16 FMA peak.
bool attention_dots_in_f16(const KVLayout& l);
// Whether a latent cache's (KVLayout::v_in_k) P.V puts the query rows across the vector
// lanes (BF16 and FP8 on AVX512-BF16 vectors; attention_bf16_avx512.h pv_latent): a call's rows
// then cost P.V's work in whole groups of 16, and no values are transposed.
bool attention_latent_lanes(const KVLayout& l);

// Keys per step of the SIMD paths' online softmax (detail::attention_tile_blocks): one of
// kAttnTileKeys. It changes the order of a row's softmax steps, so the bits of a result
// (within the kernels' tolerance), never which rows a row's bits depend on. The default
// was measured faster on the CPUs it was timed on (docs/BENCHMARKS.md); `ridge
// tune-kernels` times both and the process applies its choice at start
// (tools/kernel_cache.h). Set between calls only, never during one.
inline constexpr int32_t kAttnTileKeys[] = {64, 128};
inline constexpr int32_t kDefaultAttnTileKeys = 128;
int32_t attention_tile_keys();
void set_attention_tile_keys(int32_t keys);  // not one of kAttnTileKeys: an error

// Floats of scratch one call with n_q query rows needs (any ISA, any tile keys).
int64_t attention_scratch_floats(const KVLayout& l, int32_t n_q);
// Of those, the values read out of the keys (KVLayout::v_in_k) take the last, and the
// segments' fold (AttnArgs::segment) the floats before them.
int64_t values_from_keys_floats(const KVLayout& l, int32_t n_q);
int64_t segment_fold_floats(const KVLayout& l, int32_t n_q);
float* segment_fold_rows(const KVLayout& l, int32_t n_q, float* scratch);  // [n_q][dv], then [n_q] lse

// n_q query heads that all read KV head kv_head: q[n_q][head_dim_k] with rows ldq floats
// apart -> out[n_q][head_dim_v] with rows ldo floats apart. scratch: attention_scratch_floats.
void attention_group(const AttnArgs& a, int32_t kv_head, int32_t n_q, const float* q, int64_t ldq, float* out,
                     int64_t ldo, float* scratch);

// The query rows of n_heads consecutive KV heads [kv_head, kv_head + n_heads), `group`
// rows per head, head h's after head h - 1's: q[n_heads * group][head_dim_k] -> out[same]
// [head_dim_v]. A block's K/V tiles of those heads are one piece in the cache, read once
// per call. Same per-row arithmetic as attention_group (bit for bit), whatever n_heads is.
// scratch: attention_scratch_floats(layout, n_heads * group).
// next: the call this thread makes after this one (ThreadPool::run_ahead), whose first
// tile's keys this call asks for during its own last tile (the AVX-512 kernel), so the
// next call does not start on keys still in DRAM. A hint: it changes no result, and it
// may name any call.
struct AttnNext {
  const AttnArgs* args = nullptr;  // null: none
  int32_t kv_head = 0, n_heads = 1;
};
void attention_heads(const AttnArgs& a, int32_t kv_head, int32_t n_heads, int32_t group, const float* q, int64_t ldq,
                     float* out, int64_t ldo, float* scratch, const AttnNext& next = {});

// How to split each token's KV heads into runs, one task each, so that `threads` threads
// get even shares: the fewest runs (the longest pieces) that make the task count a
// multiple of the threads or at least 4 per thread. Decode of one sequence on 2 threads:
// 2 runs. Run i covers heads [i * run, min((i + 1) * run, n_kv_head)), never empty.
struct AttnHeadRuns {
  int32_t splits = 1;  // runs per token
  int32_t run = 1;     // KV heads per run (the last may have fewer)
};
AttnHeadRuns attention_head_runs(int64_t tokens, int32_t n_kv_head, int32_t threads);

// Fewer (token, head run) tasks than threads, one KV head each (a decode of few KV heads;
// latent attention's one): a group's query heads split among the threads too, each part
// reading the tiles itself. A row's arithmetic does not depend on which rows share its
// call, so the split changes no bits. parts = 1: no split.
struct AttnQuerySplit {
  int32_t parts = 1;  // per task
  int32_t rows = 0;   // query heads per part (the last may have fewer), never empty
};
AttnQuerySplit attention_query_split(const AttnHeadRuns& hr, int64_t tokens, int32_t group, int32_t threads);

// A step's attention as tasks, the runs and parts above together: task i is token
// i / (splits x parts)'s KV heads [h0, h0 + n) and, of each head's group, query rows
// [r0, r0 + rows) (rows <= 0: none, a part past the group). The CPU backend runs these,
// and `ridge bench kernels` the same ones.
struct AttnTasks {
  struct Task {
    int64_t token;
    int32_t h0, n, r0, rows;
  };
  AttnHeadRuns hr;
  AttnQuerySplit qs;
  int64_t tokens = 0;
  int32_t n_kv_head = 1, group = 1;

  AttnTasks(int64_t tokens, int32_t n_kv_head, int32_t group, int32_t threads);
  int64_t count() const { return tokens * hr.splits * qs.parts; }
  Task operator[](int64_t task) const;
  int32_t rows_per_call() const { return hr.run * (qs.parts > 1 ? qs.rows : group); }  // for the scratch
};

// One query row: attention_group with n_q = 1.
void attention_row(const AttnArgs& a, int32_t kv_head, const float* q, float* out, float* scratch);

namespace detail {

// What the SIMD files see of the cache: plain pointers and sizes, no inline function of a
// shared header (an ISA file's out-of-line copy of one could be kept by the linker for
// baseline callers too).
struct AttnView {
  const uint8_t* k0 = nullptr;  // K tile [dk][block_size] of (layer, block 0, kv_head)
  const uint8_t* v0 = nullptr;  // V tile [block_size][dv] of the same (int8: v_element)
  int64_t k_block_stride = 0;   // bytes from one block's K of this head to the next block's
  int64_t v_block_stride = 0;
  int64_t k_head_stride = 0;    // bytes from one head's K tile to the next head's
  int64_t v_head_stride = 0;
  int32_t n_heads = 1;          // the call's rows: n_heads heads of n_q / n_heads rows
  const int32_t* blocks = nullptr;  // block table
  int32_t n_ctx = 0, block_size = 0, dk = 0, dv = 0;
  DType dtype = DType::F16;  // F32, F16, BF16, or a scaled one: I8, F8_E4M3, F8_E5M2
  int64_t k_scales_off = 0;  // scaled dtypes: bytes from a head's K (V) tile to its scales
  int64_t v_scales_off = 0;
  float scale = 1.f;
  // KVLayout::v_in_k: values are K dimensions [v_dim0, v_dim0 + dv) (v0 unused), and vt
  // values_from_keys_floats of scratch (a tile's values in f32, int8's in V tiles' layout,
  // or the BF16 and FP8 vectors' outputs by lanes, FP8's latent rows in bf16 after them);
  // else -1.
  int32_t v_dim0 = -1;
  float* vt = nullptr;
  int64_t vt_block_bytes = 0;  // int8: bytes from one block's values in vt to the next's
  // AttnArgs::row_ctx, [rows per head] (unscaled dtypes, AVX-512), or null.
  const int32_t* row_ctx = nullptr;
  int32_t window = 0;  // AttnArgs::window (AVX-512: each row's own, from its n_ctx or row_ctx)
  // The first position in the window (AVX2, one row context): earlier blocks are not
  // read, earlier keys of its block get probability 0.
  int32_t first = 0;
  const float* sinks = nullptr;  // AttnArgs::sinks, [n_q]
  float* lse = nullptr;          // AttnArgs::lse, [n_q]
  // AttnArgs::segment in tiles (0: none), seg_out and seg_lse (for head h's rows the
  // call's, at h x group), and the fold's rows [n_q][dv] and lse [n_q] in scratch.
  int32_t seg_tiles = 0;
  float* seg_out = nullptr;
  float* seg_lse = nullptr;
  int32_t seg_rows = 0;          // rows of the whole call: seg_out's segment stride is seg_rows x dv
  float* fold = nullptr;
  // FP8 dtypes with their codes as bf16 tile rows on AMX (attention_dots Amx): that
  // path's scratch, 64-byte aligned; null: another way.
  uint8_t* tiles = nullptr;
  // A BF16 or FP8 cache with its dots on AVX512-BF16 vectors (attention_dots Bf16:
  // attention_bf16_avx512.h, attention_fp8_vec_avx512.h).
  bool bf16_dots = false;
  // An F16 cache with its dots in half arithmetic on AVX512-FP16 (attention_dots F16:
  // attention_f16_avx512.h).
  bool f16_dots = false;
  // An FP8 cache on the f32 path (AttnDots::F32) with its codes made f32 by byte lookups
  // (attention_fp8_f32_avx512.h; fp8_lookup_f32()): the half conversion's bits for every
  // finite result, fewer instructions.
  bool fp8_lookup = false;
  // attention_tile_keys() read once per call: every layout of the call follows it.
  int32_t tile_keys = kDefaultAttnTileKeys;
  // AttnNext: the next call's K pieces to ask for during the last tile, blocks
  // [next_b0, next_b1) of next_blocks at next_k0 + block * next_k_block_stride, of
  // next_k_bytes each (b0 = b1: none).
  const uint8_t* next_k0 = nullptr;
  const int32_t* next_blocks = nullptr;
  int64_t next_k_block_stride = 0, next_k_bytes = 0;
  int32_t next_b0 = 0, next_b1 = 0;
};

// How an FP8 or BF16 cache's AVX-512 attention multiplies:
//  - Amx (FP8): each tile's codes converted once to their exact bf16 values, laid out as
//    AMX-BF16 tile rows (attention_fp8_tiles_avx512.h; core/cpu.h amx_bf16_active), the
//    f32 query and probabilities split into bf16 parts that sum to them: the f32 path's
//    results up to summation order.
//  - Bf16: on AVX512-BF16 vectors (vdpbf16ps; core/cpu.h fp8_path() == Bf16, a CPU without
//    the tiles), the cache's elements as bf16 pairs in registers, straight from the
//    cache (BF16: a word permute, attention_bf16_avx512.h; FP8: a byte permute and the
//    exact lookup, attention_fp8_vec_avx512.h), the query and the probabilities rounded
//    to bf16 once, as the FP8 weights' bf16 path rounds activations: half the f32 path's
//    multiply instructions. The rounding (2^-8 of each operand) is a few percent of what
//    the E4M3 codes' own (2^-4) does to a score, and what a GPU's bf16 attention does to
//    a BF16 cache's; every row's result is still its own alone (batch invariance). Taken
//    only where the AMX tiles are not active (nor, for E4M3, the opted-in F16 way below,
//    which is taken before it): on the Intel CPU measured vdpbf16ps ran at
//    half the FMA's rate, on Zen 5 at twice it (docs/BENCHMARKS.md), and tiles for BF16
//    are not built.
//  - F32: codes converted to f32 and FMAs (any other shape, or neither unit).
// The bf16 ways need blocks of a multiple of 16 slots (vectors: at most kMaxTileKeys, the
// probabilities' row stride) and head dimensions of a multiple of 32 (a BF16 cache's
// values may lie in its keys, KVLayout::v_in_k: P.V then broadcasts their pairs from the
// keys' rows against the rows across the lanes); scratch then holds fp8_tiles_bytes more (FP8; attention_scratch_floats counts
// them). Whatever the rows of a call (units of 16).
//  - F16 (an F16 cache, or an E4M3 one where the AMX tiles are not active): on AVX512-FP16
//    vectors (vfmadd231ph), the cache's halves as they are (E4M3: its codes made halves
//    of their values x 2^-8, the scales applied in f32), the query and the probabilities
//    (E4M3: the weights, each row by a power of two per tile) rounded to halves once,
//    products summed in halves over short chunks and then in f32
//    (attention_f16_avx512.h). Where the CPU has the instructions and
//    attention_f16_arith() is on (RIDGE_ATTN_F16=1: an accuracy trade the user opts
//    into).
enum class AttnDots { F32, Amx, Bf16, F16 };
AttnDots attention_dots(const KVLayout& l);
// The F16 way's products are summed in halves over chunks before they are summed in f32:
// kF16ScoreDims consecutive dimensions of a score (dividing 32), kF16ValueKeys positions
// of an output (a power of two; chunks from each tile's first position, tiles lying at
// fixed positions). Longer chunks, fewer conversions; shorter, less rounding
// (tests/unit/attention_f16_emulation.h, test_attention_f16.cpp).
constexpr int32_t kF16ScoreDims = 32;
constexpr int32_t kF16ValueKeys = 32;
// Whether the f32 path converts FP8 codes by VBMI byte lookups (AttnView::fp8_lookup): where
// the CPU has VBMI, unless a test turned it off to run the half conversion it must match.
bool fp8_lookup_f32();
void set_fp8_lookup_f32(bool on);  // tests; capped at what the CPU has
int64_t fp8_tiles_bytes(const KVLayout& l, int32_t n_q);
// Whether an F16 (or E4M3) cache takes the F16 way where the layout allows it (AttnDots::F16): off
// unless RIDGE_ATTN_F16=1 (read at the first KV cache's construction; on a CPU without
// AVX512-FP16, or with RIDGE_ISA below avx512, an error). An accuracy trade, the user's
// call as a cache dtype is, never the tuner's: its scores move by a few 2^-11 of
// sum |q_d k_d| where the f32 way's move by f32 rounding, which on models with large
// attention logits is enough to part from llama.cpp's greedy tokens where their margin
// is clear (docs/BENCHMARKS.md, session 52). Tests set it; between calls only.
bool attention_f16_arith();
void set_attention_f16_arith(bool on);
// Whether this build has the F16 way (attention_f16_avx512.h: a compiler that gives the
// half intrinsics to a function's target attribute).
bool attention_f16_built();

// The SIMD paths' online-softmax step: a tile of whole blocks, aligned to absolute
// positions, of about `keys` keys (max(1, keys / block_size) blocks), so the per-step
// bookkeeping (max and sum trees, rescale exp, the output's load and store, the 8-bit
// dtypes' weight passes) is paid once per tile instead of once per block. The key count
// is a tuned parameter (attention_tile_keys); scratch is sized for the largest candidate,
// so it may change between calls.
constexpr int32_t kMaxTileKeys = 128;
int32_t attention_tile_blocks(int32_t block_size, int32_t keys = attention_tile_keys());
// Score lanes per row of such a tile: each block's slots padded to groups of 16 lanes.
int32_t attention_tile_lanes(int32_t block_size, int32_t keys = attention_tile_keys());

void attention_group_avx512(const AttnView& v, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo,
                            float* scratch);
void attention_group_avx2(const AttnView& v, int32_t n_q, const float* q, int64_t ldq, float* out, int64_t ldo,
                          float* scratch);

// The AVX-512 path's conversion of 8-bit codes (I8, F8_E4M3, F8_E5M2) to their values,
// over an array (for tests: every code against the scalar definition).
void kv_codes_to_f32_avx512(DType t, const uint8_t* src, float* dst, int64_t n);
// The AVX2 path's, in the codes' values (its kernel keeps E4M3's in units of 2^-8).
void kv_codes_to_f32_avx2(DType t, const uint8_t* src, float* dst, int64_t n);

// The vector exp the SIMD paths use for the softmax, over an array (for tests).
void exp_avx512(const float* x, float* y, int64_t n);
void exp_avx2(const float* x, float* y, int64_t n);

}  // namespace detail
}  // namespace ridge::kernels
