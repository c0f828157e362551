// The next memory tier for preempted sequences on the CPU backend: KV blocks copied to a
// swap file (unlinked, in --swap-dir). Swap-out copies the blocks into a staging buffer
// at once (the blocks are reused by the very next forward pass) and a background thread
// writes it to the file; swap-in waits for writes still in flight, then reads the slots
// back. Measured rates feed the recompute-or-swap choice of --preemption-mode auto.
//
// The file's space is reserved (posix_fallocate) when the swap space is made, so a full
// disk is an error at start, not a lost write under load. I/O can still fail (EIO, a
// filesystem that lies about its reservation): a failed write marks its slots bad, and
// swap_in reports the sequence's KV lost instead of ending the process; the engine then
// recomputes that sequence. A slot's bad mark clears when the slot is freed.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

#include "model/kv_cache.h"

namespace ridge {

// Fault injection for tests (RIDGE_SWAP_FAULTS="write=P,read=P,short=P,enospc=P,seed=N"):
// each pwrite/pread fails with EIO (ENOSPC for writes drawn by `enospc`) with the given
// probability, or moves only part of its bytes (`short`).
struct SwapFaults {
  double write = 0, read = 0, short_io = 0, enospc = 0;
  uint64_t seed = 1;
  bool any() const { return write > 0 || read > 0 || short_io > 0 || enospc > 0; }
  static SwapFaults parse(const std::string& spec);  // throws ridge::Error on a bad spec
};

class SwapSpace {
 public:
  SwapSpace(const KVCache& kv, int64_t bytes, const std::string& dir, const SwapFaults& faults = {});
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  int64_t capacity_blocks() const { return n_slots_; }
  int64_t free_blocks() const;
  bool can_hold(int64_t n_blocks) const { return n_blocks <= free_blocks(); }

  // Copies `blocks` out (all layers, K and V); returns the slots that now hold them.
  std::vector<int64_t> swap_out(std::span<const int32_t> blocks);
  // As swap_out, into the given free slots (another rank's choice: a split model's ranks
  // keep their shares of a block at the same slot).
  void swap_out_to(std::span<const int32_t> blocks, std::span<const int64_t> slots);
  // Copies the slots back into `blocks` (same count) and frees the slots. False when a
  // write or read of any slot failed: the KV is lost and `blocks` hold garbage.
  [[nodiscard]] bool swap_in(std::span<const int64_t> slots, std::span<const int32_t> blocks);
  void free(std::span<const int64_t> slots);

  // Measured bandwidth of the copies (bytes/s, running average; a guess before any).
  double bytes_per_second() const;
  int64_t block_bytes() const { return kv_.block_bytes(); }
  int64_t n_io_errors() const;  // failed writes and reads so far

 private:
  struct Job {
    std::vector<uint8_t> data;  // [n][block_bytes]
    std::vector<int64_t> slots;
  };
  void writer();
  void wait_idle();
  void note_rate(int64_t bytes, double seconds);
  bool write_slot(const uint8_t* p, int64_t slot);  // false on an I/O error
  bool read_slot(uint8_t* p, int64_t slot);
  ssize_t io(bool write, uint8_t* p, size_t n, int64_t off);  // pwrite/pread with injected faults

  const KVCache& kv_;
  int fd_ = -1;
  int64_t n_slots_ = 0;
  std::vector<int64_t> free_;
  std::vector<uint8_t> bad_;  // [n_slots] 1: the slot's last write failed
  int64_t n_io_errors_ = 0;
  SwapFaults faults_;
  uint64_t fault_rng_ = 0;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> jobs_;
  bool busy_ = false, stop_ = false;
  double rate_ = 2e9;
  std::thread thread_;
};

}  // namespace ridge
