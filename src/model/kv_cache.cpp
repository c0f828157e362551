#include "model/kv_cache.h"

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
  void* p = std::aligned_alloc(64, size_t((bytes_ + 63) / 64 * 64));
  if (!p) fail("cannot allocate a KV cache of {} MiB", bytes_ >> 20);
  // Zeroed: a slot read before it is written must not be NaN garbage (it is masked, but
  // 0 * NaN would still poison a sum).
  std::memset(p, 0, size_t(bytes_));
  mem_ = {static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); }};
  k_ = mem_.get();
  v_ = k_ + kbytes;
}

}  // namespace ridge
