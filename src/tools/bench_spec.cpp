#include "tools/bench_spec.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <span>

#include "core/error.h"
#include "core/progress.h"
#include "engine/engine.h"
#include "engine/proposer.h"

namespace ridge::tools {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer: a position's fixed pseudo-random bits
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Proposes the known continuation of each prompt, each token replaced by another with
// probability 1 - a. Whether a position is wrong is fixed by (request, position, seed),
// so every proposal covering it agrees and the runs are reproducible.
class ReplayProposer final : public SequenceProposer {
 public:
  ReplayProposer(const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::vector<int32_t>>& cont,
                 double a, int32_t n_vocab, uint64_t seed)
      : prompts_(prompts), cont_(cont), a_(a), n_vocab_(n_vocab), seed_(seed) {}

  void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& out) const override {
    for (size_t r = 0; r < prompts_.size(); ++r) {
      const auto& p = prompts_[r];
      if (tokens.size() < p.size() || !std::equal(p.begin(), p.end(), tokens.begin())) continue;
      const auto& c = cont_[r];
      for (size_t i = tokens.size() - p.size(); i < c.size() && int32_t(out.size()) < max_tokens; ++i) {
        const uint64_t h = mix(seed_ ^ mix(uint64_t(r) << 32 ^ uint64_t(i)));
        int32_t tok = c[i];
        if (double(h >> 11) * 0x1.0p-53 >= a_) tok = int32_t((uint64_t(tok) + 1 + mix(h) % uint64_t(n_vocab_ - 1)) % uint64_t(n_vocab_));
        out.push_back(tok);
      }
      return;
    }
  }

 private:
  const std::vector<std::vector<int32_t>>& prompts_;
  const std::vector<std::vector<int32_t>>& cont_;
  double a_;
  int32_t n_vocab_;
  uint64_t seed_;
};

struct Run {
  std::vector<std::vector<int32_t>> out;
  double tok_per_s = 0, ms_per_step = 0, tok_per_step = 0, rows_per_step = 0, acceptance = 0;
  double spec_share = 0, spec_rows = 0;  // share of decode steps with drafts, their mean rows
  double propose_ms = 0;                 // proposing time per decode step
};

Run run_once(const Model& m, const EngineConfig& cfg, const SpecBenchOptions& o, Proposer* ext) {
  Engine e(m, nullptr, cfg);
  e.set_proposer(ext);
  RequestParams p;
  p.max_tokens = o.output_len;
  p.ignore_eos = true;
  p.sampling.temperature = 0;
  std::vector<int64_t> ids;
  for (const auto& pr : o.prompts) ids.push_back(e.add_request(pr, p));
  while (e.has_work()) e.step();
  Run r;
  for (int64_t id : ids) r.out.push_back(e.output(id).tokens);
  const EngineStats& st = e.stats();
  RIDGE_CHECK(st.decode_steps > 0 && st.decode_s > 0, "bench spec: the run had no decode steps (--output-len 1?)");
  r.tok_per_s = double(st.decode_tokens) / st.decode_s;
  r.ms_per_step = 1e3 * st.decode_s / double(st.decode_steps);
  r.tok_per_step = double(st.decode_tokens) / double(st.decode_steps);
  r.rows_per_step = double(st.decode_rows) / double(st.decode_steps);
  r.acceptance = st.spec_draft_tokens ? double(st.spec_accepted_tokens) / double(st.spec_draft_tokens) : 0;
  r.spec_share = double(st.spec_decode_steps) / double(st.decode_steps);
  r.spec_rows = st.spec_decode_steps ? double(st.spec_decode_rows) / double(st.spec_decode_steps) : 0;
  r.propose_ms = 1e3 * st.spec_propose_decode_s / double(st.decode_steps);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

std::vector<SpecBenchRow> run_spec_bench(const Model& m, const SpecBenchOptions& o) {
  RIDGE_CHECK(!o.prompts.empty() && o.runs >= 1 && o.output_len >= 2 && o.k >= 1, "bench spec: nothing to run");
  const int32_t n_vocab = m.hparams().n_vocab;
  EngineConfig plain = o.engine;
  plain.speculative.method = SpecMethod::None;
  plain.speculative.draft_model.clear();  // only the draft case loads it
  EngineConfig cal1 = plain, cal = plain;
  cal1.speculative = SpeculativeConfig::make(SpecMethod::External, 1, 1, 1, /*adaptive=*/false);
  cal.speculative = SpeculativeConfig::make(SpecMethod::External, o.k, 1, 1, /*adaptive=*/false);
  std::vector<std::pair<std::string, EngineConfig>> cases{
      {"plain", plain}, {"calibration 1", cal1}, {"calibration", cal}};
  auto method = [&](SpecMethod m) {
    EngineConfig c = plain;
    c.speculative.method = m;
    c.speculative.num_speculative_tokens = o.k;
    c.speculative.adaptive = o.engine.speculative.adaptive;
    return c;
  };
  if (o.ngram) cases.push_back({"ngram", method(SpecMethod::Ngram)});
  if (o.suffix) cases.push_back({"suffix", method(SpecMethod::Suffix)});
  if (!o.draft_model.empty()) {
    cases.push_back({"draft", method(SpecMethod::Draft)});
    cases.back().second.speculative.draft_model = o.draft_model;
  }
  for (double a : o.replay_acceptance) {
    EngineConfig c = plain;
    c.speculative.adaptive = o.engine.speculative.adaptive;
    c.speculative.method = SpecMethod::External;
    c.speculative.num_speculative_tokens = o.k;
    cases.push_back({fmt::format("replay a={:.2f}", a), c});
  }

  std::vector<std::vector<int32_t>> ref;  // the plain run's continuations
  std::vector<ReplayProposer> replays;
  ReplayProposer never(o.prompts, ref, 0.0, n_vocab, o.seed);
  std::map<std::string, std::vector<Run>> runs;
  std::map<std::string, bool> same;
  Progress progress("bench spec", int64_t(o.runs) * int64_t(cases.size()), "runs");
  for (int r = 0; r < o.runs; ++r) {
    for (const auto& [name, cfg] : cases) {
      Proposer* ext = nullptr;
      if (name.starts_with("calibration")) ext = &never;
      for (size_t i = 0; i < o.replay_acceptance.size(); ++i)
        if (name == fmt::format("replay a={:.2f}", o.replay_acceptance[i])) ext = &replays[i];
      Run run = run_once(m, cfg, o, ext);
      if (ref.empty()) {
        ref = run.out;  // the first run is plain: what every other run must reproduce
        for (double a : o.replay_acceptance) replays.emplace_back(o.prompts, ref, a, n_vocab, o.seed);
      }
      same.try_emplace(name, true);
      same[name] = same[name] && run.out == ref;
      runs[name].push_back(std::move(run));
      progress.add(1);
    }
  }
  progress.finish();

  auto med = [&](const std::string& n, double Run::*f) {
    std::vector<double> v;
    for (const Run& r : runs[n]) v.push_back(r.*f);
    return median(v);
  };
  const double t_plain = med("plain", &Run::ms_per_step), rows_plain = med("plain", &Run::rows_per_step);
  const double t1 = med("calibration 1", &Run::ms_per_step), rows1 = med("calibration 1", &Run::spec_rows);
  const double tk = med("calibration", &Run::ms_per_step), rowsk = med("calibration", &Run::spec_rows);
  const double plain_rate = med("plain", &Run::tok_per_step) / t_plain;
  // Through the three measured points: from the plain batch to 1 draft per sequence, then
  // on to k (the first segment holds the first draft's extra cost; past it the step turns
  // compute-bound at its own pace).
  auto line = [&](double rows) {
    if (rows <= rows1) return rows1 > rows_plain ? t_plain + (t1 - t_plain) * (rows - rows_plain) / (rows1 - rows_plain) : t1;
    return rowsk > rows1 ? t1 + (tk - t1) * (rows - rows1) / (rowsk - rows1) : t1;
  };
  auto t_of = [&](const std::string& n) {
    const double share = med(n, &Run::spec_share);
    return (1 - share) * t_plain + (share > 0 ? share * line(med(n, &Run::spec_rows)) : 0) + med(n, &Run::propose_ms);
  };
  std::vector<SpecBenchRow> out;
  for (const auto& [name, cfg] : cases) {
    SpecBenchRow row;
    row.name = name == "calibration"     ? fmt::format("calibration: {} drafts, all wrong", o.k)
               : name == "calibration 1" ? std::string("calibration: 1 draft, wrong")
                                         : name;
    row.decode_tok_per_s = med(name, &Run::tok_per_s);
    row.plain_tok_per_s = med("plain", &Run::tok_per_s);
    row.speedup = row.decode_tok_per_s / row.plain_tok_per_s;
    row.acceptance = med(name, &Run::acceptance);
    row.tokens_per_step = med(name, &Run::tok_per_step);
    row.rows_per_step = med(name, &Run::rows_per_step);
    row.ms_per_step = med(name, &Run::ms_per_step);
    row.predicted_speedup = row.tokens_per_step / t_of(name) / plain_rate;
    row.same_output = same[name];
    out.push_back(row);
  }
  return out;
}

}  // namespace ridge::tools
