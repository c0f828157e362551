#include "engine/spec_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace ridge {

int SpecPolicy::bucket(int32_t n_decodes) {
  constexpr int kLast = int(std::tuple_size_v<decltype(fit_)>) - 1;
  return n_decodes <= 1 ? 0 : std::min(kLast, int(std::bit_width(uint32_t(n_decodes - 1))));
}

void SpecPolicy::observe(int32_t n_decodes, int64_t rows, bool drafts, double seconds) {
  if (seconds <= 0 || rows <= 0) return;
  Fit& f = fit_[size_t(bucket(n_decodes))];
  ++f.n;
  if (!drafts) {
    f.pw = kDecay * f.pw + 1;
    f.py = kDecay * f.py + seconds;
    f.pr = kDecay * f.pr + double(rows);
    f.plast = seconds;
    ++f.pn;
    return;
  }
  const double x = double(rows);
  f.w = kDecay * f.w + 1;
  f.x = kDecay * f.x + x;
  f.y = kDecay * f.y + seconds;
  f.xx = kDecay * f.xx + x * x;
  f.xy = kDecay * f.xy + x * seconds;
  f.yy = kDecay * f.yy + seconds * seconds;
}

SpecPolicy::StepCost SpecPolicy::cost(int32_t n_decodes) const {
  const int b = bucket(n_decodes);
  StepCost c = own_cost(b);
  const Fit& f = fit_[size_t(b)];
  if (c.known || f.pw < 1) return c;
  // A neighbor's line, moved: the same jump over its plain step at its plain rows, and
  // the same cost per row, from this size's plain time and rows.
  for (const int nb : {b - 1, b + 1}) {
    if (nb < 0 || nb >= int(fit_.size())) continue;
    const StepCost n = own_cost(nb);
    if (!n.known) continue;
    const Fit& g = fit_[size_t(nb)];
    const double jump = n.at(g.pr / g.pw, true) - n.plain_s;
    c.known = c.borrowed = true;
    c.plain_s = f.py / f.pw;
    c.per_row_s = n.per_row_s;
    c.fixed_s = c.plain_s + jump - n.per_row_s * (f.pr / f.pw);
    return c;
  }
  return c;
}

double SpecPolicy::plain_seconds(int32_t n_decodes) const {
  const Fit& f = fit_[size_t(bucket(n_decodes))];
  return f.pn >= kPlainSteps ? std::min(f.py / f.pw, f.plast) : 0.0;
}

bool SpecPolicy::worth_asking(int32_t n_decodes, int64_t step_rows, int32_t max_tokens) const {
  const StepCost c = cost(n_decodes);
  if (!c.known) return true;  // the prior, or the first plain step of a borrowed line: cheap either way
  const double plain_rate = double(n_decodes) / std::max(1e-12, c.plain_s);
  for (int32_t a = 1; a <= max_tokens; ++a)
    if (double(n_decodes + a) / std::max(1e-12, c.at(double(step_rows + a), true)) > plain_rate) return true;
  return false;
}

SpecPolicy::StepCost SpecPolicy::own_cost(int b) const {
  const Fit& f = fit_[size_t(b)];
  StepCost c;
  if (f.pw < 1 || f.w < 3) return c;
  // Centered sums: sxx = w x the rows' variance.
  const double sxx = f.xx - f.x * f.x / f.w, sxy = f.xy - f.x * f.y / f.w, syy = f.yy - f.y * f.y / f.w;
  if (sxx <= 0.1 * f.w) return c;  // the rows of steps with drafts hardly varied: no slope yet
  const double slope = sxy / sxx;
  const double resid = std::max(0.0, syy - slope * sxy) / std::max(1.0, f.w - 2);  // residual variance
  c.plain_s = f.py / f.pw;
  c.per_row_s = std::max(0.0, slope + std::sqrt(resid / sxx));
  c.fixed_s = std::max(0.0, (f.y - c.per_row_s * f.x) / f.w);
  c.known = true;
  return c;
}

void SpecPolicy::choose(int32_t n_decodes, int64_t step_rows, std::vector<Candidate>& cand,
                        std::vector<int32_t>& take) const {
  // Stable: a chunk's tokens keep their order (equal chances), so each takes a prefix.
  std::stable_sort(cand.begin(), cand.end(), [](const Candidate& a, const Candidate& b) { return a.p > b.p; });
  const StepCost c = cost(n_decodes);
  const int b = bucket(n_decodes);
  const Fit& f = fit_[size_t(b)];
  auto measured = [&](int nb) { return nb >= 0 && nb < int(fit_.size()) && own_cost(nb).known; };
  size_t best = 0;
  if (c.known) {
    double expect = n_decodes, best_rate = double(n_decodes) / std::max(1e-12, c.plain_s);
    for (size_t i = 0; i < cand.size(); ++i) {
      expect += cand[i].p;
      const double rate = expect / std::max(1e-12, c.at(double(step_rows) + double(i + 1), true));
      if (rate > best_rate) best_rate = rate, best = i + 1;
    }
  } else if (f.n % 2 == 1 && !measured(b - 1) && !measured(b + 1)) {  // else: a plain step, then borrow
    // A few rows in all, whatever the batch: a big batch pays for them in proportion.
    const size_t n = size_t(1 + (f.n / 2) % kPriorMax);
    while (best < std::min(n, cand.size()) && cand[best].p >= kPriorChance) ++best;
  }
  for (size_t i = 0; i < best; ++i) ++take[cand[i].chunk];
}

}  // namespace ridge
