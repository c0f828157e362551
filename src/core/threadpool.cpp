#include "core/threadpool.h"

#include <immintrin.h>

namespace ridge {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work(int thread) {
  for (;;) {
    const int64_t t = next_.fetch_add(1, std::memory_order_relaxed);
    if (t >= n_tasks_) break;
    fn_(ctx_, t, thread);
  }
}

void ThreadPool::run_impl(int64_t n_tasks, TaskFn fn, void* ctx) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    n_tasks_ = n_tasks;
    fn_ = fn;
    ctx_ = ctx;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  work(0);
  // Workers finish within microseconds when they have cores; on an oversubscribed
  // machine a worker may be descheduled, and spinning would only delay it further.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4096) _mm_pause();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker(int id) {
  uint64_t seen = 0;
  for (;;) {
    // Spin first: the next op usually starts within microseconds.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 8192; ++spin) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
      g = generation_.load();
      if (stop_) return;
    }
    seen = g;
    {
      // Reading the op's fields under the lock pairs with the writer in run_impl.
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
    }
    work(id);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

}  // namespace ridge
