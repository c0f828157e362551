// How far a run's token distributions are from a reference run's, as llama-perplexity's
// --kl-divergence measures it: a first run (the reference: f16 KV, the unquantized
// weights) saves the log-probabilities of every token perplexity scores to a file; a
// second run (int8 KV, q4_0 weights, ...) over the same text reads them back and reports,
// per scored token, KL(reference || this run), whether the two agree on the most likely
// token, and both perplexities. The file holds the tokens' hash, so two runs over
// different text, tokenizers or context sizes cannot be compared by mistake.
//
// File: "RIDGEKLD" then u32 version, u32 n_vocab, i64 n_ctx, u64 the tokens' FNV-1a hash,
// i64 rows, then rows x [n_vocab] f32 log-probabilities, in the order perplexity scores
// them (little-endian, as every machine ridge runs on).
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ridge {

// Writes the reference file row by row (nothing held in memory); finish() completes the
// header. Any write that fails (a full disk) throws ridge::Error naming the file.
class KlBaseWriter {
 public:
  KlBaseWriter(const std::string& path, int32_t n_vocab, int64_t n_ctx, std::span<const int32_t> tokens);
  ~KlBaseWriter();
  KlBaseWriter(const KlBaseWriter&) = delete;
  KlBaseWriter& operator=(const KlBaseWriter&) = delete;
  void add(std::span<const float> logits);  // one scored row's logits [n_vocab]
  void finish();

 private:
  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f_{nullptr, &std::fclose};
  int32_t n_vocab_;
  int64_t rows_ = 0;
  std::vector<float> row_;
};

struct KlReport {
  int64_t n = 0;
  double ppl = 0, ppl_base = 0;       // this run's, the reference's (same tokens)
  double mean_kl = 0, kl_err = 0;     // nats per token, standard error of the mean
  double max_kl = 0, p999 = 0, p99 = 0, p95 = 0, p90 = 0, median = 0;
  double top1 = 0, top1_err = 0;      // share of tokens whose most likely token agrees
};

// Reads the reference row by row as this run scores the same rows. A file that is not
// one, or was made with another vocabulary, context or text, or ends early, is an error.
class KlComparison {
 public:
  KlComparison(const std::string& path, int32_t n_vocab, int64_t n_ctx, std::span<const int32_t> tokens);
  ~KlComparison();
  KlComparison(const KlComparison&) = delete;
  KlComparison& operator=(const KlComparison&) = delete;
  void add(std::span<const float> logits, int32_t target);  // the next scored row, its true next token
  KlReport report() const;  // throws if the reference has rows this run did not score

 private:
  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f_{nullptr, &std::fclose};
  int32_t n_vocab_;
  int64_t rows_ = 0, read_ = 0;
  std::vector<float> base_;
  std::vector<double> kl_;
  double nll_ = 0, nll_base_ = 0;
  int64_t same_top1_ = 0;
};

std::string format_kl_report(const KlReport& r);

}  // namespace ridge
