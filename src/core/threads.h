// The one meaning of a thread-count option across journey (`--threads`, CpuOptions::threads,
// BenchOptions::threads): a positive number is taken as is, 0 means every core.
#pragma once

#include <algorithm>
#include <thread>

namespace journey {

inline int resolve_threads(int requested) {
  return requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace journey
