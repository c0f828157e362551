#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/cpu.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "model/tp_shard.h"

namespace ridge {

KVLayout kv_layout_for(const HParams& h, int32_t block_size, int32_t n_blocks, DType dtype) {
  KVLayout l{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, block_size, n_blocks, dtype};
  // Only the AVX-512 attention reads values out of keys at speed (the others run the
  // portable path for it): elsewhere the latent is kept twice. So is FP8's where AMX
  // tiles run its attention (they read values from V tiles only).
  const bool fp8 = dtype == DType::F8_E4M3 || dtype == DType::F8_E5M2;
  l.v_in_k = h.mla() && best_isa() == Isa::Avx512 && l.values_in_keys_allowed() && !(fp8 && amx_bf16_active());
  return l;
}

KvGroups kv_groups_for(const HParams& h, bool bounded, int32_t stage, int32_t stages) {
  RIDGE_CHECK(stages >= 1 && stage >= 0 && stage < stages && stages <= h.n_layer, "stage {} of {} over {} layers", stage,
              stages, h.n_layer);
  const auto first_of = [&](int32_t s) { return stage_first_layer(h.n_layer, s, stages); };
  const int32_t first = first_of(stage), end = first_of(stage + 1);
  KvGroups g;
  g.page.assign(size_t(h.n_layer), 0);
  g.slot.assign(size_t(h.n_layer), 0);
  // Each stage's global and window layers.
  std::vector<int32_t> n_glob(size_t(stages), 0), n_win(size_t(stages), 0);
  for (int32_t s = 0; s < stages; ++s)
    for (int32_t il = first_of(s); il < first_of(s + 1); ++il) ++(h.swa_layer(il) ? n_win : n_glob)[size_t(s)];
  const int64_t all_glob = std::accumulate(n_glob.begin(), n_glob.end(), int64_t(0));
  const int64_t all_win = std::accumulate(n_win.begin(), n_win.end(), int64_t(0));
  if (!bounded || all_glob == 0 || all_win == 0) {
    g.slots = end - first;
    for (int32_t il = first; il < end; ++il) g.slot[size_t(il)] = il - first;
    return g;
  }
  // A page holds the smaller kind's count of layers (the largest such count of a stage),
  // widened while an entry would take over 64 pages (a file with one global layer in a
  // hundred).
  g.slots = 1;
  for (int32_t s = 0; s < stages; ++s) g.slots = std::max(g.slots, std::min(n_glob[size_t(s)], n_win[size_t(s)]));
  const auto pages = [&](const std::vector<int32_t>& n) {
    int32_t most = 0;
    for (const int32_t c : n) most = std::max(most, (c + g.slots - 1) / g.slots);
    return most;
  };
  while (pages(n_glob) + pages(n_win) > 64) g.slots *= 2;
  g.n_global = std::max(1, pages(n_glob));
  g.n_window = pages(n_win);
  g.window = h.n_swa;
  for (int32_t il = first, i_glob = 0, i_win = 0; il < end; ++il) {
    if (h.swa_layer(il)) g.page[size_t(il)] = g.n_global + i_win / g.slots, g.slot[size_t(il)] = i_win++ % g.slots;
    else g.page[size_t(il)] = i_glob / g.slots, g.slot[size_t(il)] = i_glob++ % g.slots;
  }
  return g;
}

KVCache::KVCache(const KVLayout& layout, KvGroups groups, kernels::Backend* device)
    : KVView(layout, nullptr), groups_(std::move(groups)) {
  if (groups_.slots == 0) {  // one page of every layer
    groups_.slots = l_.n_layer;
    groups_.page.assign(size_t(l_.n_layer), 0);
    groups_.slot.resize(size_t(l_.n_layer));
    for (int32_t il = 0; il < l_.n_layer; ++il) groups_.slot[size_t(il)] = il;
  }
  RIDGE_CHECK(groups_.slots == l_.n_layer, "KV cache: {} layer slots per page, the groups say {}", l_.n_layer,
              groups_.slots);
  RIDGE_CHECK(l_.dtype == DType::F16 || l_.dtype == DType::F32 || l_.dtype == DType::BF16 || l_.scaled(),
              "KV cache dtype {} is not supported (f16, bf16, f32, i8, fp8_e4m3, fp8_e5m2)", dtype_name(l_.dtype));
  RIDGE_CHECK(l_.block_size > 0 && l_.n_blocks > 0, "KV cache needs at least one block of at least one token");
  kernels::detail::attention_f16_arith();  // RIDGE_ATTN_F16 read here: a bad value fails the construction
  RIDGE_CHECK(!l_.v_in_k || (l_.values_in_keys_allowed() && l_.head_dim_v <= l_.head_dim_k),
              "a KV cache whose values are in its keys needs values no wider than its keys, at a multiple of 4 "
              "dimensions with int8 ({}: {} of {} dimensions)",
              dtype_name(l_.dtype), l_.head_dim_v, l_.head_dim_k);
  RIDGE_CHECK(l_.block_size <= 1024, "KV cache block size {} is over 1024 tokens", l_.block_size);
  if (device) {
    base_ = device->alloc_kv(total_bytes());
    if (base_) {
      device_ = device;
      return;
    }
  }
  // Anonymous pages: zeroed (a never-written slot is never NaN garbage) and committed
  // lazily, so a large pool costs memory only as it fills.
  const size_t len = size_t(total_bytes());
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate a KV cache of {} MiB", total_bytes() >> 20);
  map_len_ = len;
  // A sequence's blocks are scattered over the pool: with 4 KiB pages nearly every K/V
  // tile of a long-context decode is a TLB miss. Advisory: THP may be off, then nothing
  // changes.
  ::madvise(p, len, MADV_HUGEPAGE);
  base_ = static_cast<uint8_t*>(p);
}

KVCache::~KVCache() {
  if (device_) device_->free_kv(base_);
  else if (base_) ::munmap(base_, map_len_);
}

}  // namespace ridge
