// Host accessors of the paged KV view (kernels/kv_view.h): the CPU reads and writes the
// cache in host memory, converting through the CPU conversion kernels.
#include "kernels/kv_view.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <limits>

#include "kernels/cpu/convert.h"

namespace ridge {
namespace {
constexpr int64_t kChunk = 128;  // elements converted per step through a stack buffer

// A scaled dtype's codes of x[0, n), element i to dst[at(i)], and the scale: int8's amax
// over the largest code, FP8's the one of a few at or above that whose codes give x back
// with the least squared error (convert.h fp8_kv_scale); 0 for a zero vector, whose codes
// are all 0; NaN if any value is NaN, so that NaN reads back as NaN whatever the codes
// can hold.
template <class At>
float quantize_scaled(DType t, const float* x, int64_t n, uint8_t* dst, At at) {
  float amax = 0.f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i])), nan |= std::isnan(x[i]);
  float scale = nan ? std::numeric_limits<float>::quiet_NaN() : amax / KVLayout::kv_code_max(t);
  if (t != DType::I8 && scale > 0.f && std::isfinite(scale) && std::isfinite(1.f / scale))
    scale = kernels::fp8_kv_scale(t, x, n, amax);
  float inv = scale > 0.f ? 1.f / scale : 0.f;  // NaN: all codes 0
  if (!std::isfinite(inv)) scale = inv = 0.f;   // a subnormal scale: the vector reads back as zeros
  alignas(64) float buf[kChunk];
  alignas(64) uint8_t codes[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) buf[i] = x[i0 + i] * inv;
    kernels::codes_from_f32(t, buf, codes, m);
    for (int64_t i = 0; i < m; ++i) dst[at(i0 + i)] = codes[i];
  }
  return scale;
}

template <class At>
void dequantize_scaled(DType t, const uint8_t* src, At at, float scale, float* x, int64_t n) {
  alignas(64) uint8_t codes[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) codes[i] = src[at(i0 + i)];
    kernels::to_f32(t, codes, x + i0, m);
    for (int64_t i = 0; i < m; ++i) x[i0 + i] *= scale;
  }
}

}  // namespace

void KVView::write_k(int32_t layer, int32_t block, int32_t head, int32_t slot, const float* x) const {
  if (l_.scaled()) {
    const auto at = [&](int64_t d) { return l_.k_element(int32_t(d), slot); };
    const float s = quantize_scaled(l_.dtype, x, l_.head_dim_k, k_tile(layer, block, head), at);
    std::memcpy(k_scales(layer, block, head) + slot, &s, 4);
    return;
  }
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
  if (l_.scaled()) {
    const auto at = [&](int64_t d) { return l_.k_element(int32_t(d), slot); };
    return dequantize_scaled(l_.dtype, k_tile(layer, block, head), at, k_scales(layer, block, head)[slot], x, l_.head_dim_k);
  }
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
  if (l_.v_in_k) return;  // written with the key
  if (l_.scaled()) {
    const auto at = [&](int64_t d) { return l_.v_element(slot, int32_t(d)); };
    v_scales(layer, block, head)[slot] = quantize_scaled(l_.dtype, x, l_.head_dim_v, v_tile(layer, block, head), at);
    return;
  }
  kernels::from_f32(l_.dtype, x, v_tile(layer, block, head) + int64_t(slot) * l_.head_dim_v * esz_, l_.head_dim_v);
}

void KVView::read_v(int32_t layer, int32_t block, int32_t head, int32_t slot, float* x) const {
  if (l_.v_in_k) {
    std::vector<float> k(size_t(l_.head_dim_k));
    read_k(layer, block, head, slot, k.data());
    std::copy(k.begin() + l_.v_dim0(), k.end(), x);
    return;
  }
  if (l_.scaled()) {
    const auto at = [&](int64_t d) { return l_.v_element(slot, int32_t(d)); };
    return dequantize_scaled(l_.dtype, v_tile(layer, block, head), at, v_scales(layer, block, head)[slot], x,
                             l_.head_dim_v);
  }
  kernels::to_f32(l_.dtype, v_tile(layer, block, head) + int64_t(slot) * l_.head_dim_v * esz_, x, l_.head_dim_v);
}

}  // namespace ridge
