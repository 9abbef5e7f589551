// The CPU reference backend: the forward pass of a Llama/Qwen2/Qwen3-style decoder written as a
// flat list of steps over the ops in reference/ops.h, reading its K/V from a paged pool.
// It is the yardstick the CUDA path and the PyTorch goldens are compared with, so clarity comes
// first; it is still fast enough to serve a 1B model on a laptop (see docs/performance.md).
#pragma once
#include <memory>

#include "assets/model.h"
#include "backend/backend.h"

namespace journey {

struct CpuOptions {
  int threads = 0;  // threads for the matrix products and attention; 0 = all cores
  // TEST-ONLY planted bug: adds this offset to the positions RoPE rotates q by (k is left alone,
  // so attention really changes). Used to prove that a trace diff finds the first diverging stage
  // (q_rope). Always 0 outside tests.
  int debug_rope_position_offset = 0;
};

// Widens the model's weights to f32 (the model may be released afterwards) and checks every
// tensor's shape against the config; throws journey::Error naming the tensor on a mismatch.
std::unique_ptr<Backend> make_cpu_backend(const LoadedModel& model, const CpuOptions& options = {});

}  // namespace journey
