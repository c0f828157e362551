#include "perf/op_cost.h"

#include <algorithm>

#include "core/cpu.h"

namespace ridge::perf {

OpCost matmul_cost(int64_t m, int64_t k, int64_t n, DType type) {
  return {2.0 * double(m) * double(k) * double(n),
          double(row_bytes(type, k)) * double(n) + 4.0 * double(m) * double(k) + 4.0 * double(m) * double(n)};
}

ComputeClass matmul_class(DType type) {
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return ComputeClass::Fp32Fma;
    case DType::F8_E4M3_B128:
      return fp8_path() == Fp8Path::Bf16 ? ComputeClass::Bf16Dot : ComputeClass::Fp32Fma;
    default:
      return ComputeClass::Int8Vnni;
  }
}

OpCost rms_norm_cost(int64_t rows, int64_t n) {
  return {3.0 * double(rows) * double(n), 4.0 * (2.0 * double(rows) * double(n) + double(n))};
}

OpCost layer_norm_cost(int64_t rows, int64_t n) {
  return {6.0 * double(rows) * double(n), 4.0 * (2.0 * double(rows) * double(n) + 2.0 * double(n))};
}

OpCost residual_cost(int64_t rows, int64_t n) { return {double(rows) * double(n), 12.0 * double(rows) * double(n)}; }

OpCost bias_cost(int64_t rows, int64_t n) { return {double(rows) * double(n), 4.0 * (2.0 * double(rows) * double(n) + double(n))}; }

OpCost gelu_cost(int64_t rows, int64_t n) { return {8.0 * double(rows) * double(n), 8.0 * double(rows) * double(n)}; }

OpCost swiglu_cost(int64_t rows, int64_t n_ff) {
  return {5.0 * double(rows) * double(n_ff), 12.0 * double(rows) * double(n_ff)};
}

namespace {
// The 8-bit KV dtypes' f32 scales per position and KV head: one for K and one for V (a
// value kept in its key has the key's).
double kv_scale_bytes(const AttnShape& h, DType t) { return is_scaled_kv_dtype(t) ? (h.v_in_k(t) ? 4.0 : 8.0) : 0.0; }
}  // namespace

OpCost rope_kv_cost(const AttnShape& h, int64_t tokens, bool bias, bool qk_norm, DType kv_type) {
  const double nq = h.n_q(), nk = h.n_kv_k(), nv = h.n_kv_v(), t = double(tokens);
  double per_token = 3.0 * double(h.rope_dim) * double(h.n_head + h.n_head_kv);
  if (bias) per_token += nq + nk + nv;
  if (qk_norm) per_token += 3.0 * (nq + nk);
  const double stored = h.v_in_k(kv_type) ? nk : nk + nv;
  const double bytes = t * (4.0 * (nq + nk + nv) + 4.0 * (nq + nk) + double(row_bytes(kv_type, 1)) * stored +
                            double(h.n_head_kv) * kv_scale_bytes(h, kv_type));
  return {t * per_token, bytes};
}

OpCost attention_cost(const AttnShape& h, std::span<const std::pair<int32_t, int32_t>> seqs, DType kv_type,
                      int32_t window) {
  const double dk = h.head_dim_k, dv = h.head_dim_v, nh = h.n_head, nkv = h.n_head_kv;
  const double kv_elem = double(row_bytes(kv_type, 1)), dv_read = h.v_in_k(kv_type) ? 0.0 : dv;
  double flops = 0, bytes = 0;
  for (auto [pos0, n] : seqs) {
    // Keys attended, summed over the slice's tokens: (pos0 + 1) + ... + (pos0 + n), each
    // at most the window.
    double keys = double(n) * double(pos0) + double(n) * double(n + 1) / 2.0;
    double ctx = double(pos0) + double(n);
    if (window > 0) {
      keys = 0;
      for (int32_t p = pos0; p < pos0 + n; ++p) keys += double(std::min(p + 1, window));
      ctx = std::min(ctx, double(window) + double(n) - 1.0);
    }
    flops += nh * keys * (2.0 * dk + 2.0 * dv + 5.0);
    bytes += ctx * nkv * ((dk + dv_read) * kv_elem + kv_scale_bytes(h, kv_type)) +
             double(n) * 4.0 * (double(h.n_q()) + double(h.n_attn_out()));
  }
  return {flops, bytes};
}

OpCost embed_cost(int64_t tokens, int64_t n, DType type) {
  return {0.0, double(tokens) * (double(row_bytes(type, n)) + 4.0 * double(n))};
}

OpCost sampling_cost(int64_t rows, int64_t n_vocab) {
  return {4.0 * double(rows) * double(n_vocab), 4.0 * double(rows) * double(n_vocab)};
}

}  // namespace ridge::perf
