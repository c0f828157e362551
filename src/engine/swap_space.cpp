#include "engine/swap_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace ridge {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

SwapSpace::SwapSpace(const KVCache& kv, int64_t bytes, const std::string& dir) : kv_(kv) {
  n_slots_ = bytes / kv.block_bytes();
  RIDGE_CHECK(n_slots_ > 0, "swap space of {} bytes holds no KV block ({} bytes each)", bytes, kv.block_bytes());
  std::string tmpl = dir + "/ridge-swap-XXXXXX";
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) fail("cannot create a swap file in {}: {}", dir, std::strerror(errno));
  ::unlink(tmpl.c_str());  // gone with the process, whatever happens
  if (::ftruncate(fd_, n_slots_ * kv.block_bytes()) != 0) {
    const int e = errno;
    ::close(fd_);
    fail("cannot size the swap file in {} to {} bytes: {}", dir, n_slots_ * kv.block_bytes(), std::strerror(e));
  }
  for (int64_t s = n_slots_ - 1; s >= 0; --s) free_.push_back(s);
  thread_ = std::thread([this] { writer(); });
}

SwapSpace::~SwapSpace() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

int64_t SwapSpace::free_blocks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(free_.size());
}

double SwapSpace::bytes_per_second() const {
  std::lock_guard<std::mutex> lk(mu_);
  return rate_;
}

void SwapSpace::note_rate(int64_t bytes, double seconds) {
  if (seconds <= 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  rate_ = 0.7 * rate_ + 0.3 * (double(bytes) / seconds);
}

std::vector<int64_t> SwapSpace::swap_out(std::span<const int32_t> blocks) {
  const KVLayout& l = kv_.layout();
  const int64_t kb = kv_.k_block_bytes(), vb = kv_.v_block_bytes(), bb = kv_.block_bytes();
  Job job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    RIDGE_CHECK(int64_t(free_.size()) >= int64_t(blocks.size()), "swap space full ({} blocks)", n_slots_);
    for (size_t i = 0; i < blocks.size(); ++i) {
      job.slots.push_back(free_.back());
      free_.pop_back();
    }
  }
  job.data.resize(size_t(bb) * blocks.size());
  const double t0 = now_s();
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint8_t* dst = job.data.data() + int64_t(i) * bb;
    for (int32_t layer = 0; layer < l.n_layer; ++layer) {
      std::memcpy(dst, kv_.k_tile(layer, blocks[i], 0), size_t(kb));
      std::memcpy(dst + kb, kv_.v(layer, blocks[i], 0, 0), size_t(vb));
      dst += kb + vb;
    }
  }
  note_rate(bb * int64_t(blocks.size()), now_s() - t0);
  std::vector<int64_t> slots = job.slots;
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
  return slots;
}

void SwapSpace::writer() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    const int64_t bb = kv_.block_bytes();
    const double t0 = now_s();
    for (size_t i = 0; i < job.slots.size(); ++i) {
      const uint8_t* p = job.data.data() + int64_t(i) * bb;
      int64_t off = job.slots[i] * bb, left = bb;
      while (left > 0) {
        const ssize_t w = ::pwrite(fd_, p, size_t(left), off);
        if (w <= 0) {
          if (w < 0 && errno == EINTR) continue;
          std::fprintf(stderr, "ridge: swap write failed: %s\n", std::strerror(errno));
          std::abort();  // the KV would be lost silently otherwise
        }
        p += w;
        off += w;
        left -= w;
      }
    }
    note_rate(bb * int64_t(job.slots.size()), now_s() - t0);
    {
      std::lock_guard<std::mutex> lk(mu_);
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

void SwapSpace::wait_idle() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return jobs_.empty() && !busy_; });
}

void SwapSpace::swap_in(std::span<const int64_t> slots, std::span<const int32_t> blocks) {
  RIDGE_ASSERT(slots.size() == blocks.size());
  wait_idle();  // the slots' writes may still be queued
  const KVLayout& l = kv_.layout();
  const int64_t kb = kv_.k_block_bytes(), vb = kv_.v_block_bytes(), bb = kv_.block_bytes();
  std::vector<uint8_t> buf(static_cast<size_t>(bb));
  const double t0 = now_s();
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t off = slots[i] * bb, got = 0;
    while (got < bb) {
      const ssize_t r = ::pread(fd_, buf.data() + got, size_t(bb - got), off + got);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        fail("swap read failed: {}", r < 0 ? std::strerror(errno) : "short file");
      }
      got += r;
    }
    const uint8_t* src = buf.data();
    for (int32_t layer = 0; layer < l.n_layer; ++layer) {
      std::memcpy(kv_.k_tile(layer, blocks[i], 0), src, size_t(kb));
      std::memcpy(kv_.v(layer, blocks[i], 0, 0), src + kb, size_t(vb));
      src += kb + vb;
    }
  }
  note_rate(bb * int64_t(slots.size()), now_s() - t0);
  free(slots);
}

void SwapSpace::free(std::span<const int64_t> slots) {
  std::lock_guard<std::mutex> lk(mu_);
  for (int64_t s : slots) free_.push_back(s);
}

}  // namespace ridge
