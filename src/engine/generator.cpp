#include "engine/generator.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Seq {
  const GenRequest* req;
  std::vector<int32_t> tokens;  // prompt + generated
  int32_t n_cached = 0;         // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;
  Sampler sampler;
  bool done = false;
};

}  // namespace

Generator::Generator(const Model& model, const Tokenizer* tok, const GenOptions& opt)
    : model_(model), tok_(tok), opt_(opt), pool_(opt.threads > 0 ? opt.threads : default_thread_count()) {
  RIDGE_CHECK(opt_.max_batch_tokens > 0, "max batch tokens must be positive");
}

Generator::~Generator() = default;

std::vector<GenResult> Generator::run(const std::vector<GenRequest>& reqs, const OnToken& on_token) {
  const HParams& h = model_.hparams();
  const auto t_start = Clock::now();
  int64_t need_blocks = 0;
  for (const auto& r : reqs) {
    RIDGE_CHECK(!r.prompt.empty(), "a request needs at least one prompt token");
    RIDGE_CHECK(r.max_tokens >= 0, "max_tokens must not be negative");
    need_blocks += (int64_t(r.prompt.size()) + r.max_tokens + opt_.block_size - 1) / opt_.block_size;
  }
  if (opt_.kv_tokens > 0) need_blocks = (opt_.kv_tokens + opt_.block_size - 1) / opt_.block_size;
  RIDGE_CHECK(need_blocks < (int64_t(1) << 31), "KV pool of {} blocks is too large", need_blocks);
  KVLayout kl{h.n_layer, h.n_head_kv, h.head_dim_k, h.head_dim_v, opt_.block_size, int32_t(std::max<int64_t>(1, need_blocks)),
              opt_.kv_dtype};
  KVCache kv(kl);
  BlockManager bm(kl.n_blocks, kl.block_size);
  Forward fwd(model_, kv, pool_);

  std::vector<Seq> seqs;
  seqs.reserve(reqs.size());
  std::vector<GenResult> out(reqs.size());
  for (const auto& r : reqs) seqs.push_back({&r, r.prompt, 0, {}, Sampler(r.sampling, h.n_vocab), r.max_tokens == 0});
  for (size_t i = 0; i < seqs.size(); ++i)
    if (seqs[i].done) out[i].finish_reason = "length";

  Batch batch;
  std::vector<size_t> batch_seq;
  for (;;) {
    batch.tokens.clear();
    batch.seqs.clear();
    batch_seq.clear();
    int64_t budget = opt_.max_batch_tokens;
    bool has_prefill = false;
    // Decodes first (one token each), then prompt chunks with what budget is left.
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < seqs.size() && budget > 0; ++i) {
        Seq& s = seqs[i];
        if (s.done) continue;
        const int64_t pending = int64_t(s.tokens.size()) - s.n_cached;
        const bool is_prefill = s.n_cached < int32_t(s.req->prompt.size());
        if (is_prefill != (pass == 1)) continue;
        const int64_t n = std::min(pending, budget);
        if (!bm.reserve(s.blocks, s.n_cached + n))
          fail("KV cache is full ({} blocks of {} tokens); preemption arrives with the engine", bm.n_total(), bm.block_size());
        const bool ends_prompt = s.n_cached + n == int64_t(s.tokens.size());
        batch.add(std::span<const int32_t>(s.tokens).subspan(size_t(s.n_cached), size_t(n)), s.n_cached, s.blocks,
                  ends_prompt ? Logits::Last : Logits::None);
        batch_seq.push_back(i);
        budget -= n;
        has_prefill |= is_prefill;
      }
    if (batch.seqs.empty()) break;

    const auto t_step = Clock::now();
    const std::span<const float> logits = fwd.run(batch);
    int64_t row = 0, produced = 0;
    for (size_t k = 0; k < batch.seqs.size(); ++k) {
      Seq& s = seqs[batch_seq[k]];
      GenResult& r = out[batch_seq[k]];
      s.n_cached += batch.seqs[k].n_tokens;
      if (batch.seqs[k].logits == Logits::None) continue;
      float* lg = const_cast<float*>(logits.data()) + row * h.n_vocab;
      ++row;
      if (s.req->capture_logits) r.logits.insert(r.logits.end(), lg, lg + h.n_vocab);
      r.margins.push_back(top2_margin(lg, h.n_vocab));
      const int32_t tok = s.sampler.sample(lg, s.tokens);
      if (r.tokens.empty()) r.ttft_s = seconds_since(t_start);
      r.tokens.push_back(tok);
      s.tokens.push_back(tok);
      ++produced;
      if (on_token) on_token(batch_seq[k], tok);
      if (!s.req->ignore_eos && tok_ && tok_->is_eog(tok)) {
        s.done = true;
        r.finish_reason = "stop";
      } else if (int32_t(r.tokens.size()) >= s.req->max_tokens) {
        s.done = true;
        r.finish_reason = "length";
      }
      if (s.done) bm.release(s.blocks);
    }
    const double dt = seconds_since(t_step);
    ++stats_.steps;
    stats_.generated_tokens += produced;
    if (has_prefill) {
      stats_.prefill_s += dt;
    } else {
      stats_.decode_s += dt;
      stats_.decode_tokens += produced;
    }
#ifdef RIDGE_DEBUG_CHECKS
    bm.check_invariants();
#endif
  }
  for (const auto& r : reqs) stats_.prompt_tokens += int64_t(r.prompt.size());
  return out;
}

}  // namespace ridge
