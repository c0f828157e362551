// Host accessors of the paged KV view (kernels/kv_view.h): the CPU reads and writes the
// cache in host memory, converting through the CPU conversion kernels.
#include "kernels/kv_view.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/convert.h"

namespace ridge {
namespace {
constexpr int64_t kChunk = 128;  // elements converted per step through a stack buffer
}

void KVView::write_k(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const {
  uint8_t* dst = k_tile(layer, block, head) + int64_t(slot) * esz_;
  const int64_t stride = int64_t(l_.block_size) * esz_;
  alignas(64) uint8_t buf[kChunk * 4];
  for (int64_t d0 = 0; d0 < l_.head_dim_k; d0 += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, l_.head_dim_k - d0);
    kernels::from_f32(l_.dtype, x + d0, buf, n);
    for (int64_t d = 0; d < n; ++d) std::memcpy(dst + (d0 + d) * stride, buf + d * esz_, size_t(esz_));
  }
}

void KVView::read_k(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const {
  const uint8_t* src = k_tile(layer, block, head) + int64_t(slot) * esz_;
  const int64_t stride = int64_t(l_.block_size) * esz_;
  alignas(64) uint8_t buf[kChunk * 4];
  for (int64_t d0 = 0; d0 < l_.head_dim_k; d0 += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, l_.head_dim_k - d0);
    for (int64_t d = 0; d < n; ++d) std::memcpy(buf + d * esz_, src + (d0 + d) * stride, size_t(esz_));
    kernels::to_f32(l_.dtype, buf, x + d0, n);
  }
}

void KVView::write_v(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const {
  kernels::from_f32(l_.dtype, x, v(layer, block, head, slot), l_.head_dim_v);
}

void KVView::read_v(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const {
  kernels::to_f32(l_.dtype, v(layer, block, head, slot), x, l_.head_dim_v);
}

}  // namespace ridge
