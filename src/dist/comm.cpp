#include "dist/comm.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
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

// The watchdog: a collective that waits longer than the timeout for the other ranks ends
// the job (a rank that died is mpirun's to notice; one that hangs, stopped or looping,
// is this). The idle wait for rank 0's next message is no collective in flight.
std::atomic<int64_t> g_since_ns{0};  // when the collective in flight began; 0: none
std::atomic<const char*> g_what{""};
int64_t g_timeout_ns = 0;

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

struct InFlight {
  explicit InFlight(const char* what) {
    g_what.store(what, std::memory_order_relaxed);
    g_since_ns.store(now_ns(), std::memory_order_release);
  }
  ~InFlight() { g_since_ns.store(0, std::memory_order_release); }
};

void start_watchdog() {
  double s = 600;
  if (const char* e = std::getenv("RIDGE_TP_TIMEOUT")) {
    char* end = nullptr;
    s = std::strtod(e, &end);
    if (end == e || *end || !(s > 0)) g_world.abort(1, fmt::format("RIDGE_TP_TIMEOUT={} is not a positive number of seconds", e));
  }
  g_timeout_ns = int64_t(s * 1e9);
  std::thread([s] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const int64_t t0 = g_since_ns.load(std::memory_order_acquire);
      if (t0 != 0 && now_ns() - t0 > g_timeout_ns) {
        // Not MPI_Abort: the main thread is inside MPI. A rank that exits without
        // finalizing makes mpirun end the others.
        const std::string line =
            fmt::format("ridge: rank {}: error: the {} has waited {:g} s for the other ranks (RIDGE_TP_TIMEOUT): one "
                        "is not answering; ending the job\n",
                        g_world.rank(), g_what.load(std::memory_order_relaxed), s);
        [[maybe_unused]] const ssize_t n = ::write(g_stderr, line.data(), line.size());
        std::_Exit(1);
      }
    }
  }).detach();
}

#if RIDGE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    g_world.abort(1, fmt::format("{}: {}", what, std::string(msg, size_t(len))));
  }
}

// Waits for req by polling, sleeping longer the longer the wait (up to a millisecond: a
// step's start is late by at most that after an idle spell, and an idle rank costs no core).
void wait_sleeping(MPI_Request& req, const char* what) {
  long ns = 20'000;
  for (int done = 0;;) {
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    const timespec ts{0, ns};
    nanosleep(&ts, nullptr);
    if (ns < 1'000'000) ns *= 2;
  }
}

MPI_Comm mpi_comm(int64_t handle) {
  if (handle == 0) return MPI_COMM_WORLD;
  MPI_Comm c;
  static_assert(sizeof(MPI_Comm) <= sizeof(int64_t));
  std::memcpy(&c, &handle, sizeof c);
  return c;
}

int count32(int64_t n, const char* what) {
  if (n < 0 || n > int64_t(1 << 30) * 2 - 1) g_world.abort(1, fmt::format("{}: {} elements in one message", what, n));
  return int(n);
}
#endif

}  // namespace

bool launched_by_mpi() {
  // A launcher of more than one process (mpirun -np 1, or a scheduler's single task, is
  // one process: no MPI needed). Slurm's srun with PMIx says PMIX_RANK and its task count.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* n = std::getenv(v); n && std::atoi(n) > 1) return true;
  const char* tasks = std::getenv("SLURM_NTASKS");
  return std::getenv("PMIX_RANK") && tasks && std::atoi(tasks) > 1;
}

int default_threads() {
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : hw;
  if (mine < hw) return std::max(1, mine);  // bound by the launcher (or taskset): its cores
  return std::max(1, hw / local_ranks());
}

int local_ranks() {
  const char* n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return g_started && n && std::atoi(n) > 0 ? std::atoi(n) : g_world.size();
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
  if (g_world.size_ > 1) start_watchdog();
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

Ranks::Ranks(Comm& world, int32_t tp, int32_t pp) : grid_(Grid::of(world.rank(), tp, pp)), world_(&world), tp_(&world) {
  RIDGE_CHECK(tp >= 1 && pp >= 1 && world.size() == tp * pp, "{} ranks are no grid of {} x {}", world.size(), tp, pp);
  if (tp > 1 && pp > 1) {
    stage_ = world.split(grid_.stage);
    tp_ = stage_.get();
    RIDGE_CHECK(tp_->size() == tp && tp_->rank() == grid_.tp_rank, "a stage's communicator is not its grid row");
  }
}

void Comm::abort(int code, const std::string& message) {
  if (!message.empty()) {
    const std::string line = fmt::format("ridge: rank {}: error: {}\n", g_world.rank(), message);
    [[maybe_unused]] const ssize_t n = ::write(g_stderr, line.data(), line.size());
  }
#if RIDGE_MPI
  if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

#if RIDGE_MPI
Comm::~Comm() {
  int done = 0;
  if (handle_ != 0 && (MPI_Finalized(&done), !done)) {
    MPI_Comm c = mpi_comm(handle_);
    MPI_Comm_free(&c);
  }
}

std::unique_ptr<Comm> Comm::split(int color) {
  auto out = std::make_unique<Comm>();
  MPI_Comm c;
  {
    const InFlight f("split of the ranks");
    check(MPI_Comm_split(mpi_comm(handle_), color, rank_, &c), "split of the ranks");
  }
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c, &out->rank_);
  MPI_Comm_size(c, &out->size_);
  std::memcpy(&out->handle_, &c, sizeof c);
  return out;
}

void Comm::all_reduce_sum(float* x, int64_t n) {
  if (size_ == 1) return;
  const InFlight f("all-reduce");
  check(MPI_Allreduce(MPI_IN_PLACE, x, count32(n, "all-reduce"), MPI_FLOAT, MPI_SUM, mpi_comm(handle_)), "all-reduce");
}

void Comm::broadcast(void* bytes, int64_t n) {
  if (size_ == 1) return;
  const InFlight f("broadcast");
  check(MPI_Bcast(bytes, count32(n, "broadcast"), MPI_BYTE, 0, mpi_comm(handle_)), "broadcast");
}

void Comm::broadcast_idle(void* bytes, int64_t n) {
  if (size_ == 1) return;
  MPI_Request req;
  check(MPI_Ibcast(bytes, count32(n, "broadcast"), MPI_BYTE, 0, mpi_comm(handle_), &req), "broadcast");
  if (rank_ == 0) {
    const InFlight f("broadcast of a step");
    return check(MPI_Wait(&req, MPI_STATUS_IGNORE), "broadcast");
  }
  wait_sleeping(req, "broadcast");
}

void Comm::send(int to, const float* x, int64_t n) {
  const InFlight f("send to the next stage");
  check(MPI_Send(x, count32(n, "send"), MPI_FLOAT, to, 0, mpi_comm(handle_)), "send");
}

void Comm::recv(int from, float* x, int64_t n) {
  const InFlight f("receive from another stage");
  check(MPI_Recv(x, count32(n, "receive"), MPI_FLOAT, from, 0, mpi_comm(handle_), MPI_STATUS_IGNORE), "receive");
}

void Comm::post_recv(int from, float* x, int64_t n) {
  MPI_Request r;
  check(MPI_Irecv(x, count32(n, "receive"), MPI_FLOAT, from, 0, mpi_comm(handle_), &r), "receive");
  static_assert(sizeof(MPI_Request) <= sizeof(int64_t));
  int64_t v = 0;
  std::memcpy(&v, &r, sizeof r);
  pending_.push_back(v);
}

void Comm::wait_all() {
  const InFlight f("receive of the logits");
  for (const int64_t v : pending_) {
    MPI_Request r;
    std::memcpy(&r, &v, sizeof r);
    check(MPI_Wait(&r, MPI_STATUS_IGNORE), "receive");
  }
  pending_.clear();
}

void Comm::barrier_idle() {
  if (size_ == 1) return;
  MPI_Request req;
  check(MPI_Ibarrier(mpi_comm(handle_), &req), "barrier");
  wait_sleeping(req, "barrier");
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
  const InFlight f("gather of the logits");
  check(MPI_Gatherv(x, cnt[size_t(rank_)], MPI_FLOAT, out, cnt.data(), off.data(), MPI_FLOAT, 0, mpi_comm(handle_)),
        "gather");
}
#else
// One process: every collective is the identity.
Comm::~Comm() = default;
std::unique_ptr<Comm> Comm::split(int) { return std::make_unique<Comm>(); }
void Comm::all_reduce_sum(float*, int64_t) {}
void Comm::broadcast(void*, int64_t) {}
void Comm::broadcast_idle(void*, int64_t) {}
void Comm::gather(const float* x, std::span<const int64_t> counts, float* out) { std::copy(x, x + counts[0], out); }
void Comm::send(int, const float*, int64_t) { fail("no other rank to send to (built without MPI)"); }
void Comm::recv(int, float*, int64_t) { fail("no other rank to receive from (built without MPI)"); }
void Comm::post_recv(int, float*, int64_t) { fail("no other rank to receive from (built without MPI)"); }
void Comm::wait_all() {}
void Comm::barrier_idle() {}
#endif

}  // namespace ridge::dist
