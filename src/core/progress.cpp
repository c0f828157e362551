#include "core/progress.h"

#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_quiet{false};

constexpr double kFirstDraw = 0.5;  // seconds before anything is drawn
constexpr double kTtyEvery = 0.1;
constexpr double kLogEvery = 5.0;

std::string amount(int64_t n, const std::string& unit) {
  if (unit != "B") return fmt::format("{}", n);
  const double v = double(n);
  return v >= double(int64_t(1) << 30) ? fmt::format("{:.2f} GiB", v / double(int64_t(1) << 30))
                                      : fmt::format("{:.0f} MiB", v / double(1 << 20));
}

std::string duration(double s) {
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

}  // namespace

Progress::Progress(std::string what, int64_t total, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), t0_(Clock::now()), last_(t0_),
      tty_(::isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

void Progress::set_quiet(bool q) { g_quiet.store(q); }
bool Progress::quiet() { return g_quiet.load(); }

void Progress::set(int64_t done) {
  done_.store(done, std::memory_order_relaxed);
  maybe_draw(false);
}

void Progress::add(int64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  maybe_draw(false);
}

void Progress::set_detail(const std::string& detail) {
  std::lock_guard lk(mu_);
  detail_ = detail;
}

std::string Progress::line() const {
  const int64_t done = done_.load(std::memory_order_relaxed);
  const double s = std::chrono::duration<double>(Clock::now() - t0_).count();
  std::string l = what_ + "  " + amount(done, unit_);
  if (total_ > 0) l += "/" + amount(total_, unit_);
  if (unit_ != "B") l += " " + unit_;
  {
    std::lock_guard lk(mu_);
    if (!detail_.empty()) l += "  " + detail_;
  }
  if (s > 0 && done > 0) {
    const double rate = double(done) / s;
    l += unit_ == "B" ? fmt::format("  {:.0f} MiB/s", rate / double(1 << 20))
                      : fmt::format("  {:.{}f} {}/s", rate, rate < 10 ? 1 : 0, unit_);
    if (total_ > done) l += "  " + duration(double(total_ - done) / rate) + " left";
  }
  return l;
}

void Progress::maybe_draw(bool force) {
  if (g_quiet.load(std::memory_order_relaxed)) return;
  const auto now = Clock::now();
  std::unique_lock lk(mu_, std::try_to_lock);  // another thread drawing: skip this update
  if (!lk.owns_lock() || finished_) return;
  const double since_start = std::chrono::duration<double>(now - t0_).count();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (!force) {
    if (since_start < (tty_ ? kFirstDraw : kLogEvery)) return;
    if (drawn_ && since_last < (tty_ ? kTtyEvery : kLogEvery)) return;
  }
  last_ = now;
  lk.unlock();
  const std::string l = line();
  if (tty_) std::fprintf(stderr, "\r\033[K%s", l.c_str());
  else std::fprintf(stderr, "%s\n", l.c_str());
  std::fflush(stderr);
  lk.lock();
  drawn_ = true;
}

void Progress::finish() {
  std::lock_guard lk(mu_);
  if (finished_) return;
  finished_ = true;
  if (!drawn_ || g_quiet.load()) return;
  if (tty_) {
    std::fputs("\r\033[K", stderr);
  } else {  // a log keeps how the work ended
    const double s = std::chrono::duration<double>(Clock::now() - t0_).count();
    const std::string n = amount(done_.load(), unit_) + (unit_ == "B" ? "" : " " + unit_);
    std::fprintf(stderr, "%s: %s in %s\n", what_.c_str(), n.c_str(), duration(s).c_str());
  }
  std::fflush(stderr);
}

}  // namespace ridge
