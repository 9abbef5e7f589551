#include "core/untrusted.h"

#include <fstream>
#include <sstream>

namespace journey {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Step back over continuation bytes (10xxxxxx) so no character is cut in half.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return cat(utf8_prefix(text, max_bytes), "… (", text.size(), " bytes in all)");
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail(path, ": read error");
  return buffer.str();
}

nlohmann::json read_untrusted_json_file(const std::string& path, int max_depth) {
  return parse_untrusted_json<nlohmann::json>(read_whole_file(path), path, max_depth);
}

nlohmann::ordered_json read_untrusted_ordered_json_file(const std::string& path, int max_depth) {
  return parse_untrusted_json<nlohmann::ordered_json>(read_whole_file(path), path, max_depth);
}

}  // namespace journey
