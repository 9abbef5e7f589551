// Errors in journey are exceptions of one type that carry a complete, human-readable message:
// what was being read (file, tensor, field), what was expected and what was found.
// The CLI and the server print the message as is, so it must stand on its own.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace journey {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenate anything streamable into one string: cat("tensor ", name, ": expected ", a, ", found ", b).
template <typename... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

// Throw a journey::Error whose message is the concatenation of the parts.
template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(cat(std::forward<Parts>(parts)...));
}

}  // namespace journey
