// Tensor parallelism without touching the engine: rank 0 runs the command (tokenizer, sampler,
// scheduler, HTTP server) over a TensorParallelBackend, which implements the Backend interface by
// broadcasting every call (allocate the KV pool, copy a KV block, one forward step) to the other
// ranks and then running it on its own shard. The other ranks ("followers") sit in
// run_tensor_parallel_follower, receiving calls and running them on their shard, until rank 0's
// backend goes away. The shard's own forward does the collectives (cpu_backend.cpp: an all-reduce
// after the attention output and after the FFN, the logits gathered to rank 0), so every rank runs
// the same calls in the same order.
//
//   rank 0:     engine → TensorParallelBackend ─ broadcast call ─┐→ local shard → all-reduce ... gather → logits
//   rank 1..n:  run_tensor_parallel_follower  ←─────────────────┘→ local shard → all-reduce ... gather
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "parallel/communicator.h"

namespace journey {

// What one rank-0 backend has done: for `journey bench` and the chapter.
struct TensorParallelStats {
  int64_t forward_steps = 0;  // forward() calls
  int64_t tokens = 0;         // tokens fed over all of them
  CommunicatorCounters communication;  // rank 0's counters (the same calls on every rank)
  std::string transport;  // how the forward pass's collectives travel (make_tensor_parallel_backend)
};

// Rank 0's side. `shard` is this rank's shard of the model (a cpu or cuda backend made with the
// same communicator); `communicator` must outlive the backend. When it goes away, the followers are
// told to stop. `transport`: how the shard's collectives travel, for the statistics (empty: the
// communicator's own, as on the cpu; a cuda shard's may be NCCL or host-staged).
std::unique_ptr<Backend> make_tensor_parallel_backend(std::unique_ptr<Backend> shard, Communicator& communicator,
                                                      const std::string& transport = "");

// The statistics of a backend made by make_tensor_parallel_backend (none for any other backend).
std::optional<TensorParallelStats> tensor_parallel_stats(const Backend& backend);
void reset_tensor_parallel_stats(Backend& backend);

// Rank 0 of a group whose followers start their loop on their own (the CLI: as soon as their shard
// is loaded) calls this once it knows it leads a group: if the process then exits before a
// TensorParallelBackend has told them to stop — an error before rank 0's backend exists, such as a
// server whose port is taken — they are told at exit, instead of waiting for rank 0 forever
// (and rank 0's MPI_Finalize with them).
void expect_tensor_parallel_followers(Communicator& communicator);

// For tracing on a follower: called before each forward step that rank 0 traces, with the batch
// and the step's index (0 = the first forward since the follower started); returns the sink to
// record into (null: none).
using FollowerTraceSinks = std::function<TraceSink*(const ForwardBatch& batch, int64_t step)>;

// The other ranks' side: runs rank 0's calls on `shard` until rank 0 says stop (then returns). A
// call that fails here cannot be answered (rank 0 would wait in the next collective forever), so
// it prints the error with the rank and ends every rank's process (Communicator::abort).
void run_tensor_parallel_follower(Backend& shard, Communicator& communicator, const FollowerTraceSinks& sinks = {});

}  // namespace journey
