// ThreadPool::run_ahead: every task once; a call's `next`, where it names one, is the task
// the same thread runs after it; the last tasks (one per thread) are claimed by whichever
// thread is free, so a thread's last call names none; for any thread and task count.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "core/threadpool.h"

namespace ridge {
namespace {

TEST(ThreadPool, RunAheadNamesEachThreadsNextTask) {
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
      ThreadPool pool(threads);
      std::mutex mu;
      std::vector<std::vector<std::pair<int64_t, int64_t>>> seen(static_cast<size_t>(threads));  // per thread: (task, next)
      pool.run_ahead(n, [&](int64_t task, int64_t next, int thread) {
        std::lock_guard<std::mutex> lk(mu);
        seen[size_t(thread)].emplace_back(task, next);
      });
      std::vector<int> runs(size_t(n), 0);
      for (const auto& calls : seen)
        for (size_t i = 0; i < calls.size(); ++i) {
          const auto [task, next] = calls[i];
          ASSERT_GE(task, 0);
          ASSERT_LT(task, n);
          ++runs[size_t(task)];
          if (next >= 0) {
            ASSERT_EQ(next, i + 1 < calls.size() ? calls[i + 1].first : -2) << threads << " threads, " << n << " tasks";
            ASSERT_GT(n - next, threads);  // only while more than one task per thread is left after it
          }
          if (i + 1 == calls.size()) {
            ASSERT_EQ(next, -1);
          }
        }
      for (int64_t t = 0; t < n; ++t) ASSERT_EQ(runs[size_t(t)], 1) << "task " << t << " of " << n;
      // Many tasks: most calls know their next.
      if (n == 1000) {
        int64_t named = 0;
        for (const auto& calls : seen)
          for (const auto& c : calls) named += c.second >= 0;
        ASSERT_GE(named, n - 2 * threads);
      }
    }
}

}  // namespace
}  // namespace ridge
