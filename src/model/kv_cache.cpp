#include "model/kv_cache.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace ridge {

KVCache::KVCache(const KVLayout& layout) : l_(layout) {
  RIDGE_CHECK(l_.dtype == DType::F16 || l_.dtype == DType::F32 || l_.dtype == DType::BF16,
              "KV cache dtype {} is not supported (f16, bf16, f32)", dtype_name(l_.dtype));
  RIDGE_CHECK(l_.block_size > 0 && l_.n_blocks > 0, "KV cache needs at least one block of at least one token");
  esz_ = dtype_info(l_.dtype).type_size;
  const int64_t per_block = int64_t(l_.n_layer) * l_.n_kv_head * l_.block_size * esz_;
  const int64_t kbytes = per_block * l_.head_dim_k * l_.n_blocks;
  const int64_t vbytes = per_block * l_.head_dim_v * l_.n_blocks;
  bytes_ = kbytes + vbytes;
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
  k_ = mem_.get();
  v_ = k_ + kbytes;
}

KVCache::~KVCache() {
  if (mem_) ::munmap(mem_.get(), map_len_);
}

}  // namespace ridge
