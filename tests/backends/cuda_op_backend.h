// The CUDA backend's ops (cuda/kernels.h) behind the op test's OpBackend: every call copies its
// inputs to the device, launches the kernel of the same name, waits, checks CUDA's errors and
// copies the outputs back. Each device output sits between guard regions of its own; a kernel that
// writes past its output makes the call throw ("wrote outside its output"), which the harness
// reports under the op's name. Built only with JOURNEY_CUDA; constructed only when a GPU is visible.
#pragma once
#include <memory>

#include "backends/op_backend.h"

namespace journey::optest {

// weight_types: the stored types handed to linear()/embedding_gather() on the device.
std::unique_ptr<OpBackend> make_cuda_op_backend();

}  // namespace journey::optest
