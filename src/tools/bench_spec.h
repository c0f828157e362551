// `ridge bench spec`: decode speed with and without speculative decoding on the same
// greedy requests, interleaved run by run, with the acceptance each proposer reached and
// the speedup that acceptance and the measured cost of a verification step predict.
//
// Proposers: prompt lookup and suffix decoding (real acceptance: they need text that
// repeats, so real models and prompts), a draft model, and a replay of the known greedy continuation with each proposed token
// wrong with probability 1 - a, independently (a: the chance a draft token is accepted
// given the ones before it were), which sets the acceptance on any model, random weights
// included.
//
// Prediction: the time of a decode step is measured without drafts (the plain run) and
// with 1 and with k drafts per sequence (calibration runs: a replay that is always
// wrong, at a fixed depth); steps with drafts are taken as linear in their rows between
// the two calibrations (the first draft costs more than the next: one row runs the
// decode kernel, more the small-batch one). A run's predicted step time mixes its steps
// without drafts at the plain time and its steps with drafts at the line's time for
// their mean rows, plus its measured proposing time per step (a draft model's forwards);
// its predicted rate is its tokens per step over that. Every run's
// output must equal the plain run's, token for token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "model/model.h"

namespace ridge::tools {

struct SpecBenchOptions {
  EngineConfig engine;  // its speculative part is set per run
  std::vector<std::vector<int32_t>> prompts;
  int32_t output_len = 128;
  int32_t k = 4;
  bool ngram = true;
  bool suffix = false;       // suffix decoding (the store fills as the run's requests finish)
  std::string draft_model;   // non-empty: a draft-model case
  std::vector<double> replay_acceptance{0.3, 0.6, 0.9};
  int runs = 3;
  uint64_t seed = 1;
};

struct SpecBenchRow {
  std::string name;              // "plain", "ngram", "replay a=0.90", "calibration: k drafts, all wrong"
  double decode_tok_per_s = 0;   // median over runs (decode-only steps)
  double plain_tok_per_s = 0;    // median of the plain runs interleaved with these
  double speedup = 0;            // decode_tok_per_s / plain_tok_per_s
  double predicted_speedup = 0;  // from tokens per step and t(rows per step)
  double acceptance = 0;         // accepted / drafted tokens
  double tokens_per_step = 0;    // produced per decode step (all sequences)
  double rows_per_step = 0;      // tokens run per decode step (drafts included)
  double ms_per_step = 0;        // median
  bool same_output = true;
};

std::vector<SpecBenchRow> run_spec_bench(const Model& m, const SpecBenchOptions& o);

}  // namespace ridge::tools
