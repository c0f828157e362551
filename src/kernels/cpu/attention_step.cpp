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
AttnArgs segment_args(const AttnStep& s, int64_t t, int32_t g, int32_t seg_keys, const float* sinks) {
  AttnArgs a{s.kv, s.layer, s.tables[size_t(t)], s.n_ctx[size_t(t)], s.scale, {}, s.window, sinks};
  if (g > 0 || (seg_keys > 0 && a.n_ctx > seg_keys)) {
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

int32_t attention_segment_keys(const KVLayout& l) {
  if (!l.v_in_k) return 0;
  const int32_t bs = l.block_size;
  return (std::max(kAttnSegmentKeys, bs) + bs - 1) / bs * bs;
}

void attention_fold(float* o, float* L, const float* oc, float lc, int32_t dv) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (lc == kNegInf) return;
  if (*L == kNegInf) {
    std::memcpy(o, oc, size_t(dv) * sizeof(float));
    *L = lc;
    return;
  }
  const float m = std::max(*L, lc), a = std::exp(*L - m), b = std::exp(lc - m), sum = a + b;
  const float wa = a / sum, wb = b / sum;
  for (int32_t d = 0; d < dv; ++d) o[d] = o[d] * wa + oc[d] * wb;
  *L = m + std::log(sum);
}

const char* attn_plan_name(AttnPlan p) {
  switch (p) {
    case AttnPlan::Auto: return "auto";
    case AttnPlan::Rows: return "rows";
    case AttnPlan::Segments: return "segments";
  }
  return "?";
}

AttnPlan attention_plan(const AttnStep& s, int32_t threads) {
  const int32_t seg_keys = step_segment_keys(s);
  if (seg_keys == 0) return AttnPlan::Rows;
  if (env_plan() != AttnPlan::Auto) return env_plan();
  const int64_t T = int64_t(s.n_ctx.size());
  const int32_t group = s.n_head / s.n_kv_head;
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
    if (k.rows > 0) deal(double(s.n_ctx[size_t(k.token)]) * (k.n * k.rows + kTransposeRows * k.n));
  }
  const double rows = busiest();
  for (int64_t t = 0; t < T; ++t) {
    const int32_t n = s.n_ctx[size_t(t)];
    for (int32_t g = 0; g < segments_of(seg_keys, n); ++g)
      deal(double(std::min(seg_keys, n - g * seg_keys)) * (s.n_head + kTransposeRows * s.n_kv_head));
  }
  return busiest() < rows ? AttnPlan::Segments : AttnPlan::Rows;
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
  // piece; as few runs per token as keep every thread busy.
  const KVLayout& l = s.kv->layout();
  const int64_t T = int64_t(s.n_ctx.size());
  const int32_t group = s.n_head / s.n_kv_head, dk = l.head_dim_k, dv = l.head_dim_v;
  const AttnTasks tasks(T, s.n_kv_head, group, pool.size());
  const int32_t rows = tasks.rows_per_call();
  const int64_t kernel = attention_scratch_floats(l, rows);
  // + a later segment's rows [rows][dv], their lse [rows], the output's lse [rows]
  const int64_t per = kernel + (seg_keys > 0 ? int64_t(rows) * (dv + 2) : 0);
  scratch_.resize(size_t(pool.size() * per));
  const auto sinks_of = [&](const AttnTasks::Task& k) {
    return s.sinks ? s.sinks + int64_t(k.h0) * group + k.r0 : nullptr;
  };
  // Each thread asks for what it reads next (the next segment's first keys, or the next
  // task's) during its last tile.
  pool.run_ahead(tasks.count(), [&](int64_t task, int64_t after, int thread) {
    const AttnTasks::Task k = tasks[task];
    if (k.rows <= 0) return;
    const int64_t row = k.token * s.n_head + int64_t(k.h0) * group + k.r0;
    const int32_t nr = k.n * k.rows;  // the call's rows, adjacent in q and out
    float* sc = scratch_.data() + thread * per;
    float* oc = sc + kernel;
    float* lc = oc + int64_t(rows) * dv;
    float* L = lc + rows;
    float* o = s.out + row * dv;
    const int32_t nseg = segments_of(seg_keys, s.n_ctx[size_t(k.token)]);
    AttnArgs na;
    for (int32_t g = 0; g < nseg; ++g) {
      AttnArgs a = segment_args(s, k.token, g, seg_keys, sinks_of(k));
      AttnNext next;
      if (g + 1 < nseg) {
        na = segment_args(s, k.token, g + 1, seg_keys, nullptr), next = AttnNext{&na, k.h0, k.n};
      } else if (after >= 0) {
        const AttnTasks::Task n = tasks[after];
        na = segment_args(s, n.token, 0, seg_keys, nullptr), next = AttnNext{&na, n.h0, n.n};
      }
      if (nseg > 1) a.lse = g == 0 ? L : lc;
      attention_heads(a, k.h0, k.n, k.rows, s.q + row * dk, dk, g == 0 ? o : oc, dv, sc, next);
      for (int32_t r = 0; r < nr && g > 0; ++r) attention_fold(o + int64_t(r) * dv, L + r, oc + int64_t(r) * dv, lc[r], dv);
    }
  });
}

void AttnStepRunner::run_segments(ThreadPool& pool, const AttnStep& s, int32_t seg_keys) {
  const KVLayout& l = s.kv->layout();
  const int64_t T = int64_t(s.n_ctx.size());
  const int32_t group = s.n_head / s.n_kv_head, dk = l.head_dim_k, dv = l.head_dim_v, nh = s.n_head;
  segs_.clear();
  first_.assign(size_t(T + 1), 0);
  for (int64_t t = 0; t < T; ++t) {
    first_[size_t(t)] = int64_t(segs_.size());
    for (int32_t g = 0; g < segments_of(seg_keys, s.n_ctx[size_t(t)]); ++g)
      segs_.push_back(Seg{t, g, int64_t(segs_.size())});
  }
  first_[size_t(T)] = int64_t(segs_.size());
  const int64_t n = int64_t(segs_.size());
  kept_.resize(size_t(n * nh * (dv + 1)));
  float* kept_lse = kept_.data() + n * nh * dv;  // [segments][nh]
  const int64_t per = attention_scratch_floats(l, nh);
  scratch_.resize(size_t(pool.size() * per));
  pool.run_ahead(n, [&](int64_t i, int64_t after, int thread) {
    const Seg& g = segs_[size_t(i)];
    AttnArgs a = segment_args(s, g.token, g.seg, seg_keys, nullptr), na;
    a.lse = kept_lse + g.kept * nh;
    AttnNext next;
    if (after >= 0) na = segment_args(s, segs_[size_t(after)].token, segs_[size_t(after)].seg, seg_keys, nullptr),
                    next = AttnNext{&na, 0, s.n_kv_head};
    attention_heads(a, 0, s.n_kv_head, group, s.q + g.token * nh * dk, dk, kept_.data() + g.kept * nh * dv, dv,
                    scratch_.data() + thread * per, next);
  });
  // Each row's segments folded in position order, as a Rows task folds them.
  pool.run(T * nh, [&](int64_t task, int) {
    const int64_t t = task / nh, r = task % nh, i0 = first_[size_t(t)], i1 = first_[size_t(t + 1)];
    float* o = s.out + (t * nh + r) * dv;
    std::memcpy(o, kept_.data() + (i0 * nh + r) * dv, size_t(dv) * sizeof(float));
    float L = kept_lse[i0 * nh + r];
    for (int64_t i = i0 + 1; i < i1; ++i) attention_fold(o, &L, kept_.data() + (i * nh + r) * dv, kept_lse[i * nh + r], dv);
  });
}

}  // namespace ridge::kernels
