// The collectives tensor parallelism needs, over whatever transport the ranks share: MPI between
// CPU processes (Open MPI, started by `mpirun`), NCCL between GPUs (src/cuda), or nothing at all
// for a single process. The forward pass of a sharded backend calls only these:
//
//   all_reduce_sum   after the attention output projection and after the FFN down projection:
//                    each rank holds a partial [N, E] sum over its heads / FFN columns
//   gather_rows      the LM head's vocabulary slices [R, V/n] of every rank into [R, V] on rank 0
//   broadcast        rank 0's next call (a forward batch, a KV allocation) to the followers
//
// Every collective counts itself (calls and bytes), so `journey bench` prints what tensor
// parallelism costs in communication from what was actually sent, not from a formula.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace journey {

// What a communicator has done since it was made (or since reset): for the bench's figures.
struct CommunicatorCounters {
  int64_t all_reduces = 0;
  int64_t all_reduce_bytes = 0;  // the payload of each rank's buffer (floats * 4), summed over calls
  int64_t gathers = 0;
  int64_t gather_bytes = 0;      // bytes rank 0 received (its own slice excluded)
  int64_t broadcasts = 0;
  int64_t broadcast_bytes = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string transport() const = 0;  // "single process", "MPI (Open MPI 4.1.4)", "NCCL"

  // data[n] on every rank becomes the element-wise sum over the ranks, on every rank.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // Every rank holds `mine` [rows, cols]; rank 0 receives [rows, size() * cols] in `out`, rank r's
  // block in columns [r * cols, (r + 1) * cols) of each row (the LM head's vocabulary slices side
  // by side). `out` is not touched on the other ranks (may be null there).
  virtual void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols) = 0;
  // bytes[n] of rank 0 are copied to every other rank (n must be equal on all ranks). The other
  // ranks wait without holding a core: a follower waits here for rank 0's next call for as long as
  // a server has no request, on cores it shares with rank 0's HTTP server and sampling.
  virtual void broadcast(void* bytes, int64_t n) = 0;
  // Ends every rank's process (a follower that cannot go on: rank 0 would wait for it forever).
  [[noreturn]] virtual void abort(int status) = 0;

  const CommunicatorCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }
  // Collectives another transport carried for this group (NCCL between GPUs, src/cuda) are counted
  // here too, so the figures cover every byte the group sent whichever way it went.
  void count_all_reduce(int64_t bytes) { counters_.all_reduces += 1, counters_.all_reduce_bytes += bytes; }
  void count_gather(int64_t bytes) { counters_.gathers += 1, counters_.gather_bytes += bytes; }

 protected:
  CommunicatorCounters counters_;
};

// One process: the sum over one rank is the data itself, a gather is a copy.
std::unique_ptr<Communicator> make_single_process_communicator();

// True when this build has MPI (find_package(MPI) found it when it was configured).
bool mpi_compiled_in();
// True when this process was started by mpirun / an MPI launcher with more than one process
// (read from the launcher's environment, before MPI is initialized).
int launcher_world_size();
// The MPI world of this process: initializes MPI on the first call (thread level "serialized": the
// server calls the backend from its loader thread, then from its engine thread, never at once) and
// finalizes it at exit. Throws journey::Error when the build has no MPI.
Communicator& mpi_world();

}  // namespace journey
