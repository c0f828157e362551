// Prompt attention on the tensor cores (WMMA, f16 or bf16 as the KV cache holds them),
// FlashAttention's schedule over the paged cache: a thread block takes a tile of 64 query
// rows, (token, query head) pairs of one sequence and one KV head (64 / group tokens, the
// group's heads each), and walks that sequence's keys in tiles of 64: S = Q K^T on the
// tensor cores, the online softmax per row in shared memory (a warp owns 16 rows: their
// scores, their running max and sum, their output rows), O += P V on the tensor cores.
// Each K/V tile is read from the cache once for the 64 rows, where the decode kernel
// (attention.cu) reads it once per token. Rounding: Q and P to the cache's 16-bit type,
// f32 accumulation.
#include <mma.h>

#include <cfloat>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace ridge::kernels::cuda {
namespace {

using namespace nvcuda;

constexpr int kRows = 64, kKeys = 64, kWarps = 4;

template <int DK>
constexpr size_t tc_smem() {
  return size_t(kRows * DK + DK * kKeys + kKeys * DK) * 2 + size_t(kRows * kKeys) * 4 + size_t(kRows * kKeys) * 2 +
         size_t(kRows * DK) * 4 + 3 * kRows * 4;
}

template <typename ET, int DK>
__global__ void __launch_bounds__(32 * kWarps) attn_tc(AttnDev a, const int32_t* __restrict__ tiles) {
  const int tile = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = a.n_head / a.n_kv_head, bs = a.kv.bs;
  const int t0 = tiles[2 * tile], nt = tiles[2 * tile + 1];
  extern __shared__ __align__(128) unsigned char smem[];
  ET* Qs = reinterpret_cast<ET*>(smem);               // [64 rows][DK]
  ET* Ks = Qs + kRows * DK;                            // [DK][64 keys]
  ET* Vs = Ks + DK * kKeys;                            // [64 keys][DK]
  float* Ss = reinterpret_cast<float*>(Vs + kKeys * DK);  // [64][64]
  ET* Ps = reinterpret_cast<ET*>(Ss + kRows * kKeys);      // [64][64]
  float* Os = reinterpret_cast<float*>(Ps + kRows * kKeys);  // [64][DK]
  float* m_s = Os + kRows * DK;
  float* l_s = m_s + kRows;
  int* pos_s = reinterpret_cast<int*>(l_s + kRows);  // each row's position, -1 for padding

  const int sq = a.step.seq[t0];
  const int32_t* tab = a.step.tab + a.step.tab_off[sq];
  const int first = a.step.pos[t0], last = a.step.pos[t0 + nt - 1];
  const int lo = a.window > 0 ? max(0, first - a.window + 1) : 0;
  const uint8_t* base = a.kv.base + int64_t(a.layer) * a.kv.layer_bytes();

  for (int i = tid; i < kRows * DK; i += blockDim.x) {
    const int r = i / DK, d = i - r * DK, j = r / g, h = r - j * g;
    float v = 0.f;
    if (j < nt) v = a.q[(int64_t(t0 + j) * a.n_head + kvh * g + h) * DK + d] * a.scale;
    Qs[i] = ET(v);
    Os[i] = 0.f;
  }
  for (int r = tid; r < kRows; r += blockDim.x) {
    const int j = r / g;
    pos_s[r] = j < nt ? a.step.pos[t0 + j] : -1;
    m_s[r] = -FLT_MAX, l_s[r] = 0.f;
  }
  __syncthreads();

  for (int kb = lo / kKeys * kKeys; kb <= last; kb += kKeys) {
    // The tile's keys and values, zero where a key is outside [lo, last].
    for (int i = tid; i < DK * kKeys; i += blockDim.x) {
      const int d = i / kKeys, j = i - d * kKeys, p = kb + j;
      ET v = ET(0.f);
      if (p >= lo && p <= last) {
        const int64_t page = tab[p / bs];
        const ET* kt = reinterpret_cast<const ET*>(base + page * a.kv.k_block_bytes + kvh * a.kv.k_head_bytes);
        v = kt[d * bs + p % bs];
      }
      Ks[i] = v;
    }
    for (int i = tid; i < kKeys * DK; i += blockDim.x) {
      const int j = i / DK, d = i - j * DK, p = kb + j;
      ET v = ET(0.f);
      if (p >= lo && p <= last) {
        const int64_t page = tab[p / bs];
        const ET* vt = reinterpret_cast<const ET*>(base + int64_t(a.kv.n_blocks) * a.kv.k_block_bytes +
                                                   page * a.kv.v_block_bytes + kvh * a.kv.v_head_bytes);
        v = vt[(p % bs) * DK + d];
      }
      Vs[i] = v;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
    const int r0 = warp * 16;
    for (int c = 0; c < kKeys / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < DK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, ET, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, ET, wmma::row_major> kb_;
        wmma::load_matrix_sync(qa, Qs + r0 * DK + kk * 16, DK);
        wmma::load_matrix_sync(kb_, Ks + kk * 16 * kKeys + c * 16, kKeys);
        wmma::mma_sync(acc, qa, kb_, acc);
      }
      wmma::store_matrix_sync(Ss + r0 * kKeys + c * 16, acc, kKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // The online softmax of each of the warp's rows: lanes over the 64 keys, two each.
    for (int rr = 0; rr < 16; ++rr) {
      const int r = r0 + rr, pr = pos_s[r];
      const int lo_r = a.window > 0 ? pr - a.window + 1 : 0;
      const int p0 = kb + lane, p1 = kb + lane + 32;
      const bool ok0 = pr >= 0 && p0 <= pr && p0 >= lo_r, ok1 = pr >= 0 && p1 <= pr && p1 >= lo_r;
      const float s0 = ok0 ? Ss[r * kKeys + lane] : -FLT_MAX, s1 = ok1 ? Ss[r * kKeys + lane + 32] : -FLT_MAX;
      const float m_old = m_s[r], m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
      const float e0 = ok0 ? expf(s0 - m_new) : 0.f, e1 = ok1 ? expf(s1 - m_new) : 0.f;
      const float corr = m_old == -FLT_MAX ? 0.f : expf(m_old - m_new);
      const float sum = warp_sum(e0 + e1);
      Ps[r * kKeys + lane] = ET(e0);
      Ps[r * kKeys + lane + 32] = ET(e1);
      for (int d = lane; d < DK; d += 32) Os[r * DK + d] *= corr;
      __syncwarp();
      if (lane == 0) l_s[r] = l_s[r] * corr + sum, m_s[r] = m_new;
    }
    __syncwarp();

    // O += P V for the warp's rows.
    for (int c = 0; c < DK / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
      wmma::load_matrix_sync(o, Os + r0 * DK + c * 16, DK, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, ET, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, ET, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, Ps + r0 * kKeys + kk * 16, kKeys);
        wmma::load_matrix_sync(vb, Vs + kk * 16 * DK + c * 16, DK);
        wmma::mma_sync(o, pa, vb, o);
      }
      wmma::store_matrix_sync(Os + r0 * DK + c * 16, o, DK, wmma::mem_row_major);
    }
    __syncthreads();  // Ks and Vs are refilled next
  }

  for (int i = tid; i < kRows * DK; i += blockDim.x) {
    const int r = i / DK, d = i - r * DK, j = r / g, h = r - j * g;
    if (j >= nt) continue;
    // With a sink: both terms against M = max(m, sink), so a large sink cannot overflow.
    float num = Os[i], den = l_s[r];
    if (a.sinks) {
      const float sink = a.sinks[kvh * g + h], M = fmaxf(m_s[r], sink), e = expf(m_s[r] - M);
      num *= e, den = den * e + expf(sink - M);
    }
    a.out[(int64_t(t0 + j) * a.n_head + kvh * g + h) * DK + d] = num / den;
  }
}

template <typename ET, int DK>
void launch(const AttnDev& a, const int32_t* tiles, int n_tiles, cudaStream_t s) {
  constexpr size_t smem = tc_smem<DK>();
  static bool configured = false;  // per instantiation, once per process
  if (!configured) {
    // attention_tc_tokens checked that the device allows this much; a failure here
    // surfaces as the launch's error.
    configured = cudaFuncSetAttribute(attn_tc<ET, DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) ==
                 cudaSuccess;
  }
  attn_tc<ET, DK><<<dim3(unsigned(n_tiles), unsigned(a.n_kv_head)), 32 * kWarps, smem, s>>>(a, tiles);
}

template <typename ET>
void launch_dk(const AttnDev& a, const int32_t* tiles, int n_tiles, cudaStream_t s) {
  switch (a.dk) {
    case 64: return launch<ET, 64>(a, tiles, n_tiles, s);
    case 96: return launch<ET, 96>(a, tiles, n_tiles, s);
    case 128: return launch<ET, 128>(a, tiles, n_tiles, s);
    case 256: return launch<ET, 256>(a, tiles, n_tiles, s);
    default: return;
  }
}

}  // namespace

int attention_tc_tokens(const AttnDev& a) {
  const size_t smem = a.dk == 64 ? tc_smem<64>() : a.dk == 96 ? tc_smem<96>() : a.dk == 128 ? tc_smem<128>()
                                                                                : tc_smem<256>();
  const bool ok = (a.kv.type == DType::F16 || a.kv.type == DType::BF16) && a.dk == a.dv &&
                  (a.dk == 64 || a.dk == 96 || a.dk == 128 || a.dk == 256) && a.n_kv_head > 0 &&
                  a.n_head % a.n_kv_head == 0 && kRows % (a.n_head / a.n_kv_head) == 0 &&
                  smem <= size_t(a.max_smem);
  return ok ? kRows / (a.n_head / a.n_kv_head) : 0;
}

void attention_tc(const AttnDev& a, const int32_t* tiles, int n_tiles, cudaStream_t s) {
  if (n_tiles == 0) return;
  if (a.kv.type == DType::F16) launch_dk<__half>(a, tiles, n_tiles, s);
  else launch_dk<__nv_bfloat16>(a, tiles, n_tiles, s);
}

}  // namespace ridge::kernels::cuda
