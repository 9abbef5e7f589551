// Helpers for the assets tests: a fresh scratch directory per test under the build tree, and
// byte-level file I/O for writing damaged copies of real model files.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace journey::test {

namespace fs = std::filesystem;

inline fs::path data_path(const std::string& relative) { return fs::path(JOURNEY_SOURCE_DIR) / relative; }

// An empty directory named after the running test case.
inline fs::path scratch_dir(const std::string& tag) {
  fs::path dir = fs::path(JOURNEY_BINARY_DIR) / "test-scratch" / "assets" / tag;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline std::vector<char> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

template <typename T>
void put(std::vector<char>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Runs `fn` and returns the journey::Error message it throws ("" if it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const journey::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace journey::test
