// Shared by the libFuzzer targets (docs/reliability.md): the readers under test take paths, so each
// input is written to a file in a per-process directory under /dev/shm (or the temp dir) and
// read back through the same entry point journey uses. A reader may reject an input only with
// journey::Error; any other exception escaping it is a finding and aborts the run, like a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

#include "core/error.h"
#include "text/tokenizer.h"

namespace journey::fuzz {

// The directory this process writes its inputs to (made on first use, removed at exit).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("journey-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    static const std::filesystem::path to_remove = d;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(to_remove, ignored);
    });
    return d;
  }();
  return dir;
}

// Write bytes to scratch_dir()/name and return the path.
inline std::filesystem::path write_file(const std::string& name, const uint8_t* data, size_t size) {
  std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}
inline std::filesystem::path write_file(const std::string& name, std::string_view text) {
  return write_file(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Run fn; journey::Error is the expected way to refuse an input, anything else is a finding.
template <typename F>
void expect_only_journey_errors(const char* what, F&& fn) {
  try {
    fn();
  } catch (const journey::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: %s let a non-journey exception escape: %s\n", what, e.what());
    std::abort();
  }
}

// Split one fuzz input into two parts at the first "\n--\n" (e.g. a template and its messages);
// without the separator the second part is empty.
inline std::pair<std::string_view, std::string_view> split_input(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t at = all.find("\n--\n");
  if (at == std::string_view::npos) return {all, {}};
  return {all.substr(0, at), all.substr(at + 4)};
}

// What every tokenizer reader is checked with once it accepted a file: encode a fixed text and
// some of the input's own bytes, decode the ids back, and print the first pieces.
inline void exercise_tokenizer(const Tokenizer& tokenizer, std::string_view extra_text) {
  for (std::string_view text : {std::string_view("Hello world, 你好 <s> </s>\n\t  x"), extra_text}) {
    std::vector<int> ids = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
    int previous = -1;
    for (int id : ids) {
      (void)tokenizer.token_bytes(id, previous, /*skip_special=*/false);
      previous = id;
    }
    (void)tokenizer.decode(ids);
  }
  for (int id = 0; id < std::min(tokenizer.vocab_size(), 64); ++id) {
    (void)tokenizer.piece(id);
    (void)tokenizer.is_special(id);
  }
}

}  // namespace journey::fuzz
