// Helpers for the tokenizer golden tests: where the test data lives, and llama.cpp's vector
// format (.inp: strings each followed by "\n__ggml_vocab_test__\n"; .out: one line of ids each).
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace journey::test {

// Small files checked into tests/data/tokenizers.
inline std::filesystem::path source_data(const std::string& name) { return std::filesystem::path(TOKENIZER_DATA_DIR) / name; }
// Files decompressed at build time (the vocabularies stored as .xz).
inline std::filesystem::path build_data(const std::string& name) {
  return std::filesystem::path(TOKENIZER_BUILD_DATA_DIR) / name;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Vector {
  std::string text;
  std::vector<int> ids;
};

// Reads a .inp file and its .out file; `stem` names them in messages.
inline std::vector<Vector> read_vectors_from(const std::filesystem::path& inp_path, const std::filesystem::path& out_path,
                                             const std::string& stem) {
  const std::string inp = read_file(inp_path);
  const std::string out = read_file(out_path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<Vector> vectors;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t hit = inp.find(separator, pos);
    REQUIRE_MESSAGE(hit != std::string::npos, stem, ".inp: text after the last separator");
    vectors.push_back({inp.substr(pos, hit - pos), {}});
    pos = hit + separator.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t index = 0;
  while (std::getline(lines, line)) {
    REQUIRE_MESSAGE(index < vectors.size(), stem, ".out has more lines than .inp has strings");
    std::istringstream numbers(line);
    for (int id; numbers >> id;) vectors[index].ids.push_back(id);
    ++index;
  }
  REQUIRE_MESSAGE(index == vectors.size(), stem, ".out has ", index, " lines for ", vectors.size(), " strings");
  return vectors;
}

// Reads <stem>.inp and <stem>.out from tests/data/tokenizers/llamacpp-vocab.
inline std::vector<Vector> read_vectors(const std::string& stem) {
  return read_vectors_from(source_data("llamacpp-vocab/" + stem + ".inp"), source_data("llamacpp-vocab/" + stem + ".out"),
                           stem);
}

inline std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += std::to_string(id) + " ";
  return s;
}

// Encodes every vector (no special tokens, as llama.cpp's test-tokenizer-0 does) and counts the
// exact matches; each mismatch is reported with the string and both id lists.
// parse_special: whether special-token text in a string is the special token (Hugging Face's
// tokenizers do that by default; llama.cpp's vectors were made without).
inline int count_exact(const Tokenizer& tokenizer, const std::vector<Vector>& vectors, const std::string& name,
                       bool parse_special = false) {
  int exact = 0;
  for (const Vector& v : vectors) {
    const std::vector<int> ids = tokenizer.encode(v.text, /*add_special=*/false, parse_special);
    if (ids == v.ids) {
      ++exact;
    } else {
      MESSAGE(name, ": mismatch for \"", v.text, "\"\n  expected ", ids_text(v.ids), "\n  found    ", ids_text(ids));
    }
  }
  MESSAGE(name, ": ", exact, "/", vectors.size(), " vectors exact");
  return exact;
}

// Decode(encode(x)) == x over the vector strings; returns the strings that do not round-trip.
inline std::vector<std::string> round_trip_failures(const Tokenizer& tokenizer, const std::vector<Vector>& vectors) {
  std::vector<std::string> failures;
  for (const Vector& v : vectors) {
    if (tokenizer.decode(tokenizer.encode(v.text, false, false)) != v.text) failures.push_back(v.text);
  }
  return failures;
}

}  // namespace journey::test
