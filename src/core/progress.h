// Progress of long work (loading, quantizing, making a model, perplexity, roofline,
// benchmarks) on stderr, so seconds to minutes of work are never silent:
//   a terminal: one line redrawn in place at most every 100 ms,
//     "packing weights  45/155 tensors  300/555 MiB  120 MiB/s  2 s left"
//   anything else (a log, a pipe): a plain line at most every 5 s, and none at all for
//     work that ends within the first 5 s;
//   quiet (`--quiet`, or set_quiet): nothing.
// Work shorter than half a second never draws, so fast commands and tests stay clean.
// One Progress is driven by one thread; add() may be called from any thread.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace ridge {

class Progress {
 public:
  // total: the count of `unit` (0: unknown, no "of N" or time left). unit "B" prints
  // bytes as MiB/GiB; any other unit is printed after the count ("tensors", "tokens").
  Progress(std::string what, int64_t total, std::string unit);
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set(int64_t done);
  void add(int64_t n);
  // A second figure shown beside the count, e.g. the bytes of the tensors counted.
  void set_detail(const std::string& detail);
  // Ends the line: on a terminal it is cleared (the command prints its own result).
  void finish();

  static void set_quiet(bool quiet);
  static bool quiet();

  // The line as drawn now (tests).
  std::string line() const;

 private:
  void maybe_draw(bool force);

  std::string what_, unit_, detail_;
  int64_t total_;
  std::atomic<int64_t> done_{0};
  std::chrono::steady_clock::time_point t0_, last_;
  bool drawn_ = false, finished_ = false, tty_ = false;
  mutable std::mutex mu_;
};

}  // namespace ridge
