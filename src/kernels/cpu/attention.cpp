#include "kernels/cpu/attention.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/convert.h"

namespace ridge::kernels {

void attention_row(const AttnArgs& a, int32_t kv_head, const float* q, float* out, float* scratch) {
  const KVLayout& l = a.kv->layout();
  const int32_t dk = l.head_dim_k, dv = l.head_dim_v, bs = l.block_size;
  float* s = scratch;            // [block_size] scores of one tile
  float* krow = s + bs;          // [dk]
  float* vrow = krow + dk;       // [dv]

  float m = -std::numeric_limits<float>::infinity();  // running max
  float sum = 0.f;                                    // running sum of exp
  for (int32_t d = 0; d < dv; ++d) out[d] = 0.f;

  const int32_t n_tiles = (a.n_ctx + bs - 1) / bs;
  for (int32_t t = 0; t < n_tiles; ++t) {
    const int32_t block = a.block_table[t];
    const int32_t n = std::min(bs, a.n_ctx - t * bs);
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < n; ++j) {
      to_f32(l.dtype, a.kv->k(a.layer, block, kv_head, j), krow, dk);
      float dot = 0.f;
      for (int32_t d = 0; d < dk; ++d) dot += q[d] * krow[d];
      s[j] = dot * a.scale;
      tile_max = std::max(tile_max, s[j]);
    }
    const float m_new = std::max(m, tile_max);
    const float corr = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
    sum *= corr;
    for (int32_t d = 0; d < dv; ++d) out[d] *= corr;
    for (int32_t j = 0; j < n; ++j) {
      const float p = std::exp(s[j] - m_new);
      sum += p;
      to_f32(l.dtype, a.kv->v(a.layer, block, kv_head, j), vrow, dv);
      for (int32_t d = 0; d < dv; ++d) out[d] += p * vrow[d];
    }
    m = m_new;
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int32_t d = 0; d < dv; ++d) out[d] *= inv;
}

}  // namespace ridge::kernels
