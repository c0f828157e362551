// Whether a step speculates: the choice that has produced more tokens per second, measured.
//
// Verification rows are nearly free while a step is memory-bound (the weights stream once
// whatever the rows) and cost their full compute once it is compute-bound; where that
// turn comes depends on the CPU, the weight format, the batch and the acceptance, so the
// policy measures instead of assuming: per batch size (decoding sequences, in powers of
// two), an average of tokens produced per second of steps that verified proposals and of
// steps that did not, and it picks the higher. One step in kExplore runs the other
// choice, so a rate that has changed (text that stopped repeating, a batch that grew) is
// seen again. Steps with prompt work teach nothing (their time is the prompt's).
#pragma once
#include <array>
#include <cstdint>

namespace ridge {

class SpecPolicy {
 public:
  // For a step with n_decodes decoding sequences.
  bool speculate(int32_t n_decodes);
  // A decode-only step: whether it verified proposals, tokens produced, its time.
  void observe(int32_t n_decodes, bool speculated, int64_t produced, double seconds);

  static constexpr int kExplore = 16;
  static constexpr double kWeight = 0.2;  // of a new step in the running average

 private:
  static int bucket(int32_t n_decodes);
  struct Arm {
    double rate = 0;  // tokens per second, averaged
    int64_t n = 0;    // steps seen
  };
  struct Bucket {
    Arm on, off;
    int64_t steps = 0;
  };
  std::array<Bucket, 12> b_{};
};

}  // namespace ridge
