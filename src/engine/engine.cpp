#include "engine/engine.h"

#include "engine/grammar_vocab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "dist/comm.h"
#include "perf/op_cost.h"
#include "perf/tracer.h"
#include "tokenizer/tokenizer.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

void check_speculative(const SpeculativeConfig& c) {
  RIDGE_CHECK(c.suffix_cache_tokens >= 0, "suffix cache of {} tokens", c.suffix_cache_tokens);
  RIDGE_CHECK(c.suffix_min_token_prob >= 0 && c.suffix_min_token_prob <= 1,
              "suffix min token probability {} is not in [0, 1]", c.suffix_min_token_prob);
  if (c.method == SpecMethod::None) return;
  RIDGE_CHECK(c.num_speculative_tokens >= 1 && c.num_speculative_tokens <= 32,
              "num_speculative_tokens {} is not in 1..32", c.num_speculative_tokens);
  RIDGE_CHECK(c.prompt_lookup_min >= 1 && c.prompt_lookup_min <= c.prompt_lookup_max && c.prompt_lookup_max <= 64,
              "prompt lookup: need 1 <= min ({}) <= max ({}) <= 64", c.prompt_lookup_min, c.prompt_lookup_max);
}

// A request's track ends: "finished" with its reason, and the whole "request" span.
void trace_end(const Sequence& s) {
  perf::trace_req_end(
      s.id, s.finish_reason,
      {{"generated", s.n_generated()}, {"prefix_hit", s.n_prefix_hit}, {"preemptions", s.n_preemptions}});
}

// Per-step counters: sequences and KV blocks.
void trace_counters(const Scheduler& sched, const BlockManager& bm) {
  perf::trace_counter("seqs", {{"running", sched.n_running()}, {"waiting", sched.n_waiting()}});
  perf::trace_counter("kv_blocks", {{"free", bm.n_free()}, {"used", bm.n_total() - bm.n_free()}});
}

// The request tracks' view of one forward: a span per prompt chunk, a decode step for
// the others. Called before the chunks' n_computed advance.
void trace_chunks(const SchedulerOutput& so, int64_t t0, int64_t t1) {
  perf::trace_counter("batch", {{"tokens", so.n_tokens()}, {"seqs", so.chunks.size()}});
  for (const ScheduledChunk& c : so.chunks) {
    const Sequence& s = *c.seq;
    if (c.decode()) {
      perf::trace_req_decode(s.id, t0);
    } else {
      perf::trace_req_span(s.id, "prefill", t0, t1,
                           {{"tokens", c.n_tokens}, {"pos", s.n_computed}, {"recompute", s.n_generated() > 0}});
    }
  }
}

}  // namespace

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::None: return "none";
    case SpecMethod::Ngram: return "ngram";
    case SpecMethod::Suffix: return "suffix";
    case SpecMethod::Draft: return "draft";
    case SpecMethod::External: return "external";
  }
  return "?";
}

// Recompute costs the sequence's tokens at the measured prefill rate; swapping costs its
// blocks out and back at the measured copy rate. Swap wins when it is cheaper.
class Engine::Cost : public PreemptionCost {
 public:
  explicit Cost(const Engine& e) : e_(e) {}
  bool prefer_swap(const Sequence& s) const override {
    const SwapSpace* sw = e_.runner_->swap();
    if (!sw) return false;
    const double recompute = double(s.n_computed) * e_.prefill_s_per_token_;
    const double bytes = 2.0 * double(e_.bm_->n_held_pages(s.blocks)) * double(sw->block_bytes());
    return bytes / sw->bytes_per_second() < recompute;
  }
  bool can_swap(const Sequence& s, int64_t reserved) const override {
    const SwapSpace* sw = e_.runner_->swap();
    return sw && sw->can_hold(reserved + e_.bm_->n_held_pages(s.blocks));
  }

 private:
  const Engine& e_;
};

Engine::Engine(const Model& model, const Tokenizer* tok, const EngineConfig& cfg)
    : model_(model),
      tok_(tok),
      cfg_(cfg),
      pool_(cfg.threads > 0 ? cfg.threads : dist::world() ? dist::default_threads() : default_thread_count()) {
  check_speculative(cfg.speculative);
  if (cfg.mlock) model.lock_in_memory();
  EngineConfig target = cfg;
  RIDGE_CHECK(cfg.kv_cache_tokens >= 0, "KV cache of {} tokens", cfg.kv_cache_tokens);
  const int64_t t = ModelRunner::kv_bytes_per_token(model, cfg);
  if (cfg.kv_cache_tokens > 0) target.kv_cache_bytes = cfg.kv_cache_tokens * t;
  if (!cfg.speculative.draft_model.empty()) {
    draft_model_ = Model::load(cfg.speculative.draft_model);
    check_draft_vocabulary(model, *draft_model_);
    if (cfg.mlock) draft_model_->lock_in_memory();
    // Both pools hold the same number of tokens: the KV memory split by bytes per token.
    const int64_t d = ModelRunner::kv_bytes_per_token(*draft_model_, cfg);
    const int64_t tokens =
        cfg.kv_cache_tokens > 0
            ? cfg.kv_cache_tokens
            : ModelRunner::kv_budget_bytes(cfg, model.mapped_bytes() + draft_model_->mapped_bytes()) / (t + d);
    target.kv_cache_bytes = std::max<int64_t>(1, tokens * t);
    EngineConfig dc = cfg;
    dc.kv_cache_bytes = std::max<int64_t>(1, tokens * d);
    draft_ = std::make_unique<DraftModelProposer>(*draft_model_, dc, pool_);
  } else if (cfg.speculative.method == SpecMethod::Draft) {
    fail("speculative method draft needs a draft model (--draft-model FILE)");
  }
  if (cfg.speculative.method == SpecMethod::Suffix) make_suffix();
  runner_ = std::make_unique<ModelRunner>(model, target, pool_);
  if (cfg.preemption != PreemptionMode::Recompute && !runner_->swap())
    fail("--preemption-mode swap/auto needs a swap space (--swap-space GB)");
  const KVLayout& kl = runner_->kv_layout();
  bm_ = std::make_unique<BlockManager>(kl.n_blocks, kl.block_size, runner_->page_groups());
  if (cfg.prefix_cache) radix_ = std::make_unique<RadixCache>(*bm_);
  cost_ = std::make_unique<Cost>(*this);
  SchedulerConfig sc{cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.preemption, cfg.aging_steps};
  sched_ = std::make_unique<Scheduler>(sc, *bm_, radix_.get(), cost_.get());
  if (draft_) time_target_rows();
}

// Whether a draft model can ever pay at batch 1 depends on what a verified row adds to a
// one-row step (from the decode kernel to the small-batch one, the head's second row),
// which otherwise only exploring with the draft would show. So, as the draft times its
// own forward at load: a warm-up block (the pages and buffers a first step would touch),
// then one-row and two-row (one draft verified) forwards, the faster of two each.
void Engine::time_target_rows() {
  using Clock = std::chrono::steady_clock;
  constexpr int kReps = 2;
  if (cfg_.max_num_batched_tokens < 2) return;  // no two-row step can run
  const int32_t n = std::min(bm_->block_size(), std::max(1, cfg_.max_num_batched_tokens - 2));
  Sequence s(-1, std::vector<int32_t>(size_t(n), 0), RequestParams{}, model_.hparams().n_vocab, 0);
  if (!bm_->reserve(s.blocks, n + 3 * kReps)) return;
  std::vector<int32_t> rows, prompt_rows;
  runner_->run({{&s, n}}, *bm_, rows, prompt_rows);
  s.n_computed = n;
  auto timed = [&](int32_t n_rows) {
    s.tokens.push_back(0);  // the pending token
    s.draft.assign(size_t(n_rows - 1), 0);
    const auto t0 = Clock::now();
    runner_->run({{&s, n_rows, n_rows - 1}}, *bm_, rows, prompt_rows);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    s.tokens.insert(s.tokens.end(), s.draft.begin(), s.draft.end());  // accepted
    s.n_computed += n_rows;
    return dt;
  };
  double one = 1e30, two = 1e30;
  for (int i = 0; i < kReps; ++i) {
    one = std::min(one, timed(1));
    two = std::min(two, timed(2));
  }
  s.draft.clear();
  bm_->release(s.blocks);
  target_row_s_ = std::max(0.0, two - one);
}

void Engine::make_suffix() {
  if (!suffix_)
    suffix_ = std::make_unique<SuffixProposer>(
        SuffixProposer::Options{cfg_.speculative.suffix_cache_tokens, cfg_.speculative.suffix_min_token_prob});
}

Proposer* Engine::proposer(SpecMethod m) const {
  switch (m) {
    case SpecMethod::Suffix: return suffix_.get();
    case SpecMethod::Draft: return draft_.get();
    case SpecMethod::External: return external_;
    default: return nullptr;
  }
}

int64_t Engine::activation_bytes() const {
  const int64_t tokens = cfg_.max_num_batched_tokens;
  return Forward::activation_bytes(model_.hparams(), tokens, std::min<int64_t>(tokens, cfg_.max_num_seqs));
}

void Engine::set_token_budget(int32_t n) {
  RIDGE_CHECK(n >= 1 && n <= cfg_.max_num_batched_tokens, "a token budget of {} is outside 1..{} (max_num_batched_tokens)",
              n, cfg_.max_num_batched_tokens);
  sched_->set_token_budget(n);
}

void Engine::set_spec_depth_cap(int32_t k) {
  RIDGE_CHECK(k >= 0 && k <= 32, "a speculation depth cap of {} is outside 0..32", k);
  spec_depth_cap_ = k;
}

Engine::~Engine() {
  // Requests that never finished end their tracks here, not at the trace's close.
  if (perf::trace_on())
    for (const auto& [id, s] : seqs_)
      if (!s->finished()) perf::trace_req_end(id, "dropped");
}

int64_t Engine::add_request(std::vector<int32_t> prompt, const RequestParams& p) {
  RIDGE_CHECK(!prompt.empty(), "a request needs at least one prompt token");
  RIDGE_CHECK(p.max_tokens >= 0, "max_tokens must not be negative");
  const int32_t n_vocab = model_.hparams().n_vocab;
  for (int32_t t : prompt) RIDGE_CHECK(t >= 0 && t < n_vocab, "token id {} is out of range (vocabulary {})", t, n_vocab);
  const int64_t total = int64_t(prompt.size()) + p.max_tokens;
  if (total > kv_capacity_tokens())
    fail("the request needs {} tokens of KV ({} prompt + {} max tokens) but the cache holds {}", total, prompt.size(),
         p.max_tokens, kv_capacity_tokens());
  const SpeculativeConfig& spec = p.speculative ? *p.speculative : cfg_.speculative;
  if (p.speculative) check_speculative(spec);
  if (spec.method == SpecMethod::Draft && !draft_)
    fail("speculative method draft needs a draft model, and this engine has none (--draft-model FILE)");
  if (spec.method == SpecMethod::Suffix) make_suffix();  // it learns from requests finishing from now on
  if (p.grammar) RIDGE_CHECK(tok_, "a grammar-constrained request needs the model's tokenizer");
  const int64_t id = next_id_++;
  auto s = std::make_unique<Sequence>(id, std::move(prompt), p, n_vocab, arrivals_++);
  if (p.grammar) s->matcher = std::make_unique<grammar::Matcher>(p.grammar, token_trie());
  s->spec_k = spec.method == SpecMethod::None ? 0 : spec.num_speculative_tokens;
  s->n_expand =
      mla_expand_until(model_.hparams(), mla_types(model_, cfg_.kv_dtype), cfg_.mla_prefill, s->n_prompt, cfg_.block_size);
  const ThinkingBudget& tb = p.thinking;
  if (tb.budget >= 0) {
    RIDGE_CHECK(!tb.force.empty() && !tb.end.empty(), "a thinking budget needs the tokens that close the thinking");
    for (int32_t t : tb.force) RIDGE_CHECK(t >= 0 && t < n_vocab, "thinking budget: token id {} is out of range", t);
  }
  think_init(*s);
  stats_.prompt_tokens += s->n_prompt;
  Sequence* raw = s.get();
  seqs_.emplace(id, std::move(s));
  ++n_unfinished_;
  if (perf::trace_on())
    perf::trace_req_begin(id, perf::trace_clock_ns(),
                          {{"prompt_tokens", raw->n_prompt}, {"max_tokens", p.max_tokens}, {"priority", p.priority}});
  if (p.max_tokens == 0 && p.prompt_logprobs < 0) {
    raw->status = SeqStatus::Finished;
    raw->finish_reason = "length";
    --n_unfinished_;
    if (perf::trace_on()) trace_end(*raw);
  } else {
    sched_->add(raw);
  }
  return id;
}

const std::shared_ptr<const grammar::TokenTrie>& Engine::token_trie() const {
  if (!trie_) trie_ = grammar_vocabulary(*tok_);
  return trie_;
}

int32_t Engine::grammar_prefix(Sequence& s, int32_t take) {
  if (!s.matcher || take == 0) return take;
  const size_t n = std::min(size_t(take), s.draft.size());
  return std::min(take, s.matcher->valid_prefix(std::span<const int32_t>(s.draft.data(), n)));
}

void Engine::retire(const Sequence& s, bool learn) {
  const std::span<const int32_t> text = learn ? std::span<const int32_t>(s.tokens) : std::span<const int32_t>();
  if (suffix_) suffix_->retire(s.id, text);
  if (draft_) draft_->retire(s.id, text);
  if (external_) external_->retire(s.id, text);
}

void Engine::finish(Sequence* s, const char* reason) {
  s->finish_reason = reason;
  retire(*s, true);
  if (runner_->swap() && !s->swap_slots.empty()) {
    runner_->swap_free(s->swap_slots);
    s->swap_slots.clear();
  }
  sched_->finish(s);
  --n_unfinished_;
  if (perf::trace_on()) trace_end(*s);
}

void Engine::abort(int64_t id, bool complete) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second->finished()) return;
  Sequence* s = it->second.get();
  s->finish_reason = "abort";
  retire(*s, complete);
  if (runner_->swap() && !s->swap_slots.empty()) {
    runner_->swap_free(s->swap_slots);
    s->swap_slots.clear();
  }
  sched_->remove(s);  // no prefix insert: its K/V may be partial
  --n_unfinished_;
  if (perf::trace_on()) trace_end(*s);
}

RequestStats Engine::request_stats(int64_t id) const {
  const Sequence* s = get(id);
  RIDGE_CHECK(s, "no request {} in the engine", id);
  RequestStats r;
  r.prompt_tokens = s->n_prompt;
  r.generated_tokens = s->n_generated();
  r.cached_tokens = s->n_prefix_hit;
  r.preemptions = s->n_preemptions;
  r.scheduled = s->finished() || s->n_computed > 0 || s->status == SeqStatus::Running;
  r.prefill_s = s->prefill_share_s;
  r.decode_s = s->decode_share_s;
  r.recompute_s = s->recompute_share_s;
  r.spec_draft_tokens = s->spec_draft_tokens;
  r.spec_accepted_tokens = s->spec_accepted_tokens;
  r.finish_reason = s->finish_reason;
  return r;
}

RequestOutput Engine::output(int64_t id) const {
  const Sequence* s = get(id);
  RIDGE_CHECK(s, "no request {} in the engine", id);
  RequestOutput o;
  o.tokens.assign(s->tokens.begin() + s->n_prompt, s->tokens.end());
  o.margins = s->margins;
  o.logits = s->logits;
  o.logprobs = s->logprobs;
  o.prompt_logprobs = s->prompt_logprobs;
  o.stats = request_stats(id);
  return o;
}

bool Engine::finished(int64_t id) const {
  const Sequence* s = get(id);
  return s && s->finished();
}

KvUsage Engine::kv_usage(bool census) const {
  KvUsage u;
  u.blocks_total = bm_->n_total();
  u.blocks_free = bm_->n_free();
  if (radix_ && census) {
    std::vector<int32_t> tree;
    radix_->collect_blocks(tree);
    // Pages only the tree holds: its blocks no sequence uses, and the window pages of
    // others only it claims.
    for (int32_t b : tree) u.blocks_cached += bm_->ref_count(b) == 1 ? bm_->entry_pages(b) : 0;
    tree.clear();
    radix_->collect_claims(tree);
    for (int32_t b : tree)
      u.blocks_cached += bm_->ref_count(b) > 1 && bm_->claim_count(b) == 1 ? bm_->groups().n_window : 0;
    u.blocks_evictable = radix_->n_evictable();
    u.prefix_query_tokens = radix_->stats().query_tokens;
    u.prefix_hit_tokens = radix_->stats().hit_tokens;
  }
  u.blocks_in_use = u.blocks_total - u.blocks_free - u.blocks_cached;
  return u;
}

const Sequence* Engine::get(int64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Engine::release(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (!it->second->finished()) abort(id);
  seqs_.erase(it);
}

// schedule -> KV copies -> execute (one varlen forward) -> sample -> postprocess ->
// account. Each phase is a function below; the trace shows each as a span of the step.
std::vector<TokenEvent> Engine::step() {
  perf::TraceScope span("step", "engine", /*lead_ns=*/1);
  SchedulerOutput so = schedule();
  jump_forward(so);
  speculate(so);
  move_kv(so);
  if (so.chunks.empty()) {
    span.end({{"step", stats_.steps}, {"seqs", 0}});
    return {};
  }
  const auto t0 = Clock::now();
  const std::span<const float> logits = execute(so);
  score_prompts(so, logits);
  const Sampled sampled = sample(so, logits);
  perf::TraceScope post("postprocess", "engine");
  StepTally tally;
  std::vector<TokenEvent> events = postprocess(so, sampled, tally);
  // Proposing is part of the step's cost (a draft model's forwards); swap copies are not.
  account(so, tally, std::chrono::duration<double>(Clock::now() - t0).count() + propose_s_);
  post.end({{"finished", tally.n_finished}});
  span.end({{"step", stats_.steps},
            {"seqs", so.chunks.size()},
            {"tokens", so.n_tokens()},
            {"prefill_tokens", so.n_tokens() - tally.n_decodes},
            {"decodes", tally.n_decodes},
            {"preempted", so.n_preempted}});
#ifdef RIDGE_DEBUG_CHECKS
  // The walk is O(pool blocks): every step on pools up to kCheckBlocks, else every
  // (blocks / kCheckBlocks)th step and whenever the engine runs out of work, so a debug
  // build's checks cost a step about as much as on such a pool. A pool sized by default
  // to a large machine's RAM (about a million blocks for a test's tiny model) never
  // preempts or evicts, and a broken count persists, so the next walk still finds it (at
  // the latest when the requests have finished); the small pools of the preemption and
  // eviction tests are walked every step.
  constexpr int64_t kCheckBlocks = 4096;
  if (stats_.steps % std::max<int64_t>(1, bm_->n_total() / kCheckBlocks) == 0 || !has_work()) check_invariants();
#endif
  return events;
}

SchedulerOutput Engine::schedule() {
  perf::TraceScope span("schedule", "engine");
  SchedulerOutput so = sched_->schedule();
  span.end({{"chunks", so.chunks.size()}, {"preempted", so.n_preempted}, {"swap_out", so.swap_out.size()},
            {"swap_in", so.swap_in.size()}});
  if (perf::trace_on()) trace_counters(*sched_, *bm_);
  return so;
}

// Before the forward: blocks freed by swap-outs may be written by this very step.
void Engine::move_kv(const SchedulerOutput& so) {
  if (so.swap_out.empty() && so.swap_in.empty()) return;
  perf::TraceScope span("swap", "engine");
  for (Sequence* s : so.swap_out) {
    s->swap_slots = runner_->swap_out(s->swap_src);
    sched_->swapped_out(s);
  }
  for (Sequence* s : so.swap_in) {
    bm_->held_pages(s->blocks, swap_pages_);
    RIDGE_CHECK(swap_pages_.size() == s->swap_slots.size(), "request {}: swap-in of {} pages into {}", s->id,
                s->swap_slots.size(), swap_pages_.size());
    const bool ok = runner_->swap_in(s->swap_slots, swap_pages_);
    s->swap_slots.clear();
    if (!ok) {  // its KV is lost: recompute it rather than fail the request
      sched_->swap_in_failed(s);
      ++stats_.swap_fallbacks;
    }
  }
  span.end({{"out", so.swap_out.size()}, {"in", so.swap_in.size()}});
}

std::span<const float> Engine::execute(const SchedulerOutput& so) {
  const bool tr = perf::trace_on();
  if (tr) {
    int32_t n_decodes = 0;
    for (const auto& c : so.chunks) n_decodes += c.decode();
    perf::trace_batch(int32_t(so.chunks.size()), n_decodes);
  }
  const int64_t t0 = tr ? perf::trace_clock_ns() : 0;
  const std::span<const float> logits = runner_->run(so.chunks, *bm_, rows_, prompt_rows_);
  if (tr) {
    const int64_t t1 = perf::trace_clock_ns();
    perf::trace_batch(-1, 0);  // a forward run outside a step does not inherit this shape
    perf::trace_span("forward", "engine", t0 - 1, t1, {{"seqs", so.chunks.size()}, {"tokens", so.n_tokens()}});
    trace_chunks(so, t0, t1);
  }
  return logits;
}

// A grammar that took an end token, or can take nothing else, ends the request (its state
// is the one after the last token sampled); so does one that failed (matcher.h: a state
// past its budgets, or no token that spells what it needs), with finish reason "abort".
static bool grammar_done(const Sequence& s) {
  return s.matcher && (s.matcher->ended() || s.matcher->must_end() || s.matcher->failed());
}

void Engine::jump_forward(SchedulerOutput& so) {
  const size_t n = so.chunks.size();
  int32_t n_decodes = 0, n_constrained = 0;
  for (const ScheduledChunk& c : so.chunks) {
    c.seq->draft_forced = false;
    n_decodes += c.decode();
    n_constrained += c.decode() && c.seq->matcher;
  }
  // A step with prompt work is compute-bound: a row costs its compute, more than a
  // forced token saves. And none is worth finding where the policy knows that not even
  // certain tokens would pay for their rows.
  if (!cfg_.jump_forward || n_constrained == 0 || n_decodes < int32_t(n) ||
      !spec_policy_.worth_asking(n_decodes, so.n_tokens(), n_constrained * kMaxJump))
    return;
  std::vector<SpecPolicy::Candidate> cand;
  for (size_t i = 0; i < n; ++i) {
    const ScheduledChunk& c = so.chunks[i];
    Sequence* s = c.seq;
    if (!s->matcher || !c.decode() || s->pending() != 1 || grammar_done(*s)) continue;
    const int64_t room = std::min<int64_t>(kMaxJump, int64_t(s->params.max_tokens) - s->n_generated() - 1);
    if (room <= 0) continue;
    // The tokenizer's own split of the forced text (what a model trained on its output
    // expects), unless the grammar refuses it (a tokenizer that adds a leading space);
    // then the longest tokens that spell it.
    const std::string text = s->matcher->forced_bytes(256);
    if (text.empty()) continue;
    s->draft = tok_->encode(text, false);
    if (s->draft.size() > size_t(room)) s->draft.resize(size_t(room));
    if (grammar_prefix(*s, int32_t(s->draft.size())) == 0) s->matcher->forced_tokens(int32_t(room), s->draft);
    s->draft.resize(size_t(grammar_prefix(*s, int32_t(s->draft.size()))));
    // A model that splits the forced text its own way takes few of its tokens: they are
    // candidates with the sequence's rate of taking them, and the step runs those worth
    // their rows (SpecPolicy, the same measured line as speculation's).
    const double rate = (s->jump_acc + 1) / (s->jump_acc + s->jump_rej + 2);
    double p = 1;
    for (size_t j = 0; j < s->draft.size(); ++j) cand.push_back({p *= rate, i});
  }
  if (cand.empty()) return;
  std::vector<int32_t> take(n, 0);
  spec_policy_.choose(n_decodes, so.n_tokens(), cand, take);
  for (size_t i = 0; i < n; ++i) {
    Sequence* s = so.chunks[i].seq;
    if (s->draft.empty() || s->draft_forced) continue;
    s->draft.resize(size_t(take[i]));
    if (take[i] > 0 && sched_->grant_draft(so, so.chunks[i], take[i]) > 0) s->draft_forced = true;
    else s->draft.clear();
  }
}

void Engine::think_init(Sequence& s) {
  const ThinkingBudget& tb = s.params.thinking;
  s.think = tb.budget < 0 ? Sequence::Think::Done : tb.inside ? Sequence::Think::Inside : Sequence::Think::Before;
  if (s.think == Sequence::Think::Inside && tb.budget == 0) s.think = Sequence::Think::Forcing;
}

namespace {
// Whether history + tok ends with seq.
bool ends_with(const std::vector<int32_t>& history, int32_t tok, const std::vector<int32_t>& seq) {
  if (seq.empty() || seq.back() != tok || history.size() + 1 < seq.size()) return false;
  return std::equal(seq.begin(), seq.end() - 1, history.end() - std::ptrdiff_t(seq.size() - 1));
}
}  // namespace

// The thinking budget's state after the drawn token `tok` (s.tokens: the history before it).
void Engine::think_step(Sequence& s, int32_t tok) {
  const ThinkingBudget& tb = s.params.thinking;
  switch (s.think) {
    case Sequence::Think::Before:
      if (ends_with(s.tokens, tok, tb.open)) s.think = tb.budget == 0 ? Sequence::Think::Forcing : Sequence::Think::Inside;
      break;
    case Sequence::Think::Inside:
      if (ends_with(s.tokens, tok, tb.end)) s.think = Sequence::Think::Done;
      else if (++s.think_tokens >= tb.budget) s.think = Sequence::Think::Forcing;
      break;
    case Sequence::Think::Forcing:
      if (++s.think_forced >= int32_t(tb.force.size())) s.think = Sequence::Think::Done;
      break;
    case Sequence::Think::Done: break;
  }
}

bool Engine::stops(const Sequence& s, int32_t tok) const {
  if (!s.params.ignore_eos && tok_ && tok_->is_eog(tok)) return true;
  return std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(), tok) != s.params.stop_token_ids.end();
}

// Row j of a chunk with drafts is the target's distribution after draft j - 1: the
// sampler draws from it with the accepted tokens as history; a draw equal to draft j
// accepts it and moves on to row j + 1, any other draw is the correction and ends the
// chunk (proposer.h: this is rejection sampling for a deterministic proposal, and gives
// the tokens decoding without speculation gives). A stop token ends it too.
int32_t Engine::sample_chunk(const ScheduledChunk& c, const float* logits, int32_t* out, int thread) {
  Sequence* s = c.seq;
  const int32_t n_vocab = model_.hparams().n_vocab;
  const size_t n_history = s->tokens.size();
  int32_t n = 0;
  for (int32_t j = 0; j <= c.n_draft; ++j) {
    float* lg = const_cast<float*>(logits) + int64_t(j) * n_vocab;
    // Rows of the embedding past the tokenizer's ids (a Hugging Face checkpoint pads its
    // vocabulary to a multiple of 64 or 128) are no token: never sampled, probability 0.
    if (tok_ && tok_->n_vocab() < n_vocab) std::fill(lg + tok_->n_vocab(), lg + n_vocab, -INFINITY);
    if (s->params.capture_logits) s->logits.insert(s->logits.end(), lg, lg + n_vocab);
    if (s->params.margins) s->margins.push_back(top2_margin(lg, n_vocab));
    // Logprobs are of the raw distribution: keep the row before the sampler edits it.
    std::vector<float>& raw = raw_[size_t(thread)];
    if (s->params.logprobs >= 0) raw.assign(lg, lg + n_vocab);
    int32_t tok;
    if (s->matcher && (s->matcher->failed() || !s->matcher->any_allowed())) {
      // The grammar cannot go on: the row's token is the end of generation (an id past
      // the text if the vocabulary has none), and the request ends (grammar_done).
      s->matcher->fail();
      const auto eog = trie_->eog();  // made with the matcher, in add_request
      tok = tok_->eos() >= 0 ? tok_->eos() : !eog.empty() ? eog[0] : 0;
    } else {
      const auto g0 = s->matcher ? Clock::now() : Clock::time_point{};
      if (s->matcher) s->matcher->apply_mask(lg);
      const auto g1 = s->matcher ? Clock::now() : Clock::time_point{};
      if (s->think == Sequence::Think::Forcing && !s->matcher) {
        // The budget is spent: the close is the only token there is.
        const int32_t f = s->params.thinking.force[size_t(s->think_forced)];
        const float keep = std::isfinite(lg[f]) ? lg[f] : 0.0f;
        std::fill(lg, lg + n_vocab, -INFINITY);
        lg[f] = keep;
      }
      tok = s->sampler.sample(lg, s->tokens);
      // The mask allowed it, so the matcher takes it (an end token ends the grammar); a
      // token it refuses (all logits NaN) fails the grammar.
      if (s->matcher) {
        const auto g2 = Clock::now();
        if (!s->matcher->accept(tok)) s->matcher->fail();
        grammar_s_[size_t(thread)] += std::chrono::duration<double>(g1 - g0 + (Clock::now() - g2)).count();
      }
    }
    if (s->params.logprobs >= 0) s->logprobs.push_back(token_logprobs(raw.data(), n_vocab, tok, s->params.logprobs));
    if (s->think != Sequence::Think::Done) think_step(*s, tok);
    out[n++] = tok;
    if (j == c.n_draft || tok != s->draft[size_t(j)] || stops(*s, tok) || grammar_done(*s)) break;
    s->tokens.push_back(tok);  // accepted: the next row's history (postprocess appends for good)
  }
  s->tokens.resize(n_history);
  return n;
}

// The logprob of each prompt token a scored chunk's rows predict (row k: position
// n_computed + k, predicting the token after it), in order, once: after a preemption the
// positions already scored are not scored again. Rows in parallel on the pool.
void Engine::score_prompts(const SchedulerOutput& so, std::span<const float> logits) {
  const int32_t n_vocab = model_.hparams().n_vocab;
  const int32_t n_text = tok_ ? std::min(tok_->n_vocab(), n_vocab) : n_vocab;  // padded rows are no tokens
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    if (prompt_rows_[i] < 0) continue;
    Sequence* s = so.chunks[i].seq;
    const int32_t pos0 = s->n_computed, first = int32_t(s->prompt_logprobs.size()) + 1;  // first position to score
    const int32_t lo = std::max(pos0 + 1, first), hi = std::min(pos0 + so.chunks[i].n_tokens, s->n_prompt - 1) + 1;
    if (lo >= hi) continue;
    const size_t at = s->prompt_logprobs.size();
    s->prompt_logprobs.resize(at + size_t(hi - lo));
    pool_.run(hi - lo, [&](int64_t k, int) {
      const int32_t p = lo + int32_t(k);  // the token at position p, from the row of position p - 1
      const float* row = logits.data() + int64_t(prompt_rows_[i] + (p - 1 - pos0)) * n_vocab;
      s->prompt_logprobs[at + size_t(k)] = token_logprobs(row, n_text, s->tokens[size_t(p)], s->params.prompt_logprobs);
    });
  }
}

// Every chunk in parallel on the pool: each touches only its own sequence (its sampler,
// RNG and outputs) and its thread's raw_ row, so the result is the serial loop's.
Engine::Sampled Engine::sample(const SchedulerOutput& so, std::span<const float> logits) {
  perf::TraceScope span("sample", "engine");
  const int32_t n_vocab = model_.hparams().n_vocab;
  Sampled r;
  r.count.assign(so.chunks.size(), 0);
  // tokens is indexed like the logit rows (rows_), which a scored prompt's rows also take.
  int64_t n_rows = 0, n_verify = 0, n_slots = 0;
  for (size_t i = 0; i < so.chunks.size(); ++i)
    if (rows_[i] >= 0) {
      n_rows += 1 + so.chunks[i].n_draft, n_verify += so.chunks[i].n_draft > 0;
      n_slots = std::max<int64_t>(n_slots, rows_[i] + 1 + so.chunks[i].n_draft);
    }
  r.tokens.assign(size_t(n_slots), -1);
  perf::OpProfile& prof = runner_->profile();
  const auto t0 = prof.timing ? Clock::now() : Clock::time_point{};
  raw_.resize(size_t(pool_.size()));
  grammar_s_.assign(size_t(pool_.size()), 0.0);
  pool_.run(int64_t(so.chunks.size()), [&](int64_t task, int thread) {
    const size_t i = size_t(task);
    // A request of max_tokens 0 ran only to score its prompt: nothing is drawn.
    if (rows_[i] < 0 || so.chunks[i].seq->params.max_tokens == 0) return;
    r.count[i] = sample_chunk(so.chunks[i], logits.data() + int64_t(rows_[i]) * n_vocab,
                              r.tokens.data() + rows_[i], thread);
  });
  for (size_t i = 0; i < so.chunks.size(); ++i)
    if (rows_[i] >= 0 && so.chunks[i].seq->matcher) stats_.grammar_tokens += r.count[i];
  for (double t : grammar_s_) stats_.grammar_s += t;
  if (n_rows > 0) {
    const perf::OpCost c = perf::sampling_cost(n_rows, n_vocab);
    prof.add(perf::Op::Sampling, perf::ComputeClass::None, c.flops, c.bytes,
             prof.timing ? std::chrono::duration<double>(Clock::now() - t0).count() : 0.0);
  }
  span.end({{"rows", n_rows}, {"verified", n_verify}});
  return r;
}

// A verified proposal's outcome: the counters, and the sequence's acceptance per token
// (decaying counts, so it follows text that starts or stops repeating).
void Engine::on_verified(Sequence* s, int32_t n_draft, int32_t n_accepted) {
  if (s->draft_forced) {  // the grammar's span, not a proposer's: its counters only
    ++stats_.jump_drafts;
    stats_.jump_tokens += n_draft;
    stats_.jump_accepted += n_accepted;
    s->jump_acc = 0.9 * s->jump_acc + n_accepted;
    s->jump_rej = 0.9 * s->jump_rej + (n_accepted < n_draft ? 1 : 0);
    return;
  }
  s->spec_draft_tokens += n_draft;
  s->spec_accepted_tokens += n_accepted;
  ++stats_.spec_drafts;
  stats_.spec_draft_tokens += n_draft;
  stats_.spec_accepted_tokens += n_accepted;
  if (stats_.spec_accepted_per_pos.size() < size_t(n_draft)) stats_.spec_accepted_per_pos.resize(size_t(n_draft), 0);
  for (int32_t j = 0; j < n_accepted; ++j) ++stats_.spec_accepted_per_pos[size_t(j)];
  s->spec_acc = 0.9 * s->spec_acc + n_accepted;
  s->spec_rej = 0.9 * s->spec_rej + (n_accepted < n_draft ? 1 : 0);
  if (perf::trace_on() && n_accepted < n_draft)
    perf::trace_instant("rollback", "engine", {{"req", s->id}, {"drafted", n_draft}, {"accepted", n_accepted}});
}

// The chunks' tokens are in the cache now (a verified chunk's: the pending token and its
// accepted drafts; the rejected drafts' slots are rolled back); sampled tokens join their
// sequences, which finish on EOS, a stop id or their length.
std::vector<TokenEvent> Engine::postprocess(const SchedulerOutput& so, const Sampled& sampled, StepTally& t) {
  std::vector<TokenEvent> events;
  t.advanced.assign(so.chunks.size(), 0);
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    const ScheduledChunk& c = so.chunks[i];
    Sequence* s = c.seq;
    t.n_decodes += c.decode();
    t.prompt_work |= !c.decode();
    const int32_t n = rows_[i] < 0 ? 0 : sampled.count[size_t(i)];
    const int32_t advanced = c.n_draft > 0 ? n : c.n_tokens;  // n produced = pending + n - 1 accepted
    t.advanced[i] = advanced;
    s->n_computed += advanced;
    stats_.computed_tokens += advanced;
    if (c.n_draft > 0) {
      ++t.n_verified;
      // Accepted: the drafts the produced tokens matched (a stop token that matched its
      // draft ends the chunk accepted).
      int32_t accepted = n - 1;
      if (accepted < c.n_draft && sampled.tokens[size_t(rows_[i] + n - 1)] == s->draft[size_t(n - 1)]) ++accepted;
      on_verified(s, c.n_draft, accepted);
      sched_->rollback(s);
      s->draft.clear();
    }
    if (rows_[i] < 0) {
      sched_->on_computed(s);
      continue;
    }
    if (s->n_generated() == 0) stats_.prefix_hit_tokens += s->n_prefix_hit;
    if (s->params.max_tokens == 0) {  // scored its prompt (prompt_logprobs); generates nothing
      finish(s, "length");
      ++t.n_finished;
      events.push_back({s->id, -1, true, std::string_view(s->finish_reason), nullptr});
      continue;
    }
    const size_t first_lp = s->logprobs.size() - (s->params.logprobs >= 0 ? size_t(n) : 0);
    for (int32_t j = 0; j < n; ++j) {
      const int32_t tok = sampled.tokens[size_t(rows_[i] + j)];
      score_shadow(*s, tok);
      s->tokens.push_back(tok);
      ++t.produced;
      const bool failed = j + 1 == n && s->matcher && s->matcher->failed();
      const bool stop = stops(*s, tok) || (j + 1 == n && grammar_done(*s));
      const bool done = stop || s->n_generated() >= s->params.max_tokens;
      if (done) {
        finish(s, failed ? "abort" : stop ? "stop" : "length");
        ++t.n_finished;
      }
      events.push_back({s->id, tok, done, done ? std::string_view(s->finish_reason) : std::string_view(),
                        s->params.logprobs >= 0 ? &s->logprobs[first_lp + size_t(j)] : nullptr});
      // n_computed counted every produced token: a stop can only be the last of them
      // (sample_chunk ends at a stop token, grant_draft at max_tokens).
      RIDGE_CHECK(!done || j + 1 == n, "request {}: finished at token {} of {} produced in one step", s->id, j + 1, n);
      if (done) break;
    }
    // After the tokens joined: n_computed never runs past them (the prefix cache reads
    // the tokens of its full blocks). A finished sequence did this in finish().
    if (!s->finished()) sched_->on_computed(s);
  }
  return events;
}

// Each sequence's share of the step's time by the kind of work its chunk was, and the
// engine's totals (the prefill rate feeds the recompute-or-swap choice).
void Engine::account(const SchedulerOutput& so, const StepTally& t, double dt) {
  const double per_token = dt / double(std::max<int64_t>(so.n_tokens(), 1));
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    const ScheduledChunk& c = so.chunks[i];
    Sequence* s = c.seq;
    const int32_t start = s->n_computed - t.advanced[i];
    const int32_t redo = std::max(0, std::min(start + c.n_tokens, s->max_computed) - start);
    s->recompute_share_s += per_token * redo;
    const double fresh = per_token * (c.n_tokens - redo);
    if (c.n_tokens - c.n_draft == 1 && start >= s->n_prompt) s->decode_share_s += fresh;
    else s->prefill_share_s += fresh;
    s->max_computed = std::max(s->max_computed, s->n_computed);
    stats_.attn_pairs += double(c.n_tokens) * (double(start) + 0.5 * double(c.n_tokens + 1));
  }
  ++stats_.steps;
  stats_.batched_seqs += int64_t(so.chunks.size());
  stats_.generated_tokens += t.produced;
  stats_.spec_propose_s += propose_s_;
  if (!t.prompt_work) stats_.spec_propose_decode_s += propose_s_;
  if (t.prompt_work) {
    stats_.prefill_s += dt;
    const int64_t n = so.n_tokens();
    if (n >= 16) prefill_s_per_token_ = 0.7 * prefill_s_per_token_ + 0.3 * (dt - propose_s_) / double(n);
  } else {
    stats_.decode_s += dt;
    stats_.decode_tokens += t.produced;
    ++stats_.decode_steps;
    stats_.decode_rows += so.n_tokens();
    // Not the draft model's catch-up on new text: a cost of the sequence, not of the rows.
    spec_policy_.observe(t.n_decodes, so.n_tokens(), t.n_verified > 0, std::max(0.0, dt - draft_catchup_s_));
    if (t.n_verified > 0) ++stats_.spec_decode_steps, stats_.spec_decode_rows += so.n_tokens();
  }
}

void Engine::check_invariants() const {
  bm_->check_invariants();
  sched_->check_invariants();
  // Every reference and window claim on a block has its holder: a table (claims from its
  // n_slid on) or a radix node.
  std::vector<int32_t> refs(size_t(bm_->n_total()), 0), claims(refs.size(), 0);
  for (const auto& [id, s] : seqs_) {
    for (size_t i = 0; i < s->blocks.size(); ++i) {
      ++refs[size_t(s->blocks[i])];
      if (bm_->windowed() && int64_t(i) >= s->blocks.n_slid) ++claims[size_t(s->blocks[i])];
    }
    // A swapped-out sequence's KV is its computed tokens' pages, no more: swap-in
    // reserves exactly those.
    if (s->status == SeqStatus::Swapped && !s->swap_slots.empty())
      RIDGE_CHECK(int64_t(s->swap_slots.size()) == bm_->pages_for(s->n_computed),
                  "request {} is swapped out in {} pages but has {} tokens computed", id, s->swap_slots.size(),
                  s->n_computed);
  }
  if (radix_) {
    radix_->check_invariants();
    std::vector<int32_t> tree;
    radix_->collect_blocks(tree);
    for (int32_t b : tree) ++refs[size_t(b)];
    tree.clear();
    radix_->collect_claims(tree);
    for (int32_t b : tree) ++claims[size_t(b)];
  }
  for (int32_t b = 0; b < bm_->n_total(); ++b) {
    RIDGE_CHECK(refs[size_t(b)] == bm_->ref_count(b), "block {} has ref count {} but {} holders", b,
                bm_->ref_count(b), refs[size_t(b)]);
    RIDGE_CHECK(claims[size_t(b)] == bm_->claim_count(b), "block {} has {} window claims but {} claimants", b,
                bm_->claim_count(b), claims[size_t(b)]);
  }
}

}  // namespace ridge
