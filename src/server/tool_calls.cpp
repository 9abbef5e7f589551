#include "server/tool_calls.h"

#include <algorithm>
#include <random>

#include "core/error.h"
#include "core/untrusted.h"
#include "grammar/token_mask.h"
#include "server/openai_api.h"
#include "text/chat_template.h"

namespace journey::server {

namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

size_t depth_of(const ojson& v) {
  // Iterative: a schema is outside input; recursion depth must not follow it.
  size_t deepest = 0;
  std::vector<std::pair<const ojson*, size_t>> stack = {{&v, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    deepest = std::max(deepest, depth);
    if (node->is_structured())
      for (const ojson& child : *node) stack.push_back({&child, depth + 1});
  }
  return deepest;
}

void check_keys(const ojson& object, std::initializer_list<std::string_view> known, const std::string& where) {
  for (const auto& [key, value] : object.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      bad(where + "." + key, cat("unknown field '", excerpt(key), "' in ", where));
}

bool all_space(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
}

std::string rtrim_space(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && all_space(s.substr(end - 1, 1))) --end;
  return std::string(s.substr(0, end));
}

// The longest suffix of text that is a proper prefix of tag: text that may yet become the tag.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

}  // namespace

std::optional<ToolRequest> parse_tool_request(const nlohmann::ordered_json& body) {
  auto present = [&](const char* name) { return body.contains(name) && !body[name].is_null(); };
  ToolRequest request;
  if (present("parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean())
      bad("parallel_tool_calls", cat("'parallel_tool_calls' must be a boolean, got ", body["parallel_tool_calls"].type_name()));
    request.parallel = body["parallel_tool_calls"].get<bool>();
  }
  if (!present("tools")) {
    if (present("tool_choice") && body["tool_choice"] != "none")
      bad("tool_choice", "'tool_choice' is only allowed when 'tools' are given");
    return std::nullopt;
  }
  const ojson& tools = body["tools"];
  if (!tools.is_array()) bad("tools", cat("'tools' must be a list, got ", tools.type_name()));
  if (tools.empty()) bad("tools", "'tools' must hold at least one tool (leave it out for none)");
  if (tools.size() > kMaxTools) bad("tools", cat("'tools' may hold at most ", kMaxTools, " tools, got ", tools.size()));
  if (tools.dump().size() > kMaxToolsJsonBytes)
    bad("tools", cat("'tools' may take at most ", kMaxToolsJsonBytes, " bytes as JSON"));
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = cat("tools[", i, "]");
    const ojson& tool = tools[i];
    if (!tool.is_object()) bad(where, cat(where, " must be an object, got ", tool.type_name()));
    check_keys(tool, {"type", "function"}, where);
    if (!tool.contains("type") || tool["type"] != "function")
      bad(where + ".type", cat(where, ".type must be \"function\" (the only tool type), got ",
                               tool.contains("type") ? excerpt_json(tool["type"]) : "nothing"));
    if (!tool.contains("function") || !tool["function"].is_object())
      bad(where + ".function", cat(where, ".function must be an object"));
    const ojson& function = tool["function"];
    check_keys(function, {"name", "description", "parameters", "strict"}, where + ".function");
    if (!function.contains("name") || !function["name"].is_string() || !valid_name(function["name"].get<std::string>()))
      bad(where + ".function.name", cat(where, ".function.name must be 1 to ", kMaxToolNameBytes,
                                        " characters of a-z, A-Z, 0-9, '_' and '-', got ",
                                        function.contains("name") ? excerpt_json(function["name"]) : "nothing"));
    const std::string name = function["name"].get<std::string>();
    if (std::find(request.names.begin(), request.names.end(), name) != request.names.end())
      bad(where + ".function.name", cat("two tools are named '", name, "'"));
    if (function.contains("description") && !function["description"].is_string())
      bad(where + ".function.description", cat(where, ".function.description must be a string"));
    if (function.contains("strict") && !function["strict"].is_boolean())
      bad(where + ".function.strict", cat(where, ".function.strict must be a boolean"));
    if (function.contains("parameters")) {
      const ojson& parameters = function["parameters"];
      if (!parameters.is_object())
        bad(where + ".function.parameters", cat(where, ".function.parameters must be a JSON schema object, got ",
                                                parameters.type_name()));
      if (depth_of(parameters) > kMaxToolSchemaDepth)
        bad(where + ".function.parameters", cat(where, ".function.parameters is nested deeper than ",
                                                kMaxToolSchemaDepth, " levels"));
    }
    request.names.push_back(name);
  }
  request.tools = tools;

  if (present("tool_choice")) {
    const ojson& choice = body["tool_choice"];
    if (choice.is_string()) {
      const std::string c = choice.get<std::string>();
      if (c == "auto") request.choice = ToolChoiceKind::automatic;
      else if (c == "none") request.choice = ToolChoiceKind::none;
      else if (c == "required") request.choice = ToolChoiceKind::required;
      else bad("tool_choice", cat("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                                  "\"function\": {\"name\": ...}}, got \"", excerpt(c), "\""));
    } else if (choice.is_object() && choice.contains("type") && choice["type"] == "function" &&
               choice.contains("function") && choice["function"].is_object() && choice["function"].contains("name") &&
               choice["function"]["name"].is_string()) {
      check_keys(choice, {"type", "function"}, "tool_choice");
      check_keys(choice["function"], {"name"}, "tool_choice.function");
      request.choice = ToolChoiceKind::named;
      request.chosen_name = choice["function"]["name"].get<std::string>();
      if (std::find(request.names.begin(), request.names.end(), request.chosen_name) == request.names.end())
        bad("tool_choice.function.name", cat("'tool_choice' names the function '", excerpt(request.chosen_name),
                                             "', which is not among 'tools'"));
    } else {
      bad("tool_choice", cat("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                             "\"function\": {\"name\": ...}}, got ", excerpt_json(choice)));
    }
  }
  return request;
}

ToolCallFormat tool_call_format(const ChatTemplate& chat_template) {
  // Llama 3.1/3.2 ask for {"name": ..., "parameters": ...}; Qwen (and our default) for <tool_call>.
  const std::string_view source = chat_template.source();
  if (chat_template.renders_tools() && source.find("<tool_call>") == std::string_view::npos &&
      source.find("\"parameters\": dictionary") != std::string_view::npos)
    return ToolCallFormat::llama3_json;
  return ToolCallFormat::hermes;
}

namespace {
// Rendered by journey's Jinja interpreter so that the JSON inside is written exactly as templates
// write it (`tojson`: Python's json.dumps, ", " and ": "), the way a Hermes-trained model saw it.
// The text is Qwen2.5's own tool section (its template, minus the system-prompt lines).
constexpr const char* kDefaultToolsSource =
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call>' }}";
// One earlier call as Qwen2.5's template writes it.
constexpr const char* kHermesCallSource =
    "{{- '<tool_call>\\n{\"name\": \"' + name + '\", \"arguments\": ' }}{{- arguments | tojson }}{{- '}\\n</tool_call>' }}";

std::string render_snippet(const ChatTemplate& snippet, const ojson& variables) {
  ChatTemplateInputs inputs;
  inputs.extra_context_json = variables.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return snippet.render(inputs);
}

std::string hermes_call_text(const ojson& name, const ojson& arguments) {
  static const auto snippet = make_jinja_template(kHermesCallSource, "builtin:hermes-call");
  return render_snippet(*snippet, {{"name", name}, {"arguments", arguments}});
}
}  // namespace

std::string default_tools_system_text(const nlohmann::ordered_json& tools) {
  static const auto snippet = make_jinja_template(kDefaultToolsSource, "builtin:default-tools");
  return render_snippet(*snippet, {{"tools", tools}});
}

void add_tools_to_prompt(const ToolRequest& tools, const ChatTemplate& chat_template, ChatTemplateInputs& inputs) {
  if (chat_template.renders_tools()) {
    if (tools.active()) inputs.tools_json = tools.tools.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return;
  }
  // No tool section: earlier calls and answers become Hermes text, and the tools a system message.
  for (ChatMessage& m : inputs.messages) {
    if (!m.tool_calls_json.empty()) {
      ojson calls = ojson::parse(m.tool_calls_json);  // written by openai_api.cpp: valid
      for (const ojson& call : calls) {
        const ojson& f = call.at("function");
        if (!m.content.empty()) m.content += '\n';
        m.content += hermes_call_text(f.at("name"), f.at("arguments"));
      }
      m.tool_calls_json.clear();
    } else if (m.role == "tool") {
      m.role = "user";
      m.content = "<tool_response>\n" + m.content + "\n</tool_response>";
      m.tool_call_id.clear();
      m.name.clear();
    }
  }
  if (!tools.active()) return;
  const std::string system = default_tools_system_text(tools.tools);
  if (!inputs.messages.empty() && inputs.messages[0].role == "system")
    inputs.messages[0].content += "\n\n" + system;
  else
    inputs.messages.insert(inputs.messages.begin(), ChatMessage{"system", system});
}

std::optional<Grammar> tool_call_grammar(const ToolRequest& tools, ToolCallFormat format) {
  if (tools.choice != ToolChoiceKind::required && tools.choice != ToolChoiceKind::named) return std::nullopt;
  const bool hermes = format == ToolCallFormat::hermes;
  std::vector<Grammar> calls;
  for (size_t i = 0; i < tools.names.size(); ++i) {
    if (tools.choice == ToolChoiceKind::named && tools.names[i] != tools.chosen_name) continue;
    const ojson& function = tools.tools[i]["function"];
    const std::string path = cat("tools[", i, "].function.parameters");
    std::optional<Grammar> arguments;
    try {
      arguments = function.contains("parameters") ? Grammar::json_schema(function["parameters"], path) : Grammar::json_object();
    } catch (const SchemaError& e) {
      bad(e.path, e.what());
    }
    // The name is written by the grammar (a JSON string of a name made of [A-Za-z0-9_-]: no escapes).
    const std::string head = cat(hermes ? std::string(kHermesOpen) + "\n" : "", "{\"name\": \"", tools.names[i], "\", \"",
                                 hermes ? "arguments" : "parameters", "\": ");
    calls.push_back(Grammar::sequence({Grammar::literal(head), *arguments,
                                       Grammar::literal(hermes ? "}\n" + std::string(kHermesClose) : "}")}));
  }
  Grammar grammar = calls.size() == 1 ? calls[0] : Grammar::alternatives(calls);
  try {
    GrammarMatcher check(grammar, nullptr, {});  // throws when the grammar admits no text at all
  } catch (const Error& e) {
    bad("tools", cat("the allowed tools admit no call: ", e.what()));
  }
  return grammar;
}

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, std::vector<std::string> names, bool parallel)
    : format_(format), names_(std::move(names)), parallel_(parallel) {}

bool ToolCallParser::parse_call(std::string_view json_text, ToolCall& call) const {
  ojson value;
  try {
    value = parse_untrusted_json<ojson>(json_text, "a tool call");
  } catch (const Error&) {
    return false;
  }
  if (!value.is_object() || !value.contains("name") || !value["name"].is_string()) return false;
  call.name = value["name"].get<std::string>();
  if (std::find(names_.begin(), names_.end(), call.name) == names_.end()) return false;
  const char* keys[] = {"arguments", "parameters"};
  ojson arguments = ojson::object();
  for (const char* key : keys) {
    if (!value.contains(key)) continue;
    arguments = value[key];
    break;
  }
  if (arguments.is_string()) {  // some models write the arguments as a JSON string
    try {
      arguments = parse_untrusted_json<ojson>(arguments.get<std::string>(), "tool call arguments");
    } catch (const Error&) {
      return false;
    }
  }
  if (!arguments.is_object()) return false;
  call.arguments = arguments.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return true;
}

void ToolCallParser::add_call(Output& out, ToolCall call) {
  ++calls_;
  if (!parallel_ && calls_ > 1) return;  // parallel_tool_calls: false keeps the first call only
  call.id = new_tool_call_id();
  out.calls.push_back(std::move(call));
}

void ToolCallParser::drain(Output& out, bool at_end) {
  if (format_ == ToolCallFormat::llama3_json) {
    if (llama3_mode_ == Llama3Mode::undecided) {
      size_t start = 0;
      while (start < pending_.size() && all_space(std::string_view(pending_).substr(start, 1))) ++start;
      std::string_view rest = std::string_view(pending_).substr(start);
      if (rest.starts_with("{") || rest.starts_with(kPythonTag)) llama3_mode_ = Llama3Mode::json;
      else if (!rest.empty() && !(kPythonTag.starts_with(rest) && rest.size() < kPythonTag.size())) llama3_mode_ = Llama3Mode::text;
      else if (!at_end) return;  // nothing decisive yet
      else llama3_mode_ = Llama3Mode::text;
    }
    if (llama3_mode_ == Llama3Mode::text) {
      out.content += pending_;
      pending_.clear();
      return;
    }
    if (!at_end) return;  // a JSON answer is parsed whole, at the end
    std::string_view body = pending_;
    size_t tag = body.find(kPythonTag);
    if (tag != std::string_view::npos) body = body.substr(tag + kPythonTag.size());
    std::vector<ToolCall> calls;
    ToolCall one;
    bool ok = parse_call(body, one);
    if (ok) {
      calls.push_back(one);
    } else {  // several calls separated by ';'
      ok = body.find(';') != std::string_view::npos;
      for (size_t begin = 0; ok && begin <= body.size();) {
        size_t end = std::min(body.find(';', begin), body.size());
        ToolCall call;
        ok = parse_call(body.substr(begin, end - begin), call);
        if (ok) calls.push_back(call);
        begin = end + 1;
      }
    }
    if (ok) {
      for (ToolCall& call : calls) add_call(out, std::move(call));
    } else {
      out.content += pending_;
    }
    pending_.clear();
    return;
  }

  // Hermes. Trailing whitespace before a call, between calls and after the last one is layout,
  // not content; elsewhere whitespace is content like any other text.
  while (true) {
    if (!in_call_) {
      size_t open = pending_.find(kHermesOpen);
      if (open != std::string::npos) {
        std::string before = rtrim_space(std::string_view(pending_).substr(0, open));
        out.content += before;
        pending_.erase(0, open + kHermesOpen.size());
        in_call_ = true;
        continue;
      }
      if (at_end) {
        if (!(calls_ > 0 && all_space(pending_))) out.content += pending_;
        pending_.clear();
        return;
      }
      // Give out all but a possible start of the tag and the trailing whitespace.
      size_t keep = partial_tag_suffix(pending_, kHermesOpen);
      std::string_view certain = std::string_view(pending_).substr(0, pending_.size() - keep);
      std::string given = rtrim_space(certain);
      out.content += given;
      pending_.erase(0, given.size());
      return;
    }
    size_t close = pending_.find(kHermesClose);
    if (close == std::string::npos && !at_end) return;
    std::string_view body = std::string_view(pending_).substr(0, std::min(close, pending_.size()));
    ToolCall call;
    if (parse_call(body, call)) {
      add_call(out, std::move(call));
    } else {
      out.content += std::string(kHermesOpen) + std::string(body) + (close == std::string::npos ? "" : std::string(kHermesClose));
    }
    pending_.erase(0, close == std::string::npos ? pending_.size() : close + kHermesClose.size());
    in_call_ = false;
    if (close == std::string::npos) return;
  }
}

ToolCallParser::Output ToolCallParser::feed(std::string_view text) {
  pending_ += text;
  Output out;
  drain(out, false);
  return out;
}

ToolCallParser::Output ToolCallParser::finish() {
  Output out;
  drain(out, true);
  return out;
}

ToolCallParser::Output parse_tool_calls(std::string_view text, ToolCallFormat format, const ToolRequest& tools) {
  ToolCallParser parser(format, tools.names, tools.parallel);
  ToolCallParser::Output out = parser.feed(text);
  ToolCallParser::Output rest = parser.finish();
  out.content += rest.content;
  for (ToolCall& call : rest.calls) out.calls.push_back(std::move(call));
  return out;
}

}  // namespace journey::server
