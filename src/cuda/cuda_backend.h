// The CUDA backend: the same forward pass as the fast CPU backend, step for step and stage for
// stage, with the weights on the GPU in bf16 (default), f16 or f32 — quantized GGUF weights (Q8_0,
// Q4_0, Q4_1, Q4_K, Q6_K) as stored — and the KV pool in f32 device memory. Behind the same Backend interface, so the scheduler, the generation loop and the tracer
// run on it unchanged; it samples on the device (Backend::forward_sample), which copies back only
// the sampled ids instead of [rows, vocab] logits.
//
// Decode steps (every sequence feeds one token, no trace) take a faster road: batched decode
// kernels that read positions and block tables from device memory, fused GEMVs (norm + product,
// product + residual add, gate/up + SwiGLU), and the whole step captured once in a CUDA graph per
// (batch size, block-table width) and replayed. Each of these can be switched off (CudaOptions), and
// tests/cuda checks every combination against the plain path.
//
// Plain C++ header (no CUDA types), so the CLI can include it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "assets/model.h"
#include "backend/backend.h"
#include "backend/device_sampling.h"
#include "core/dtype.h"

namespace journey {

class Communicator;

struct CudaOptions {
  DType dtype = DType::BF16;  // weight type on the device: BF16, F16 or F32 (norm weights and biases stay f32)
  bool keep_quantized = true; // GGUF blocks of a type in cuda_weight_types() stay as stored (else widened to dtype)
  int device = 0;             // CUDA device ordinal
  int gemv_version = 4;       // hand-written decode GEMV version (1, 2, 3, 4; see cuda/kernels.cu)
  bool fuse = true;           // fused kernels (norm + GEMV, GEMV + residual, SwiGLU) where no trace looks inside
  bool fast_decode = true;    // decode steps through the batched decode kernels (positions on the device)
  bool graphs = true;         // ... captured in a CUDA graph and replayed (needs fast_decode)
  bool early_launch = true;   // programmatic dependent launch of the decode GEMVs (Hopper and later)
  // Tensor parallelism (parallel/shard.h), as CpuOptions::communicator: with a communicator of size
  // n > 1 this backend holds rank communicator->rank()'s shard (its heads, its KV heads in a KV pool
  // of its own, its FFN columns and vocabulary rows), all-reduces after the attention output and
  // the FFN down projection, and gathers the logits to rank 0 (the other ranks' logits are their
  // vocabulary slice). Every rank of the group must make its backend at the same time (setting up
  // the transport is collective). Null: the whole model on this device. Not owned.
  Communicator* communicator = nullptr;
  // How the collectives travel (parallel/device_transport.h): "auto" (NCCL when every rank has a
  // GPU of its own, else host-staged over the communicator), "nccl" or "host-staged".
  std::string tp_transport = "auto";
  // Told the stored bytes of the tensors uploaded so far, of all the model's, while the weights
  // are converted and copied to the device (a 1.1B file takes seconds). Forgotten once loaded.
  LoadProgress on_load_progress = nullptr;
};

// What the backend did, for benchmarks and tests: which road each forward step took.
struct CudaStats {
  int64_t plain_steps = 0;        // prefill, mixed or traced steps: per-sequence kernels
  int64_t decode_steps = 0;       // decode steps launched kernel by kernel (graphs off, or a first sight)
  int64_t graph_captures = 0;     // decode graphs captured
  int64_t graph_replays = 0;      // decode steps run by replaying a graph
  std::string graph_error;        // why graphs were turned off (a capture failed, or a transport that cannot be captured)
  // Under tensor parallelism: the transport of the collectives and why it was chosen
  // ("NCCL 2.27.3 (every rank has its own GPU)", "host-staged over MPI (...) (ranks 0 and 1 share GPU-...)");
  // empty otherwise.
  std::string tp_transport;
};

class CudaBackend : public Backend {
 public:
  virtual std::string device_name() const = 0;
  virtual CudaStats stats() const = 0;
  // Bytes of weights one decode step reads as the device stores them: every layer's matrices and
  // vectors, the final norm and the LM head (the bandwidth ceiling's denominator).
  virtual int64_t weight_bytes_per_token() const = 0;
  // The matrices' bytes per device type ("q4_K" -> bytes), f32 vectors included under f32.
  virtual std::vector<std::pair<DType, int64_t>> weight_bytes_by_type() const = 0;
};

// Devices the CUDA runtime can see; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

// The weight types the device keeps as stored (CudaOptions::dtype); anything else is converted.
std::vector<DType> cuda_weight_types();

// Uploads the model's weights (the model may be released afterwards). Throws journey::Error:
// "no CUDA device visible" when there is none, a tensor's name on a shape mismatch, CUDA's
// message on an allocation failure.
std::unique_ptr<CudaBackend> make_cuda_backend(const LoadedModel& model, const CudaOptions& options = {});

}  // namespace journey
