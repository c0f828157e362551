#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <utility>

#include "core/cpu.h"
#include "core/error.h"

namespace ridge {

KVLayout kv_layout_for(const HParams& h, int32_t block_size, int32_t n_blocks, DType dtype) {
  KVLayout l{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, block_size, n_blocks, dtype};
  // Only the AVX-512 attention reads values out of keys at speed (the others run the
  // portable path for it): elsewhere the latent is kept twice.
  l.v_in_k = h.mla() && !is_scaled_kv_dtype(dtype) && best_isa() == Isa::Avx512;
  return l;
}

KvGroups kv_groups_for(const HParams& h, bool bounded, int32_t first, int32_t end) {
  if (end < 0) end = h.n_layer;
  KvGroups g;
  std::vector<int32_t> global, window;
  for (int32_t il = first; il < end; ++il) (h.swa_layer(il) ? window : global).push_back(il);
  g.page.assign(size_t(h.n_layer), 0);
  g.slot.assign(size_t(h.n_layer), 0);
  if (!bounded || global.empty() || window.empty()) {
    g.slots = end - first;
    for (int32_t il = first; il < end; ++il) g.slot[size_t(il)] = il - first;
    return g;
  }
  // The smaller kind's count, widened while a block would take over 64 pages (a file
  // with one global layer in a hundred).
  g.slots = int32_t(std::min(global.size(), window.size()));
  auto pages = [&](size_t n) { return (int32_t(n) + g.slots - 1) / g.slots; };
  while (pages(global.size()) + pages(window.size()) > 64) g.slots *= 2;
  g.n_global = pages(global.size());
  g.n_window = pages(window.size());
  g.window = h.n_swa;
  for (size_t i = 0; i < global.size(); ++i)
    g.page[size_t(global[i])] = int32_t(i) / g.slots, g.slot[size_t(global[i])] = int32_t(i) % g.slots;
  for (size_t i = 0; i < window.size(); ++i)
    g.page[size_t(window[i])] = g.n_global + int32_t(i) / g.slots, g.slot[size_t(window[i])] = int32_t(i) % g.slots;
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
  RIDGE_CHECK(!l_.v_in_k || (!l_.scaled() && l_.head_dim_v <= l_.head_dim_k),
              "a KV cache whose values are in its keys needs an unscaled dtype (f16, bf16, f32), not {}",
              dtype_name(l_.dtype));
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
