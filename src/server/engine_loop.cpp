#include "server/engine_loop.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "perf/tracer.h"
#include "server/metrics.h"
#include "server/stop_matcher.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct EngineLoop::Active {
  struct Choice {
    int64_t seq = -1;  // engine sequence id; -1 once released
    double first_token_s = 0;
    std::unique_ptr<StreamDecoder> dec;
    std::unique_ptr<StopMatcher> stop;
    bool done = false;
    bool prompt_scored = false;  // its prompt logprobs were handed to the job
    double last_token_s = 0;
  };
  std::shared_ptr<Job> job;
  std::vector<Choice> ch;
  bool started = false;        // some choice has been scheduled (queue time recorded)
  double first_token_s = 0;
  bool touched = false;        // has output to notify about
  bool prompt_counted = false;
  const char* trace_cause = "";  // why the loop aborts it, for the trace
};

EngineLoop::EngineLoop(Engine& engine, const Tokenizer& tok, Metrics& metrics, const LoopOptions& o)
    : engine_(engine), tok_(tok), metrics_(metrics), opt_(o) {
  // Made here, so that impossible bounds are the caller's error, before any request.
  if (o.auto_tune.enabled) tuner_ = std::make_unique<AutoTuner>(engine, o.auto_tune);
  if (o.kv_events) {
    engine_.set_kv_events(true);
    publish_kv_events();  // AllBlocksCleared: a fresh cache
  }
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lk(mu_);
    exit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool EngineLoop::submit(const std::shared_ptr<Job>& job) {
  job->arrival_s = steady_seconds();
  job->state.assign(job->choices.size(), ChoiceState{});
  if (perf::trace_on()) {
    perf::trace_thread_name("http");
    perf::trace_instant("submit", "server",
                        {{"choices", job->choices.size()},
                         {"prompt_tokens", job->choices.empty() ? size_t(0) : job->choices[0].prompt.size()}});
  }
  {
    std::lock_guard lk(mu_);
    if (stopping_) return false;
    if (n_waiting_.load() + int32_t(inbox_.size()) >= opt_.max_waiting) return false;
    inbox_.push_back(job);
    ++n_jobs_;
  }
  cv_.notify_one();
  return true;
}

void EngineLoop::cancel(const std::shared_ptr<Job>& job) {
  job->cancelled.store(true);
  {
    // Under the lock: the loop tests wake_ inside its wait, so a store between its test
    // and its sleep would otherwise be lost until the wait's timeout.
    std::lock_guard lk(mu_);
    wake_.store(true);
  }
  cv_.notify_one();
}

void EngineLoop::shutdown(double grace_s) {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    grace_deadline_ = steady_seconds() + grace_s;
    wake_.store(true);
  }
  cv_.notify_one();
}

void EngineLoop::admit(const std::shared_ptr<Job>& job) {
  auto a = std::make_unique<Active>();
  a->job = job;
  a->ch.resize(job->choices.size());
  try {
    for (size_t c = 0; c < job->choices.size(); ++c) {
      const ChoiceSpec& spec = job->choices[c];
      // Generated text continues the prompt: SentencePiece's leading space is kept.
      a->ch[c].dec = std::make_unique<StreamDecoder>(tok_, false, spec.show_control);
      if (!spec.stop.empty()) a->ch[c].stop = std::make_unique<StopMatcher>(spec.stop);
      a->ch[c].seq = engine_.add_request(spec.prompt, spec.params);
      by_seq_[a->ch[c].seq] = {a.get(), c};
      // The request track starts at the HTTP submit, not when this loop got to it. (Same
      // clock: steady_clock, in seconds here.)
      if (perf::trace_on()) perf::trace_req_arrival(a->ch[c].seq, int64_t(job->arrival_s * 1e9));
    }
  } catch (const std::exception& e) {
    for (auto& ch : a->ch)
      if (ch.seq >= 0) {
        perf::trace_req_note_end(ch.seq, "abort", "refused");
        by_seq_.erase(ch.seq);
        engine_.release(ch.seq);
      }
    {
      std::lock_guard lk(job->mu);
      job->error = e.what();
      for (auto& st : job->state) st.finished = true, st.finish_reason = "abort";
    }
    --n_jobs_;
    if (job->notify) job->notify();
    return;
  }
  Active* raw = a.get();
  active_.push_back(std::move(a));
  // max_tokens == 0 finishes at once, without a token event.
  for (size_t c = 0; c < raw->ch.size(); ++c)
    if (engine_.finished(raw->ch[c].seq)) finish_choice(*raw, c, "length", false);
}

void EngineLoop::on_token(Active& a, size_t c, const TokenEvent& ev) {
  Active::Choice& ch = a.ch[c];
  if (ch.done) return;
  const double now = steady_seconds();
  if (a.first_token_s == 0) {
    a.first_token_s = now;
    metrics_.observe_ttft(now - a.job->arrival_s);
  }
  if (ch.last_token_s > 0) {
    metrics_.observe_itl(now - ch.last_token_s);
  } else {
    ch.first_token_s = now;
    if (perf::trace_on())
      perf::trace_req_instant(ch.seq, "first_token", {{"ttft_ms", (now - a.job->arrival_s) * 1e3}});
  }
  ch.last_token_s = now;

  const ChoiceSpec& spec = a.job->choices[c];
  if (spec.params.prompt_logprobs >= 0 && !ch.prompt_scored) {
    ch.prompt_scored = true;
    const Sequence* s = engine_.get(ch.seq);
    std::vector<TokenOut> pl;
    if (s) {
      pl.reserve(s->prompt_logprobs.size());
      for (size_t k = 0; k < s->prompt_logprobs.size(); ++k) {
        const TokenLogprobs& t = s->prompt_logprobs[k];
        pl.push_back({s->tokens[k + 1], t.logprob, t.top, t.rank});
      }
    }
    std::lock_guard lk(a.job->mu);
    ChoiceState& st = a.job->state[c];
    st.prompt_logprobs = std::move(pl);
    st.prompt_scored = true;
  }
  if (ev.token < 0) {  // the end of a request that generates nothing (it scored its prompt)
    a.touched = true;
    finish_choice(a, c, std::string(ev.finish_reason), false);
    return;
  }
  std::string text = ch.dec->push(ev.token);
  bool stopped = false;
  if (ch.stop) {
    auto o = ch.stop->push(text);
    text = std::move(o.text);
    stopped = o.stopped;
  }
  {
    Job& j = *a.job;
    std::lock_guard lk(j.mu);
    ChoiceState& st = j.state[c];
    st.text += text;
    j.pending_bytes += int64_t(text.size());
    if (ev.logprobs) {
      st.tokens.push_back({ev.token, ev.logprobs->logprob, ev.logprobs->top});
      j.pending_bytes += 16 + int64_t(ev.logprobs->top.size()) * 8;
    } else if (a.job->choices[c].params.logprobs >= 0) {
      st.tokens.push_back({ev.token, 0.0f, {}});
    }
    if (++st.n_generated == 1) st.n_cached = engine_.request_stats(ch.seq).cached_tokens;
  }
  a.touched = true;
  if (stopped) finish_choice(a, c, "stop", true);
  else if (ev.finished) finish_choice(a, c, std::string(ev.finish_reason), false);
}

void EngineLoop::finish_choice(Active& a, size_t c, const std::string& reason, bool abort_seq) {
  Active::Choice& ch = a.ch[c];
  if (ch.done) return;
  ch.done = true;
  std::string tail;
  bool stopped_late = false;
  int32_t n_generated = 0;
  if (!abort_seq || reason != "stop") {
    // End of the stream: an incomplete character becomes U+FFFD; a held stop-string
    // prefix that never completed is text after all.
    tail = ch.dec->flush();
    if (ch.stop) {
      auto o = ch.stop->push(tail);
      tail = std::move(o.text);
      stopped_late = o.stopped;
      if (!stopped_late) {
        tail += ch.stop->flush();
        stopped_late = ch.stop->stopped();
      }
    }
  }
  {
    Job& j = *a.job;
    std::lock_guard lk(j.mu);
    ChoiceState& st = j.state[c];
    st.text += tail;
    st.finished = true;
    st.finish_reason = stopped_late ? "stop" : reason;
    if (ch.seq >= 0) {
      const RequestStats rs = engine_.request_stats(ch.seq);
      // A stop string ends the text where it matched: tokens the engine produced after
      // it in the same step (accepted speculative tokens) are not the completion's.
      if (!(abort_seq && reason == "stop")) st.n_generated = rs.generated_tokens;
      if (rs.generated_tokens == 0) st.n_cached = rs.cached_tokens;
      st.prefill_s = rs.prefill_s;
      st.decode_s = rs.decode_s;
      st.recompute_s = rs.recompute_s;
      st.preemptions = rs.preemptions;
      st.spec_draft_tokens = rs.spec_draft_tokens;
      st.spec_accepted_tokens = rs.spec_accepted_tokens;
    }
    n_generated = st.n_generated;
  }
  if (tuner_ && n_generated > 0 && reason != "abort")
    tuner_->on_request(ch.first_token_s - a.job->arrival_s,
                       n_generated > 1 ? (ch.last_token_s - ch.first_token_s) / double(n_generated - 1) : 0);
  if (opt_.recorder) {
    const ChoiceSpec& spec = a.job->choices[c];
    opt_.recorder->record(a.job->arrival_s, spec.prompt, spec.params.max_tokens, n_generated);
  }
  if (abort_seq) {
    // The engine would report "abort"; say why. (A no-op when not tracing.)
    if (reason == "stop") perf::trace_req_note_end(ch.seq, "stop", "stop_string");
    else if (*a.trace_cause) perf::trace_req_note_end(ch.seq, reason, a.trace_cause);
    // A stop string ends a normal completion: its text teaches the suffix store.
    engine_.abort(ch.seq, /*complete=*/reason == "stop");
  }
  by_seq_.erase(ch.seq);
  engine_.release(ch.seq);
  ch.seq = -1;
  a.touched = true;
}

void EngineLoop::abort_job(Active& a) {
  for (size_t c = 0; c < a.ch.size(); ++c) finish_choice(a, c, "abort", true);
}

void EngineLoop::finish_job_if_done(Active& a) {
  for (const auto& ch : a.ch)
    if (!ch.done) return;
  Job& j = *a.job;
  const double now = steady_seconds();
  int32_t gen = 0, prompt = 0;
  std::string reason;
  {
    std::lock_guard lk(j.mu);
    for (const auto& st : j.state) gen += st.n_generated;
    reason = j.state.empty() ? "abort" : j.state[0].finish_reason;
  }
  for (const auto& spec : j.choices) prompt = std::max(prompt, int32_t(spec.prompt.size()));
  metrics_.observe_e2e(now - j.arrival_s);
  {
    std::lock_guard lk(j.mu);
    for (const auto& st : j.state)
      metrics_.observe_attribution(st.prefill_s, st.decode_s, st.recompute_s, st.n_cached, st.preemptions);
  }
  metrics_.observe_request_tokens(prompt, gen);
  if (a.first_token_s > 0 && gen > 1) {
    double last = 0;
    for (const auto& ch : a.ch) last = std::max(last, ch.last_token_s);
    metrics_.observe_tpot((last - a.first_token_s) / double(gen - 1));
  }
  metrics_.request_finished(reason);
}

void EngineLoop::publish_kv_events() {
  if (!opt_.kv_events) return;
  std::vector<KvEvent> ev = engine_.take_kv_events();
  if (ev.empty()) return;
  const double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  opt_.kv_events->publish(ts, std::move(ev));
}

void EngineLoop::update_gauges(bool force) {
  const double now = steady_seconds();
  int32_t running = 0, waiting = 0;
  for (const auto& a : active_) (a->started ? running : waiting)++;
  {
    std::lock_guard lk(mu_);
    waiting += int32_t(inbox_.size());
  }
  n_waiting_.store(waiting);
  // The block census walks the prefix tree: at most every 50 ms unless asked.
  if (force || now - last_gauges_s_ > 0.05) {
    last_gauges_s_ = now;
    kv_ = engine_.kv_usage();
  }
  Metrics::Gauges g;
  g.running = running;
  g.waiting = waiting;
  g.kv_blocks_total = kv_.blocks_total;
  g.kv_blocks_free = kv_.blocks_free;
  g.kv_blocks_evictable = kv_.blocks_evictable;
  g.kv_blocks_in_use = kv_.blocks_in_use;
  g.kv_cache_usage = kv_.blocks_total ? double(kv_.blocks_in_use) / kv_.blocks_total : 0.0;
  metrics_.set_gauges(g);
  metrics_.set_prefix_cache_totals(kv_.prefix_query_tokens, kv_.prefix_hit_tokens);
  metrics_.set_preemptions_total(engine_.n_preemptions(), engine_.n_swaps(), engine_.stats().swap_fallbacks);
  const EngineStats& es = engine_.stats();
  metrics_.set_spec_decode_totals(es.spec_drafts, es.spec_draft_tokens, es.spec_accepted_tokens,
                                  es.spec_accepted_per_pos);
  metrics_.set_grammar_engine_totals(es.grammar_tokens, es.grammar_s, es.jump_tokens, es.jump_accepted);
}

void EngineLoop::run() {
  perf::trace_thread_name("engine loop");
  int64_t seen_prompt = 0, seen_gen = 0;
  bool checked_idle = true;
  for (;;) {
    std::vector<std::shared_ptr<Job>> incoming;
    bool stopping = false;
    double deadline = 0;
    {
      std::unique_lock lk(mu_);
      const bool work = engine_.has_work() || !active_.empty();
      if (!work && inbox_.empty() && !exit_) {
        cv_.wait_for(lk, std::chrono::milliseconds(stopping_ ? 20 : 500),
                     [&] { return exit_ || !inbox_.empty() || wake_.load(); });
      }
      if (exit_) break;
      incoming.assign(inbox_.begin(), inbox_.end());
      inbox_.clear();
      stopping = stopping_;
      deadline = grace_deadline_;
      wake_.store(false);  // cleared with the state it announced read, never after
    }
    for (auto& j : incoming) admit(j);

    const bool past_grace = stopping && steady_seconds() >= deadline;
    for (auto& a : active_)
      if (past_grace || a->job->cancelled.load()) {
        a->trace_cause = past_grace ? "shutdown" : "client_disconnect";
        abort_job(*a);
      } else if (a->job->pending_bytes.load() > opt_.max_pending_bytes) {
        std::fprintf(stderr, "serve: a client is not reading its stream; aborting its request\n");
        a->trace_cause = "slow_client";
        abort_job(*a);
      }

    if (engine_.has_work()) {
      checked_idle = false;
      const double t_step = steady_seconds();  // a job first scheduled now stopped queueing now
      const double prefill_before = engine_.stats().prefill_s;
      const std::vector<TokenEvent> events = engine_.step();
      if (tuner_) tuner_->on_step(steady_seconds() - t_step, engine_.stats().prefill_s > prefill_before);
      for (const TokenEvent& ev : events) {
        auto it = by_seq_.find(ev.id);
        if (it == by_seq_.end()) continue;
        on_token(*it->second.first, it->second.second, ev);
      }
      for (auto& a : active_) {
        if (a->started) continue;
        for (const auto& ch : a->ch) {
          if (ch.done || (ch.seq >= 0 && engine_.request_stats(ch.seq).scheduled)) {
            a->started = true;
            metrics_.observe_queue(t_step - a->job->arrival_s);
            {
              std::lock_guard lk(a->job->mu);
              a->job->queued_s = t_step - a->job->arrival_s;
            }
            break;
          }
        }
      }
    }
    publish_kv_events();
    if (tuner_) {
      const std::string change = tuner_->tick(steady_seconds());
      if (!change.empty()) std::fprintf(stderr, "serve: auto-tune: %s\n", change.c_str());
    }
    const EngineStats& es = engine_.stats();
    metrics_.add_prompt_tokens(es.prompt_tokens - seen_prompt);
    metrics_.add_generation_tokens(es.generated_tokens - seen_gen);
    seen_prompt = es.prompt_tokens, seen_gen = es.generated_tokens;

    // Notify consumers and retire finished jobs.
    size_t w = 0;
    for (size_t r = 0; r < active_.size(); ++r) {
      Active& a = *active_[r];
      bool done = true;
      for (const auto& ch : a.ch) done &= ch.done;
      if (done) finish_job_if_done(a);
      if (a.touched || done) {
        a.touched = false;
        if (a.job->notify) a.job->notify();
      }
      if (done) {
        --n_jobs_;
        continue;
      }
      active_[w++] = std::move(active_[r]);
    }
    active_.resize(w);
    update_gauges(!engine_.has_work());

    // Idle: every block's ref count must be explained by its holders.
    if (!engine_.has_work() && active_.empty() && !checked_idle) {
      checked_idle = true;
      bool ok = true;
      try {
        engine_.check_invariants();
      } catch (const std::exception& e) {
        ok = false;
        std::fprintf(stderr, "serve: engine invariant violated: %s\n", e.what());
      }
      metrics_.invariant_check(ok);
    }
  }
}

}  // namespace ridge::server
