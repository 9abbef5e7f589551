// The CUDA backend's tensor-parallel collectives on device memory, behind one interface with two
// transports (parallel/device_transport.h says which and why): NCCL between GPUs, or host-staged
// over the group's Communicator (MPI) when ranks share a GPU. The forward pass calls only these,
// in the order the CPU backend calls its Communicator's: an all-reduce after the attention output
// projection and after the FFN down projection, the logits' vocabulary slices gathered to rank 0.
//
// Plain C++ (compiled by the host compiler): NCCL's header stays inside device_collectives.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "parallel/device_transport.h"

namespace journey {

class Communicator;

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual DeviceTransport transport() const = 0;
  // "NCCL 2.27.3" or "host-staged over MPI (Open MPI v4.1.4)", with why it was chosen.
  virtual std::string describe() const = 0;
  // Whether the calls can be recorded into a CUDA graph: NCCL's kernels can; host-staged waits on
  // the host in the middle of the step, which a graph cannot hold.
  virtual bool capturable() const = 0;

  // data [n] f32 in device memory, on every rank: becomes the element-wise sum over the ranks.
  // Enqueued on `stream` (host-staged: also waits for it).
  virtual void all_reduce_sum(float* data, int64_t n, cudaStream_t stream) = 0;
  // mine [rows, cols] f32 in device memory on every rank; rank 0's `out` [rows, size * cols] gets
  // rank r's block in columns [r * cols, (r + 1) * cols) (out is untouched, may be null, on the
  // others). `staging` [size, rows, cols] device scratch of the caller's (NCCL's all-gather lands
  // there; the caller owns it so that a graph that captured it knows when it moves).
  virtual void gather_columns(float* out, const float* mine, int64_t rows, int64_t cols, float* staging,
                              cudaStream_t stream) = 0;
  // One forward step's collectives, counted into the group Communicator's counters where they did
  // not go through it (NCCL; a replayed graph runs them without any host call to count), so that
  // `journey bench --tensor-parallel N` reports what was sent whichever transport ran.
  virtual void count_step(int64_t all_reduces, int64_t floats_each, int64_t gather_rows, int64_t gather_cols) = 0;
};

// True when this build has NCCL (JOURNEY_NCCL).
bool nccl_compiled_in();

// Called by every rank of `communicator`'s group at once (it is collective): exchanges the ranks'
// device ids, chooses the transport (choose_device_transport; `requested`: auto, nccl or
// host-staged) and sets it up; for NCCL rank 0's unique id goes to the others over
// `communicator`, then every rank joins the NCCL communicator on `device` (its CUDA ordinal,
// already current). `communicator` must outlive the result.
std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator& communicator, int device,
                                                           const std::string& requested);

}  // namespace journey
