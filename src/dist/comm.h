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
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ridge::dist {

class Comm {
 public:
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The ranks of this communicator with the same color, as a communicator of their own
  // (ranked in this one's order): every rank of this one calls it, at the same point.
  std::unique_ptr<Comm> split(int color);

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
  // on the stderr it started with, naming its rank in the world).
  [[noreturn]] void abort(int code, const std::string& message = {});

 private:
  friend void init(int* argc, char*** argv);
  int rank_ = 0, size_ = 1;
  int64_t handle_ = 0;            // its MPI communicator (as an integer: no <mpi.h> here); 0: the world
  std::vector<int64_t> pending_;  // MPI requests, likewise
};

// A split model's ranks as a grid of pipeline stages by tensor-parallel ranks: world rank
// = stage x tp + tp_rank. A stage's ranks are neighbours, which the usual placement
// (mpirun fills a host's slots in rank order) puts on one host: tensor parallelism's
// all-reduces, one per matrix, stay on the host, and the stages' hand-offs, one per step,
// cross the network.
struct Grid {
  int32_t tp = 1, pp = 1;            // the sizes
  int32_t tp_rank = 0, stage = 0;    // this process's place
  static Grid of(int world_rank, int32_t tp, int32_t pp) { return {tp, pp, world_rank % tp, world_rank / tp}; }
  int world_rank(int32_t at_stage, int32_t at_tp_rank) const { return at_stage * tp + at_tp_rank; }
  int32_t world_size() const { return tp * pp; }
};

// The communicators of a split model's forward: its stage's ranks for tensor
// parallelism's collectives (the world itself without stages), the world for the
// stages' hand-offs (by Grid::world_rank).
class Ranks {
 public:
  // Every rank of world calls it, at the same point (a split of the world when tp and pp
  // are both above 1).
  Ranks(Comm& world, int32_t tp, int32_t pp);
  const Grid& grid() const { return grid_; }
  Comm* tp() const { return grid_.tp > 1 ? tp_ : nullptr; }  // null: no tensor parallelism
  Comm* pp() const { return grid_.pp > 1 ? world_ : nullptr; }  // null: no stages
  Comm& world() const { return *world_; }

 private:
  Grid grid_;
  Comm* world_;
  std::unique_ptr<Comm> stage_;  // the stage's ranks, when there are several stages of several
  Comm* tp_;
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
