// The engine's speculative step: which decodes get proposals, from which proposer, and
// how many of their tokens the step verifies (engine/spec_policy.h prices them). The
// rest of the step (schedule, execute, sample, postprocess) is engine.cpp's.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "perf/tracer.h"

namespace ridge {

using Clock = std::chrono::steady_clock;

// Proposals for the decodes of sequences that speculate, then how much of each the step
// runs: all of it at a fixed depth; adaptive, the tokens worth their row (spec_policy.h:
// a token's chance of acceptance against the time its row adds, best chances first
// across the batch). Within the remaining max_tokens, the token budget and free blocks.
// A costly proposer (a draft model) is asked after that choice, for as many tokens as
// the step will verify; the others before it, since what they find (often nothing)
// informs it. Where the policy knows that not even certain tokens would pay for their
// rows, no proposer is asked at all (on a small model the lookup is a share of the step)
// but the probe's, for its one token.
void Engine::speculate(SchedulerOutput& so) {
  draft_catchup_s_ = 0;
  propose_s_ = 0;
  int32_t n_decodes = 0, n_speculating = 0;
  for (const ScheduledChunk& c : so.chunks) {
    n_decodes += c.decode();
    n_speculating += c.decode() && c.seq->spec_k > 0 && !c.seq->draft_forced;
  }
  if (n_speculating == 0) return;
  perf::TraceScope span("propose", "engine");
  const auto t0 = Clock::now();
  const size_t n = so.chunks.size();
  std::vector<int32_t> want(n, 0);
  int32_t adaptive_want = 0;
  for (size_t i = 0; i < n; ++i) {
    Sequence* s = so.chunks[i].seq;
    if (s->draft_forced) continue;  // jump_forward's
    s->draft.clear();  // a proposal lives for its step only
    if (s->spec_k <= 0 || !so.chunks[i].decode() || s->pending() != 1) continue;
    // Every produced token counts against max_tokens: the pending token's row gives one
    // more than the drafts.
    const int32_t k = spec_depth_cap_ > 0 && !s->params.speculative ? std::min(s->spec_k, spec_depth_cap_) : s->spec_k;
    want[i] = std::max(0, std::min(k, s->params.max_tokens - s->n_generated() - 1));
    if (spec_config(*s).adaptive) adaptive_want += want[i];
  }
  const bool hopeless = !spec_policy_.worth_asking(n_decodes, so.n_tokens(), adaptive_want);
  const std::vector<bool> too_dear = dear_asks(so, n_decodes, want);
  std::vector<SpecPolicy::Candidate> cand;
  std::vector<int32_t> take(n, 0), avail(n, 0);
  std::vector<Proposer*> later(n, nullptr);  // costly: asked after the choice
  std::vector<bool> deferred(n, false);      // not asked: nothing could pay
  std::vector<float> conf;                   // a proposal's confidence, where its proposer has one
  for (size_t i = 0; i < n; ++i) {
    conf.clear();
    if (want[i] <= 0) continue;
    Sequence* s = so.chunks[i].seq;
    const SpeculativeConfig& sc = spec_config(*s);
    if (too_dear[i]) continue;
    if (sc.adaptive && hopeless) {
      deferred[i] = true;
      avail[i] = want[i];
      continue;
    }
    Proposer* p = proposer(sc.method);
    if (p && p->costly()) {
      later[i] = p;
      avail[i] = want[i];
    } else {
      avail[i] = ask_cheap(*s, p, want[i], &conf);
    }
    if (!sc.adaptive) {
      take[i] = avail[i];
      continue;
    }
    // The sequence's acceptance per token (a Beta(1, 1) prior on its decaying counts),
    // times the proposer's own confidence where it has one (suffix decoding's votes).
    const double rate = (s->spec_acc + 1) / (s->spec_acc + s->spec_rej + 2);
    double p_acc = 1;
    for (int32_t j = 0; j < avail[i]; ++j) {
      p_acc *= rate;
      cand.push_back({p_acc * (size_t(j) < conf.size() ? double(conf[size_t(j)]) : 1.0), i});
    }
  }
  spec_policy_.choose(n_decodes, so.n_tokens(), cand, take);
  const bool probed = probe(so, n_decodes, avail, deferred, take);
  for (size_t i = 0; i < n; ++i) {
    if (!deferred[i] || take[i] == 0) continue;
    Sequence* s = so.chunks[i].seq;  // the probe's: ask its proposer now
    Proposer* p = proposer(spec_config(*s).method);
    if (p && p->costly()) later[i] = p;
    else take[i] = std::min(take[i], ask_cheap(*s, p, take[i], nullptr));
  }
  ask_costly(so, later, take);
  // Catching a draft model up is a cost of speculating that the policy's line leaves out
  // (spec_policy.h): a probe's is paid from the probes' share, so that a draft turned off
  // for being slow cannot cost more than that share by being probed. (The catch-ups of a
  // step the policy chose to draft in are not: new prompts would stop the probes.)
  if (probed && draft_catchup_s_ > 0) {
    const SpecPolicy::StepCost c = spec_policy_.cost(n_decodes);
    if (c.known) probe_credit_ -= draft_catchup_s_ / std::max(1e-12, c.plain_s);
  }
  int64_t n_drafts = 0, n_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    Sequence* s = so.chunks[i].seq;
    take[i] = grammar_prefix(*s, take[i]);  // a proposal the grammar refuses is not worth a row
    const int32_t got = take[i] > 0 ? sched_->grant_draft(so, so.chunks[i], take[i]) : 0;
    if (got > 0) {
      s->spec_idle = 0;
      clear_shadow(*s);  // the verification measures it now
      ++n_drafts;
      n_tokens += got;
      continue;
    }
    s->spec_idle += avail[i] > 0;
    // A proposal made and not run (a hopeless step's deferred sequences made none) is
    // scored as the grammar would have cut it.
    if (!s->draft.empty() && !deferred[i] && s->spec_shadow.empty() && spec_config(*s).adaptive)
      s->spec_shadow.assign(s->draft.begin(), s->draft.begin() + grammar_prefix(*s, int32_t(s->draft.size())));
  }
  propose_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  span.end({{"drafts", n_drafts}, {"tokens", n_tokens}});
}

// The adaptive sequences whose costly proposer cannot pay in this step even with every
// token right: with B decodes in a plain step of time T, B' of them asking proposer p for
// a tokens each, certain, give B + B'a tokens in at least T + a t + r, t being p's time
// per position at B' sequences and r what verified rows add (the timed second row when
// the step is one row, else 0); that beats B / T only if a (B' T - B t) > B r for some a
// up to the deepest ask. Such a proposer (a draft model as dear as the target) is not
// asked, explored or probed; nor is any costly proposer before T is known
// (SpecPolicy::plain_seconds). And a sequence is left out whose catch-up on text the
// proposer has not seen its share of those savings would not repay within
// kSpecRepaySteps steps (or the tokens it has left): a draft that barely pays is not
// worth running a long prompt through.
std::vector<bool> Engine::dear_asks(const SchedulerOutput& so, int32_t n_decodes, const std::vector<int32_t>& want) const {
  const size_t n = so.chunks.size();
  std::vector<bool> dear(n, false);
  struct Asked {
    Proposer* p;
    int32_t n, k;  // adaptive sequences asking it, the most tokens one wants
  };
  std::vector<Asked> asked;
  std::vector<Proposer*> costly(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const SpeculativeConfig& sc = spec_config(*so.chunks[i].seq);
    Proposer* p = want[i] > 0 && sc.adaptive ? proposer(sc.method) : nullptr;
    if (!p || !p->costly()) continue;
    costly[i] = p;
    auto it = std::find_if(asked.begin(), asked.end(), [&](const Asked& a) { return a.p == p; });
    if (it == asked.end()) it = asked.insert(asked.end(), {p, 0, 0});
    ++it->n;
    it->k = std::max(it->k, want[i]);
  }
  if (asked.empty()) return dear;
  const double plain = spec_policy_.plain_seconds(n_decodes);
  const double b = n_decodes, r = so.n_tokens() == 1 ? target_row_s_ : 0.0;
  for (const Asked& a : asked) {
    // Seconds a step with every drafted token right saves against plain steps, per
    // sequence asking.
    const double saved = plain <= 0 ? 0.0
                                     : (double(a.k) * (double(a.n) * plain - b * a.p->token_seconds(a.n)) - b * r) /
                                           (b * double(a.n));
    for (size_t i = 0; i < n; ++i) {
      if (costly[i] != a.p) continue;
      const Sequence& s = *so.chunks[i].seq;
      const double steps = std::min<double>(kSpecRepaySteps, std::max(0, s.params.max_tokens - s.n_generated()));
      dear[i] = saved <= 0 || saved * steps <= a.p->setup_seconds(s.id, s.tokens);
    }
  }
  return dear;
}

const SpeculativeConfig& Engine::spec_config(const Sequence& s) const {
  return s.params.speculative ? *s.params.speculative : cfg_.speculative;
}

// A cheap proposer's (or prompt lookup's, which needs no state) proposal of up to n
// tokens into s.draft, with its confidence where it has one; returns its length.
int32_t Engine::ask_cheap(Sequence& s, Proposer* p, int32_t n, std::vector<float>* confidence) {
  const SpeculativeConfig& sc = spec_config(s);
  RIDGE_CHECK(p || sc.method == SpecMethod::Ngram, "speculative method {} has no proposer in this engine",
              spec_method_name(sc.method));
  s.draft.clear();
  if (!p) {
    NgramProposer(sc.prompt_lookup_min, sc.prompt_lookup_max).propose_one(s.tokens, n, s.draft);
  } else {
    const Proposer::Ask ask{s.id, s.tokens, n, &s.draft, confidence};
    p->propose({&ask, 1});
  }
  return int32_t(s.draft.size());
}

// The costly proposers' asks, one batch per proposer (a draft model drafts for all its
// sequences in one forward per position).
void Engine::ask_costly(const SchedulerOutput& so, const std::vector<Proposer*>& later, std::vector<int32_t>& take) {
  std::vector<Proposer*> done;
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    Proposer* p = later[i];
    if (!p || take[i] == 0 || std::find(done.begin(), done.end(), p) != done.end()) continue;
    done.push_back(p);
    std::vector<Proposer::Ask> asks;
    for (size_t j = i; j < so.chunks.size(); ++j)
      if (later[j] == p && take[j] > 0) {
        Sequence* s = so.chunks[j].seq;
        asks.push_back({s->id, s->tokens, take[j], &s->draft});
      }
    perf::TraceScope span("draft", "engine");
    p->propose(asks);
    if (p == draft_.get()) draft_catchup_s_ += draft_->catchup_seconds();
    span.end({{"seqs", asks.size()}});
  }
  for (size_t i = 0; i < so.chunks.size(); ++i)
    if (later[i]) take[i] = std::min(take[i], int32_t(so.chunks[i].seq->draft.size()));
}

// A cheap proposal the policy did not take is scored against the tokens the sequence goes
// on to produce: a verification would have accepted exactly the prefix they match (the
// sampler draws the same token with or without it: proposer.h), so the sequence's
// acceptance follows its text with no row spent on measuring it.
void score_shadow(Sequence& s, int32_t tok) {
  if (s.spec_shadow.empty()) return;
  const int32_t n = int32_t(s.spec_shadow.size());
  RIDGE_ASSERT(s.spec_shadow_ok >= 0 && s.spec_shadow_ok < n);
  const bool match = tok == s.spec_shadow[size_t(s.spec_shadow_ok)];
  if (match && ++s.spec_shadow_ok < n) return;
  s.spec_acc = 0.9 * s.spec_acc + s.spec_shadow_ok;
  s.spec_rej = 0.9 * s.spec_rej + (match ? 0 : 1);
  clear_shadow(s);
}

void clear_shadow(Sequence& s) {
  s.spec_shadow.clear();
  s.spec_shadow_ok = 0;
}

// A sequence whose costly proposer's proposals were not worth a row still verifies one
// token now and then, so its acceptance is measured again (text that starts repeating; a
// cheap proposal is scored for free, score_shadow), and so does one of a step the line
// calls hopeless (only a step with drafts refits the line): the one idle longest, when
// the probe credit covers the share of the step a row costs (and the draft model's
// forward and catch-up it would need). The credit grows by kSpecProbeShare per step,
// so probes never take more than that share of the time.
bool Engine::probe(const SchedulerOutput& so, int32_t n_decodes, const std::vector<int32_t>& avail,
                   const std::vector<bool>& deferred, std::vector<int32_t>& take) {
  probe_credit_ = std::min(1.0, probe_credit_ + kSpecProbeShare);
  size_t best = so.chunks.size();
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    const Sequence* s = so.chunks[i].seq;
    const Proposer* p = proposer(spec_config(*s).method);
    if (take[i] == 0 && avail[i] > 0 && (deferred[i] || (p && p->costly())) &&
        (best == so.chunks.size() || s->spec_idle > so.chunks[best].seq->spec_idle))
      best = i;
  }
  if (best == so.chunks.size()) return false;
  const SpecPolicy::StepCost c = spec_policy_.cost(n_decodes);
  if (!c.known) return false;  // the policy's prior measures this batch size already
  const double share = std::max(0.0, c.at(double(so.n_tokens()) + 1, true) / std::max(1e-12, c.plain_s) - 1);
  // A draft model's catch-up too must fit in the credit (speculate() charges what it took).
  const Sequence* s = so.chunks[best].seq;
  const Proposer* p = proposer(spec_config(*s).method);
  const double setup = p ? (p->setup_seconds(s->id, s->tokens) + p->token_seconds(1)) / std::max(1e-12, c.plain_s) : 0.0;
  if (probe_credit_ < share + setup) return false;
  probe_credit_ -= share;
  take[best] = 1;
  return true;
}

}  // namespace ridge
