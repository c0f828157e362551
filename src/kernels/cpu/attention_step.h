// A step's attention on the thread pool: which kernel calls, on which threads, and for
// latent attention its context in fixed segments.
//
// Latent attention (KVLayout::v_in_k: DeepSeek's one KV head of [rope key | latent], the
// latent its value) has one (token, KV head) task per token, too few for the threads at
// a small batch. Splitting a token's query heads among the threads (AttnQuerySplit) makes
// each thread read the whole cache and transpose the values out of the keys itself: on T
// threads the cache is read and transposed T times. So its context is cut into segments
// of attention_segment_keys() positions, fixed by the layout alone, and a row's result is
// defined as its segments' results folded in position order (attention_fold): each
// segment one kernel call with its own softmax (its normalized output and log-sum-exp,
// AttnArgs::lse). Since the segments and the fold's order depend only on the row's
// context, every plan gives a row the same bits, whatever the batch or the threads:
//  - Rows: tasks of (token, KV heads, query rows) as AttnTasks makes them; a task runs
//    its token's segments in order and folds each into its output as it comes.
//  - Segments: one task per (token, segment) with all the token's rows, each result
//    kept; then each row's kept results folded in position order. Each thread reads and
//    transposes its segments' share of the cache once for all the query heads.
// attention_plan chooses per step by what each plan's busiest thread would do. A context
// of one segment is one call, bit for bit as before segments; every other layout (and a
// window, or sinks) reads its whole context in one call.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/attention.h"

namespace ridge {
class ThreadPool;
}

namespace ridge::kernels {

// Positions per segment of this layout's context, a whole number of blocks and of the
// attention tiles; 0: no segments (one call over the whole context).
inline constexpr int32_t kAttnSegmentKeys = 512;
int32_t attention_segment_keys(const KVLayout& l);

// Row o (ln its log-sum-exp L) folded with a later segment's row oc (lc): both rescaled
// to their joint normalizer, L updated. A segment with no weight (lc = -inf) leaves it;
// an o with none takes oc. One out-of-line function, so every plan runs the same
// instructions in the same order.
void attention_fold(float* o, float* L, const float* oc, float lc, int32_t dv);

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
const char* attn_plan_name(AttnPlan p);

// Rows or Segments for this step. Segments only where a layout has them and the rows'
// tasks would split query heads (fewer tokens than threads), and where their busiest
// thread does less: a task's cost is its keys x (its query rows + kTransposeRows), the
// values' transposition out of the keys counted as that many rows' dots and P.V (the
// latent's BF16 path, docs/BENCHMARKS.md), tasks dealt to the least-loaded thread in
// order as the pool claims them. RIDGE_ATTN_PLAN=rows|segments overrides Auto (for
// measurements: every plan gives the same bits).
inline constexpr double kTransposeRows = 3.0;
AttnPlan attention_plan(const AttnStep& s, int32_t threads);

class AttnStepRunner {
 public:
  // plan: Auto, or one forced (tests; a layout without segments always runs Rows).
  void run(ThreadPool& pool, const AttnStep& s, AttnPlan plan = AttnPlan::Auto);
  AttnPlan last_plan() const { return last_; }

 private:
  void run_rows(ThreadPool& pool, const AttnStep& s, int32_t seg_keys);
  void run_segments(ThreadPool& pool, const AttnStep& s, int32_t seg_keys);

  std::vector<float> scratch_;  // [threads][per thread]
  struct Seg {
    int64_t token;
    int32_t seg;
    int64_t kept;  // index of its kept result
  };
  std::vector<Seg> segs_;
  std::vector<int64_t> first_;  // [tokens + 1] each token's first entry in segs_
  std::vector<float> kept_;     // [segments][n_head][dv], then [segments][n_head] lse
  AttnPlan last_ = AttnPlan::Rows;
};

}  // namespace ridge::kernels
