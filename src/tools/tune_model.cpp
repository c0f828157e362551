#include "tools/tune_model.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <unordered_set>

#include "model/model.h"
#include "perf/peaks.h"

namespace ridge::tools {
namespace {

// The matrices' multiply-adds per token (attention's own work left out: it is a small
// share at the lengths a prior matters for).
double flops_per_token(const HParams& h) {
  const double e = h.n_embd, q = double(h.n_head) * h.head_dim_k, kv = double(h.n_head_kv) * (h.head_dim_k + h.head_dim_v);
  const double ff = h.moe() ? double(h.n_expert_used + h.n_expert_shared) * (h.n_ff_exp > 0 ? h.n_ff_exp : h.n_ff)
                            : double(h.n_ff);
  const double layer = e * q + e * kv + double(h.n_head) * h.head_dim_v * e + 3 * e * ff;
  return 2 * (double(h.n_layer) * layer + e * h.n_vocab);
}

// Solves the n x n system a x = b (Gaussian elimination with partial pivoting); false
// when it is singular.
template <int N>
bool solve(double (&a)[N][N], double (&b)[N], double (&x)[N]) {
  for (int c = 0; c < N; ++c) {
    int p = c;
    for (int r = c + 1; r < N; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    if (std::fabs(a[p][c]) < 1e-300) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (int r = c + 1; r < N; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < N; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int c = N - 1; c >= 0; --c) {
    double s = b[c];
    for (int k = c + 1; k < N; ++k) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  return true;
}

}  // namespace

double model_flops_per_token(const Model& m) { return flops_per_token(m.hparams()); }

Ceilings model_ceilings(const Model& m, const Peaks& peaks, int threads) {
  Ceilings c;
  c.dram_gbs = peaks.dram_read_gbs_max;
  if (auto it = peaks.dram_read_gbs.find(threads); it != peaks.dram_read_gbs.end()) c.dram_gbs = it->second;
  if (!(c.dram_gbs > 0)) c.dram_gbs = 20;  // no measurement: a modest DRAM
  // The class of the layers' matrices (the output head may be stored otherwise).
  DType t = DType::F32;
  if (!m.weights().layers.empty()) {
    const LayerWeights& l = m.weights().layers[0];
    t = l.wo.data || l.wo.packed ? l.wo.type : l.w_down.type;
  }
  const bool quantized = t != DType::F32 && t != DType::F16 && t != DType::BF16;
  const auto& peak = quantized ? peaks.int8_vnni : peaks.fp32_fma;
  c.compute_class = quantized ? "int8" : "fp32";
  c.compute_gops = peak ? peak->all : 0;
  if (peak && threads > 0 && peaks.threads > 0) c.compute_gops = peak->per_core * std::min(threads, peaks.threads);
  if (!(c.compute_gops > 0)) c.compute_gops = 100;
  return c;
}

StepModel step_model_prior(const Model& m, const Peaks& peaks, int threads) {
  StepModel sm;
  const Ceilings c = model_ceilings(m, peaks, threads);
  sm.prior_fixed_s = double(m.streamed_weight_bytes()) / (c.dram_gbs * 1e9);
  // Kernels reach about half the peak on real shapes: the prior says so, the fit corrects.
  sm.prior_per_token_s = flops_per_token(m.hparams()) / (0.5 * c.compute_gops * 1e9);
  // A scored pair reads one position's K and V (f16) for every layer and KV head once,
  // at the DRAM ceiling: decode's attention, which streams the cache.
  const HParams& h = m.hparams();
  const double kv_bytes = 2.0 * double(h.n_layer) * h.n_head_kv * (h.head_dim_k + h.head_dim_v);
  sm.prior_per_pair_s = kv_bytes / (c.dram_gbs * 1e9);
  sm.fixed_s = sm.prior_fixed_s;
  sm.per_token_s = sm.prior_per_token_s;
  sm.per_pair_s = sm.prior_per_pair_s;
  return sm;
}

void fit_step_model(StepModel& sm, const std::vector<StepRecord>& steps) {
  // Normal equations of [1, tokens, seqs, pairs] -> seconds, plus pseudo-steps from the prior.
  constexpr int N = 4;
  double a[N][N] = {}, b[N] = {};
  auto add = [&](double tok, double seqs, double pairs, double t, double w) {
    const double x[N] = {1, tok, seqs, pairs};
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < N; ++j) a[i][j] += w * x[i] * x[j];
      b[i] += w * x[i] * t;
    }
  };
  auto prior = [&](double tok, double pairs) {
    return sm.prior_fixed_s + sm.prior_per_token_s * tok + sm.prior_per_pair_s * pairs;
  };
  // Light enough that a few dozen real steps outweigh them, heavy enough to pin a
  // direction the steps do not vary in.
  for (double tok : {1.0, 16.0, 256.0}) add(tok, std::min(tok, 16.0), 0, prior(tok, 0), 0.01);
  add(1, 1, 4096, prior(1, 4096), 0.01);
  int64_t n = 0;
  for (const StepRecord& s : steps)
    if (s.tokens > 0) add(s.tokens, s.seqs, s.pairs, s.seconds, 1), ++n;
  double x[N];
  if (!solve(a, b, x)) return;
  sm.fixed_s = std::max(0.0, x[0]);
  sm.per_token_s = std::max(0.0, x[1]);
  sm.per_seq_s = std::max(0.0, x[2]);
  sm.per_pair_s = std::max(0.0, x[3]);
  sm.fitted_steps = n;
}

TrialMetrics simulate(const StepModel& sm, const EngineConfig& cfg, int64_t kv_tokens,
                      const std::vector<TracedRequest>& requests, int32_t max_concurrency, const Slo& slo) {
  struct Seq {
    size_t i;
    int32_t todo;  // prompt tokens still to run
    int32_t left;  // output tokens still to produce
    int32_t len;   // tokens whose KV it holds
  };
  const size_t n = requests.size();
  const int32_t bs = std::max(1, cfg.block_size);
  const double kv_scale = kv_pair_scale(cfg.kv_dtype);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> arrival(n), ttft(n, kInf), tpot(n, kInf), end(n, kInf), first(n, 0);
  std::vector<int32_t> out(n, 0);
  std::deque<size_t> waiting;
  std::vector<Seq> running;
  std::unordered_set<uint64_t> cached;  // chain hashes of full prompt blocks computed
  auto blocks_of = [&](const TracedRequest& r, bool insert) {
    uint64_t h = 1469598103934665603ull;
    int32_t hit = 0;
    for (int32_t b = 0; (b + 1) * bs <= r.prompt_len; ++b) {
      for (int32_t k = b * bs; k < (b + 1) * bs; ++k) h = (h ^ uint64_t(uint32_t(r.prompt[size_t(k)]))) * 1099511628211ull;
      if (insert) cached.insert(h);
      else if (cached.count(h)) hit = (b + 1) * bs;
      else break;
    }
    return hit;
  };
  int64_t kv_used = 0, in_flight = 0;
  size_t next = 0;
  double t = 0;
  int64_t guard = 0;
  while ((next < n || !waiting.empty() || !running.empty()) && ++guard < 50'000'000) {
    while (next < n && requests[next].t <= t && (max_concurrency <= 0 || in_flight < max_concurrency)) {
      arrival[next] = std::max(requests[next].t, max_concurrency > 0 ? t : requests[next].t);
      waiting.push_back(next++);
      ++in_flight;
    }
    // Decodes first, then prompt chunks, then new sequences, within the two budgets.
    int64_t budget = cfg.max_num_batched_tokens, tokens = 0;
    std::vector<int32_t> take(running.size(), 0);
    for (size_t k = 0; k < running.size() && budget > 0; ++k)
      if (running[k].todo == 0) take[k] = 1, --budget;
    for (size_t k = 0; k < running.size() && budget > 0; ++k)
      if (running[k].todo > 0) take[k] = int32_t(std::min<int64_t>(running[k].todo, budget)), budget -= take[k];
    while (!waiting.empty() && budget > 0 && int32_t(running.size()) < cfg.max_num_seqs) {
      const TracedRequest& r = requests[waiting.front()];
      const int64_t need = r.prompt_len + r.output_tokens;
      if (kv_used + need > kv_tokens && !running.empty()) break;  // waits for memory
      const int32_t hit = cfg.prefix_cache ? std::min(blocks_of(r, false), r.prompt_len - 1) : 0;
      Seq s{waiting.front(), r.prompt_len - hit, r.output_tokens, r.prompt_len};
      waiting.pop_front();
      kv_used += need;
      running.push_back(s);
      take.push_back(int32_t(std::min<int64_t>(s.todo, budget)));
      budget -= take.back();
    }
    for (int32_t x : take) tokens += x;
    if (tokens == 0) {
      if (next >= n) break;
      t = std::max(t, requests[next].t);
      continue;
    }
    double pairs = 0;  // attention's query-key pairs, each chunk from where its sequence stands
    for (size_t k = 0; k < running.size(); ++k) {
      if (take[k] == 0) continue;
      const Seq& s = running[k];
      const double start = s.todo > 0 ? double(requests[s.i].prompt_len - s.todo)
                                      : double(requests[s.i].prompt_len + out[s.i] - 1);
      pairs += double(take[k]) * (start + 0.5 * double(take[k] + 1));
    }
    t += sm.at(double(tokens), double(running.size()), pairs * kv_scale);
    for (size_t k = 0; k < running.size(); ++k) {
      Seq& s = running[k];
      if (take[k] == 0) continue;
      if (s.todo > 0) {
        s.todo -= take[k];
        if (s.todo > 0) continue;
        if (cfg.prefix_cache) blocks_of(requests[s.i], true);
      }
      // The step's last prompt chunk or a decode: one token out.
      if (out[s.i]++ == 0) first[s.i] = t, ttft[s.i] = t - arrival[s.i];
      --s.left;
    }
    for (size_t k = running.size(); k-- > 0;) {
      Seq& s = running[k];
      if (s.left > 0) continue;
      end[s.i] = t;
      tpot[s.i] = out[s.i] > 1 ? (t - first[s.i]) / double(out[s.i] - 1) : 0;
      kv_used -= requests[s.i].prompt_len + requests[s.i].output_tokens;
      --in_flight;
      running.erase(running.begin() + std::ptrdiff_t(k));
    }
  }
  TrialMetrics m;
  summarize(m, arrival, ttft, tpot, end, out, slo);
  return m;
}

}  // namespace ridge::tools
