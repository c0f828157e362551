// A step's attention on the thread pool: which kernel calls, on which threads, and for
// latent attention its context in fixed segments.
//
// Latent attention (KVLayout::v_in_k: DeepSeek's one KV head of [rope key | latent], the
// latent its value) has one (token, KV head) task per token, too few for the threads at
// a small batch. Splitting a token's query heads among the threads (AttnQuerySplit) makes
// each thread read the whole cache (and, on the f32 way, transpose the values out of the
// keys) itself: on T threads the cache is read T times. So its context is cut into segments
// of attention_segment_keys() positions, fixed by the layout alone, and a row's result is
// defined as its segments' results folded in position order (attention_fold), each
// segment's softmax started from an empty state (AttnArgs::segment). Since the segments
// and the fold's order depend only on the row's context, every plan gives a row the same
// bits, whatever the batch or the threads:
//  - Rows: tasks of (token, KV heads, query rows) as AttnTasks makes them; a task's one
//    call folds its segments as it reaches their ends.
//  - Segments: a token's segments cut into runs of about equal keys, one call each with
//    all the token's rows; the first run folds its segments as a Rows call does, each
//    later run keeps each segment's result (AttnArgs::seg_out); then each row's kept
//    results folded onto the first run's in position order. Each thread reads its share
//    of the cache once for all the query heads.
// attention_plan chooses per step by what each plan's busiest thread would do. A context
// of one segment runs exactly as before segments; every other layout (and a window, or
// sinks) reads its whole context with one softmax.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/attention.h"

namespace ridge {
class ThreadPool;
}

namespace ridge::kernels {

struct AttnStep {
  const KVView* kv = nullptr;
  int32_t layer = 0;
  float scale = 1.f;
  int32_t window = 0;            // AttnArgs::window
  const float* sinks = nullptr;  // [n_head] AttnArgs::sinks, or null
  int32_t n_head = 1, n_kv_head = 1;
  const float* q = nullptr;  // [tokens][n_head][dk]
  float* out = nullptr;      // [tokens][n_head][dv]
  std::span<const std::span<const int32_t>> tables;  // [tokens] each token's block table
  std::span<const int32_t> n_ctx;                    // [tokens] the positions it attends
};

enum class AttnPlan { Auto, Rows, Segments };

// A Segments task: token's segments [g0, g1), one call.
struct AttnSegRun {
  int64_t token;
  int32_t g0, g1;
};
const char* attn_plan_name(AttnPlan p);

// Rows or Segments for this step. Segments only where a layout has them and the rows'
// tasks would split query heads (fewer tokens than threads), and where their busiest
// thread does less: a task's cost is its keys x (its query rows + what reading the values
// out of the keys adds: kTransposeRows rows' dots and P.V where they are transposed into
// f32 rows, or, where P.V puts the rows across 16 lanes (attention_latent_lanes), the
// empty lanes' share of P.V), tasks dealt to the least-loaded thread in order as the pool
// claims them; Segments pays kSegmentsFixedKeys keys of all the rows more (its second
// pass over the pool, the fold of the kept rows, a call per run). docs/BENCHMARKS.md.
// RIDGE_ATTN_PLAN=rows|segments overrides Auto (for measurements: every plan gives the
// same bits).
inline constexpr double kTransposeRows = 3.0;
inline constexpr double kSegmentsFixedKeys = 100.0;
AttnPlan attention_plan(const AttnStep& s, int32_t threads);

class AttnStepRunner {
 public:
  // plan: Auto, or one forced (tests; a layout without segments always runs Rows).
  void run(ThreadPool& pool, const AttnStep& s, AttnPlan plan = AttnPlan::Auto);
  AttnPlan last_plan() const { return last_; }

 private:
  void run_rows(ThreadPool& pool, const AttnStep& s, int32_t seg_keys);
  void run_segments(ThreadPool& pool, const AttnStep& s, int32_t seg_keys);

  std::vector<float> scratch_;  // [threads][attention_scratch_floats of a call's rows]
  std::vector<AttnSegRun> runs_;
  std::vector<int64_t> first_;  // [tokens + 1] each token's first segment among all kept
  std::vector<int64_t> prefix_;  // [tokens] the first kept after the token's first run's
  std::vector<float> kept_;     // [segments][n_head][dv], then [segments][n_head] lse
  AttnPlan last_ = AttnPlan::Rows;
};

}  // namespace ridge::kernels
