// A variable-length batch for one forward pass: any mix of prompt chunks and decode
// steps of many sequences. Tokens of all sequences are concatenated; each sequence says
// where its new tokens start (pos0, its cached prefix length) and names its KV blocks.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ridge {

// Which of a slice's tokens get a logit row: none (a prompt chunk that does not end
// the prompt), the last one (the usual), or all (perplexity).
enum class Logits : uint8_t { None, Last, All };

struct SeqSlice {
  int32_t n_tokens = 0;                  // new tokens of this sequence in the batch
  int32_t pos0 = 0;                      // position of the first one (= tokens already cached)
  // Must cover positions [0, pos0 + n_tokens). With window and global layers in pages of
  // their own (model/kv_cache.h KvGroups), [pages][entries]: each page's table in turn,
  // -1 where a window page a query no longer sees was dropped.
  std::span<const int32_t> block_table;
  Logits logits = Logits::Last;
  // Multi-head latent attention: this sequence's positions below expand_until attend in
  // the expanded form (forward_mla_expand.cpp), the others in the absorbed form. A
  // property of the sequence (its prompt length, or 0), never of the step, so a token's
  // result stays the same however the steps cut the sequence.
  int32_t expand_until = 0;
};

struct Batch {
  std::vector<int32_t> tokens;  // [sum n_tokens]
  std::vector<SeqSlice> seqs;

  void add(std::span<const int32_t> toks, int32_t pos0, std::span<const int32_t> block_table,
           Logits logits = Logits::Last, int32_t expand_until = 0) {
    // resize + copy: GCC 12 misreports insert of a 1-element span (-Wstringop-overflow).
    const size_t at = tokens.size();
    tokens.resize(at + toks.size());
    std::copy(toks.begin(), toks.end(), tokens.begin() + std::ptrdiff_t(at));
    seqs.push_back({int32_t(toks.size()), pos0, block_table, logits, expand_until});
  }
  static int32_t logit_rows(const SeqSlice& s) {
    return s.logits == Logits::All ? s.n_tokens : s.logits == Logits::Last ? 1 : 0;
  }
  // Logit rows the forward returns: per sequence in order, logit_rows(slice) each.
  int64_t n_logit_rows() const {
    int64_t n = 0;
    for (const auto& s : seqs) n += logit_rows(s);
    return n;
  }
};

}  // namespace ridge
