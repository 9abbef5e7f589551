// The OpenAI wire format: request bodies of /v1/completions and /v1/chat/completions turned into
// engine requests (every field checked: type, range, size), and engine outputs turned back into
// response objects and stream chunks. No I/O here; http_server.cpp moves the bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/llm_engine.h"
#include "server/tool_calls.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace journey::server {

// Ordered: a request's objects keep the client's key order (the tools a template renders with
// tojson come out as sent), and responses list their fields in the order they are written.
using json = nlohmann::ordered_json;

// An error answered with OpenAI's {"error": {"message", "type", "param", "code"}} body.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status_, std::string message, std::string param_ = "", std::string type_ = "invalid_request_error",
           std::string code_ = "")
      : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
        code(std::move(code_)) {}
};
json error_body(const std::string& message, const std::string& type, const std::string& param, const std::string& code);

struct ModelContext {
  std::string served_model_name;
  const Tokenizer* tokenizer = nullptr;
  const ModelChatTemplate* chat_template = nullptr;
  int64_t max_model_len = 0;
  std::vector<int32_t> eos_ids;
};

// Prompt text is refused before tokenizing when it holds more than this many bytes per token of
// the context: no tokenizer packs that much text into one token of a real conversation, so such a
// prompt could never fit, and refusing it first bounds the tokenizer's (and the template's) work.
inline constexpr int64_t kPromptBytesPerToken = 64;
inline constexpr int64_t kMinPromptBytes = 64 * 1024;
int64_t max_prompt_bytes(const ModelContext& ctx);

// A request body parsed as JSON whose nesting is checked first (core/untrusted.h): a body nested
// deeper than kMaxJsonDepth, or not JSON, is a 400 before any endpoint sees it.
json parse_request_body(std::string_view body);

// Every request field of /v1/completions and /v1/chat/completions, in one table: the request
// check (a field not in it is a 400 "unknown field"; an unsupported one a 400 saying so) and
// docs/serving.md's table of supported fields (api_fields_markdown(); a test keeps them equal).
enum class FieldSupport { implemented, unsupported };
inline constexpr unsigned kCompletionsEndpoint = 1, kChatEndpoint = 2, kBothEndpoints = 3;
struct ApiField {
  const char* name;
  unsigned endpoints;    // kCompletionsEndpoint | kChatEndpoint
  FieldSupport support;
  const char* what;      // what journey does with it, or why it is refused
};
std::span<const ApiField> api_fields();
std::string api_fields_markdown();
// 400 for the first field of body that the endpoint does not take (unknown, the other endpoint's,
// or unsupported with a non-null value).
void check_fields(const json& body, unsigned endpoint);

// One parsed API request: what to run (n engine requests) and how to answer.
struct ApiRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;      // return logprobs of the chosen tokens
  int top_logprobs = 0;       // alternatives per token
  bool echo = false;          // completions: prompt text before the completion
  std::string prompt_text;    // completions: for echo
  std::string template_text;  // chat: the rendered template the prompt ids encode
  bool trace = false;         // "journey_trace": true (needs journey serve --trace-dir)
  std::string user;           // "user": shown in the request's log line
  std::optional<ToolRequest> tools;  // chat: tools offered (and tool_choice)
  ToolCallFormat tool_format = ToolCallFormat::hermes;  // how calls are written, from the template
  bool parse_tool_calls() const { return tools && tools->active(); }
  int n = 1;
  std::vector<EngineRequest> sequences;  // [n]
};

ApiRequest parse_completion_request(const json& body, const ModelContext& ctx);
ApiRequest parse_chat_request(const json& body, const ModelContext& ctx);
// /tokenize {"prompt"} or {"messages"} -> the prompt's token ids; /detokenize {"tokens"} -> ids.
std::vector<int32_t> parse_tokenize_request(const json& body, const ModelContext& ctx);
std::vector<int> parse_detokenize_request(const json& body, const ModelContext& ctx);

// The prompt token ids of a chat conversation (template applied) or plain text (with BOS).
// rendered (optional) receives the template text.
// tools (optional): offered to the template (tool_calls.h).
std::vector<int32_t> encode_chat(const json& messages, const ModelContext& ctx, std::string* rendered = nullptr,
                                 const ToolRequest* tools = nullptr);
std::vector<int32_t> encode_text(const std::string& text, const ModelContext& ctx);

// Per choice, what the HTTP handler accumulates for the final response.
struct ChoiceState {
  std::string text;
  std::vector<SampledToken> tokens;
  std::string finish_reason;  // "" until finished
  std::vector<ToolCall> tool_calls;           // parsed from the text (tools offered)
  std::optional<ToolCallParser> tool_parser;  // the choice's parser while it runs
  std::string content;                        // text outside the calls (when parsed)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// The token's text for logprobs ("tokens" / "token"), given the previous token.
std::string token_text(const ModelContext& ctx, int32_t id, int32_t previous);
// The logprobs object of a run of tokens, in the chat or the completions shape.
json logprobs_json(const ApiRequest& req, const ModelContext& ctx, const std::vector<SampledToken>& tokens,
                   int32_t previous, size_t text_offset);

json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace journey::server
