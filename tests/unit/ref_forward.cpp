#include "ref_forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gguf/gguf.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace ridge::test {
namespace {

using Vec = std::vector<double>;

[[noreturn]] void bad(const std::string& what) { throw std::runtime_error("ref_forward: " + what); }

// ref_logits' round_q8a: the inputs of 8-bit-activation matmuls rounded as ridge rounds them.
bool g_round_q8a = false;

// x in f32, then in 8-bit blocks of 32 (quant::quantize_act_q8a), back to the values.
Vec q8a_round(const Vec& x) {
  const int64_t n = int64_t(x.size());
  if (n % quant::kQK != 0) bad("an 8-bit activation row is not a multiple of 32");
  std::vector<float> xf(x.begin(), x.end());
  std::vector<quant::BlockQ8A> b(size_t(n / quant::kQK));
  quant::quantize_act_q8a(xf.data(), b.data(), n);
  Vec y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[size_t(i)] = double(b[size_t(i / quant::kQK)].qs[i % quant::kQK]) * double(b[size_t(i / quant::kQK)].d);
  return y;
}

// A tensor as GGUF stores it: `rows` rows of `cols` elements (ne[0] = cols), in double.
struct Mat {
  int64_t rows = 0, cols = 0;
  Vec w;  // [rows][cols]
  bool q8a = false;  // ridge multiplies it with 8-bit activations

  const double* row(int64_t r) const { return w.data() + r * cols; }
  // What the matmul's input is, as ridge sees it.
  Vec input(const Vec& x) const { return g_round_q8a && q8a ? q8a_round(x) : x; }
  // y[rows] = W x[cols]
  Vec mul(const Vec& x0) const {
    if (int64_t(x0.size()) != cols) bad("matmul shape mismatch");
    const Vec x = input(x0);
    Vec y(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += row(r)[c] * x[size_t(c)];
      y[size_t(r)] = s;
    }
    return y;
  }
};

bool has(const gguf::File& f, const std::string& name) { return f.find_tensor(name) != nullptr; }

Mat load(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) bad("missing tensor " + name);
  Mat m;
  m.q8a = quant::act_kind(t->type) == quant::ActKind::Q8A;
  m.cols = t->ne[0];
  m.rows = t->n_elements() / m.cols;
  const uint64_t row_bytes = t->nbytes / uint64_t(m.rows);
  std::vector<float> tmp(size_t(m.cols));
  m.w.resize(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    quant::dequantize_row(t->type, t->data + uint64_t(r) * row_bytes, tmp.data(), m.cols);
    for (int64_t c = 0; c < m.cols; ++c) m.w[size_t(r * m.cols + c)] = tmp[size_t(c)];
  }
  return m;
}
Vec load_vec(const gguf::File& f, const std::string& name) { return load(f, name).w; }

// y = x / sqrt(mean(x^2) + eps) * w, on n elements at x (w: [n]).
void rms_norm(double* x, const Vec& w, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale * w[size_t(i)];
}
Vec rms_norm(Vec x, const Vec& w, double eps) {
  rms_norm(x.data(), w, int64_t(x.size()), eps);
  return x;
}

struct HP {
  std::string arch;
  int64_t n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, head_dim_v, rope_dim;
  double rope_base, eps;
  bool neox;  // qwen2/qwen3 rotate halves; llama rotates adjacent pairs
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // a mixture of experts
  // Routing: softmax or sigmoid; renormalized top-k (qwen3moe, Mixtral) or as the file
  // says (deepseek2); scaled; chosen within the best groups.
  bool sigmoid = false, norm = true;
  double scale = 1.0;
  int64_t n_groups = 0, n_groups_used = 0, n_shared = 0, n_dense_lead = 0;
  // deepseek2's latent attention: the heads' own key and value sizes, the latent rank,
  // the low-rank q's (0: attn_q), and its score scale (YaRN's mscale^2 / sqrt(dqk)).
  int64_t dqk = 0, dv_mla = 0, kv_rank = 0, q_rank = 0;
  double kq_scale = 0;
  double yarn_factor = 0, yarn_orig_ctx = 0;
  double freq_scale = 1.0;  // linear position scaling (gemma3's global layers)
  // gemma3: the window (0: none) of every layer but each 6th, their rope base, the linear
  // scaling of the global layers' positions, the final logit cap (0: none).
  // gpt-oss: the window on the even layers (period 2), the same rope on all.
  int64_t n_swa = 0, swa_period = 6;
  double rope_base_swa = 10000, linear_factor = 1, softcap = 0;
  bool swa_layer(int64_t il) const { return n_swa > 0 && il % swa_period < swa_period - 1; }
};

HP read_hp(const gguf::File& f) {
  HP h;
  h.arch = std::string(f.require_str("general.architecture"));
  if (h.arch != "llama" && h.arch != "qwen2" && h.arch != "qwen3" && h.arch != "qwen3moe" && h.arch != "deepseek2" &&
      h.arch != "gpt2" && h.arch != "gemma3" && h.arch != "gpt-oss")
    bad("unknown architecture " + h.arch);
  const std::string a = h.arch + ".";
  auto u = [&](const std::string& k) { return int64_t(f.require_uint(a + k)); };
  h.n_embd = u("embedding_length");
  h.n_layer = u("block_count");
  h.n_ff = u("feed_forward_length");
  h.n_head = u("attention.head_count");
  h.n_head_kv = int64_t(f.get_uint(a + "attention.head_count_kv").value_or(uint64_t(h.n_head)));
  h.head_dim = int64_t(f.get_uint(a + "attention.key_length").value_or(uint64_t(h.n_embd / h.n_head)));
  h.head_dim_v = int64_t(f.get_uint(a + "attention.value_length").value_or(uint64_t(h.head_dim)));
  h.rope_dim = int64_t(f.get_uint(a + "rope.dimension_count").value_or(uint64_t(h.head_dim)));
  h.rope_base = f.get_float(a + "rope.freq_base").value_or(10000.0);
  h.eps = h.arch == "gpt2" ? f.require_float(a + "attention.layer_norm_epsilon")
                           : f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  h.neox = h.arch != "llama";
  if (auto ne = f.get_uint(a + "expert_count"); ne && *ne > 0) {
    h.n_expert = int64_t(*ne);
    h.n_expert_used = u("expert_used_count");
    h.n_ff_exp = int64_t(f.get_uint(a + "expert_feed_forward_length").value_or(uint64_t(h.n_ff)));
  }
  if (h.arch == "deepseek2") {
    h.dqk = u("attention.key_length_mla");
    h.dv_mla = u("attention.value_length_mla");
    h.kv_rank = u("attention.kv_lora_rank");
    h.q_rank = int64_t(f.get_uint(a + "attention.q_lora_rank").value_or(0));
    h.n_shared = int64_t(f.get_uint(a + "expert_shared_count").value_or(0));
    h.n_dense_lead = int64_t(f.get_uint(a + "leading_dense_block_count").value_or(0));
    h.sigmoid = f.get_uint(a + "expert_gating_func").value_or(1) == 2;
    h.norm = f.get_bool(a + "expert_weights_norm").value_or(false);
    h.scale = f.get_float(a + "expert_weights_scale").value_or(1.0);
    h.n_groups = int64_t(f.get_uint(a + "expert_group_count").value_or(0));
    h.n_groups_used = int64_t(f.get_uint(a + "expert_group_used_count").value_or(0));
    h.neox = false;
    double mscale = 1.0;
    if (auto s = f.get_str(a + "rope.scaling.type"); s && *s == "yarn") {
      h.yarn_factor = f.require_float(a + "rope.scaling.factor");
      h.yarn_orig_ctx = double(f.require_uint(a + "rope.scaling.original_context_length"));
      mscale = 1.0 + f.get_float(a + "rope.scaling.yarn_log_multiplier").value_or(0.0) * std::log(h.yarn_factor);
    }
    h.kq_scale = mscale * mscale / std::sqrt(double(h.dqk));
    return h;
  }
  if (h.arch == "gpt-oss") {
    // Scores scaled by 1/sqrt(dk) times YaRN's magnitude (1 + 0.1 ln factor, on cos and
    // sin in ggml's rope: on q and on k) squared.
    h.n_swa = u("attention.sliding_window");
    h.swa_period = 2;
    h.rope_base_swa = h.rope_base;
    double mscale = 1.0;
    if (auto s = f.get_str(a + "rope.scaling.type"); s && *s == "yarn") {
      h.yarn_factor = f.require_float(a + "rope.scaling.factor");
      h.yarn_orig_ctx = double(f.require_uint(a + "rope.scaling.original_context_length"));
      mscale = 1.0 + 0.1 * std::log(h.yarn_factor);
    }
    h.kq_scale = mscale * mscale / std::sqrt(double(h.head_dim));
    return h;
  }
  if (h.arch == "gemma3") {
    h.n_swa = int64_t(f.get_uint(a + "attention.sliding_window").value_or(0));
    h.rope_base_swa = f.get_float(a + "rope.freq_base_swa").value_or(10000.0);
    h.softcap = f.get_float(a + "final_logit_softcapping").value_or(0.0);
    if (auto s = f.get_str(a + "rope.scaling.type"); s && *s == "linear") h.linear_factor = f.require_float(a + "rope.scaling.factor");
    return h;
  }
  // Linear / YaRN position scaling is not modelled here: refuse rather than differ.
  if (auto s = f.get_str(a + "rope.scaling.type"); s && *s != "none") bad("rope scaling is not supported");
  if (f.find(a + "rope.scale_linear")) bad("rope scaling is not supported");
  return h;
}

// Rotates the first rope_dim dims of one head vector x at position pos.
//   llama:       pairs (x[2i], x[2i+1])
//   qwen2/qwen3: pairs (x[i], x[i + rope_dim/2])   (GPT-NeoX)
//   theta_i = pos * base^(-2i/rope_dim) / factors[i]   (factors: Llama 3 rope_freqs, or 1)
void rope(double* x, int64_t pos, const HP& h, const Vec& factors) {
  const int64_t half = h.rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    double theta = double(pos) * h.freq_scale * std::pow(h.rope_base, -2.0 * double(i) / double(h.rope_dim));
    if (!factors.empty()) theta /= factors[size_t(i)];
    const double c = std::cos(theta), s = std::sin(theta);
    const int64_t i0 = h.neox ? i : 2 * i, i1 = h.neox ? i + half : 2 * i + 1;
    const double a = x[i0], b = x[i1];
    x[i0] = a * c - b * s;
    x[i1] = a * s + b * c;
  }
}

// YaRN (ggml's rope_yarn with ext_factor 1 and unit magnitude) as per-pair divisors of
// the frequency: pair i blends interpolation (theta / factor) and extrapolation (theta)
// by a ramp between the pairs where a wavelength fits 32 and 1 times into the original
// context.
Vec yarn_factors(const HP& h) {
  auto corr = [&](double n_rot) {
    return double(h.rope_dim) * std::log(h.yarn_orig_ctx / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(h.rope_base));
  };
  const double low = std::max(0.0, std::floor(corr(32.0))), high = std::min(double(h.rope_dim - 1), std::ceil(corr(1.0)));
  Vec f;
  for (int64_t i = 0; i < h.rope_dim / 2; ++i) {
    const double mix = 1.0 - std::clamp((double(i) - low) / std::max(0.001, high - low), 0.0, 1.0);
    f.push_back(1.0 / ((1.0 - mix) / h.yarn_factor + mix));
  }
  return f;
}

// A token's chosen experts and their weights from the router's logits, as HP says.
std::vector<std::pair<int64_t, double>> route(const Vec& lg, const Vec& bias, const HP& h) {
  const int64_t NE = int64_t(lg.size());
  Vec p(lg.size());
  if (h.sigmoid) {
    for (size_t e = 0; e < lg.size(); ++e) p[e] = 1.0 / (1.0 + std::exp(-lg[e]));
  } else {
    const double mx = *std::max_element(lg.begin(), lg.end());
    double z = 0;
    for (double v : lg) z += std::exp(v - mx);
    for (size_t e = 0; e < lg.size(); ++e) p[e] = std::exp(lg[e] - mx) / z;
  }
  Vec sel = p;
  for (size_t e = 0; e < bias.size(); ++e) sel[e] += bias[e];
  if (h.n_groups > 1) {  // keep the groups whose two best sum highest
    const int64_t gs = NE / h.n_groups;
    std::vector<std::pair<double, int64_t>> g;
    for (int64_t j = 0; j < h.n_groups; ++j) {
      Vec m(sel.begin() + j * gs, sel.begin() + (j + 1) * gs);
      std::sort(m.rbegin(), m.rend());
      g.push_back({-(m[0] + (gs > 1 ? m[1] : 0.0)), j});
    }
    std::sort(g.begin(), g.end());
    std::vector<bool> keep(size_t(h.n_groups), false);
    for (int64_t j = 0; j < h.n_groups_used; ++j) keep[size_t(g[size_t(j)].second)] = true;
    for (int64_t e = 0; e < NE; ++e)
      if (!keep[size_t(e / gs)]) sel[size_t(e)] = -INFINITY;
  }
  std::vector<std::pair<int64_t, double>> out;
  double wsum = 0;
  for (int64_t j = 0; j < h.n_expert_used; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < NE; ++e) {
      bool taken = false;
      for (auto& c : out) taken = taken || c.first == e;
      if (!taken && (best < 0 || sel[size_t(e)] > sel[size_t(best)])) best = e;
    }
    out.push_back({best, p[size_t(best)]});
    wsum += p[size_t(best)];
  }
  for (auto& c : out) c.second = c.second / (h.norm ? wsum : 1.0) * (h.scale != 0 ? h.scale : 1.0);
  return out;
}

// y[E] += SwiGLU FFN rows [r0, r0 + F) of gate/up (and the matching part of down, whose
// rows are [d0, d0 + E)) on hn, times w.
void swiglu_into(double* y, const Mat& g, const Mat& u, const Mat& d, int64_t r0, int64_t F, int64_t d0, const Vec& hn,
                 double w) {
  const int64_t E = int64_t(hn.size());
  Vec a(static_cast<size_t>(F));
  for (int64_t i = 0; i < F; ++i) {
    double gv = 0, uv = 0;
    for (int64_t c = 0; c < E; ++c) {
      gv += g.row(r0 + i)[c] * hn[size_t(c)];
      uv += u.row(r0 + i)[c] * hn[size_t(c)];
    }
    a[size_t(i)] = gv / (1.0 + std::exp(-gv)) * uv;
  }
  for (int64_t i = 0; i < E; ++i) {
    double s = 0;
    for (int64_t c = 0; c < F; ++c) s += d.row(d0 + i)[c] * a[size_t(c)];
    y[i] += w * s;
  }
}

// GPT-2: token plus learned position embeddings; per layer LayerNorm (weight and bias),
// the fused q/k/v with its bias, causal attention without RoPE, the output projection
// with its bias; LayerNorm, up with its bias, GELU (tanh form), down with its bias; a
// final LayerNorm and the head (tied to token_embd when output.weight is absent).
std::vector<double> gpt2_logits(const gguf::File& f, const HP& h, const std::vector<int32_t>& tokens) {
  const int64_t T = int64_t(tokens.size()), E = h.n_embd, dk = h.head_dim, nh = h.n_head, nkv = h.n_head_kv;
  const int64_t group = nh / nkv;
  auto layer_norm = [&](const Vec& x, const Vec& w, const Vec& b) {
    double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= double(x.size());
    for (double v : x) var += (v - mean) * (v - mean);
    const double s = 1.0 / std::sqrt(var / double(x.size()) + h.eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) * s * w[i] + b[i];
    return y;
  };
  auto plus = [](Vec a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  };
  const Mat tok = load(f, "token_embd.weight"), pos = load(f, "position_embd.weight");
  if (T > pos.rows) bad("more tokens than learned positions");
  std::vector<Vec> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= tok.rows) bad("token id out of range");
    x[size_t(t)].assign(tok.row(tokens[size_t(t)]), tok.row(tokens[size_t(t)]) + E);
    for (int64_t i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += pos.row(t)[i];
  }
  for (int64_t il = 0; il < h.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const Vec an = load_vec(f, p + "attn_norm.weight"), anb = load_vec(f, p + "attn_norm.bias");
    const Mat wqkv = load(f, p + "attn_qkv.weight");  // [(nh + 2 nkv) dk][E]: q's rows, k's, v's
    const Vec bqkv = load_vec(f, p + "attn_qkv.bias");
    const Mat wo = load(f, p + "attn_output.weight");
    const Vec bo = load_vec(f, p + "attn_output.bias");
    std::vector<Vec> qkv(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) qkv[size_t(t)] = plus(wqkv.mul(layer_norm(x[size_t(t)], an, anb)), bqkv);
    for (int64_t t = 0; t < T; ++t) {
      Vec att(size_t(nh * dk), 0.0);
      for (int64_t hh = 0; hh < nh; ++hh) {
        const double* q = qkv[size_t(t)].data() + hh * dk;
        const int64_t ko = nh * dk + (hh / group) * dk, vo = (nh + nkv) * dk + (hh / group) * dk;
        Vec sc(size_t(t + 1));
        double mx = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < dk; ++i) d += q[i] * qkv[size_t(u)][size_t(ko + i)];
          mx = std::max(mx, sc[size_t(u)] = d / std::sqrt(double(dk)));
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < dk; ++i) att[size_t(hh * dk + i)] += sc[size_t(u)] / sum * qkv[size_t(u)][size_t(vo + i)];
      }
      x[size_t(t)] = plus(x[size_t(t)], plus(wo.mul(att), bo));
    }
    const Vec fn = load_vec(f, p + "ffn_norm.weight"), fnb = load_vec(f, p + "ffn_norm.bias");
    const Mat up = load(f, p + "ffn_up.weight"), down = load(f, p + "ffn_down.weight");
    const Vec bu = load_vec(f, p + "ffn_up.bias"), bd = load_vec(f, p + "ffn_down.bias");
    for (auto& xt : x) {
      Vec a = plus(up.mul(layer_norm(xt, fn, fnb)), bu);
      for (double& v : a) v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      xt = plus(xt, plus(down.mul(a), bd));
    }
  }
  const Vec on = load_vec(f, "output_norm.weight"), onb = load_vec(f, "output_norm.bias");
  const Mat out = has(f, "output.weight") ? load(f, "output.weight") : tok;
  std::vector<double> logits;
  for (const auto& xt : x) {
    const Vec l = out.mul(layer_norm(xt, on, onb));
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

// deepseek2's multi-head latent attention of layer p in the expanded form: every cached
// token's per-head keys and values decompressed from its latent (the form the paper
// writes; ridge runs the absorbed one), added into x.
void mla_layer(const gguf::File& f, const std::string& p, const HP& h, const Vec& rope_factors, std::vector<Vec>& x) {
  const int64_t T = int64_t(x.size()), nh = h.n_head, R = h.rope_dim, C = h.kv_rank, dqk = h.dqk;
  const int64_t nope = dqk - R, dv = h.dv_mla;
  const Vec attn_norm = load_vec(f, p + "attn_norm.weight");
  const Mat kv_a = load(f, p + "attn_kv_a_mqa.weight");  // [C + R][E]
  const Vec kv_norm = load_vec(f, p + "attn_kv_a_norm.weight");
  const Mat k_b = load(f, p + "attn_k_b.weight");        // [nh * C][nope]
  const Mat v_b = load(f, p + "attn_v_b.weight");        // [nh * dv][C]
  const Mat wo = load(f, p + "attn_output.weight");      // [E][nh * dv]
  std::vector<Vec> q(static_cast<size_t>(T)), k(q.size()), v(q.size());  // [nh][dqk] (nope, then rope), same, [nh][dv]
  for (int64_t t = 0; t < T; ++t) {
    const Vec hn = rms_norm(x[size_t(t)], attn_norm, h.eps);
    if (h.q_rank > 0) {
      const Mat q_a = load(f, p + "attn_q_a.weight"), q_b = load(f, p + "attn_q_b.weight");
      q[size_t(t)] = q_b.mul(rms_norm(q_a.mul(hn), load_vec(f, p + "attn_q_a_norm.weight"), h.eps));
    } else {
      q[size_t(t)] = load(f, p + "attn_q.weight").mul(hn);
    }
    const Vec ckv = kv_a.mul(hn);
    const Vec c = rms_norm(Vec(ckv.begin(), ckv.begin() + C), kv_norm, h.eps);
    Vec kpe(ckv.begin() + C, ckv.end());
    rope(kpe.data(), t, h, rope_factors);
    k[size_t(t)].assign(size_t(nh * dqk), 0.0);
    v[size_t(t)].assign(size_t(nh * dv), 0.0);
    for (int64_t hh = 0; hh < nh; ++hh) {
      rope(q[size_t(t)].data() + hh * dqk + nope, t, h, rope_factors);
      for (int64_t i = 0; i < nope; ++i) {  // k_nope = Wkb_h^T c
        double s = 0;
        for (int64_t j = 0; j < C; ++j) s += k_b.row(hh * C + j)[i] * c[size_t(j)];
        k[size_t(t)][size_t(hh * dqk + i)] = s;
      }
      for (int64_t i = 0; i < R; ++i) k[size_t(t)][size_t(hh * dqk + nope + i)] = kpe[size_t(i)];
      for (int64_t i = 0; i < dv; ++i) {
        double s = 0;
        for (int64_t j = 0; j < C; ++j) s += v_b.row(hh * dv + i)[j] * c[size_t(j)];
        v[size_t(t)][size_t(hh * dv + i)] = s;
      }
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    Vec att(size_t(nh * dv), 0.0);
    for (int64_t hh = 0; hh < nh; ++hh) {
      Vec sc(size_t(t + 1));
      double mx = -INFINITY;
      for (int64_t u = 0; u <= t; ++u) {
        double d = 0;
        for (int64_t i = 0; i < dqk; ++i) d += q[size_t(t)][size_t(hh * dqk + i)] * k[size_t(u)][size_t(hh * dqk + i)];
        mx = std::max(mx, sc[size_t(u)] = d * h.kq_scale);
      }
      double sum = 0;
      for (double& e : sc) sum += (e = std::exp(e - mx));
      for (int64_t u = 0; u <= t; ++u)
        for (int64_t i = 0; i < dv; ++i) att[size_t(hh * dv + i)] += sc[size_t(u)] / sum * v[size_t(u)][size_t(hh * dv + i)];
    }
    const Vec o = wo.mul(att);
    for (size_t i = 0; i < o.size(); ++i) x[size_t(t)][i] += o[i];
  }
}

}  // namespace

std::vector<double> ref_logits(const std::string& gguf_path, const std::vector<int32_t>& tokens, bool round_q8a) {
  g_round_q8a = round_q8a;
  const auto file = gguf::File::open(gguf_path);
  const gguf::File& f = *file;
  const HP h = read_hp(f);
  if (h.arch == "gpt2") return gpt2_logits(f, h, tokens);
  const int64_t T = int64_t(tokens.size()), E = h.n_embd, dk = h.head_dim, dv = h.head_dim_v;
  const int64_t group = h.n_head / h.n_head_kv;  // q heads per kv head (GQA)

  const Mat tok_embd = load(f, "token_embd.weight");  // [n_vocab][E]
  const int64_t n_vocab = tok_embd.rows;
  // Llama 3.1's rope scaling factors: a llama tensor (as in llama.cpp; other architectures never read one).
  const Vec rope_factors = h.arch == "llama" && has(f, "rope_freqs.weight") ? load_vec(f, "rope_freqs.weight")
                           : h.yarn_factor > 0                             ? yarn_factors(h)
                                                                           : Vec{};  // [rope_dim/2]

  // Residual stream x[t][E], starting from the token embeddings.
  std::vector<Vec> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = tokens[size_t(t)];
    if (id < 0 || id >= n_vocab) bad("token id out of range");
    x[size_t(t)].assign(tok_embd.row(id), tok_embd.row(id) + E);
    if (h.arch == "gemma3")  // Gemma scales the embeddings by sqrt(n_embd)
      for (double& v : x[size_t(t)]) v *= std::sqrt(double(E));
  }

  for (int64_t il = 0; il < h.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    if (h.arch == "deepseek2") {
      mla_layer(f, p, h, rope_factors, x);
      const Vec ffn_norm = load_vec(f, p + "ffn_norm.weight");
      if (il < h.n_dense_lead) {
        const Mat g = load(f, p + "ffn_gate.weight"), u = load(f, p + "ffn_up.weight"), d = load(f, p + "ffn_down.weight");
        for (auto& xt : x) swiglu_into(xt.data(), g, u, d, 0, h.n_ff, 0, rms_norm(xt, ffn_norm, h.eps), 1.0);
        continue;
      }
      const Mat router = load(f, p + "ffn_gate_inp.weight");
      const Vec bias = has(f, p + "exp_probs_b.bias") ? load_vec(f, p + "exp_probs_b.bias") : Vec{};
      const Mat g = load(f, p + "ffn_gate_exps.weight"), u = load(f, p + "ffn_up_exps.weight"),
                d = load(f, p + "ffn_down_exps.weight");
      const Mat gs = load(f, p + "ffn_gate_shexp.weight"), us = load(f, p + "ffn_up_shexp.weight"),
                ds = load(f, p + "ffn_down_shexp.weight");
      for (auto& xt : x) {
        const Vec hn = rms_norm(xt, ffn_norm, h.eps);
        Vec y(size_t(E), 0.0);
        for (auto [e, we] : route(router.mul(hn), bias, h))
          swiglu_into(y.data(), g, u, d, e * h.n_ff_exp, h.n_ff_exp, e * E, hn, we);
        swiglu_into(y.data(), gs, us, ds, 0, h.n_ff_exp * h.n_shared, 0, hn, 1.0);
        for (int64_t i = 0; i < E; ++i) xt[size_t(i)] += y[size_t(i)];
      }
      continue;
    }
    const Vec attn_norm = load_vec(f, p + "attn_norm.weight");  // [E]
    const Mat wq = load(f, p + "attn_q.weight");                // [n_head*dk][E]
    const Mat wk = load(f, p + "attn_k.weight");                // [n_head_kv*dk][E]
    const Mat wv = load(f, p + "attn_v.weight");                // [n_head_kv*dv][E]
    const Mat wo = load(f, p + "attn_output.weight");           // [E][n_head*dv]
    const bool bias = has(f, p + "attn_q.bias"), qk_norm = has(f, p + "attn_q_norm.weight");
    if (h.arch == "qwen2" && !bias) bad("qwen2 without attn_q.bias");
    if (h.arch == "qwen3" && !qk_norm) bad("qwen3 without attn_q_norm.weight");
    const Vec bq = bias ? load_vec(f, p + "attn_q.bias") : Vec{};  // [n_head*dk]
    const Vec bk = bias ? load_vec(f, p + "attn_k.bias") : Vec{};  // [n_head_kv*dk]
    const Vec bv = bias ? load_vec(f, p + "attn_v.bias") : Vec{};  // [n_head_kv*dv]
    const Vec q_norm = qk_norm ? load_vec(f, p + "attn_q_norm.weight") : Vec{};  // [dk], shared by heads
    const Vec k_norm = qk_norm ? load_vec(f, p + "attn_k_norm.weight") : Vec{};  // [dk]
    // gemma3: a window layer's own rope base and no scaling; a global layer's scaling.
    const bool swa = h.swa_layer(il);
    HP hl = h;
    if (swa) hl.rope_base = h.rope_base_swa;
    else hl.freq_scale = 1.0 / h.linear_factor;
    const bool gemma = h.arch == "gemma3", oai = h.arch == "gpt-oss";
    const Vec sinks = oai ? load_vec(f, p + "attn_sinks.weight") : Vec{};  // [n_head]

    // q[t][n_head*dk], k[t][n_head_kv*dk], v[t][n_head_kv*dv]
    std::vector<Vec> q(static_cast<size_t>(T)), k(q.size()), v(q.size());
    for (int64_t t = 0; t < T; ++t) {
      const Vec hn = rms_norm(x[size_t(t)], attn_norm, h.eps);
      q[size_t(t)] = wq.mul(hn);
      k[size_t(t)] = wk.mul(hn);
      v[size_t(t)] = wv.mul(hn);
      if (bias) {
        for (size_t i = 0; i < bq.size(); ++i) q[size_t(t)][i] += bq[i];
        for (size_t i = 0; i < bk.size(); ++i) k[size_t(t)][i] += bk[i];
        for (size_t i = 0; i < bv.size(); ++i) v[size_t(t)][i] += bv[i];
      }
      for (int64_t hh = 0; hh < h.n_head; ++hh) {
        double* qh = q[size_t(t)].data() + hh * dk;
        if (qk_norm) rms_norm(qh, q_norm, dk, h.eps);
        rope(qh, t, hl, rope_factors);
      }
      for (int64_t hh = 0; hh < h.n_head_kv; ++hh) {
        double* kh = k[size_t(t)].data() + hh * dk;
        if (qk_norm) rms_norm(kh, k_norm, dk, h.eps);
        rope(kh, t, hl, rope_factors);
      }
    }

    // Causal softmax attention, then the output projection into the residual.
    for (int64_t t = 0; t < T; ++t) {
      Vec att(size_t(h.n_head * dv), 0.0);  // [n_head*dv]
      for (int64_t hh = 0; hh < h.n_head; ++hh) {
        const int64_t kvh = hh / group;
        const double* qh = q[size_t(t)].data() + hh * dk;
        Vec s(size_t(t + 1), -INFINITY);  // scores over positions 0..t
        double mx = -INFINITY;
        // A window layer: key u is masked from query t when t - u >= n_swa (llama.cpp's).
        const int64_t u0 = swa ? std::max<int64_t>(0, t - h.n_swa + 1) : 0;
        for (int64_t u = u0; u <= t; ++u) {
          const double* ku = k[size_t(u)].data() + kvh * dk;
          double d = 0;
          for (int64_t i = 0; i < dk; ++i) d += qh[i] * ku[i];
          s[size_t(u)] = h.kq_scale > 0 ? d * h.kq_scale : d / std::sqrt(double(dk));
          mx = std::max(mx, s[size_t(u)]);
        }
        // gpt-oss's sink: a logit without a value in the softmax's denominator.
        if (oai) mx = std::max(mx, sinks[size_t(hh)]);
        double sum = oai ? std::exp(sinks[size_t(hh)] - mx) : 0.0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t u = u0; u <= t; ++u) {
          const double* vu = v[size_t(u)].data() + kvh * dv;
          for (int64_t i = 0; i < dv; ++i) att[size_t(hh * dv + i)] += s[size_t(u)] / sum * vu[i];
        }
      }
      Vec o = wo.mul(att);  // [E]
      if (oai) {
        const Vec bo = load_vec(f, p + "attn_output.bias");
        for (int64_t i = 0; i < E; ++i) o[size_t(i)] += bo[size_t(i)];
      }
      if (gemma) o = rms_norm(o, load_vec(f, p + "post_attention_norm.weight"), h.eps);  // the sandwich
      for (int64_t i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
    }

    // (gpt-oss names its MoE's pre-norm post_attention_norm.)
    const Vec ffn_norm = load_vec(f, p + (oai ? "post_attention_norm.weight" : "ffn_norm.weight"));  // [E]
    if (h.n_expert > 0) {
      // Mixture of experts: softmax over the router's logits, the top n_expert_used (ties:
      // the lower id), their probabilities over their sum, each expert a SwiGLU.
      const Mat router = load(f, p + "ffn_gate_inp.weight");  // [n_expert][E]
      const Mat g_all = load(f, p + "ffn_gate_exps.weight");  // [n_expert * F][E]
      const Mat u_all = load(f, p + "ffn_up_exps.weight");    // [n_expert * F][E]
      const Mat d_all = load(f, p + "ffn_down_exps.weight");  // [n_expert * E][F]
      const int64_t F = h.n_ff_exp, NE = h.n_expert;
      // gpt-oss: biases on the router ([n_expert]) and on each expert's gate, up ([n_expert]
      // [F]) and down ([n_expert][E]); the top-k by biased logit, weighed by a softmax over
      // those (the same as the renormalized probabilities below); the clamped SwiGLU.
      const Vec rb = oai ? load_vec(f, p + "ffn_gate_inp.bias") : Vec{};
      const Mat gb = oai ? load(f, p + "ffn_gate_exps.bias") : Mat{}, ub = oai ? load(f, p + "ffn_up_exps.bias") : Mat{},
                db = oai ? load(f, p + "ffn_down_exps.bias") : Mat{};
      for (int64_t t = 0; t < T; ++t) {
        const Vec hn0 = rms_norm(x[size_t(t)], ffn_norm, h.eps);
        Vec lg = router.mul(hn0);
        const Vec hn = g_all.input(hn0);  // the experts' input
        for (size_t e = 0; e < rb.size(); ++e) lg[e] += rb[e];
        const double mx = *std::max_element(lg.begin(), lg.end());
        double z = 0;
        for (double v : lg) z += std::exp(v - mx);
        std::vector<int64_t> chosen;
        double wsum = 0;
        for (int64_t j = 0; j < h.n_expert_used; ++j) {
          int64_t best = -1;
          for (int64_t e = 0; e < NE; ++e)
            if (std::find(chosen.begin(), chosen.end(), e) == chosen.end() && (best < 0 || lg[size_t(e)] > lg[size_t(best)]))
              best = e;
          chosen.push_back(best);
          wsum += std::exp(lg[size_t(best)] - mx) / z;
        }
        for (int64_t e : chosen) {
          const double we = std::exp(lg[size_t(e)] - mx) / z / wsum;
          Vec a(static_cast<size_t>(F));
          for (int64_t i = 0; i < F; ++i) {
            double g = 0, up = 0;
            for (int64_t c = 0; c < E; ++c) {
              g += g_all.row(e * F + i)[c] * hn[size_t(c)];
              up += u_all.row(e * F + i)[c] * hn[size_t(c)];
            }
            if (oai) {
              g = std::min(g + gb.row(e)[i], 7.0);
              up = std::clamp(up + ub.row(e)[i], -7.0, 7.0);
              a[size_t(i)] = g / (1.0 + std::exp(-1.702 * g)) * (up + 1.0);
            } else {
              a[size_t(i)] = g / (1.0 + std::exp(-g)) * up;
            }
          }
          a = d_all.input(a);
          for (int64_t i = 0; i < E; ++i) {
            double d = oai ? db.row(e)[i] : 0.0;
            for (int64_t c = 0; c < F; ++c) d += d_all.row(e * E + i)[c] * a[size_t(c)];
            x[size_t(t)][size_t(i)] += we * d;
          }
        }
      }
      continue;
    }
    // SwiGLU FFN: down(silu(gate(h)) * up(h)), into the residual.
    const Mat w_gate = load(f, p + "ffn_gate.weight");        // [n_ff][E]
    const Mat w_up = load(f, p + "ffn_up.weight");            // [n_ff][E]
    const Mat w_down = load(f, p + "ffn_down.weight");        // [E][n_ff]
    for (int64_t t = 0; t < T; ++t) {
      const Vec hn = rms_norm(x[size_t(t)], ffn_norm, h.eps);
      const Vec g = w_gate.mul(hn), up = w_up.mul(hn);
      Vec a(size_t(h.n_ff));  // [n_ff]
      for (size_t i = 0; i < a.size(); ++i) {
        // gemma3: GeGLU, GELU's tanh form
        a[i] = gemma ? 0.5 * g[i] * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g[i] + 0.044715 * g[i] * g[i] * g[i]))) * up[i]
                     : g[i] / (1.0 + std::exp(-g[i])) * up[i];
      }
      Vec d = w_down.mul(a);  // [E]
      if (gemma) d = rms_norm(d, load_vec(f, p + "post_ffw_norm.weight"), h.eps);
      for (int64_t i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
    }
  }

  // Final norm and the output head (tied to token_embd when output.weight is absent).
  const Vec out_norm = load_vec(f, "output_norm.weight");
  const Mat out_w = has(f, "output.weight") ? load(f, "output.weight") : tok_embd;  // [n_vocab][E]
  if (out_w.rows != n_vocab) bad("output.weight rows differ from token_embd");
  std::vector<double> logits;  // [T][n_vocab]
  logits.reserve(size_t(T * n_vocab));
  for (int64_t t = 0; t < T; ++t) {
    Vec l = out_w.mul(rms_norm(x[size_t(t)], out_norm, h.eps));
    if (h.softcap > 0)
      for (double& v : l) v = h.softcap * std::tanh(v / h.softcap);
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

double max_rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(got[i]) - ref[i]);
    if (!std::isfinite(d)) return INFINITY;
    num = std::max(num, d);
    den = std::max(den, std::fabs(ref[i]));
  }
  return num / den;
}

}  // namespace ridge::test
