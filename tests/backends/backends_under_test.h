// The backends the contract and comparison tests run on this machine: the literal reference and
// the fast CPU backend, by the names `--device` uses. (The CUDA backend runs the same comparisons
// in tests/cuda, which skip without a GPU.)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "assets/model.h"
#include "backend/backend.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "reference/reference_backend.h"

namespace journey {

inline const std::vector<std::string> kCpuBackends = {"reference", "cpu"};

// threads: the fast backend's thread count (the reference has one).
inline std::unique_ptr<Backend> make_backend_under_test(const std::string& kind, const LoadedModel& model,
                                                        int threads = 2) {
  if (kind == "reference") return make_reference_backend(model);
  if (kind == "cpu") return make_cpu_backend(model, CpuOptions{.threads = threads});
  fail("no backend named ", kind);
}

}  // namespace journey
