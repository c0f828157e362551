// The processes one model is spread over (tensor parallelism, issue 28): MPI ranks started
// by mpirun, each holding a shard of every layer. This is the whole of ridge's use of MPI:
// who this process is, and the few collectives a sharded forward needs. Nothing above this
// header includes <mpi.h>; without MPI at build time the world is one process and asking
// for more is a clear error.
//
// Ranks agree by construction: rank 0 runs the scheduler and sends each step to the others
// (engine/tp_worker.h), and every rank then runs the same forward on its shard, meeting
// in the same collectives in the same order. A rank that dies ends the job: mpirun kills
// the others and names the rank; a rank that fails calls abort(), which does the same.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ridge::dist {

class Comm {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Every rank's x[n] summed element-wise, in place, on every rank: one all-reduce. Two
  // ranks add the same two numbers, so every rank gets the same bits.
  void all_reduce_sum(float* x, int64_t n);
  // Rank 0's bytes[n] into every rank's (n known to all).
  void broadcast(void* bytes, int64_t n);
  // As broadcast, for a wait that may be long (an idle server's workers): the waiting
  // ranks sleep between polls instead of spinning a core. Rank 0 must use it for the same
  // message (a non-blocking collective matches only its kind).
  void broadcast_idle(void* bytes, int64_t n);
  // Every rank here, waited for as broadcast_idle waits (a shard's load may take long):
  // rank 0 knows its workers are ready, and no collective of the first step times it.
  void barrier_idle();
  // Rank r's x[counts[r]] into rank 0's out, rank after rank (out: sum of counts; unused
  // elsewhere).
  void gather(const float* x, std::span<const int64_t> counts, float* out);
  // x[n] to rank `to` / from rank `from` (pipeline stages): blocking, in the order sent.
  void send(int to, const float* x, int64_t n);
  void recv(int from, float* x, int64_t n);
  // A receive posted now and completed by wait_all (in the order posted): the first stage
  // posts its logits' receives before its own work, so the last never waits on it.
  void post_recv(int from, float* x, int64_t n);
  void wait_all();
  // Ends every rank of the job with exit status code (after this rank's message, if any,
  // on the stderr it started with).
  [[noreturn]] void abort(int code, const std::string& message = {});

 private:
  friend void init(int* argc, char*** argv);
  int rank_ = 0, size_ = 1;
  std::vector<int64_t> pending_;  // MPI requests (as integers: no <mpi.h> here)
};

// Whether this process was started by an MPI launcher (its environment says so).
bool launched_by_mpi();
// Starts MPI when launched_by_mpi() (else nothing): call first thing in main. Ranks other
// than 0 get /dev/null for stdout and stderr (only rank 0 talks to the user); their
// errors still reach the original stderr through abort(). Throws ridge::Error when the
// launcher asks for MPI and the build has none.
void init(int* argc, char*** argv);
// The world of this process: null unless init() started MPI.
Comm* world();
// The ranks of the world on this machine (they share its memory and cores): 1 without MPI.
int local_ranks();
// Threads for a rank that was given none: the cores it may run on (mpirun may bind it to
// one or a few), or, where it is not bound, the machine's cores shared among its ranks.
int default_threads();
// Ends MPI (after the last collective). Safe to call without init().
void finalize();

}  // namespace ridge::dist
