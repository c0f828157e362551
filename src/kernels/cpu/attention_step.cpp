#include "kernels/cpu/attention_step.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "core/threadpool.h"

namespace ridge::kernels {

namespace {

// Segments of a context of n positions (one for a layout without them, or none).
int32_t segments_of(int32_t seg_keys, int32_t n) { return seg_keys > 0 && n > seg_keys ? (n + seg_keys - 1) / seg_keys : 1; }

// Segment g of token t's context: its blocks from the segment's first, its positions.
// g < 0: the whole context.
AttnArgs segment_args(const AttnStep& s, int64_t t, int32_t g, int32_t seg_keys, const float* sinks) {
  AttnArgs a{s.kv, s.layer, s.tables[size_t(t)], s.n_ctx[size_t(t)], s.scale, {}, s.window, sinks};
  if (g > 0 || (g == 0 && seg_keys > 0 && a.n_ctx > seg_keys)) {
    const int32_t p0 = g * seg_keys;
    a.block_table = a.block_table.subspan(size_t(p0 / s.kv->layout().block_size));
    a.n_ctx = std::min(seg_keys, a.n_ctx - p0);
  }
  return a;
}

// The segment length a step runs with: none with a window or sinks (a window's first
// position is its row's own; a sink belongs to the whole context).
int32_t step_segment_keys(const AttnStep& s) {
  return s.window > 0 || s.sinks ? 0 : attention_segment_keys(s.kv->layout());
}

// A call's work per key in rows' dots and P.V: `rows` query rows of each of n heads.
double call_rows(const KVLayout& l, int32_t n, int32_t rows) {
  if (!attention_latent_lanes(l)) return n * (rows + kTransposeRows);
  const double pv = double(l.head_dim_v) / (l.head_dim_k + l.head_dim_v);  // P.V's share of a row
  return n * (rows + pv * ((rows + 15) / 16 * 16 - rows));
}

AttnPlan env_plan() {
  static const AttnPlan p = [] {
    const char* e = std::getenv("RIDGE_ATTN_PLAN");
    const std::string_view v = e ? e : "";
    if (v == "rows") return AttnPlan::Rows;
    if (v == "segments") return AttnPlan::Segments;
    RIDGE_CHECK(v.empty() || v == "auto", "RIDGE_ATTN_PLAN={}: expected auto, rows or segments", v);
    return AttnPlan::Auto;
  }();
  return p;
}

}  // namespace

const char* attn_plan_name(AttnPlan p) {
  switch (p) {
    case AttnPlan::Auto: return "auto";
    case AttnPlan::Rows: return "rows";
    case AttnPlan::Segments: return "segments";
  }
  return "?";
}

// The Segments plan's tasks: each token's segments cut into runs of about the same keys,
// as many per token as its share of all the step's keys gives the threads (at least one).
void segment_runs(const AttnStep& s, int32_t seg_keys, int32_t threads, std::vector<AttnSegRun>& runs) {
  runs.clear();
  double total = 0;
  for (int32_t n : s.n_ctx) total += n;
  for (int64_t t = 0; t < int64_t(s.n_ctx.size()); ++t) {
    const int32_t n = s.n_ctx[size_t(t)], nseg = segments_of(seg_keys, n);
    const int32_t want = total > 0 ? int32_t(std::lround(double(n) * threads / total)) : 1;
    const int32_t r = std::clamp(want, 1, nseg);
    int32_t g0 = 0;
    for (int32_t j = 1; j <= r; ++j) {
      // The boundary nearest j / r of the keys, leaving each later run a segment.
      int32_t g1 = j == r ? nseg : int32_t(std::lround(double(n) * j / r / seg_keys));
      g1 = std::clamp(g1, g0 + 1, nseg - (r - j));
      runs.push_back(AttnSegRun{t, g0, g1});
      g0 = g1;
    }
  }
}

AttnPlan attention_plan(const AttnStep& s, int32_t threads) {
  const int32_t seg_keys = step_segment_keys(s);
  if (seg_keys == 0) return AttnPlan::Rows;
  if (env_plan() != AttnPlan::Auto) return env_plan();
  const int64_t T = int64_t(s.n_ctx.size());
  const int32_t group = s.n_head / s.n_kv_head;
  const KVLayout& l = s.kv->layout();
  const AttnTasks tasks(T, s.n_kv_head, group, threads);
  if (tasks.qs.parts == 1) return AttnPlan::Rows;  // enough tasks without splitting queries
  std::vector<double> load(size_t(std::max(threads, 1)));
  const auto deal = [&](double c) { *std::min_element(load.begin(), load.end()) += c; };
  const auto busiest = [&] {
    const double m = *std::max_element(load.begin(), load.end());
    std::fill(load.begin(), load.end(), 0.0);
    return m;
  };
  for (int64_t i = 0; i < tasks.count(); ++i) {
    const AttnTasks::Task k = tasks[i];
    if (k.rows > 0) deal(double(s.n_ctx[size_t(k.token)]) * call_rows(l, k.n, k.rows));
  }
  const double rows = busiest();
  std::vector<AttnSegRun> runs;
  segment_runs(s, seg_keys, threads, runs);
  for (const AttnSegRun& r : runs) {
    const int32_t keys = std::min(s.n_ctx[size_t(r.token)], r.g1 * seg_keys) - r.g0 * seg_keys;
    deal(double(keys) * call_rows(l, s.n_kv_head, group));
  }
  const double fixed = kSegmentsFixedKeys * call_rows(l, s.n_kv_head, group);
  return busiest() + fixed < rows ? AttnPlan::Segments : AttnPlan::Rows;
}

void AttnStepRunner::run(ThreadPool& pool, const AttnStep& s, AttnPlan plan) {
  RIDGE_CHECK(s.n_kv_head >= 1 && s.n_head % s.n_kv_head == 0 && s.tables.size() == s.n_ctx.size(),
              "attention step: {} query heads over {} KV heads, {} tables for {} tokens", s.n_head, s.n_kv_head,
              s.tables.size(), s.n_ctx.size());
  const int32_t seg_keys = step_segment_keys(s);
  if (plan == AttnPlan::Auto) plan = attention_plan(s, pool.size());
  last_ = seg_keys > 0 ? plan : AttnPlan::Rows;
  if (last_ == AttnPlan::Segments) run_segments(pool, s, seg_keys);
  else run_rows(pool, s, seg_keys);
}

void AttnStepRunner::run_rows(ThreadPool& pool, const AttnStep& s, int32_t seg_keys) {
  // Tasks of (token, a run of KV heads): each head's group of query heads (adjacent in q
  // and out) shares each K/V tile, and a run of heads reads its tiles of a block as one
  // piece; as few runs per token as keep every thread busy. A task's segments are folded
  // inside its one call.
  const KVLayout& l = s.kv->layout();
  const int64_t T = int64_t(s.n_ctx.size());
  const int32_t group = s.n_head / s.n_kv_head, dk = l.head_dim_k, dv = l.head_dim_v;
  const AttnTasks tasks(T, s.n_kv_head, group, pool.size());
  const int64_t per = attention_scratch_floats(l, tasks.rows_per_call());
  scratch_.resize(size_t(pool.size() * per));
  const auto args_of = [&](const AttnTasks::Task& k) {
    AttnArgs a = segment_args(s, k.token, -1, 0, s.sinks ? s.sinks + int64_t(k.h0) * group + k.r0 : nullptr);
    a.segment = seg_keys;
    return a;
  };
  // Each thread asks for its next task's first keys during this one's last tile.
  pool.run_ahead(tasks.count(), [&](int64_t task, int64_t after, int thread) {
    const AttnTasks::Task k = tasks[task];
    if (k.rows <= 0) return;
    AttnArgs na;
    AttnNext next;
    if (after >= 0) {
      const AttnTasks::Task n = tasks[after];
      na = args_of(n), next = AttnNext{&na, n.h0, n.n};
    }
    const int64_t row = k.token * s.n_head + int64_t(k.h0) * group + k.r0;
    attention_heads(args_of(k), k.h0, k.n, k.rows, s.q + row * dk, dk, s.out + row * dv, dv,
                    scratch_.data() + thread * per, next);
  });
}

void AttnStepRunner::run_segments(ThreadPool& pool, const AttnStep& s, int32_t seg_keys) {
  const KVLayout& l = s.kv->layout();
  const int64_t T = int64_t(s.n_ctx.size());
  const int32_t group = s.n_head / s.n_kv_head, dk = l.head_dim_k, dv = l.head_dim_v, nh = s.n_head;
  segment_runs(s, seg_keys, pool.size(), runs_);
  first_.assign(size_t(T + 1), 0);  // each token's first segment among all kept
  for (int64_t t = 0; t < T; ++t) first_[size_t(t + 1)] = first_[size_t(t)] + segments_of(seg_keys, s.n_ctx[size_t(t)]);
  const int64_t n = first_[size_t(T)];
  kept_.resize(size_t(n * nh * (dv + 1)));
  float* kept_lse = kept_.data() + n * nh * dv;  // [segments][nh]
  // + the call's running rows [nh][dv]: two runs of one token work at once
  const int64_t kernel = attention_scratch_floats(l, nh), per = kernel + int64_t(nh) * dv;
  scratch_.resize(size_t(pool.size() * per));
  // A run's segments [g0, g1) in one call, its context from segment g0's first block.
  const auto args_of = [&](const AttnSegRun& r) {
    AttnArgs a = segment_args(s, r.token, r.g0, seg_keys, nullptr);
    a.n_ctx = std::min(s.n_ctx[size_t(r.token)], r.g1 * seg_keys) - r.g0 * seg_keys;
    a.segment = seg_keys;
    return a;
  };
  // A token's first run folds its own segments as it goes (a left fold from the first
  // segment is what the fold below would start with) into its first segment's kept rows;
  // the later runs keep each segment's rows. prefix_[t]: the first kept segment after it.
  prefix_.assign(size_t(T), 0);
  for (const AttnSegRun& r : runs_)
    if (r.g0 == 0) prefix_[size_t(r.token)] = first_[size_t(r.token)] + r.g1;
  pool.run_ahead(int64_t(runs_.size()), [&](int64_t i, int64_t after, int thread) {
    const AttnSegRun& r = runs_[size_t(i)];
    const int64_t c0 = first_[size_t(r.token)] + r.g0;
    AttnArgs a = args_of(r), na;
    float* sc = scratch_.data() + thread * per;
    float* out = sc + kernel;
    if (r.g0 == 0) out = kept_.data() + c0 * nh * dv, a.lse = kept_lse + c0 * nh;
    else a.seg_out = kept_.data() + c0 * nh * dv, a.seg_lse = kept_lse + c0 * nh;
    AttnNext next;
    if (after >= 0) na = args_of(runs_[size_t(after)]), next = AttnNext{&na, 0, s.n_kv_head};
    attention_heads(a, 0, s.n_kv_head, group, s.q + r.token * nh * dk, dk, out, dv, sc, next);
  });
  // Each row's later segments folded onto its first run's in position order, as a Rows
  // call folds them (the first run's own segments' slots after its first stay unused).
  pool.run(T * nh, [&](int64_t task, int) {
    const int64_t t = task / nh, r = task % nh, i0 = first_[size_t(t)], i1 = first_[size_t(t + 1)];
    float* o = s.out + (t * nh + r) * dv;
    std::memcpy(o, kept_.data() + (i0 * nh + r) * dv, size_t(dv) * sizeof(float));
    float L = kept_lse[i0 * nh + r];
    for (int64_t i = prefix_[size_t(t)]; i < i1; ++i)
      attention_fold(o, &L, kept_.data() + (i * nh + r) * dv, kept_lse[i * nh + r], dv);
  });
}

}  // namespace ridge::kernels
