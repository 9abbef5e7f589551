// The expected stories260K greedy outputs (tests/data/expected/stories260K, see PROVENANCE.md).
#pragma once
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace journey::test {

inline const char* kStoriesModel = "data/stories260K";  // tests run from the repository root

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline std::string expected_text(int steps) {  // 200 or 256
  return read_bytes("tests/data/expected/stories260K/greedy_" + std::to_string(steps) + ".txt");
}

inline std::vector<int32_t> expected_ids() {  // [256]
  std::istringstream in(read_bytes("tests/data/expected/stories260K/greedy_256_ids.txt"));
  std::vector<int32_t> ids;
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

}  // namespace journey::test
