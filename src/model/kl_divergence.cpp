#include "model/kl_divergence.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ridge {
namespace {

constexpr char kMagic[8] = {'R', 'I', 'D', 'G', 'E', 'K', 'L', 'D'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version, n_vocab;
  int64_t n_ctx;
  uint64_t tokens_hash;
  int64_t rows;
};
static_assert(sizeof(Header) == 40);

uint64_t fnv1a(std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : tokens)
    for (int i = 0; i < 4; ++i) h = (h ^ ((uint32_t(t) >> (8 * i)) & 0xFF)) * 0x100000001b3ull;
  return h;
}

// Log-softmax of a row of logits, in double: the log-probabilities both sides compare.
void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, double(x));
  double se = 0;
  for (float x : logits) se += std::exp(double(x) - mx);
  const double lse = mx + std::log(se);
  out.resize(logits.size());
  for (size_t v = 0; v < logits.size(); ++v) out[v] = double(logits[v]) - lse;
}

[[noreturn]] void io_fail(const std::string& what, const std::string& path) {
  fail("{} {}: {}", what, path, errno ? std::strerror(errno) : "unexpected end of file");
}

}  // namespace

KlBaseWriter::KlBaseWriter(const std::string& path, int32_t n_vocab, int64_t n_ctx, std::span<const int32_t> tokens)
    : path_(path), n_vocab_(n_vocab), row_(size_t(n_vocab)) {
  errno = 0;
  f_.reset(std::fopen(path.c_str(), "wb"));
  if (!f_) io_fail("cannot create the KL-divergence base", path);
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.n_vocab = uint32_t(n_vocab);
  h.n_ctx = n_ctx;
  h.tokens_hash = fnv1a(tokens);
  h.rows = -1;  // finish() writes the count: a file cut short says so
  if (std::fwrite(&h, sizeof h, 1, f_.get()) != 1) io_fail("cannot write", path_);
}

KlBaseWriter::~KlBaseWriter() = default;

void KlBaseWriter::add(std::span<const float> logits) {
  RIDGE_CHECK(int64_t(logits.size()) == n_vocab_, "KL base: a row of {} logits, not {}", logits.size(), n_vocab_);
  std::vector<double> lp;
  log_softmax(logits, lp);
  for (size_t v = 0; v < lp.size(); ++v) row_[v] = float(lp[v]);
  errno = 0;
  if (std::fwrite(row_.data(), sizeof(float), row_.size(), f_.get()) != row_.size()) io_fail("cannot write", path_);
  ++rows_;
}

void KlBaseWriter::finish() {
  errno = 0;
  const auto off = int64_t(offsetof(Header, rows));
  if (std::fseek(f_.get(), off, SEEK_SET) != 0 || std::fwrite(&rows_, sizeof rows_, 1, f_.get()) != 1) io_fail("cannot write", path_);
  const int rc = std::fclose(f_.release());  // the last buffered bytes: a full disk shows here
  if (rc != 0) io_fail("cannot write", path_);
}

KlComparison::KlComparison(const std::string& path, int32_t n_vocab, int64_t n_ctx, std::span<const int32_t> tokens)
    : path_(path), n_vocab_(n_vocab), base_(size_t(n_vocab)) {
  errno = 0;
  f_.reset(std::fopen(path.c_str(), "rb"));
  if (!f_) io_fail("cannot read the KL-divergence base", path);
  Header h{};
  if (std::fread(&h, sizeof h, 1, f_.get()) != 1 || std::memcmp(h.magic, kMagic, 8) != 0)
    fail("{} is not a KL-divergence base (make one with ridge perplexity --kl-divergence-base FILE)", path);
  if (h.version != kVersion) fail("{}: KL-divergence base version {} (this ridge reads {})", path, h.version, kVersion);
  if (h.rows < 0) fail("{}: the run that wrote this KL-divergence base did not finish", path);
  if (int64_t(h.n_vocab) != n_vocab)
    fail("{} was made with a vocabulary of {} tokens, this model has {}", path, h.n_vocab, n_vocab);
  if (h.n_ctx != n_ctx) fail("{} was made with -c {}, this run has -c {}", path, h.n_ctx, n_ctx);
  if (h.tokens_hash != fnv1a(tokens))
    fail("{} was made from other tokens (another text or tokenizer) than this run's", path);
  rows_ = h.rows;
}

KlComparison::~KlComparison() = default;

void KlComparison::add(std::span<const float> logits, int32_t target) {
  RIDGE_CHECK(int64_t(logits.size()) == n_vocab_, "KL: a row of {} logits, not {}", logits.size(), n_vocab_);
  RIDGE_CHECK(read_ < rows_, "{} has {} rows; this run scores more", path_, rows_);
  RIDGE_CHECK(target >= 0 && target < n_vocab_, "KL: token {} is outside the vocabulary", target);
  if (std::fread(base_.data(), sizeof(float), base_.size(), f_.get()) != base_.size())
    fail("{} ends after {} of the {} rows its header promises (cut short?)", path_, read_, rows_);
  ++read_;
  std::vector<double> lq;
  log_softmax(logits, lq);
  double kl = 0;
  size_t top_p = 0, top_q = 0;
  for (size_t v = 0; v < lq.size(); ++v) {
    const double lp = double(base_[v]);
    if (lp != -INFINITY) kl += std::exp(lp) * (lp - lq[v]);  // a token the base gives no chance adds nothing
    // Both sides' top token from f32 log-probabilities (the base's precision), so a run
    // against itself always agrees, ties to the lower id.
    if (base_[v] > base_[top_p]) top_p = v;
    if (float(lq[v]) > float(lq[top_q])) top_q = v;
  }
  kl_.push_back(kl < 0 ? 0.0 : kl);  // >= 0 but for rounding; NaN stays NaN
  same_top1_ += top_p == top_q;
  nll_ -= lq[size_t(target)];
  nll_base_ -= double(base_[size_t(target)]);
}

KlReport KlComparison::report() const {
  RIDGE_CHECK(read_ == rows_, "{} has {} rows; this run scored {} (another text length or context?)", path_, rows_, read_);
  KlReport r;
  r.n = int64_t(kl_.size());
  if (r.n == 0) return r;
  const double n = double(r.n);
  double s = 0, s2 = 0;
  for (double k : kl_) s += k, s2 += k * k;
  r.mean_kl = s / n;
  r.kl_err = r.n > 1 ? std::sqrt(std::max(0.0, s2 / n - r.mean_kl * r.mean_kl) / (n - 1)) : 0;
  std::vector<double> v = kl_;
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[std::min(v.size() - 1, size_t(f * double(v.size() - 1) + 0.5))]; };
  r.max_kl = v.back();
  r.p999 = q(0.999), r.p99 = q(0.99), r.p95 = q(0.95), r.p90 = q(0.90), r.median = q(0.5);
  r.top1 = double(same_top1_) / n;
  r.top1_err = std::sqrt(r.top1 * (1 - r.top1) / n);
  r.ppl = std::exp(nll_ / n);
  r.ppl_base = std::exp(nll_base_ / n);
  return r;
}

std::string format_kl_report(const KlReport& r) {
  return fmt::format(
      "KL divergence against the base, {} tokens\n"
      "PPL                {:.4f} (base {:.4f}, ratio {:.5f})\n"
      "mean KLD           {:.6f} +/- {:.6f}\n"
      "max KLD            {:.6f}\n"
      "99.9% KLD          {:.6f}\n"
      "99% KLD            {:.6f}\n"
      "95% KLD            {:.6f}\n"
      "90% KLD            {:.6f}\n"
      "median KLD         {:.6f}\n"
      "same top-1         {:.3f} +/- {:.3f} %\n",
      r.n, r.ppl, r.ppl_base, r.ppl_base > 0 ? r.ppl / r.ppl_base : 0.0, r.mean_kl, r.kl_err, r.max_kl, r.p999, r.p99,
      r.p95, r.p90, r.median, 100 * r.top1, 100 * r.top1_err);
}

}  // namespace ridge
