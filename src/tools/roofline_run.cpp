#include "tools/roofline_run.h"

#include <chrono>
#include <map>
#include <random>

#include "core/error.h"
#include "core/progress.h"
#include "engine/engine.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "perf/op_cost.h"

namespace ridge::tools {

using namespace ridge::perf;  // the instrumentation this tool reports on
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The type holding most of the layer weight bytes: what "q4_0 model" means.
std::string main_weight_type(const Model& m) {
  std::map<DType, int64_t> bytes;
  for (const LayerWeights& L : m.weights().layers)
    for (const kernels::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      bytes[w->type] += row_bytes(w->type, w->k) * w->n_out;
  DType best = DType::F32;
  int64_t most = -1;
  for (auto [t, b] : bytes)
    if (b > most) best = t, most = b;
  return std::string(dtype_name(best));
}

// Per-step averages of a phase's accumulated profile.
PhaseMeasure to_phase(const char* name, int32_t batch, const OpProfile& p, double wall_s) {
  PhaseMeasure ph;
  ph.phase = name;
  ph.batch = batch;
  ph.steps = p.steps();
  const double n = std::max<int64_t>(p.steps(), 1);
  ph.tokens = int64_t(double(p.tokens()) / n + 0.5);
  ph.step_seconds = p.step_seconds() / n;
  ph.wall_seconds = wall_s / n;
  for (int i = 0; i < int(Op::kCount); ++i) {
    const OpStat& s = p.op(Op(i));
    if (s.calls == 0) continue;
    ph.ops.push_back({std::string(op_name(Op(i))), s.cls, s.flops / n, s.bytes / n, s.seconds / n});
  }
  return ph;
}

}  // namespace

RooflineRun measure_roofline(const Model& m, const Tokenizer* tok, const Peaks& peaks, const RooflineOptions& o) {
  const HParams& h = m.hparams();
  RIDGE_CHECK(!o.batches.empty(), "--batch needs at least one batch size");
  for (int32_t b : o.batches) RIDGE_CHECK(b >= 1 && b <= 4096, "--batch {} is out of range (1..4096)", b);
  RIDGE_CHECK(o.prompt >= 1, "--prompt must be at least 1");
  RIDGE_CHECK(o.decode_steps >= 1, "--decode-steps must be at least 1");
  const int64_t per_seq = int64_t(o.prompt) + o.decode_steps + 1;
  if (h.n_ctx_train > 0 && per_seq > h.n_ctx_train)
    fail("--prompt {} + {} decode steps exceed the model's context of {} tokens", o.prompt, o.decode_steps, h.n_ctx_train);

  RooflineRun run;
  run.model = o.model_name;
  run.weight_type = main_weight_type(m);
  run.prompt = o.prompt;
  run.kv_dtype = std::string(dtype_name(o.engine.kv_dtype));
  run.block_size = o.engine.block_size;
  run.max_num_batched_tokens = o.engine.max_num_batched_tokens;
  run.peaks = peaks;
  std::mt19937_64 rng(o.seed);
  const int32_t hi = std::min<int32_t>(h.n_vocab, 32000);

  int64_t total_tokens = 0;
  for (int32_t batch : o.batches) {  // prompts, then decode_steps + prefill_steps + 1 tokens each (below)
    const int64_t mbt = std::max<int32_t>(o.engine.max_num_batched_tokens, batch);
    total_tokens += int64_t(batch) * (per_seq + (int64_t(batch) * o.prompt + mbt - 1) / mbt);
  }
  Progress progress("roofline: running the model", total_tokens, "tokens");
  for (int32_t batch : o.batches) {
    progress.set_detail(fmt::format("batch {}", batch));
    EngineConfig cfg = o.engine;
    cfg.max_num_seqs = batch;
    cfg.max_num_batched_tokens = std::max<int32_t>(o.engine.max_num_batched_tokens, batch);
    cfg.prefix_cache = false;  // every prompt computed: the phase measures the model, not the cache
    // Prompts finish their prefill a chunk apart, so the first ones start decoding early:
    // enough tokens that decode_steps steps run with every sequence decoding.
    const int64_t prefill_steps = (int64_t(batch) * o.prompt + cfg.max_num_batched_tokens - 1) / cfg.max_num_batched_tokens;
    const int64_t seq_tokens = per_seq + prefill_steps;
    const int32_t bs = cfg.block_size;
    const int64_t blocks = int64_t(batch) * ((seq_tokens + bs - 1) / bs) + 1;
    KVLayout kl = kv_layout_for(h, bs, 0, cfg.kv_dtype);
    cfg.kv_cache_bytes = blocks * bs * kl.bytes_per_token();
    Engine engine(m, tok, cfg);
    run.threads = engine.pool().size();

    RequestParams rp;
    rp.sampling.temperature = 0;
    rp.max_tokens = int32_t(o.decode_steps + prefill_steps + 1);
    rp.ignore_eos = true;
    for (int32_t s = 0; s < batch; ++s) {
      std::vector<int32_t> prompt(static_cast<size_t>(o.prompt));
      for (auto& t : prompt) t = int32_t(3 + rng() % uint64_t(std::max(hi - 3, 1)));
      engine.add_request(std::move(prompt), rp);
    }

    // Each step's profile lands in its phase: steps that carry prompt tokens are prefill,
    // steps of one token per sequence are decode.
    OpProfile prefill, decode;
    double prefill_wall = 0, decode_wall = 0;
    OpProfile& prof = engine.op_profile();
    prof.timing = true;
    while (engine.has_work()) {
      prof.reset();
      prof.timing = true;
      const double before_prefill = engine.stats().prefill_s, before_decode = engine.stats().decode_s;
      const auto t0 = Clock::now();
      const int64_t computed = engine.stats().computed_tokens;
      engine.step();
      const double wall = seconds_since(t0);
      progress.add(engine.stats().computed_tokens - computed);
      const double pf = engine.stats().prefill_s - before_prefill, dc = engine.stats().decode_s - before_decode;
      if (pf > 0) {
        prof.add_step(pf);
        prefill.merge(prof);
        prefill_wall += wall;
      } else if (dc > 0 && prof.tokens() == batch && decode.steps() < o.decode_steps) {
        // Only full-batch decode steps: the ramp and the tail would blur the batch size.
        prof.add_step(dc);
        decode.merge(prof);
        decode_wall += wall;
      }
    }
    prof.timing = false;
    run.phases.push_back(to_phase("prefill", batch, prefill, prefill_wall));
    run.phases.push_back(to_phase("decode", batch, decode, decode_wall));
  }
  return run;
}

}  // namespace ridge::tools
