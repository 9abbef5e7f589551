// Small helpers shared by the trace tests: fresh temporary directories and running NumPy.
#pragma once
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>
#include <string>

namespace journey::test {

// A new empty directory under the build tree (kept after the test for inspection).
inline std::filesystem::path fresh_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(JOURNEY_BINARY_DIR) / "test-tmp" / "trace" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Debian's python3 with numpy, the independent reader/writer of .npy files. Never the python3 on PATH.
inline bool have_numpy() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return ok;
}

inline int run_python(const std::filesystem::path& script_file) {
  return std::system(("/usr/bin/python3 " + script_file.string()).c_str());
}

inline std::vector<float> random_values(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace journey::test
