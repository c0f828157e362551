#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ridge {

Sampler::Sampler(const SamplingParams& p, int32_t n_vocab) : p_(p), n_vocab_(n_vocab), rng_(p.seed) {
  RIDGE_CHECK(n_vocab > 0, "sampler: n_vocab must be positive, got {}", n_vocab);
  RIDGE_CHECK(std::isfinite(p.temperature), "sampling: temperature must be a finite number");
  RIDGE_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f,
              "sampling: repetition_penalty must be > 0, got {}", p.repetition_penalty);
  RIDGE_CHECK(!std::isnan(p.top_p) && !std::isnan(p.min_p), "sampling: top_p and min_p must be numbers");
  RIDGE_CHECK(std::isfinite(p.presence_penalty) && std::isfinite(p.frequency_penalty),
              "sampling: presence_penalty and frequency_penalty must be finite");
  for (auto [id, bias] : p.logit_bias)
    RIDGE_CHECK(id >= 0 && id < n_vocab && !std::isnan(bias), "sampling: logit_bias token {} is not in the vocabulary "
                "(0..{}) or its bias is not a number", id, n_vocab - 1);
}

double Sampler::uniform01() {
  // The top 53 bits of one 64-bit draw, scaled by 2^-53: exact in a double, in [0, 1).
  return double(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::apply_penalties(float* logits, std::span<const int32_t> history) {
  const bool any = p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if (!any || p_.penalty_last_n == 0 || history.empty()) return;
  size_t n = history.size();
  if (p_.penalty_last_n > 0) n = std::min(n, size_t(p_.penalty_last_n));
  const auto window = history.last(n);

  // Count each distinct token once (sorting keeps this allocation-free after warm-up and
  // independent of the vocabulary size).
  counts_.clear();
  for (int32_t t : window)
    if (t >= 0 && t < n_vocab_) counts_.push_back({t, 1});
  std::sort(counts_.begin(), counts_.end());
  size_t w = 0;
  for (size_t r = 0; r < counts_.size(); ++r) {
    if (w > 0 && counts_[w - 1].first == counts_[r].first)
      ++counts_[w - 1].second;
    else
      counts_[w++] = counts_[r];
  }
  counts_.resize(w);

  // Same order as llama.cpp: the multiplicative penalty, then the OpenAI-style offsets.
  for (auto [id, count] : counts_) {
    float& l = logits[id];
    if (p_.repetition_penalty != 1.0f) l = l > 0.0f ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    l -= float(count) * p_.frequency_penalty + p_.presence_penalty;
  }
}

int32_t Sampler::sample(float* logits, std::span<const int32_t> history) {
  apply_penalties(logits, history);
  for (auto [id, bias] : p_.logit_bias) logits[id] += bias;
  if (p_.temperature <= 0.0f) return argmax(logits, n_vocab_);

  cand_.clear();
  for (int32_t i = 0; i < n_vocab_; ++i)
    if (!std::isnan(logits[i])) cand_.push_back({logits[i], 0.0f, i});
  // Higher logit first; equal logits by id, so the order (and every cut) is deterministic.
  auto before = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };

  if (p_.top_k > 0 && size_t(p_.top_k) < cand_.size()) {
    std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), before);
    cand_.resize(size_t(p_.top_k));
  }
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const Cand& c : cand_) max_logit = std::max(max_logit, c.logit);
  if (cand_.empty() || max_logit == -std::numeric_limits<float>::infinity()) return argmax(logits, n_vocab_);

  // Softmax at temperature T over the top-k set (Z normalizes it; the max maps to 1).
  const double inv_t = 1.0 / double(p_.temperature);
  double z = 0.0;
  for (Cand& c : cand_) {
    c.p = float(std::exp((double(c.logit) - double(max_logit)) * inv_t));
    z += c.p;
  }

  // min-p keeps p >= min_p * p_max. Top-p and min-p each keep a prefix of the sorted
  // order and renormalizing after top-p leaves ratios to p_max unchanged, so min-p can
  // run first, before the sort, to sort only its survivors; top-p still measures its
  // mass against Z of the whole top-k set, so the result is that of top-p then min-p.
  if (p_.min_p > 0.0f) {
    const float floor = p_.min_p;  // relative to p_max == 1
    std::erase_if(cand_, [floor](const Cand& c) { return c.p < floor; });
  }

  // Both cuts and the draw walk the candidates in sorted order, but only as far as a
  // target mass: sort just that prefix (doubling it until its mass exceeds the target).
  // The order is total (ties by id), so the prefix is exactly the full sort's.
  size_t sorted = 0;
  auto sort_prefix_to = [&](double target) {
    size_t k = std::min<size_t>(std::max<size_t>(sorted, 64), cand_.size());
    for (;;) {
      if (k > sorted) {
        if (k < cand_.size()) std::nth_element(cand_.begin() + std::ptrdiff_t(sorted), cand_.begin() + std::ptrdiff_t(k), cand_.end(), before);
        std::sort(cand_.begin() + std::ptrdiff_t(sorted), cand_.begin() + std::ptrdiff_t(k), before);
        sorted = k;
      }
      double cum = 0.0;
      for (size_t i = 0; i < sorted; ++i) cum += cand_[i].p;
      if (cum > target || sorted == cand_.size()) return;
      k = std::min(sorted * 2, cand_.size());
    }
  };

  if (p_.top_p < 1.0f) {
    const double target = double(p_.top_p) * z;
    sort_prefix_to(target);
    double cum = 0.0;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
      cum += cand_[i].p;
      if (cum >= target) {
        keep = i + 1;  // the smallest prefix reaching top_p of the mass
        break;
      }
    }
    cand_.resize(std::max<size_t>(keep, 1));
    sorted = std::min(sorted, cand_.size());
  }

  double total = 0.0;
  for (const Cand& c : cand_) total += c.p;
  const double r = uniform01() * total;
  sort_prefix_to(r);
  double cum = 0.0;
  for (size_t i = 0; i < sorted; ++i) {
    cum += cand_[i].p;
    if (r < cum) return cand_[i].id;
  }
  // r can round up to the total: take the last candidate (in sorted order) with any mass.
  sort_prefix_to(std::numeric_limits<double>::infinity());
  for (auto it = cand_.rbegin(); it != cand_.rend(); ++it)
    if (it->p > 0.0f) return it->id;
  return cand_.front().id;
}

TokenLogprobs token_logprobs(const float* logits, int32_t n, int32_t chosen, int32_t k) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n; ++i)
    if (!std::isnan(logits[i])) mx = std::max(mx, logits[i]);
  double z = 0.0;
  for (int32_t i = 0; i < n; ++i)
    if (!std::isnan(logits[i])) z += std::exp(double(logits[i]) - double(mx));
  const double lse = double(mx) + std::log(z);
  auto lp = [&](int32_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : float(double(logits[i]) - lse);
  };
  TokenLogprobs out;
  out.logprob = lp(chosen);
  for (int32_t i = 0; i < n; ++i) out.rank += logits[i] > logits[chosen];
  k = std::min(k, n);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) ids[size_t(i)] = i;
    auto before = [&](int32_t a, int32_t b) {
      const float la = lp(a), lb = lp(b);
      return la > lb || (la == lb && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
    out.top.reserve(size_t(k));
    for (int32_t i = 0; i < k; ++i) out.top.emplace_back(ids[size_t(i)], lp(ids[size_t(i)]));
  }
  return out;
}

namespace {

// The largest of x[b, e) (NaN never taken: it compares false), -inf if none. Kept in
// kLanes running maxima with a compare-and-select the compiler vectorizes: one scalar,
// branchy pass per row over a 32000-entry vocabulary, three of them per sampled row, was
// a visible share of a 16-sequence decode step (ridge roofline --batch 16; measured:
// docs/BENCHMARKS.md, issue 6 session 6).
constexpr int32_t kLanes = 16;
float max_of(const float* x, int32_t b, int32_t e) {
  float m[kLanes];
  for (float& v : m) v = -std::numeric_limits<float>::infinity();
  int32_t i = b;
  for (; i + kLanes <= e; i += kLanes)
    for (int32_t j = 0; j < kLanes; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  float best = -std::numeric_limits<float>::infinity();
  for (; i < e; ++i) best = x[i] > best ? x[i] : best;
  for (float v : m) best = v > best ? v : best;
  return best;
}

}  // namespace

// The first index of the largest logit, NaN skipped; 0 if every logit is NaN.
int32_t argmax(const float* logits, int32_t n) {
  const float best = max_of(logits, 0, n);
  for (int32_t i = 0; i < n; ++i)
    if (logits[i] == best) return i;
  return 0;
}

// One pass: per lane the two largest values seen (NaN never taken), then the top two of
// those 2 x kLanes as a multiset, so a maximum that occurs twice gives 0, as it must.
float top2_margin(const float* logits, int32_t n) {
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  if (n < 2) return std::numeric_limits<float>::infinity();
  float a[kLanes], b[kLanes];  // a[j] >= b[j]
  for (int32_t j = 0; j < kLanes; ++j) a[j] = b[j] = kNeg;
  auto take = [](float x, float& hi, float& lo) {
    const float under = x > hi ? hi : x;  // what x pushes down to the second place
    lo = under > lo ? under : lo;
    hi = x > hi ? x : hi;
  };
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int32_t j = 0; j < kLanes; ++j) take(logits[i + j], a[j], b[j]);
  for (int32_t j = 0; i < n; ++i, ++j) take(logits[i], a[j], b[j]);
  float hi = kNeg, lo = kNeg;
  for (int32_t j = 0; j < kLanes; ++j) take(a[j], hi, lo), take(b[j], hi, lo);
  return hi - lo;  // NaN when no logit is above -inf, as the first maximum minus the rest
}

}  // namespace ridge
