// The CUDA backend: the same forward pass as the CPU reference (reference/cpu_backend.cpp), step
// for step and stage for stage, with the weights on the GPU in bf16 (default), f16 or f32 and the
// KV pool in f32 device memory. Behind the same Backend interface, so the scheduler, the
// generation loop and the tracer run on it unchanged; it adds on-device sampling, which copies
// back only the sampled ids instead of [rows, vocab] logits.
//
// Plain C++ header (no CUDA types), so the CLI can include it.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/dtype.h"
#include "backend/device_sampling.h"
#include "backend/backend.h"

namespace journey {

struct CudaOptions {
  DType dtype = DType::BF16;  // weight type on the device: BF16, F16 or F32 (norm weights and biases stay f32)
  int device = 0;             // CUDA device ordinal
  int gemv_version = 3;       // hand-written decode GEMV version (1, 2, 3; see cuda/kernels.cu)
  bool fuse = true;           // fused residual-add + RMSNorm when no trace wants the stages inside
};

class CudaBackend : public Backend {
 public:
  virtual DType weight_dtype() const = 0;
  virtual std::string device_name() const = 0;
};

// Devices the CUDA runtime can see; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

// Uploads the model's weights (the model may be released afterwards). Throws journey::Error:
// "no CUDA device visible" when there is none, a tensor's name on a shape mismatch, CUDA's
// message on an allocation failure.
std::unique_ptr<CudaBackend> make_cuda_backend(const LoadedModel& model, const CudaOptions& options = {});

}  // namespace journey
