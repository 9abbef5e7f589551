// Tool calling (OpenAI `tools` / `tool_choice`): the request's tools checked and handed to the
// model's chat template, and the model's answer split back into text and calls.
//
//   request tools ──► chat template (its own tool section, or a system message we write) ──► model
//   model text ──► ToolCallParser (the template's call format) ──► message.tool_calls / delta.tool_calls
//
// Two call formats, chosen from the template:
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   (Qwen2.5/Qwen3, and
//                the default for templates without a tool section, e.g. stories260K's "plain")
//   llama3_json  {"name": "f", "parameters": {...}}, optionally after <|python_tag|>; several calls
//                separated by ";"   (Llama 3.1 / 3.2)
// No I/O here; openai_api.cpp parses requests and http_server.cpp streams the results.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace journey {
class ChatTemplate;
struct ChatTemplateInputs;
}  // namespace journey

namespace journey::server {

// Bounds on what a request's tools may hold (the tool list is rendered into every prompt).
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolNameBytes = 64;           // OpenAI: a-z, A-Z, 0-9, '_' and '-', at most 64
inline constexpr size_t kMaxToolSchemaDepth = 32;          // nesting of one function's "parameters"
inline constexpr size_t kMaxToolsJsonBytes = 256 * 1024;   // the whole list, serialized

enum class ToolChoiceKind { automatic, none, required, named };

enum class ToolCallFormat { hermes, llama3_json };

struct ToolRequest {
  nlohmann::ordered_json tools;  // [T] the validated list, as the client sent it (key order kept for the template)
  std::vector<std::string> names;  // [T] function names, distinct
  ToolChoiceKind choice = ToolChoiceKind::automatic;
  std::string chosen_name;       // choice == named
  bool parallel = true;          // parallel_tool_calls: false keeps only the first call
  // Whether the template is given the tools and the output is parsed for calls (not for "none").
  bool active() const { return choice != ToolChoiceKind::none; }
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat request, checked: every problem is an
// ApiError (400) whose param names the field (e.g. "tools[1].function.name"). nullopt when the
// request has no tools (then tool_choice must be absent or "none", as OpenAI requires).
std::optional<ToolRequest> parse_tool_request(const nlohmann::ordered_json& body);

// The call format of a template (see the top of this file).
ToolCallFormat tool_call_format(const ChatTemplate& chat_template);

// Put the tools into a conversation for a template: a template with a tool section gets
// inputs.tools_json; one without gets a system message describing the tools and the Hermes call
// format (merged into the conversation's own system message when it has one), and earlier
// assistant calls / tool answers written as Hermes text.
void add_tools_to_prompt(const ToolRequest& tools, const ChatTemplate& chat_template, ChatTemplateInputs& inputs);

// The system text add_tools_to_prompt writes for templates without a tool section.
std::string default_tools_system_text(const nlohmann::ordered_json& tools);

// "required" / a named choice, enforced: the grammar of exactly one call in the template's format,
// an alternative per allowed function, e.g. for Hermes
//   <tool_call>\n{"name": "get_weather", "arguments": <JSON valid under its parameters>}\n</tool_call>
// nullopt for "auto" and "none". A parameters schema the grammar cannot enforce is a 400 naming
// its path (tools[i].function.parameters.…).
std::optional<Grammar> tool_call_grammar(const ToolRequest& tools, ToolCallFormat format);

// One parsed call. arguments: the JSON text of the arguments object (OpenAI sends a string).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

// An incremental parser of one choice's output. feed() takes each new piece of text and returns
// what is certain so far: content text (outside any call) and completed calls. Text that might
// still turn into a call ("<tool_" ...) is held back until it is decided. finish() flushes.
// A call whose JSON does not parse, or names a function that was not offered, is given back as
// content, unchanged (the client sees what the model wrote).
class ToolCallParser {
 public:
  ToolCallParser(ToolCallFormat format, std::vector<std::string> names, bool parallel);

  struct Output {
    std::string content;          // new content text
    std::vector<ToolCall> calls;  // calls completed by this piece
  };
  Output feed(std::string_view text);
  Output finish();
  int calls_so_far() const { return calls_; }

 private:
  void drain(Output& out, bool at_end);
  bool parse_call(std::string_view json_text, ToolCall& call) const;
  void add_call(Output& out, ToolCall call);

  ToolCallFormat format_;
  std::vector<std::string> names_;
  bool parallel_;
  std::string pending_;  // text not yet given out
  bool in_call_ = false; // hermes: inside <tool_call> ... (pending_ holds the call's text)
  int calls_ = 0;
  enum class Llama3Mode { undecided, json, text } llama3_mode_ = Llama3Mode::undecided;
};

// Whole-text convenience: feed + finish.
ToolCallParser::Output parse_tool_calls(std::string_view text, ToolCallFormat format, const ToolRequest& tools);

// A fresh call id, "call_" + 24 random hex digits.
std::string new_tool_call_id();

}  // namespace journey::server
