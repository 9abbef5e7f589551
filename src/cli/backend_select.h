// `--device reference|cpu|cuda`: the one place the CLI commands turn a device name into a Backend,
// so every command (generate, chat, bench, trace, serve) says the same thing when CUDA is missing.
#pragma once
#include <memory>
#include <string>

#include "assets/model.h"
#include "backend/backend.h"

namespace journey::cli {

// device: "reference" (the literal path: one thread, f32; what the chapters run), "cpu" (the fast
// CPU backend with `threads` threads, 0 = all cores; the default of every command), "cuda" (bf16
// weights on GPU 0), or "cuda:bf16" / "cuda:f16" / "cuda:f32" to choose the weight type. Throws
// journey::Error: "journey was built without CUDA (JOURNEY_CUDA=OFF)" or "no CUDA device visible"
// for cuda when it cannot run, and names the device for anything else.
std::unique_ptr<Backend> make_backend(const LoadedModel& model, const std::string& device, int threads);

// The help text of the flag, listing what this build supports.
const char* device_flag_help();

}  // namespace journey::cli
