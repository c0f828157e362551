#include "engine/swap_space.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"

namespace ridge {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int64_t free_bytes(const std::string& dir) {
  struct statvfs st{};
  return ::statvfs(dir.c_str(), &st) == 0 ? int64_t(st.f_bavail) * int64_t(st.f_frsize) : -1;
}

}  // namespace

SwapFaults SwapFaults::parse(const std::string& spec) {
  SwapFaults f;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    RIDGE_CHECK(eq != std::string::npos, "swap fault spec item '{}' is not KEY=VALUE", item);
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(val.c_str(), &end);
    RIDGE_CHECK(!val.empty() && *end == 0, "swap fault spec value '{}' of {} is not a number", val, key);
    if (key == "seed") {
      f.seed = uint64_t(v);
      continue;
    }
    RIDGE_CHECK(v >= 0 && v <= 1, "swap fault probability {}={} is not in [0, 1]", key, val);
    if (key == "write") f.write = v;
    else if (key == "read") f.read = v;
    else if (key == "short") f.short_io = v;
    else if (key == "enospc") f.enospc = v;
    else fail("swap fault spec key '{}' is not one of write, read, short, enospc, seed", key);
  }
  return f;
}

SwapSpace::SwapSpace(const KVCache& kv, int64_t bytes, const std::string& dir, const SwapFaults& faults)
    : kv_(kv), faults_(faults), fault_rng_(faults.seed) {
  n_slots_ = bytes / kv.block_bytes();
  RIDGE_CHECK(n_slots_ > 0, "swap space of {} bytes holds no KV block ({} bytes each)", bytes, kv.block_bytes());
  std::string tmpl = dir + "/ridge-swap-XXXXXX";
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) fail("cannot create a swap file in {}: {}", dir, std::strerror(errno));
  ::unlink(tmpl.c_str());  // gone with the process, whatever happens
  // Reserve the blocks on disk now: a sparse file would run out of space mid-write under
  // load, long after the operator could have chosen another --swap-dir.
  const int64_t size = n_slots_ * kv.block_bytes();
  if (const int e = ::posix_fallocate(fd_, 0, size); e != 0) {
    ::close(fd_);
    fail("cannot reserve {:.1f} MiB of swap space in {}: {} ({:.1f} MiB free there); give a smaller --swap-space or "
         "another --swap-dir",
         double(size) / (1 << 20), dir, std::strerror(e), double(free_bytes(dir)) / (1 << 20));
  }
  for (int64_t s = n_slots_ - 1; s >= 0; --s) free_.push_back(s);
  bad_.assign(size_t(n_slots_), 0);
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

int64_t SwapSpace::n_io_errors() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_io_errors_;
}

void SwapSpace::note_rate(int64_t bytes, double seconds) {
  if (seconds <= 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  rate_ = 0.7 * rate_ + 0.3 * (double(bytes) / seconds);
}

ssize_t SwapSpace::io(bool write, uint8_t* p, size_t n, int64_t off) {
  if (faults_.any()) {
    double u, v;
    {
      std::lock_guard<std::mutex> lk(mu_);
      u = double(splitmix64(fault_rng_) >> 11) * 0x1p-53;
      v = double(splitmix64(fault_rng_) >> 11) * 0x1p-53;
    }
    const double p_fail = write ? faults_.write + faults_.enospc : faults_.read;
    if (u < p_fail) {
      errno = write && u < faults_.enospc ? ENOSPC : EIO;
      return -1;
    }
    if (v < faults_.short_io && n > 1) n = 1 + size_t(v / faults_.short_io * double(n - 1));
  }
  return write ? ::pwrite(fd_, p, n, off) : ::pread(fd_, p, n, off);
}

bool SwapSpace::write_slot(const uint8_t* p, int64_t slot) {
  const int64_t bb = kv_.block_bytes();
  int64_t off = slot * bb, left = bb;
  while (left > 0) {
    const ssize_t w = io(true, const_cast<uint8_t*>(p), size_t(left), off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;  // no progress on a regular file: no space
      return false;
    }
    p += w;
    off += w;
    left -= w;
  }
  return true;
}

bool SwapSpace::read_slot(uint8_t* p, int64_t slot) {
  const int64_t bb = kv_.block_bytes();
  int64_t off = slot * bb, got = 0;
  while (got < bb) {
    const ssize_t r = io(false, p + got, size_t(bb - got), off + got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;  // end of file: shorter than its reservation
      return false;
    }
    got += r;
  }
  return true;
}

std::vector<int64_t> SwapSpace::swap_out(std::span<const int32_t> blocks) {
  std::vector<int64_t> slots;
  {
    std::lock_guard<std::mutex> lk(mu_);
    RIDGE_CHECK(int64_t(free_.size()) >= int64_t(blocks.size()), "swap space full ({} blocks)", n_slots_);
    slots.assign(free_.end() - int64_t(blocks.size()), free_.end());
    std::reverse(slots.begin(), slots.end());  // the top of the stack first
  }
  swap_out_to(blocks, slots);
  return slots;
}

void SwapSpace::swap_out_to(std::span<const int32_t> blocks, std::span<const int64_t> slots) {
  RIDGE_CHECK(slots.size() == blocks.size(), "swap-out of {} blocks into {} slots", blocks.size(), slots.size());
  const KVLayout& l = kv_.layout();
  const int64_t kb = kv_.k_block_bytes(), vb = kv_.v_block_bytes(), bb = kv_.block_bytes();
  Job job;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<uint8_t> taken(size_t(n_slots_), 1);  // every slot is free and named once, or none is taken
    for (const int64_t s : free_) taken[size_t(s)] = 0;
    for (const int64_t s : slots) {
      RIDGE_CHECK(s >= 0 && s < n_slots_ && !taken[size_t(s)], "swap slot {} is not free (of {})", s, n_slots_);
      taken[size_t(s)] = 1;
    }
    for (const int64_t s : slots) {  // claimed: off the free list (from its top, as swap_out takes them)
      free_.erase(std::next(std::find(free_.rbegin(), free_.rend(), s)).base());
      job.slots.push_back(s);
    }
  }
  job.data.resize(size_t(bb) * blocks.size());
  const double t0 = now_s();
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint8_t* dst = job.data.data() + int64_t(i) * bb;
    for (int32_t layer = 0; layer < l.n_layer; ++layer) {
      std::memcpy(dst, kv_.k_tile(layer, blocks[i], 0), size_t(kb));
      if (vb > 0) std::memcpy(dst + kb, kv_.v_tile(layer, blocks[i], 0), size_t(vb));
      dst += kb + vb;
    }
  }
  note_rate(bb * int64_t(blocks.size()), now_s() - t0);
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
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
    int64_t n_bad = 0;
    int err = 0;
    for (size_t i = 0; i < job.slots.size(); ++i) {
      if (write_slot(job.data.data() + int64_t(i) * bb, job.slots[i])) continue;
      err = errno;
      ++n_bad;
      std::lock_guard<std::mutex> lk(mu_);
      bad_[size_t(job.slots[i])] = 1;
    }
    if (n_bad > 0)  // the sequence will be recomputed: a warning, not a failure
      std::fprintf(stderr, "ridge: swap write of %lld of %zu blocks failed (%s); their sequence will be recomputed\n",
                   (long long)n_bad, job.slots.size(), err ? std::strerror(err) : "no space");
    else
      note_rate(bb * int64_t(job.slots.size()), now_s() - t0);
    {
      std::lock_guard<std::mutex> lk(mu_);
      n_io_errors_ += n_bad;
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

void SwapSpace::wait_idle() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return jobs_.empty() && !busy_; });
}

bool SwapSpace::swap_in(std::span<const int64_t> slots, std::span<const int32_t> blocks) {
  RIDGE_ASSERT(slots.size() == blocks.size());
  wait_idle();  // the slots' writes may still be queued
  bool ok = true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (int64_t s : slots) ok = ok && !bad_[size_t(s)];
  }
  const KVLayout& l = kv_.layout();
  const int64_t kb = kv_.k_block_bytes(), vb = kv_.v_block_bytes(), bb = kv_.block_bytes();
  std::vector<uint8_t> buf(static_cast<size_t>(bb));
  const double t0 = now_s();
  for (size_t i = 0; ok && i < slots.size(); ++i) {
    if (!read_slot(buf.data(), slots[i])) {
      const int e = errno;
      std::fprintf(stderr, "ridge: swap read failed (%s); the sequence will be recomputed\n",
                   e ? std::strerror(e) : "short file");
      std::lock_guard<std::mutex> lk(mu_);
      ++n_io_errors_;
      ok = false;
      break;
    }
    const uint8_t* src = buf.data();
    for (int32_t layer = 0; layer < l.n_layer; ++layer) {
      std::memcpy(kv_.k_tile(layer, blocks[i], 0), src, size_t(kb));
      if (vb > 0) std::memcpy(kv_.v_tile(layer, blocks[i], 0), src + kb, size_t(vb));
      src += kb + vb;
    }
  }
  if (ok) note_rate(bb * int64_t(slots.size()), now_s() - t0);
  free(slots);
  return ok;
}

void SwapSpace::free(std::span<const int64_t> slots) {
  std::lock_guard<std::mutex> lk(mu_);
  for (int64_t s : slots) {
    bad_[size_t(s)] = 0;
    free_.push_back(s);
  }
}

}  // namespace ridge
