// Tensor parallelism's control plane: rank 0 runs the engine (scheduler, sampling, HTTP)
// and sends every forward step to the other ranks, which run the same forward on their
// shards and meet rank 0 in its collectives (model/forward.h). What crosses is small: the
// setup once (the model's path and the options that shape the forward, the KV pool and
// the swap space, whose sizes rank 0 decides), then per step the batch (token ids,
// positions, block tables), and a swap message when rank 0 swaps a sequence out or in.
// The KV cache needs nothing else: each rank writes its heads' K/V in the forward, and the
// block tables rank 0's block manager keeps name the same blocks on every rank.
//
// Every message starts with a fixed header through Comm::broadcast_idle, so a worker
// waiting for the next step sleeps instead of spinning a core.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "dist/comm.h"
#include "engine/config.h"
#include "model/batch.h"

namespace ridge {

// What a worker needs to build its side of the model runner.
struct TpSetup {
  std::string model;     // the path every rank loads its shard of
  EngineConfig cfg;      // threads, KV dtype, block size, window pages, MLA form, mlock, swap dir and faults
  int64_t n_pages = 0;   // the KV pool rank 0 made (pages)
  int64_t n_swap_slots = 0;  // its swap space (blocks; 0: none)
  int32_t tp = 1, pp = 1;  // tensor parallel or pipeline parallel, over the world's ranks
};

// What a swap message does on every rank's swap space (engine/swap_space.h), with rank
// 0's choice of slots.
enum class SwapOp : int32_t { Out = 1, In = 2, Free = 3 };

// Rank 0's side.
void tp_send_setup(dist::Comm& c, const TpSetup& s);
// Returns once every worker has loaded its shard and made its pool (after the setup).
void tp_wait_ready(dist::Comm& c);
void tp_send_batch(dist::Comm& c, const Batch& b);
// A swap operation (blocks: the pool's pages, slots: the swap space's, as rank 0's chose
// them; Free has no blocks). After an In, every rank meets in tp_swap_in_agree.
void tp_send_swap(dist::Comm& c, SwapOp op, std::span<const int32_t> blocks, std::span<const int64_t> slots);
// Whether every rank read its share of a swap-in back (a failed read or an earlier failed
// write on any rank loses the block's K/V for all); every rank calls it after an In.
bool tp_swap_in_agree(dist::Comm& c, bool ok);
// Lets the workers go from the current setup (a runner's end): they free its model and
// wait for the next setup.
void tp_send_release(dist::Comm& c);
// Ends the workers (they exit with `code`): rank 0's exit. Once; later calls do nothing.
void tp_send_stop(dist::Comm& c, int code);

// A worker's whole life: waits for rank 0's setup, loads its shard, runs every step rank
// 0 sends until a release (then waits for the next setup) or the stop, and returns the
// exit status rank 0 sent. Its errors end the job
// (Comm::abort with the message).
// before_load runs after each setup arrives, before the shard is loaded, with rank 0's
// kernel cache directory (the command line's side: the cache rank 0 may just have written).
int run_tp_worker(dist::Comm& c, const std::function<void(const std::string&)>& before_load = {});

}  // namespace ridge
