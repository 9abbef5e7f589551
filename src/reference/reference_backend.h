// The reference backend: the forward pass of a Llama/Qwen2/Qwen3-style decoder written the way
// llama2.c's run.c writes it — top to bottom, one short comment per step, the shape beside every
// buffer — over the literal ops of reference/ops.h. It is the oracle: the fast CPU backend and the
// CUDA backend are compared with it op by op and stage by stage (tests/backends), and it is what
// chapters 3-8 run. It implements the same Backend interface and emits every stage at the same
// point as the others; speed is not its job (one thread, f32, Eigen).
#pragma once
#include <cstdint>
#include <memory>

#include "assets/model.h"
#include "backend/backend.h"

namespace journey {

// Widens every weight to f32 (the model may be released afterwards) after checking its shape
// against the config (core/model_weights.h), telling on_progress the stored bytes widened so far;
// throws journey::Error naming the tensor.
std::unique_ptr<Backend> make_reference_backend(const LoadedModel& model, const LoadProgress& on_progress = {});

}  // namespace journey
