// Turns the scheduler's chunks into one varlen batch, runs the forward pass and returns
// one logit row per chunk that reaches the end of its sequence's tokens (a prompt chunk
// that does not finish the prompt produces none).
#pragma once
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "model/forward.h"

namespace ridge {

class ModelRunner {
 public:
  ModelRunner(const Model& m, KVCache& kv, ThreadPool& pool) : fwd_(m, kv, pool) {}

  // rows[i] = index of chunk i's logit row, or -1.
  std::span<const float> run(const std::vector<ScheduledChunk>& chunks, std::vector<int32_t>& rows) {
    batch_.tokens.clear();
    batch_.seqs.clear();
    rows.assign(chunks.size(), -1);
    int32_t r = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Sequence& s = *chunks[i].seq;
      const bool last = s.n_computed + chunks[i].n_tokens == int32_t(s.tokens.size());
      batch_.add(std::span<const int32_t>(s.tokens).subspan(size_t(s.n_computed), size_t(chunks[i].n_tokens)),
                 s.n_computed, s.blocks, last ? Logits::Last : Logits::None);
      if (last) rows[i] = r++;
    }
    return fwd_.run(batch_);
  }

  perf::OpProfile& profile() { return fwd_.profile(); }

 private:
  Forward fwd_;
  Batch batch_;
};

}  // namespace ridge
