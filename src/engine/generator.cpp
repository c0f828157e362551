#include "engine/generator.h"

#include <chrono>

#include "core/error.h"
#include "dist/comm.h"
#include "perf/tracer.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Generator::Generator(const Model& model, const Tokenizer* tok, const GenOptions& opt)
    : model_(model), tok_(tok), opt_(opt), threads_(opt.threads > 0 ? opt.threads : dist::world() ? dist::default_threads() : default_thread_count()) {
  RIDGE_CHECK(opt_.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive");
}

Generator::~Generator() = default;

std::vector<GenResult> Generator::run(const std::vector<GenRequest>& reqs, const OnToken& on_token) {
  const auto t_start = Clock::now();
  int64_t need_tokens = 0;
  for (const auto& r : reqs) {
    RIDGE_CHECK(!r.prompt.empty(), "a request needs at least one prompt token");
    RIDGE_CHECK(r.max_tokens >= 0, "max_tokens must not be negative");
    // Whole blocks per request: what running them all at once takes.
    need_tokens += (int64_t(r.prompt.size()) + r.max_tokens + opt_.block_size - 1) / opt_.block_size * opt_.block_size;
  }
  EngineConfig ec = opt_;
  ec.threads = threads_;
  if (opt_.kv_tokens > 0 || (opt_.kv_cache_bytes <= 0 && opt_.pool_for_requests)) {
    const int64_t tokens = opt_.kv_tokens > 0 ? opt_.kv_tokens : std::max<int64_t>(need_tokens, opt_.block_size);
    ec.kv_cache_tokens = (tokens + opt_.block_size - 1) / opt_.block_size * opt_.block_size;
  }
  // A lone request has nobody to share a prefix with: no prefix cache, whose claims
  // would otherwise keep every window page it passes (evictable) and walk the whole pool.
  if (reqs.size() == 1) ec.prefix_cache = false;
  Engine engine(model_, tok_, ec);
  if (opt_.on_engine) opt_.on_engine(engine);

  std::vector<int64_t> ids;
  for (const auto& r : reqs) {
    RequestParams p;
    p.sampling = r.sampling;
    p.max_tokens = r.max_tokens;
    p.ignore_eos = r.ignore_eos;
    p.grammar = r.grammar;
    p.capture_logits = r.capture_logits;
    p.margins = r.margins;
    p.priority = r.priority;
    ids.push_back(engine.add_request(r.prompt, p));
  }
  std::vector<GenResult> out(reqs.size());
  std::vector<double> ttft(reqs.size(), -1);
  while (engine.has_work()) {
    for (const TokenEvent& e : engine.step()) {
      const size_t i = size_t(e.id - ids.front());
      if (ttft[i] < 0) {
        ttft[i] = std::chrono::duration<double>(Clock::now() - t_start).count();
        if (perf::trace_on()) perf::trace_req_instant(e.id, "first_token", {{"ttft_ms", ttft[i] * 1e3}});
      }
      if (on_token && e.token >= 0) on_token(i, e.token);
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    RequestOutput o = engine.output(ids[i]);
    GenResult& r = out[i];
    r.tokens = std::move(o.tokens);
    r.margins = std::move(o.margins);
    r.logits = std::move(o.logits);
    r.finish_reason = std::string(o.stats.finish_reason);
    r.ttft_s = std::max(0.0, ttft[i]);
    r.prefix_hit_tokens = o.stats.cached_tokens;
    r.preemptions = o.stats.preemptions;
  }
  engine.check_invariants();
  const EngineStats& es = engine.stats();
  stats_.prompt_tokens += es.prompt_tokens;
  stats_.generated_tokens += es.generated_tokens;
  stats_.prefill_s += es.prefill_s;
  stats_.decode_s += es.decode_s;
  stats_.decode_tokens += es.decode_tokens;
  stats_.steps += es.steps;
  stats_.computed_tokens += es.computed_tokens;
  stats_.prefix_hit_tokens += es.prefix_hit_tokens;
  stats_.spec_drafts += es.spec_drafts;
  stats_.spec_draft_tokens += es.spec_draft_tokens;
  stats_.spec_accepted_tokens += es.spec_accepted_tokens;
  stats_.grammar_tokens += es.grammar_tokens;
  stats_.grammar_s += es.grammar_s;
  stats_.jump_drafts += es.jump_drafts;
  stats_.jump_tokens += es.jump_tokens;
  stats_.jump_accepted += es.jump_accepted;
  stats_.preemptions += engine.n_preemptions();
  stats_.swaps += engine.n_swaps();
  if (engine.prefix_cache()) stats_.evicted_blocks += engine.prefix_cache()->stats().evicted_blocks;
  stats_.mean_batch = es.steps ? double(es.batched_seqs) / double(es.steps) : 0;
  stats_.wall_s += std::chrono::duration<double>(Clock::now() - t_start).count();
  return out;
}

}  // namespace ridge
