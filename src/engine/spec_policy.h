// How much a step speculates: the proposed tokens worth the rows they add, measured.
//
// A proposed token is worth its chance of acceptance (its sequence's measured acceptance
// per token, raised to the token's depth in the proposal) and costs one more row of the
// step. Rows are nearly free while a step is memory-bound (the weights stream once
// whatever the rows) and cost their compute once it is compute-bound; where that turn
// comes depends on the CPU, the weight format, the batch and the kernels, so the policy
// measures it: per batch size (decoding sequences, in powers of two) it fits the time of
// decode-only steps as fixed + per_row x rows (least squares, older steps forgotten). A
// step then takes tokens, likeliest first across its sequences, while each one's chance
// is above the tokens per second the step makes without it times the time its row adds.
// At batch 1 on a memory-bound step that takes deep proposals; at a compute-bound batch
// only near-certain tokens, or none: speculation shrinks and turns itself off.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ridge {

class SpecPolicy {
 public:
  struct Candidate {
    double p;      // chance of acceptance
    size_t chunk;  // whose token it is; a chunk's candidates in proposal order
  };
  // take[chunk] += how many of that chunk's candidates the step runs (a prefix of them);
  // the step already runs n_decodes decodes in step_rows rows.
  void choose(int32_t n_decodes, int64_t step_rows, std::vector<Candidate>& cand, std::vector<int32_t>& take) const;
  // A decode-only step: rows it ran (drafts included) and its time.
  void observe(int32_t n_decodes, int64_t rows, double seconds);

  // A decode step's time at this batch size: fixed + per_row x rows, once measured steps
  // with different row counts fit it.
  struct StepCost {
    bool known = false;
    double fixed_s = 0, per_row_s = 0;
  };
  StepCost cost(int32_t n_decodes) const;

  // Before a slope is measured: tokens whose chance is at least this.
  static constexpr double kPriorChance = 0.25;
  static constexpr double kDecay = 0.98;  // of the fit's sums per step

 private:
  static int bucket(int32_t n_decodes);
  struct Fit {  // decaying sums for least squares of seconds on rows
    double w = 0, x = 0, y = 0, xx = 0, xy = 0;
  };
  std::array<Fit, 12> fit_{};
};

}  // namespace ridge
