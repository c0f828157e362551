// The next memory tier for preempted sequences on the CPU backend: KV blocks copied to a
// swap file (unlinked, in --swap-dir). Swap-out copies the blocks into a staging buffer
// at once (the blocks are reused by the very next forward pass) and a background thread
// writes it to the file; swap-in waits for writes still in flight, then reads the slots
// back. Measured rates feed the recompute-or-swap choice of --preemption-mode auto.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/kv_cache.h"

namespace ridge {

class SwapSpace {
 public:
  SwapSpace(const KVCache& kv, int64_t bytes, const std::string& dir);
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  int64_t capacity_blocks() const { return n_slots_; }
  int64_t free_blocks() const;
  bool can_hold(int64_t n_blocks) const { return n_blocks <= free_blocks(); }

  // Copies `blocks` out (all layers, K and V); returns the slots that now hold them.
  std::vector<int64_t> swap_out(std::span<const int32_t> blocks);
  // Copies the slots back into `blocks` (same count) and frees the slots.
  void swap_in(std::span<const int64_t> slots, std::span<const int32_t> blocks);
  void free(std::span<const int64_t> slots);

  // Measured bandwidth of the copies (bytes/s, running average; a guess before any).
  double bytes_per_second() const;
  int64_t block_bytes() const { return kv_.block_bytes(); }

 private:
  struct Job {
    std::vector<uint8_t> data;  // [n][block_bytes]
    std::vector<int64_t> slots;
  };
  void writer();
  void wait_idle();
  void note_rate(int64_t bytes, double seconds);

  const KVCache& kv_;
  int fd_ = -1;
  int64_t n_slots_ = 0;
  std::vector<int64_t> free_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> jobs_;
  bool busy_ = false, stop_ = false;
  double rate_ = 2e9;
  std::thread thread_;
};

}  // namespace ridge
