// How much a step speculates: the proposed tokens worth the rows they add, measured.
//
// A proposed token is worth its chance of acceptance (its sequence's measured acceptance
// per token, raised to the token's depth in the proposal) and costs one more row of the
// step. Rows are nearly free while a step is memory-bound (the weights stream once
// whatever the rows) and cost their compute once it is compute-bound; and the first
// draft of a step costs more than the next (a one-row step runs the decode kernel, more
// rows the small-batch one). Where these turns come depends on the CPU, the weight
// format, the batch and the kernels, so the policy measures them, per batch size
// (decoding sequences, in powers of two): the mean time of decode steps without drafts,
// and a least-squares line of time on rows through the steps with drafts (older steps
// forgotten; the slope taken one standard error high, so rows that hardly varied are
// assumed dear). A step then takes, of its candidates sorted likeliest first, the prefix
// that maximizes expected tokens per second. A batch size not yet measured borrows the
// line of the next size up or down, once it has its own plain steps: what a draft row
// adds to a step (the first one's jump, each next one's cost) changes little between
// neighbors, and a batch that shrinks as its sequences finish otherwise pays to measure
// every size again. With no neighbor measured either, every other step takes none and
// the others 1..kPriorMax of the likeliest tokens (if at least kPriorChance likely),
// whatever the batch: the rows that varies are what the line needs.
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
  // A decode-only step: rows it ran, whether any were drafts, its time.
  void observe(int32_t n_decodes, int64_t rows, bool drafts, double seconds);
  // Whether a step of n_decodes decodes in step_rows rows could gain from up to
  // max_tokens more, even certain ones. False lets the engine skip asking proposers.
  bool worth_asking(int32_t n_decodes, int64_t step_rows, int32_t max_tokens) const;

  // A decode step's time at this batch size: plain_s without drafts, fixed + per_row x
  // rows with them (borrowed: the line is a neighbor batch size's, moved to this one's
  // plain steps).
  struct StepCost {
    bool known = false, borrowed = false;
    double plain_s = 0, fixed_s = 0, per_row_s = 0;
    double at(double rows, bool drafts) const { return drafts ? fixed_s + per_row_s * rows : plain_s; }
  };
  StepCost cost(int32_t n_decodes) const;
  // The time of this batch size's decode steps without drafts: the lower of their mean
  // and the last one (a fresh engine's first steps touch new pages); 0 before
  // kPlainSteps of them.
  double plain_seconds(int32_t n_decodes) const;
  static constexpr int kPlainSteps = 4;

  static constexpr double kPriorChance = 0.25;
  static constexpr int kPriorMax = 4;     // tokens per step, cycling 1..kPriorMax
  static constexpr double kDecay = 0.98;  // of the sums per step

 private:
  static int bucket(int32_t n_decodes);
  StepCost own_cost(int b) const;
  struct Fit {  // decaying sums: steps without drafts, and least squares of time on rows with them
    double pw = 0, py = 0, pr = 0;  // pr: the plain steps' rows
    double plast = 0;               // the last plain step's time
    int64_t pn = 0;                 // plain steps seen
    double w = 0, x = 0, y = 0, xx = 0, xy = 0, yy = 0;
    int64_t n = 0;  // steps seen
  };
  std::array<Fit, 12> fit_{};
};

}  // namespace ridge
