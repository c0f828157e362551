#include "engine/spec_policy.h"

#include <algorithm>
#include <bit>

namespace ridge {

int SpecPolicy::bucket(int32_t n_decodes) {
  constexpr int kLast = int(std::tuple_size_v<decltype(fit_)>) - 1;
  return n_decodes <= 1 ? 0 : std::min(kLast, int(std::bit_width(uint32_t(n_decodes - 1))));
}

void SpecPolicy::observe(int32_t n_decodes, int64_t rows, double seconds) {
  if (seconds <= 0 || rows <= 0) return;
  Fit& f = fit_[size_t(bucket(n_decodes))];
  const double x = double(rows);
  f.w = kDecay * f.w + 1;
  f.x = kDecay * f.x + x;
  f.y = kDecay * f.y + seconds;
  f.xx = kDecay * f.xx + x * x;
  f.xy = kDecay * f.xy + x * seconds;
}

SpecPolicy::StepCost SpecPolicy::cost(int32_t n_decodes) const {
  const Fit& f = fit_[size_t(bucket(n_decodes))];
  StepCost c;
  const double var = f.w * f.xx - f.x * f.x;  // w^2 x the rows' variance
  // Rows must have varied (steps with and without drafts) for a slope to mean anything.
  if (f.w < 4 || var <= 0.05 * f.w * f.w) return c;
  c.per_row_s = std::max(0.0, (f.w * f.xy - f.x * f.y) / var);
  c.fixed_s = std::max(0.0, (f.y - c.per_row_s * f.x) / f.w);
  c.known = c.fixed_s + c.per_row_s > 0;
  return c;
}

void SpecPolicy::choose(int32_t n_decodes, int64_t step_rows, std::vector<Candidate>& cand,
                        std::vector<int32_t>& take) const {
  // Stable: a chunk's tokens keep their order (equal chances), so each takes a prefix.
  std::stable_sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) { return a.p > b.p; });
  const StepCost c = cost(n_decodes);
  double expect = n_decodes, rows = double(step_rows);
  for (const Candidate& k : cand) {
    // Worth its row while p / per_row is above the step's rate without it.
    if (c.known ? k.p * (c.fixed_s + c.per_row_s * rows) <= c.per_row_s * expect : k.p < kPriorChance) break;
    ++take[k.chunk];
    expect += k.p;
    rows += 1;
  }
}

}  // namespace ridge
