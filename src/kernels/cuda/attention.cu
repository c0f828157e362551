// Paged attention and the K/V write, on the layout of kernels/kv_view.h: per layer the K
// tiles [block][head][dk][bs] of every block, then the V tiles [block][head][bs][dv].
//
// attention: a thread block per (token, KV head, split) takes all the query heads of its
// group, so each K/V tile is read once for the group (GQA). Per tile of up to 32 slots
// of a block: the tile's K and V into shared memory (f32), the group's scores, an online
// softmax per query head (a warp each, a lane per slot), the running output rescaled and
// the tile's P.V added. A token's positions are split over thread blocks when the step
// has few (token, KV head) pairs for the multiprocessors (decode at long context); the
// splits' maxima, sums and partial outputs are combined by a second kernel, which also
// adds the sinks' terms to the denominators.
#include <cfloat>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace ridge::kernels::cuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kTile = 32;  // slots per tile: a warp's lanes in the softmax

__device__ __forceinline__ const uint8_t* layer_base(const KvDev& kv, int32_t layer) {
  return kv.base + int64_t(layer) * kv.layer_bytes();
}

// scratch: o [T][n_head][n_split][dv] (unnormalized), ml [T][n_head][n_split][2].
template <typename KT>
__global__ void __launch_bounds__(kAttnThreads) attn_partial(AttnDev a, int n_split, float* part_o, float* part_ml) {
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const int g = a.n_head / a.n_kv_head, dk = a.dk, dv = a.dv, bs = a.kv.bs;
  extern __shared__ float sm[];
  float* q_s = sm;                   // [g][dk], pre-scaled
  float* k_s = q_s + g * dk;         // [dk][kTile]
  float* v_s = k_s + dk * kTile;     // [kTile][dv]
  float* p_s = v_s + kTile * dv;     // [g][kTile]
  float* acc = p_s + g * kTile;      // [g][dv]
  float* m_s = acc + g * dv;         // [g]
  float* l_s = m_s + g;              // [g]
  float* c_s = l_s + g;              // [g] this tile's correction of the running sums

  const int pos = a.step.pos[t], sq = a.step.seq[t];
  const int lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int b0 = lo / bs, nb = pos / bs - b0 + 1;
  const int per = (nb + n_split - 1) / n_split;
  const int sb0 = b0 + split * per, sb1 = min(b0 + nb, sb0 + per);
  const int32_t* tab = a.step.tab + a.step.tab_off[sq];
  const float* q = a.q + int64_t(t) * a.n_head * dk + int64_t(kvh) * g * dk;
  for (int i = tid; i < g * dk; i += kAttnThreads) q_s[i] = q[i] * a.scale;
  for (int i = tid; i < g * dv; i += kAttnThreads) acc[i] = 0.f;
  for (int i = tid; i < g; i += kAttnThreads) m_s[i] = -FLT_MAX, l_s[i] = 0.f;
  __syncthreads();

  const uint8_t* base = layer_base(a.kv, a.layer);
  const int warp = tid >> 5, lane = tid & 31;
  for (int b = sb0; b < sb1; ++b) {
    const int64_t page = tab[b];
    const KT* kt = reinterpret_cast<const KT*>(base + page * a.kv.k_block_bytes + kvh * a.kv.k_head_bytes);
    const KT* vt = reinterpret_cast<const KT*>(base + int64_t(a.kv.n_blocks) * a.kv.k_block_bytes +
                                               page * a.kv.v_block_bytes + kvh * a.kv.v_head_bytes);
    for (int s0 = 0; s0 < bs; s0 += kTile) {
      const int S = min(kTile, bs - s0), p0 = b * bs + s0;
      if (p0 > pos || p0 + S - 1 < lo) continue;  // the same for every thread of the block
      for (int i = tid; i < dk * S; i += kAttnThreads) {
        const int d = i / S, j = i - d * S;
        k_s[d * kTile + j] = kv_load<KT>(kt + d * bs + s0 + j);
      }
      for (int i = tid; i < S * dv; i += kAttnThreads) {
        const int j = i / dv, d = i - j * dv;
        v_s[j * dv + d] = kv_load<KT>(vt + (s0 + j) * dv + d);
      }
      __syncthreads();
      for (int i = tid; i < g * kTile; i += kAttnThreads) {
        const int h = i / kTile, j = i - h * kTile, p = p0 + j;
        float sc = -FLT_MAX;
        if (j < S && p >= lo && p <= pos) {
          const float* qh = q_s + h * dk;
          float s = 0.f;
          for (int d = 0; d < dk; ++d) s = fmaf(qh[d], k_s[d * kTile + j], s);
          sc = s;
        }
        p_s[i] = sc;
      }
      __syncthreads();
      for (int h = warp; h < g; h += kAttnThreads / 32) {
        const float s = p_s[h * kTile + lane];
        const float m_old = m_s[h], m_new = fmaxf(m_old, warp_max(s));
        const float p = s == -FLT_MAX ? 0.f : expf(s - m_new);
        const float corr = m_old == -FLT_MAX ? 0.f : expf(m_old - m_new);
        const float sum = warp_sum(p);
        p_s[h * kTile + lane] = p;
        if (lane == 0) l_s[h] = l_s[h] * corr + sum, m_s[h] = m_new, c_s[h] = corr;
      }
      __syncthreads();
      for (int i = tid; i < g * dv; i += kAttnThreads) {
        const int h = i / dv, d = i - h * dv;
        const float* ph = p_s + h * kTile;
        float o = acc[i] * c_s[h];
        for (int j = 0; j < S; ++j) o = fmaf(ph[j], v_s[j * dv + d], o);
        acc[i] = o;
      }
      __syncthreads();
    }
  }
  for (int i = tid; i < g * dv; i += kAttnThreads) {
    const int h = i / dv, d = i - h * dv;
    const int64_t row = (int64_t(t) * a.n_head + kvh * g + h) * n_split + split;
    part_o[row * dv + d] = acc[i];
  }
  for (int h = tid; h < g; h += kAttnThreads) {
    const int64_t row = (int64_t(t) * a.n_head + kvh * g + h) * n_split + split;
    part_ml[2 * row] = m_s[h];
    part_ml[2 * row + 1] = l_s[h];
  }
}

__global__ void attn_combine(AttnDev a, int n_split, const float* part_o, const float* part_ml) {
  const int t = blockIdx.x, h = blockIdx.y;
  const int64_t row0 = (int64_t(t) * a.n_head + h) * n_split;
  const float* ml = part_ml + 2 * row0;
  float M = -FLT_MAX;
  for (int i = 0; i < n_split; ++i) M = fmaxf(M, ml[2 * i]);
  const bool sink = a.sinks != nullptr;
  if (sink) M = fmaxf(M, a.sinks[h]);
  float L = sink ? expf(a.sinks[h] - M) : 0.f;
  for (int i = 0; i < n_split; ++i)
    if (ml[2 * i + 1] > 0.f) L += ml[2 * i + 1] * expf(ml[2 * i] - M);
  const float inv = 1.f / L;
  float* out = a.out + (int64_t(t) * a.n_head + h) * a.dv;
  for (int d = threadIdx.x; d < a.dv; d += blockDim.x) {
    float o = 0.f;
    for (int i = 0; i < n_split; ++i)
      if (ml[2 * i + 1] > 0.f) o = fmaf(part_o[(row0 + i) * a.dv + d], expf(ml[2 * i] - M), o);
    out[d] = o * inv;
  }
}

int split_count(const AttnDev& a) {
  const int64_t pairs = int64_t(a.step.T) * a.n_kv_head;
  const int64_t want = (2 * int64_t(a.n_sm) + pairs - 1) / pairs;
  const int64_t blocks = int64_t(a.max_pos) / a.kv.bs + 1;
  int64_t n = want < blocks / 4 ? want : blocks / 4;  // at least 4 blocks a split
  if (n > 64) n = 64;
  return n < 1 ? 1 : int(n);
}

size_t attn_smem(const AttnDev& a) {
  const int g = a.n_head / a.n_kv_head;
  return sizeof(float) * size_t(g * a.dk + a.dk * kTile + kTile * a.dv + g * kTile + g * a.dv + 3 * g);
}

template <typename KT>
void launch_attention(const AttnDev& a, float* scratch, cudaStream_t s) {
  const int n_split = split_count(a);
  float* part_o = scratch;
  float* part_ml = scratch + int64_t(a.step.T) * a.n_head * n_split * a.dv;
  const size_t smem = attn_smem(a);
  if (smem > 48 * 1024) cudaFuncSetAttribute(attn_partial<KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  attn_partial<KT><<<dim3(unsigned(a.step.T), unsigned(a.n_kv_head), unsigned(n_split)), kAttnThreads, smem, s>>>(
      a, n_split, part_o, part_ml);
  attn_combine<<<dim3(unsigned(a.step.T), unsigned(a.n_head)), 128, 0, s>>>(a, n_split, part_o, part_ml);
}

// --- the K/V write, with qkv_rope's biases, norms and RoPE ----------------------------

template <typename KT>
__device__ void write_kv(const KvDev& kv, const StepDev& st, int32_t layer, int t, int n_heads, const float* k,
                         const float* v) {
  const int pos = st.pos[t], bs = kv.bs;
  const int64_t page = st.tab[st.tab_off[st.seq[t]] + pos / bs];
  const int slot = pos % bs;
  uint8_t* base = kv.base + int64_t(layer) * kv.layer_bytes();
  for (int i = threadIdx.x; i < n_heads * kv.dk; i += blockDim.x) {
    const int h = i / kv.dk, d = i - h * kv.dk;
    KT* kt = reinterpret_cast<KT*>(base + page * kv.k_block_bytes + h * kv.k_head_bytes);
    kt[d * bs + slot] = kv_store<KT>(k[int64_t(h) * kv.dk + d]);
  }
  for (int i = threadIdx.x; i < n_heads * kv.dv; i += blockDim.x) {
    const int h = i / kv.dv, d = i - h * kv.dv;
    KT* vt = reinterpret_cast<KT*>(base + int64_t(kv.n_blocks) * kv.k_block_bytes + page * kv.v_block_bytes +
                                   h * kv.v_head_bytes);
    vt[slot * kv.dv + d] = kv_store<KT>(v[int64_t(h) * kv.dv + d]);
  }
}

// The per-head RMSNorm of n heads of d in x, a warp per head.
__device__ void head_norms(float* x, int n, int d, const float* w, float eps) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int h = warp; h < n; h += nw) {
    float* xh = x + int64_t(h) * d;
    float ss = 0.f;
    for (int i = lane; i < d; i += 32) ss = fmaf(xh[i], xh[i], ss);
    ss = warp_sum(ss);
    const float r = 1.f / sqrtf(ss / float(d) + eps);
    for (int i = lane; i < d; i += 32) xh[i] = xh[i] * r * w[i];
  }
}

__device__ void rope_heads(float* x, int n, int d, const RopeDev& r, int pos) {
  const int half = r.rope_dim / 2;
  for (int i = threadIdx.x; i < n * half; i += blockDim.x) {
    const int h = i / half, j = i - h * half;
    double theta = double(pos) * double(r.freq_scale) * pow(double(r.freq_base), -2.0 * j / r.rope_dim);
    if (r.freq_factors) theta /= double(r.freq_factors[j]);
    float c = float(cos(theta)), s = float(sin(theta));
    if (r.attn_factor != 1.f) c *= r.attn_factor, s *= r.attn_factor;
    float* xh = x + int64_t(h) * d;
    const int ia = r.neox ? j : 2 * j, ib = r.neox ? j + half : 2 * j + 1;
    const float va = xh[ia], vb = xh[ib];
    xh[ia] = va * c - vb * s;
    xh[ib] = va * s + vb * c;
  }
}

template <typename KT>
__global__ void qkv_rope_kernel(QkvDev a) {
  const int t = blockIdx.x;
  const int nq = a.n_head * a.dk, nk = a.n_kv_head * a.dk, nv = a.n_kv_head * a.dv;
  float* q = a.q + int64_t(t) * nq;
  float* k = a.k ? a.k + int64_t(t) * nk : nullptr;
  float* v = a.v ? a.v + int64_t(t) * nv : nullptr;
  if (a.bq) {
    for (int i = threadIdx.x; i < nq; i += blockDim.x) q[i] += a.bq[i];
    if (k)
      for (int i = threadIdx.x; i < nk; i += blockDim.x) k[i] += a.bk[i];
    if (v)
      for (int i = threadIdx.x; i < nv; i += blockDim.x) v[i] += a.bv[i];
    __syncthreads();
  }
  if (a.q_norm) {
    head_norms(q, a.n_head, a.dk, a.q_norm, a.eps);
    if (k) head_norms(k, a.n_kv_head, a.dk, a.k_norm, a.eps);
    __syncthreads();
  }
  const int pos = a.step.pos[t];
  if (a.rope.rope_dim > 0) {
    rope_heads(q, a.n_head, a.dk, a.rope, pos);
    if (k) rope_heads(k, a.n_kv_head, a.dk, a.rope, pos);
    __syncthreads();
  }
  if (k && v) write_kv<KT>(a.kv, a.step, a.layer, t, a.n_kv_head, k, v);
}

template <typename KT>
__global__ void kv_write_kernel(KvDev kv, StepDev st, int32_t layer, int32_t n_heads, const float* k, const float* v) {
  const int t = blockIdx.x;
  write_kv<KT>(kv, st, layer, t, n_heads, k + int64_t(t) * n_heads * kv.dk, v + int64_t(t) * n_heads * kv.dv);
}

template <typename KT>
__global__ void kv_read_kernel(KvDev kv, StepDev st, int32_t layer, float* k) {
  const int t = blockIdx.x, pos = st.pos[t], bs = kv.bs;
  const int64_t page = st.tab[st.tab_off[st.seq[t]] + pos / bs];
  const uint8_t* base = kv.base + int64_t(layer) * kv.layer_bytes();
  for (int i = threadIdx.x; i < kv.n_kv_head * kv.dk; i += blockDim.x) {
    const int h = i / kv.dk, d = i - h * kv.dk;
    const KT* kt = reinterpret_cast<const KT*>(base + page * kv.k_block_bytes + h * kv.k_head_bytes);
    k[int64_t(t) * kv.n_kv_head * kv.dk + i] = kv_load<KT>(kt + d * bs + pos % bs);
  }
}

template <typename F>
void dispatch_kv(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<float>();
    case DType::F16: return f.template operator()<__half>();
    case DType::BF16: return f.template operator()<__nv_bfloat16>();
    default: return;  // the backend refuses other cache types before any launch
  }
}

}  // namespace

int64_t attention_scratch_floats(const AttnDev& a) {
  return int64_t(a.step.T) * a.n_head * split_count(a) * (a.dv + 2);
}

void attention(const AttnDev& a, float* scratch, cudaStream_t s) {
  if (a.step.T == 0) return;
  dispatch_kv(a.kv.type, [&]<typename KT>() { launch_attention<KT>(a, scratch, s); });
}

void qkv_rope(const QkvDev& a, cudaStream_t s) {
  if (a.step.T == 0) return;
  dispatch_kv(a.kv.type, [&]<typename KT>() { qkv_rope_kernel<KT><<<unsigned(a.step.T), 256, 0, s>>>(a); });
}

void kv_write(const KvDev& kv, const StepDev& st, int32_t layer, int32_t n_heads, const float* k, const float* v,
              cudaStream_t s) {
  if (st.T == 0) return;
  dispatch_kv(kv.type, [&]<typename KT>() { kv_write_kernel<KT><<<unsigned(st.T), 256, 0, s>>>(kv, st, layer, n_heads, k, v); });
}

void kv_read(const KvDev& kv, const StepDev& st, int32_t layer, float* k, cudaStream_t s) {
  if (st.T == 0) return;
  dispatch_kv(kv.type, [&]<typename KT>() { kv_read_kernel<KT><<<unsigned(st.T), 256, 0, s>>>(kv, st, layer, k); });
}

}  // namespace ridge::kernels::cuda
