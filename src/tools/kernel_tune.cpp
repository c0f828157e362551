#include "tools/kernel_tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "core/arena.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/threadpool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed.h"
#include "tools/bench_kernels.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

// The prefill chunk the tile rows are timed at (a 512-token prompt's).
constexpr int64_t kPrefillRows = 512;
using kernels::KernelTuning;
using kernels::TunableParam;

// One matrix in a ring of packed copies, for one FP8 layout.
struct Ring {
  DType type = DType::F32;
  int64_t k = 0, n_out = 0, bytes = 0, copies = 0;
  bool fp8_bf16 = false;
  std::unique_ptr<Arena> mem;
  kernels::WeightView view(int64_t c) const {
    const uint8_t* p = mem->data() + c * bytes;
    return {type, k, n_out, p, p, fp8_bf16};
  }
};

Ring make_ring(DType t, const KernelShape& s, int64_t ring_bytes, bool fp8_bf16) {
  Ring r;
  r.type = t;
  r.k = s.k;
  r.n_out = s.n_out;
  r.fp8_bf16 = fp8_bf16;
  const auto rows = random_rows(t, s.k, s.n_out, uint64_t(s.k * 131 + s.n_out));
  r.bytes = kernels::packed_bytes(t, s.k, s.n_out);
  r.copies = std::max<int64_t>(2, ring_bytes / r.bytes);
  r.mem = std::make_unique<Arena>(size_t(r.copies * r.bytes));
  kernels::pack_panels(t, s.k, s.n_out, rows.data(), r.mem->data(), 0, (s.n_out + kernels::kPanelRows - 1) / kernels::kPanelRows,
                       fp8_bf16);
  for (int64_t c = 1; c < r.copies; ++c) std::memcpy(r.mem->data() + c * r.bytes, r.mem->data(), size_t(r.bytes));
  return r;
}

class Tuner {
 public:
  Tuner(const TuneOptions& o) : opt_(o), pool_(o.threads > 0 ? o.threads : default_thread_count()) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    int64_t kmax = 0;
    for (const auto& s : shapes()) kmax = std::max(kmax, std::max(s.k, s.n_out));
    x_.resize(size_t(kPrefillRows * kmax));
    y_.resize(size_t(kPrefillRows * kmax));
    for (auto& v : x_) v = nd(rng);
  }

  std::vector<KernelShape> shapes() const {
    std::vector<KernelShape> out;
    for (const auto& s : preset_shapes(opt_.preset))
      if (s.name == "ffn_up" || s.name == "ffn_down") out.push_back(s);
    return out;
  }

  std::vector<int32_t> candidates_of(const TunableParam& p, DType t) const {
    return raced_candidates(p, kernels::default_tuning().of(t).*p.field, shapes(), pool_.size());
  }

  // Seconds of one pass over every ring at each of ms.
  double sample(const std::vector<Ring>& rings, const std::vector<int64_t>& ms) {
    const auto t0 = Clock::now();
    // Up to a decode batch every call streams its weights from DRAM; a prefill reuses
    // one copy from cache, as it does across its row tiles.
    // The matrices take turns, copy by copy, as a forward's do, rather than each ring
    // passing whole: a stream's start after another matrix's is part of what is timed.
    for (int64_t m : ms) {
      int64_t passes = 1;
      for (const Ring& r : rings) passes = std::max(passes, m <= 64 ? r.copies : 1);
      for (int64_t c = 0; c < passes; ++c)
        for (const Ring& r : rings)
          if (m > 64 ? c == 0 : c < r.copies) mm_.run(pool_, r.view(c), x_.data(), m, y_.data());
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // Candidates take turns (rotating order) for opt_.rounds rounds; set(i) applies
  // candidate i, sample_of(i, warm) times one sample of it (warm: the untimed first, to
  // size scratch and touch pages). Fills the trial's medians and wins and returns the
  // index chosen.
  template <class Set, class SampleOf>
  size_t race(TuneTrial& tr, size_t def, Set&& set, SampleOf&& sample_of) {
    const size_t n = tr.candidates.size();
    std::vector<std::vector<double>> s(n);
    for (size_t i = 0; i < n; ++i) {
      set(i);
      sample_of(i, true);
    }
    for (int r = 0; r < opt_.rounds; ++r)
      for (size_t j = 0; j < n; ++j) {
        const size_t i = (j + size_t(r)) % n;
        set(i);
        s[i].push_back(sample_of(i, false));
        progress_->add(1);
      }
    tr.median_us.assign(n, 0);
    tr.wins.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      auto v = s[i];
      std::sort(v.begin(), v.end());
      tr.median_us[i] = v[v.size() / 2] * 1e6;
      for (int r = 0; r < opt_.rounds; ++r) tr.wins[i] += s[i][size_t(r)] < s[def][size_t(r)];
    }
    size_t best = def;
    for (size_t i = 0; i < n; ++i)
      if (i != def && tr.median_us[i] < tr.median_us[def] * (1 - opt_.margin) && 3 * tr.wins[i] >= 2 * opt_.rounds &&
          tr.median_us[i] < tr.median_us[best])
        best = i;
    return best;
  }

  // The attention tile's keys (kernels::attention_tile_keys): a sample is kAttnSteps
  // decode steps of the preset's heads over 32 sequences of 2048 f16 positions (64 MiB
  // for TinyLlama's, past a 32 MiB last-level cache), blocks placed as the engine places
  // them.
  void race_attention_tile(TuneResult& res) {
    progress_->set_detail("attention");
    KernelBenchOptions ao;
    ao.preset = opt_.preset;
    ao.attn_seqs = 32;
    ao.attn_ctx = 2048;
    ao.attn_dtype = DType::F16;
    ao.attn_order = KernelBenchOptions::AttnOrder::Turns;
    AttnDecodeStep step(ao, pool_);
    TuneTrial tr;
    tr.type = DType::F16;
    tr.param = "attn_tile_keys";
    tr.ms = {ao.attn_seqs};
    tr.candidates.assign(std::begin(kernels::kAttnTileKeys), std::end(kernels::kAttnTileKeys));
    tr.default_value = kernels::kDefaultAttnTileKeys;
    const size_t def = size_t(std::find(tr.candidates.begin(), tr.candidates.end(), tr.default_value) - tr.candidates.begin());
    constexpr int kAttnSteps = 4;
    const size_t best = race(tr, def, [&](size_t i) { kernels::set_attention_tile_keys(tr.candidates[i]); },
                             [&](size_t, bool warm) {
                               const auto t0 = Clock::now();
                               for (int i = 0; i < (warm ? 1 : kAttnSteps); ++i) step.run();
                               return std::chrono::duration<double>(Clock::now() - t0).count();
                             });
    tr.chosen = tr.candidates[best];
    kernels::set_attention_tile_keys(tr.chosen);
    res.entry.attn_tile_keys = tr.chosen;
    res.trials.push_back(tr);
  }

  TuneResult run() {
    const auto t0 = Clock::now();
    TuneResult res;
    res.entry.threads = pool_.size();
    KernelTuning tn = kernels::default_tuning();
    kernels::set_kernel_tuning(tn);
    int64_t steps = 0;
    // FP8's convert_once applies on the f16c path only, which the path's race may choose
    // after this count: counted here, its samples are added when the race leaves bf16.
    const char* forced = std::getenv("RIDGE_FP8_PATH");
    const bool fp8_race = fp8_bf16_available() && !(forced && *forced);
    int64_t fp8_convert_steps = 0;
    for (DType t : opt_.types) {
      if (!kernels::gemm_available(t)) continue;
      for (const auto& p : kernels::tunable_params()) {
        const bool convert = t == DType::F8_E4M3_B128 && fp8_race && p.name == "convert_once";
        if (kernels::tunable_for(p, t) || convert) {
          const size_t n = candidates_of(p, t).size();
          if (n > 1) steps += int64_t(n) * opt_.rounds;
          if (n > 1 && convert) fp8_convert_steps = int64_t(n) * opt_.rounds;
        }
      }
      if (t == DType::F8_E4M3_B128 && fp8_race) steps += 2 * opt_.rounds;
    }
    // The attention tile with f16 among the types (its trial's), on the SIMD paths (the
    // ones with tiles, and with packed kernels: Q8_0's stands for them).
    const bool attention = std::find(opt_.types.begin(), opt_.types.end(), DType::F16) != opt_.types.end() &&
                           kernels::gemm_available(DType::Q8_0);
    if (attention) steps += int64_t(std::size(kernels::kAttnTileKeys)) * opt_.rounds;
    Progress progress("tune-kernels", steps, "samples");
    progress_ = &progress;
    if (attention) race_attention_tile(res);
    for (DType t : opt_.types) {
      if (!kernels::gemm_available(t)) {
        std::fprintf(stderr, "tune-kernels: no packed kernel for %s on this CPU path; skipped\n",
                     std::string(dtype_name(t)).c_str());
        continue;
      }
      progress.set_detail(std::string(dtype_name(t)));
      res.types.push_back(t);
      const bool fp8 = t == DType::F8_E4M3_B128;
      bool bf16 = fp8 && fp8_path() == Fp8Path::Bf16;
      std::vector<Ring> rings, other;
      for (const auto& s : shapes()) rings.push_back(make_ring(t, s, opt_.ring_bytes, bf16));
      // The FP8 path is raced unless RIDGE_FP8_PATH forces one.
      if (fp8 && fp8_race) {
        for (const auto& s : shapes()) other.push_back(make_ring(t, s, opt_.ring_bytes, !bf16));
        TuneTrial tr;
        tr.type = t;
        tr.param = "fp8_path";
        tr.ms = {1, 16};
        tr.candidates = {0, 1};
        tr.default_value = bf16 ? 1 : 0;
        const size_t def = size_t(tr.default_value);
        // candidate 1 reads the bf16-packed rings, which are `rings` when bf16 is the current path
        auto rings_of = [&](size_t i) -> const std::vector<Ring>& { return (i == 1) == bf16 ? rings : other; };
        const size_t best = race(tr, def, [](size_t) {}, [&](size_t i, bool warm) {
          return sample(rings_of(i), warm ? std::vector<int64_t>{tr.ms.front()} : tr.ms);
        });
        tr.chosen = tr.candidates[best];
        res.entry.fp8_path = tr.chosen ? Fp8Path::Bf16 : Fp8Path::F16c;
        if ((tr.chosen == 1) != bf16) {
          std::swap(rings, other);
          bf16 = tr.chosen == 1;
        }
        set_fp8_path(*res.entry.fp8_path);
        if (bf16) progress.add(fp8_convert_steps);  // convert_once does not apply there
        res.trials.push_back(tr);
        other.clear();
      }
      for (const TunableParam& p : kernels::tunable_params()) {
        if (!kernels::tunable_for(p, t)) continue;
        // A prefill chunk of a 32-block format runs on the AMX tiles, which have no
        // register tiles to size: the race would time noise.
        if (p.name == "tile_rows" && kernels::gemm_on_amx(t, kernels::kGemmRowChunk)) continue;
        TuneTrial tr;
        tr.type = t;
        tr.param = std::string(p.name);
        tr.ms = p.name == "batch_even" ? std::vector<int64_t>{9}
                : p.name == "batch_ahead" || p.name == "batch_streams" ? std::vector<int64_t>{9, 16}
                : p.name == "task_panels" ? std::vector<int64_t>{1}
                : p.name == "batch_task_panels" ? std::vector<int64_t>{16}
                : p.name == "tile_rows" || p.name == "convert_once" ? std::vector<int64_t>{kPrefillRows}
                                          : std::vector<int64_t>{1};
        tr.default_value = kernels::default_tuning().of(t).*p.field;
        tr.candidates = candidates_of(p, t);
        if (tr.candidates.size() < 2) continue;  // the default, nothing to race
        const size_t def =
            size_t(std::find(tr.candidates.begin(), tr.candidates.end(), tr.default_value) - tr.candidates.begin());
        auto set = [&](size_t i) {
          KernelTuning c = tn;
          c.of(t).*p.field = tr.candidates[i];
          kernels::set_kernel_tuning(c);
        };
        const size_t best = race(tr, def, set, [&](size_t, bool warm) {
          return sample(rings, warm ? std::vector<int64_t>{tr.ms.front()} : tr.ms);
        });
        tr.chosen = tr.candidates[best];
        tn.of(t).*p.field = tr.chosen;
        kernels::set_kernel_tuning(tn);
        res.trials.push_back(tr);
      }
    }
    // The types not timed follow their nearest timed sibling.
    auto timed = [&](DType t) { return std::find(opt_.types.begin(), opt_.types.end(), t) != opt_.types.end(); };
    const std::pair<DType, DType> like[] = {{DType::Q4_1, DType::Q4_0}, {DType::Q5_0, DType::Q4_0}, {DType::Q5_1, DType::Q4_0},
                                            {DType::MXFP4, DType::Q4_0}, {DType::Q5_K, DType::Q4_K}, {DType::F32, DType::F16},
                                            {DType::BF16, DType::F16}};
    for (const auto& [t, from] : like)
      if (!timed(t) && std::find(res.types.begin(), res.types.end(), from) != res.types.end()) {
        for (const auto& p : kernels::tunable_params())
          if (kernels::tunable_for(p, t)) tn.of(t).*p.field = tn.of(from).*p.field;
        res.types.push_back(t);
      }
    kernels::set_kernel_tuning(tn);
    res.entry.tuning = tn;
    res.entry.measured_at = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    res.entry.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    progress_ = nullptr;
    return res;
  }

 private:
  TuneOptions opt_;
  ThreadPool pool_;
  kernels::Matmul mm_;
  std::vector<float> x_, y_;
  Progress* progress_ = nullptr;
};

std::string candidate_name(const TuneTrial& tr, int32_t v) {
  if (tr.param == "fp8_path") return v ? "bf16" : "f16c";
  return std::to_string(v);
}

}  // namespace

std::vector<int32_t> raced_candidates(const TunableParam& p, int32_t default_value, const std::vector<KernelShape>& shapes,
                                      int threads) {
  if (p.name != "task_panels" && p.name != "batch_task_panels") return p.candidates;
  auto tasks = [&](int32_t c) {
    std::vector<int64_t> v;
    for (const auto& s : shapes)
      v.push_back(kernels::decode_panels_per_task((s.n_out + kernels::kPanelRows - 1) / kernels::kPanelRows, threads, c));
    return v;
  };
  std::vector<int32_t> out;
  for (int32_t c : p.candidates) {
    bool kept = true;
    for (int32_t o : p.candidates)  // o stands for c: the default, or else larger
      if (o != c && tasks(o) == tasks(c) && (o == default_value || (c != default_value && o > c))) kept = false;
    if (kept) out.push_back(c);
  }
  return out;
}

TuneOptions quick_tune_options(int threads) {
  TuneOptions o;
  o.threads = threads;
  o.rounds = 6;
  o.ring_bytes = int64_t(192) << 20;
  return o;
}

TunedEntry merge_tuned(const TunedEntry& old, const TuneResult& r) {
  TunedEntry e = r.entry;
  for (DType t : kernels::kTunedTypes)
    if (std::find(r.types.begin(), r.types.end(), t) == r.types.end()) {
      e.tuning.of(t) = old.tuning.of(t);
      e.tuner = std::min(e.tuner, old.tuner);  // kept values of an older tuner: still stale
    }
  if (!e.fp8_path) e.fp8_path = old.fp8_path;
  if (!e.attn_tile_keys) e.attn_tile_keys = old.attn_tile_keys;
  return e;
}

TuneResult tune_kernels(const TuneOptions& opt) {
  RIDGE_CHECK(opt.rounds >= 3, "tune-kernels: --rounds must be at least 3 (got {})", opt.rounds);
  RIDGE_CHECK(opt.ring_bytes >= (int64_t(16) << 20), "tune-kernels: a ring under 16 MiB would run from cache");
  return Tuner(opt).run();
}

std::string tune_report_text(const TuneResult& r) {
  std::string s = fmt::format("{:<6} {:<15} {:<6} {:<58} {:>7} {:>7}\n", "type", "parameter", "rows",
                              "candidates: median us per ring pass (wins vs default)", "default", "chosen");
  for (const auto& tr : r.trials) {
    std::string ms, cands;
    for (size_t i = 0; i < tr.ms.size(); ++i) ms += (i ? "," : "") + std::to_string(tr.ms[i]);
    for (size_t i = 0; i < tr.candidates.size(); ++i) {
      const bool def = tr.candidates[i] == tr.default_value;
      cands += fmt::format("{}{}: {:.0f}{} ", candidate_name(tr, tr.candidates[i]), def ? "*" : "", tr.median_us[i],
                           def ? "" : fmt::format(" ({})", tr.wins[i]));
    }
    s += fmt::format("{:<6} {:<15} {:<6} {:<58} {:>7} {:>7}\n", dtype_name(tr.type), tr.param, ms, cands,
                     candidate_name(tr, tr.default_value), candidate_name(tr, tr.chosen));
  }
  s += fmt::format("(* the default; a candidate replaces it when its median is faster by the margin and it won at least "
                   "two thirds of the rounds; tuned in {:.1f} s on {} threads)\n",
                   r.entry.seconds, r.entry.threads);
  return s;
}

std::string tune_report_json(const TuneResult& r) {
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& tr : r.trials)
    trials.push_back({{"type", dtype_name(tr.type)}, {"param", tr.param}, {"rows", tr.ms}, {"candidates", tr.candidates},
                      {"median_us", tr.median_us}, {"wins", tr.wins}, {"default", tr.default_value}, {"chosen", tr.chosen}});
  return nlohmann::json({{"cpu", kernel_cpu_id()}, {"threads", r.entry.threads}, {"seconds", r.entry.seconds}, {"trials", trials}})
      .dump(1);
}

}  // namespace ridge
