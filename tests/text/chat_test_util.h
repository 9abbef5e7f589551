// Helpers shared by the chat-template tests: reading repo files and explaining string mismatches.
#pragma once
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"

namespace journey::test {

inline std::string read_repo_file(const std::string& relative) {
  std::ifstream in(std::string(JOURNEY_SOURCE_DIR) + "/" + relative, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + relative);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::ordered_json read_repo_json(const std::string& relative) {
  return nlohmann::ordered_json::parse(read_repo_file(relative));
}

inline std::vector<ChatMessage> messages_from_json(const nlohmann::ordered_json& list) {
  std::vector<ChatMessage> messages;
  for (const auto& m : list) {
    ChatMessage message(m.at("role").get<std::string>(), m.at("content").get<std::string>());
    if (m.contains("tool_calls")) message.tool_calls_json = m.at("tool_calls").dump();
    if (m.contains("tool_call_id")) message.tool_call_id = m.at("tool_call_id").get<std::string>();
    if (m.contains("name")) message.name = m.at("name").get<std::string>();
    messages.push_back(std::move(message));
  }
  return messages;
}

// "" when equal; otherwise the first differing byte offset with some context on both sides.
inline std::string first_difference(const std::string& expected, const std::string& actual) {
  if (expected == actual) return "";
  std::size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  std::size_t from = i > 40 ? i - 40 : 0;
  auto show = [&](const std::string& s) {
    nlohmann::json j = s.substr(from, std::min<std::size_t>(s.size() - std::min(from, s.size()), 100));
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::ostringstream out;
  out << "first difference at byte " << i << " (expected " << expected.size() << " bytes, got " << actual.size()
      << ")\n  expected[" << from << "..]: " << show(expected) << "\n  actual  [" << from << "..]: " << show(actual);
  return out.str();
}

}  // namespace journey::test
