#include "engine/tp_worker.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/threadpool.h"
#include "engine/swap_space.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "perf/tracer.h"

namespace ridge {
namespace {

enum class Msg : int32_t { Setup = 1, Step = 2, Release = 3, Stop = 4, Swap = 5 };

// The fixed part of every message; the payload's size follows from it.
struct Header {
  Msg msg = Msg::Stop;
  // Step: tokens, sequences, block table entries; Stop: the exit status; Swap: the op,
  // blocks, slots.
  int32_t a = 0, b = 0, c = 0;
  int64_t bytes = 0;            // Setup: the JSON's bytes
};

bool g_stopped = false;

void send_header(dist::Comm& c, Header h) { c.broadcast_idle(&h, sizeof h); }

// A step's ints: the tokens, then per sequence (n_tokens, pos0, logits, expand_until,
// table entries), then the tables one after another.
constexpr int32_t kSeqInts = 5;

}  // namespace

void tp_wait_ready(dist::Comm& c) { c.barrier_idle(); }

void tp_send_setup(dist::Comm& c, const TpSetup& s) {
  const nlohmann::json j = {{"model", s.model},
                            {"threads", s.cfg.threads},
                            {"kv_dtype", int(s.cfg.kv_dtype)},
                            {"block_size", s.cfg.block_size},
                            {"swa_full", s.cfg.swa_full},
                            {"mlock", s.cfg.mlock},
                            {"n_pages", s.n_pages},
                            {"n_swap_slots", s.n_swap_slots},
                            {"swap_dir", s.cfg.swap_dir},
                            {"swap_faults", s.cfg.swap_faults},
                            {"tp", s.tp},
                            {"expert_parallel", s.cfg.expert_parallel},
                            {"kernel_cache", s.cfg.kernel_cache},
                            {"pp", s.pp},
                            {"trace", perf::trace_path()},
                            {"trace_origin", perf::trace_origin_ns()}};
  std::string text = j.dump();
  send_header(c, {Msg::Setup, 0, 0, 0, int64_t(text.size())});
  c.broadcast(text.data(), int64_t(text.size()));
}

void tp_send_batch(dist::Comm& c, const Batch& b) {
  std::vector<int32_t> ints(b.tokens);
  int32_t entries = 0;
  for (const SeqSlice& s : b.seqs) {
    ints.insert(ints.end(), {s.n_tokens, s.pos0, int32_t(s.logits), s.expand_until, int32_t(s.block_table.size())});
    entries += int32_t(s.block_table.size());
  }
  for (const SeqSlice& s : b.seqs) ints.insert(ints.end(), s.block_table.begin(), s.block_table.end());
  send_header(c, {Msg::Step, int32_t(b.tokens.size()), int32_t(b.seqs.size()), entries, 0});
  c.broadcast(ints.data(), int64_t(ints.size() * sizeof(int32_t)));
}

void tp_send_swap(dist::Comm& c, SwapOp op, std::span<const int32_t> blocks, std::span<const int64_t> slots) {
  std::vector<int64_t> v(blocks.begin(), blocks.end());
  v.insert(v.end(), slots.begin(), slots.end());
  send_header(c, {Msg::Swap, int32_t(op), int32_t(blocks.size()), int32_t(slots.size()), 0});
  c.broadcast(v.data(), int64_t(v.size() * sizeof(int64_t)));
}

bool tp_swap_in_agree(dist::Comm& c, bool ok) {
  float failed = ok ? 0.f : 1.f;  // ranks whose share is lost
  c.all_reduce_sum(&failed, 1);
  return failed == 0.f;
}

void tp_send_stop(dist::Comm& c, int code) {
  if (g_stopped) return;
  g_stopped = true;
  send_header(c, {Msg::Stop, code, 0, 0, 0});
}

namespace {

// One setup's model, pool and forward, running rank 0's steps until it lets them go.
// Returns the exit status on a stop, -1 on a release.
int serve_setup(dist::Comm& c, const std::string& text, const std::function<void(const std::string&)>& before_load) {
  const nlohmann::json j = nlohmann::json::parse(text);
  EngineConfig cfg;
  cfg.threads = j.at("threads").get<int>();
  cfg.kv_dtype = DType(j.at("kv_dtype").get<int>());
  cfg.block_size = j.at("block_size").get<int32_t>();
  cfg.swa_full = j.at("swa_full").get<bool>();
  cfg.mlock = j.at("mlock").get<bool>();
  const int64_t n_pages = j.at("n_pages").get<int64_t>();
  // Rank 0 traces: this rank too, into FILE.rankN.json on rank 0's time axis (one machine's
  // clock), its ops on a track of its own.
  struct TraceGuard {
    bool on = false;
    ~TraceGuard() {
      if (on) perf::trace_stop();
    }
  } trace;
  if (std::string path = j.at("trace").get<std::string>(); !path.empty()) {
    const std::string rank = fmt::format(".rank{}", c.rank());
    path = path.size() > 5 && path.ends_with(".json") ? path.insert(path.size() - 5, rank) : path + rank;
    perf::TraceOptions o;
    o.origin_ns = j.at("trace_origin").get<int64_t>();
    o.process_name = fmt::format("ridge rank {}", c.rank());
    perf::trace_start(path, o);
    trace.on = true;
    perf::trace_thread_name(fmt::format("rank {}", c.rank()));
  }

  // The grid first: its split is a collective rank 0 makes right after the setup.
  const dist::Ranks ranks(c, j.at("tp").get<int32_t>(), j.at("pp").get<int32_t>());
  const dist::Grid& grid = ranks.grid();
  if (before_load) before_load(j.at("kernel_cache").get<std::string>());
  TpShard tp;
  PpStage pp;
  if (grid.tp > 1) tp = {grid.tp_rank, grid.tp, j.at("expert_parallel").get<bool>()};
  if (grid.pp > 1) pp.stage = grid.stage, pp.size = grid.pp;
  const std::unique_ptr<Model> m = Model::load(j.at("model").get<std::string>(), true, tp, pp);
  if (cfg.mlock) m->lock_in_memory();
  ThreadPool pool(cfg.threads > 0 ? cfg.threads : dist::default_threads());  // -t as given to rank 0, else this rank's own
  const std::unique_ptr<kernels::Backend> be = kernels::make_cpu_backend(pool);
  KVLayout kl = kv_layout_for(m->hparams(), cfg.block_size, 0, cfg.kv_dtype);
  const KvGroups g = kv_groups_for(m->hparams(), !cfg.swa_full, m->pp_stage().stage, m->pp_stage().size);
  kl.n_layer = g.slots;
  kl.n_blocks = int32_t(n_pages);
  KVCache kv(kl, g, be.get());
  // The swap space: as many slots as rank 0's, each of this rank's share of a block.
  // Injected faults (tests) draw from a seed of this rank's, so that ranks fail at
  // different points and the swap-in's agreement is tested.
  std::unique_ptr<SwapSpace> swap;
  if (const int64_t slots = j.at("n_swap_slots").get<int64_t>(); slots > 0) {
    SwapFaults faults = SwapFaults::parse(j.at("swap_faults").get<std::string>());
    faults.seed += uint64_t(c.rank()) * 0x9e3779b97f4a7c15ull;
    swap = std::make_unique<SwapSpace>(kv, slots * kv.block_bytes(), j.at("swap_dir").get<std::string>(), faults);
  }
  Forward fwd(*m, kv, *be, &ranks);
  c.barrier_idle();  // ready: rank 0's runner waits for every shard before its first step

  Header h;
  Batch b;
  std::vector<int32_t> ints, tables;
  for (;;) {
    c.broadcast_idle(&h, sizeof h);
    if (h.msg == Msg::Stop) return h.a;
    if (h.msg == Msg::Release) return -1;
    if (h.msg == Msg::Swap) {
      std::vector<int64_t> v(size_t(h.b) + size_t(h.c));
      c.broadcast(v.data(), int64_t(v.size() * sizeof(int64_t)));
      if (!swap) c.abort(1, "a swap operation from rank 0, but this rank has no swap space");
      const std::vector<int32_t> blocks(v.begin(), v.begin() + h.b);
      const std::span<const int64_t> slots(v.data() + h.b, size_t(h.c));
      switch (SwapOp(h.a)) {
        case SwapOp::Out: swap->swap_out_to(blocks, slots); break;
        case SwapOp::In: tp_swap_in_agree(c, swap->swap_in(slots, blocks)); break;
        case SwapOp::Free: swap->free(slots); break;
        default: c.abort(1, "a swap message from rank 0 of no known kind");
      }
      continue;
    }
    if (h.msg != Msg::Step) c.abort(1, "a message from rank 0 that is no step");
    const int64_t n = int64_t(h.a) + int64_t(h.b) * kSeqInts + h.c;
    ints.resize(size_t(n));
    c.broadcast(ints.data(), n * int64_t(sizeof(int32_t)));
    // The batch's tables are spans into `tables`, filled before any span is made.
    tables.assign(ints.begin() + h.a + int64_t(h.b) * kSeqInts, ints.end());
    b.tokens.assign(ints.begin(), ints.begin() + h.a);
    b.seqs.clear();
    int64_t at = 0;
    for (int32_t i = 0; i < h.b; ++i) {
      const int32_t* s = ints.data() + h.a + int64_t(i) * kSeqInts;
      b.seqs.push_back({s[0], s[1], std::span<const int32_t>(tables).subspan(size_t(at), size_t(s[4])), Logits(s[2]), s[3]});
      at += s[4];
    }
    fwd.run(b);
  }
}

}  // namespace

void tp_send_release(dist::Comm& c) {
  if (!g_stopped) send_header(c, {Msg::Release, 0, 0, 0, 0});
}

int run_tp_worker(dist::Comm& c, const std::function<void(const std::string&)>& before_load) {
  for (;;) {
    Header h;
    c.broadcast_idle(&h, sizeof h);
    if (h.msg == Msg::Stop) return h.a;
    if (h.msg != Msg::Setup) c.abort(1, "a message from rank 0 that is no setup");
    std::string text(size_t(h.bytes), '\0');
    c.broadcast(text.data(), h.bytes);
    if (const int code = serve_setup(c, text, before_load); code >= 0) return code;
  }
}

}  // namespace ridge
