// A persistent pool: threads are created once, each op hands out tasks through an atomic
// counter, and the caller's thread works too. Workers spin briefly between ops (ops in a
// forward pass follow each other within microseconds) and then sleep on a condvar.
// Tasks write disjoint outputs, so results never depend on which thread ran a task.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ridge {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread) for every task in [0, n_tasks); returns when all are done.
  template <typename F>
  void run(int64_t n_tasks, F&& fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
      for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
      return;
    }
    run_impl(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); },
             &fn);
  }

  // As run, with fn(task, next, thread): next is the task this thread runs after this one
  // (claimed before fn starts), or -1 where that is not known yet. A task can ask for the
  // next one's data while it works, so that one does not start on a cold cache. A thread
  // claims ahead only while more than a task per thread stays unclaimed after it: the last
  // tasks go to whichever thread is free, as in run, and a call of few tasks spreads over
  // the threads instead of going to the first thread awake.
  template <typename F>
  void run_ahead(int64_t n_tasks, F&& fn) {
    if (n_tasks <= 0) return;
    std::atomic<int64_t> next{0};
    const int64_t spare = n_threads_;
    run(n_threads_ < n_tasks ? n_threads_ : n_tasks, [&](int64_t, int thread) {
      for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < n_tasks;) {
        int64_t after = -1;
        for (int64_t c = next.load(std::memory_order_relaxed); n_tasks - c > spare;)
          if (next.compare_exchange_weak(c, c + 1, std::memory_order_relaxed)) {
            after = c;
            break;
          }
        fn(t, after, thread);
        t = after >= 0 ? after : next.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  // Splits [0, n) into contiguous ranges of about `grain` items: fn(begin, end, thread).
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (grain < 1) grain = 1;
    const int64_t tasks = (n + grain - 1) / grain;
    run(tasks, [&](int64_t t, int thread) {
      const int64_t b = t * grain, e = b + grain < n ? b + grain : n;
      fn(b, e, thread);
    });
  }

 private:
  using TaskFn = void (*)(void*, int64_t, int);
  void run_impl(int64_t n_tasks, TaskFn fn, void* ctx);
  void worker(int id);
  void work(int thread);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int64_t> next_{0};
  int64_t n_tasks_ = 0;
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;
};

int default_thread_count();

}  // namespace ridge
