// Reading outside data (model files, request bodies) safely: JSON parsed only after its nesting
// depth is known to be small, and error messages that quote at most a short excerpt of what
// was found. Every reader of outside JSON goes through here (docs/reliability.md).
//
// Why a depth limit before parsing: nlohmann's parser is iterative, but dump(), operator==,
// and every recursive walk over a value (ours included) recurse once per level, so a 200 KB
// body of "[[[[…" overflows the stack of whichever function touches it first. Checking the
// depth on the raw bytes first means no handler ever holds a value deeper than the limit.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace journey {

// Deepest JSON nesting (arrays + objects) accepted from any file or request. Real inputs stay
// far below it: tokenizer.json ~6 levels, config.json ~3, OpenAI request bodies ~5.
inline constexpr int kMaxJsonDepth = 64;

// Most characters of a value quoted in an error message.
inline constexpr std::size_t kMaxExcerptBytes = 200;

// The deepest [ / { nesting in text, counting brackets outside strings (the scan stops early at
// limit + 1). Works on any bytes: for malformed JSON the parser reports the real problem.
int json_nesting_depth(std::string_view text, int limit);

// The first max_bytes of text or less, cut at a UTF-8 character boundary.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// At most max_bytes of text (cut at a UTF-8 character boundary), followed by
// "… (N bytes in all)" when something was cut.
std::string excerpt(std::string_view text, std::size_t max_bytes = kMaxExcerptBytes);

// A JSON value as it would be written, but at most max_bytes of it, walking no deeper than a few
// levels: safe on values of any size or depth. The one way an error message shows a value.
template <typename Json>
std::string excerpt_json(const Json& value, std::size_t max_bytes = kMaxExcerptBytes);

// Parse outside JSON: the depth is checked first (an error naming `where` and the limit),
// then nlohmann parses; syntax errors become journey::Error naming `where`.
template <typename Json = nlohmann::json>
Json parse_untrusted_json(std::string_view text, const std::string& where, int max_depth = kMaxJsonDepth) {
  const int depth = json_nesting_depth(text, max_depth);
  if (depth > max_depth) fail(where, ": JSON nested deeper than ", max_depth, " levels (refused before parsing)");
  try {
    return Json::parse(text);
  } catch (const typename Json::exception& e) {
    fail(where, ": not valid JSON: ", excerpt(e.what()));
  }
}

// A whole file's bytes; errors name the file.
std::string read_whole_file(const std::string& path);

// Read and parse a JSON file with parse_untrusted_json; errors name the file.
nlohmann::json read_untrusted_json_file(const std::string& path, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json read_untrusted_ordered_json_file(const std::string& path, int max_depth = kMaxJsonDepth);

// ---- implementation of the template ---------------------------------------------------------

namespace detail {
template <typename Json>
void excerpt_json_into(const Json& v, std::string& out, std::size_t max_bytes, int depth) {
  if (out.size() > max_bytes) return;
  constexpr int kShownLevels = 4;  // deeper containers print as [...] / {...}
  if (v.is_array()) {
    if (depth >= kShownLevels) {
      out += v.empty() ? "[]" : "[...]";
      return;
    }
    out += '[';
    bool first = true;
    for (const auto& item : v) {
      if (out.size() > max_bytes) return;
      if (!first) out += ',';
      first = false;
      excerpt_json_into(item, out, max_bytes, depth + 1);
    }
    out += ']';
  } else if (v.is_object()) {
    if (depth >= kShownLevels) {
      out += v.empty() ? "{}" : "{...}";
      return;
    }
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (out.size() > max_bytes) return;
      if (!first) out += ',';
      first = false;
      out += Json(std::string(utf8_prefix(it.key(), max_bytes))).dump(-1, ' ', false, Json::error_handler_t::replace);
      out += ':';
      excerpt_json_into(it.value(), out, max_bytes, depth + 1);
    }
    out += '}';
  } else if (v.is_string()) {
    const std::string& s = v.template get_ref<const std::string&>();
    out += Json(std::string(utf8_prefix(s, max_bytes))).dump(-1, ' ', false, Json::error_handler_t::replace);
  } else {
    out += v.dump();  // a scalar: short
  }
}
}  // namespace detail

template <typename Json>
std::string excerpt_json(const Json& value, std::size_t max_bytes) {
  std::string out;
  detail::excerpt_json_into(value, out, max_bytes, 0);
  if (out.size() <= max_bytes) return out;
  return std::string(utf8_prefix(out, max_bytes)) + "…";
}

}  // namespace journey
