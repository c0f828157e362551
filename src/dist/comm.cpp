#include "dist/comm.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "core/error.h"

#if RIDGE_MPI
#include <mpi.h>
#endif

namespace ridge::dist {
namespace {

Comm g_world;
bool g_started = false;
int g_stderr = 2;  // the stderr this process started with (ranks > 0 write theirs to /dev/null)

#if RIDGE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    g_world.abort(1, fmt::format("{}: {}", what, std::string(msg, size_t(len))));
  }
}

int count32(int64_t n, const char* what) {
  if (n < 0 || n > int64_t(1 << 30) * 2 - 1) g_world.abort(1, fmt::format("{}: {} elements in one message", what, n));
  return int(n);
}
#endif

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

void init(int* argc, char*** argv) {
  if (g_started || !launched_by_mpi()) return;
#if RIDGE_MPI
  int provided = 0;
  // The engine's steps may run on a thread other than main's, one at a time.
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  g_started = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size_);
  if (provided < MPI_THREAD_SERIALIZED)
    g_world.abort(1, "this MPI library does not let a second thread make MPI calls (MPI_THREAD_SERIALIZED)");
  if (g_world.rank_ != 0) {
    g_stderr = ::dup(2);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1), ::dup2(null, 2), ::close(null);
  }
#else
  (void)argc, (void)argv;
  fail("started by an MPI launcher, but this ridge was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

Comm* world() { return g_started ? &g_world : nullptr; }

void finalize() {
#if RIDGE_MPI
  if (g_started) MPI_Finalize();
#endif
  g_started = false;
}

void Comm::abort(int code, const std::string& message) {
  if (!message.empty()) {
    const std::string line = fmt::format("ridge: rank {}: error: {}\n", rank_, message);
    [[maybe_unused]] const ssize_t n = ::write(g_stderr, line.data(), line.size());
  }
#if RIDGE_MPI
  if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

#if RIDGE_MPI
void Comm::all_reduce_sum(float* x, int64_t n) {
  if (size_ == 1) return;
  check(MPI_Allreduce(MPI_IN_PLACE, x, count32(n, "all-reduce"), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "all-reduce");
}

int64_t Comm::all_reduce_min(int64_t v) {
  if (size_ == 1) return v;
  long long x = v;
  check(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD), "all-reduce");
  return x;
}

void Comm::broadcast(void* bytes, int64_t n) {
  if (size_ == 1) return;
  check(MPI_Bcast(bytes, count32(n, "broadcast"), MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
}

void Comm::broadcast_idle(void* bytes, int64_t n) {
  if (size_ == 1) return;
  MPI_Request req;
  check(MPI_Ibcast(bytes, count32(n, "broadcast"), MPI_BYTE, 0, MPI_COMM_WORLD, &req), "broadcast");
  if (rank_ == 0) return check(MPI_Wait(&req, MPI_STATUS_IGNORE), "broadcast");
  // Poll, sleeping longer the longer the wait (up to a millisecond: a step's start is
  // late by at most that after an idle spell, and an idle worker costs no core).
  long ns = 20'000;
  for (int done = 0;;) {
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "broadcast");
    if (done) return;
    const timespec ts{0, ns};
    nanosleep(&ts, nullptr);
    if (ns < 1'000'000) ns *= 2;
  }
}

void Comm::gather(const float* x, std::span<const int64_t> counts, float* out) {
  if (size_ == 1) {
    std::copy(x, x + counts[0], out);
    return;
  }
  std::vector<int> cnt(static_cast<size_t>(size_)), off(static_cast<size_t>(size_));
  int64_t at = 0;
  for (int r = 0; r < size_; ++r) {
    cnt[size_t(r)] = count32(counts[size_t(r)], "gather");
    off[size_t(r)] = count32(at, "gather");
    at += counts[size_t(r)];
  }
  check(MPI_Gatherv(x, cnt[size_t(rank_)], MPI_FLOAT, out, cnt.data(), off.data(), MPI_FLOAT, 0, MPI_COMM_WORLD),
        "gather");
}
#else
// One process: every collective is the identity.
void Comm::all_reduce_sum(float*, int64_t) {}
int64_t Comm::all_reduce_min(int64_t v) { return v; }
void Comm::broadcast(void*, int64_t) {}
void Comm::broadcast_idle(void*, int64_t) {}
void Comm::gather(const float* x, std::span<const int64_t> counts, float* out) { std::copy(x, x + counts[0], out); }
#endif

}  // namespace ridge::dist
