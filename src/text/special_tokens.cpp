#include "text/special_tokens.h"

#include <array>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/untrusted.h"

namespace journey {

namespace {

bool is_word_byte(unsigned char c) {
  return std::isalnum(c) || c == '_' || c >= 0x80;
}

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

std::vector<TextSegment> split_on_added_tokens(std::string_view text, const std::vector<AddedToken>& tokens,
                                               bool parse_special) {
  std::vector<TextSegment> segments;
  // Bytes that can start an added token: most positions of a text are ruled out by this alone.
  std::array<bool, 256> can_start{};
  for (const AddedToken& token : tokens) {
    if (!token.content.empty() && (parse_special || !token.special))
      can_start[static_cast<unsigned char>(token.content[0])] = true;
  }
  size_t plain_start = 0;  // start of the plain stretch not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    if (!can_start[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest added token that starts at pos.
    const AddedToken* best = nullptr;
    for (const AddedToken& token : tokens) {
      if (token.content.empty() || (token.special && !parse_special)) continue;
      if (best && token.content.size() <= best->content.size()) continue;
      if (text.compare(pos, token.content.size(), token.content) != 0) continue;
      if (token.single_word) {
        const size_t end = pos + token.content.size();
        const bool word_before = pos > 0 && is_word_byte(text[pos - 1]);
        const bool word_after = end < text.size() && is_word_byte(text[end]);
        if (word_before || word_after) continue;
      }
      best = &token;
    }
    if (!best) {
      ++pos;
      continue;
    }
    size_t match_start = pos;
    size_t match_end = pos + best->content.size();
    if (best->lstrip) {
      while (match_start > plain_start && is_space_byte(text[match_start - 1])) --match_start;
    }
    if (best->rstrip) {
      while (match_end < text.size() && is_space_byte(text[match_end])) ++match_end;
    }
    if (match_start > plain_start) segments.push_back({text.substr(plain_start, match_start - plain_start), -1});
    segments.push_back({text.substr(match_start, match_end - match_start), best->id});
    pos = plain_start = match_end;
  }
  if (plain_start < text.size()) segments.push_back({text.substr(plain_start), -1});
  return segments;
}

namespace {

// "bos_token": "<s>" | {"content": "<s>", ...} | null
std::optional<std::string> token_text(const nlohmann::json& config, const char* field,
                                      const std::filesystem::path& path) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail(path.string(), ": field \"", field, "\": expected a string or {\"content\": string}, found ", excerpt_json(*it));
}

std::optional<bool> optional_bool(const nlohmann::json& config, const char* field,
                                  const std::filesystem::path& path) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail(path.string(), ": field \"", field, "\": expected true/false, found ", excerpt_json(*it));
  return it->get<bool>();
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::filesystem::path& path) {
  TokenizerConfig config;
  if (!std::filesystem::exists(path)) return config;
  const nlohmann::json json = read_untrusted_json_file(path.string());
  if (!json.is_object()) fail(path.string(), ": expected a JSON object at the top level");
  config.present = true;
  config.bos_token = token_text(json, "bos_token", path);
  config.eos_token = token_text(json, "eos_token", path);
  config.add_bos_token = optional_bool(json, "add_bos_token", path);
  config.add_eos_token = optional_bool(json, "add_eos_token", path);
  if (auto it = json.find("added_tokens_decoder"); it != json.end()) {
    if (!it->is_object()) fail(path.string(), ": field \"added_tokens_decoder\": expected an object of id -> token");
    for (const auto& [key, value] : it->items()) {
      AddedToken token;
      try {
        token.id = std::stoi(key);
        token.content = value.at("content").get<std::string>();
        token.special = value.value("special", false);
        token.lstrip = value.value("lstrip", false);
        token.rstrip = value.value("rstrip", false);
        token.single_word = value.value("single_word", false);
      } catch (const std::exception& e) {
        fail(path.string(), ": added_tokens_decoder[\"", excerpt(key), "\"]: ", excerpt(e.what()));
      }
      config.added_tokens.push_back(std::move(token));
    }
  }
  return config;
}

}  // namespace journey
