#include "model/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/convert.h"

namespace ridge {

KVCache::KVCache(const KVLayout& layout) : l_(layout) {
  RIDGE_CHECK(l_.dtype == DType::F16 || l_.dtype == DType::F32 || l_.dtype == DType::BF16,
              "KV cache dtype {} is not supported (f16, bf16, f32)", dtype_name(l_.dtype));
  RIDGE_CHECK(l_.block_size > 0 && l_.n_blocks > 0, "KV cache needs at least one block of at least one token");
  RIDGE_CHECK(l_.block_size <= 1024, "KV cache block size {} is over 1024 tokens", l_.block_size);
  esz_ = dtype_info(l_.dtype).type_size;
  bytes_ = block_bytes() * l_.n_blocks;
  // Anonymous pages: zeroed (a never-written slot is never NaN garbage) and committed
  // lazily, so a large pool costs memory only as it fills.
  const size_t len = size_t(bytes_);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate a KV cache of {} MiB", bytes_ >> 20);
  map_len_ = len;
  // A sequence's blocks are scattered over the pool: with 4 KiB pages nearly every K/V
  // tile of a long-context decode is a TLB miss (measured 1.6-2.2x slower attention
  // sweeps). Advisory: THP may be off, then nothing changes.
  ::madvise(p, len, MADV_HUGEPAGE);
  mem_ = {static_cast<uint8_t*>(p), [](uint8_t*) {}};
  base_ = mem_.get();
}

KVCache::~KVCache() {
  if (mem_) ::munmap(mem_.get(), map_len_);
}

namespace {
constexpr int64_t kChunk = 128;  // elements converted per step through a stack buffer
}

void KVCache::write_k(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const {
  uint8_t* dst = k_tile(layer, block, head) + int64_t(slot) * esz_;
  const int64_t stride = int64_t(l_.block_size) * esz_;
  alignas(64) uint8_t buf[kChunk * 4];
  for (int64_t d0 = 0; d0 < l_.head_dim_k; d0 += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, l_.head_dim_k - d0);
    kernels::from_f32(l_.dtype, x + d0, buf, n);
    for (int64_t d = 0; d < n; ++d) std::memcpy(dst + (d0 + d) * stride, buf + d * esz_, size_t(esz_));
  }
}

void KVCache::read_k(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const {
  const uint8_t* src = k_tile(layer, block, head) + int64_t(slot) * esz_;
  const int64_t stride = int64_t(l_.block_size) * esz_;
  alignas(64) uint8_t buf[kChunk * 4];
  for (int64_t d0 = 0; d0 < l_.head_dim_k; d0 += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, l_.head_dim_k - d0);
    for (int64_t d = 0; d < n; ++d) std::memcpy(buf + d * esz_, src + (d0 + d) * stride, size_t(esz_));
    kernels::to_f32(l_.dtype, buf, x + d0, n);
  }
}

void KVCache::write_v(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const {
  kernels::from_f32(l_.dtype, x, v(layer, block, head, slot), l_.head_dim_v);
}

void KVCache::read_v(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const {
  kernels::to_f32(l_.dtype, v(layer, block, head, slot), x, l_.head_dim_v);
}

}  // namespace ridge
