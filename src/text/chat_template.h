// Chat templates: the model's own Jinja template (tokenizer_config.json "chat_template",
// chat_template.jinja, or GGUF tokenizer.chat_template), rendered by a Jinja subset written here,
// with a named built-in fallback for models that ship none (stories260K: plain prompt).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace journey {

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
  // OpenAI tool calling, as the template sees it (Hugging Face's message dict). Empty = the key is
  // absent from the message (templates test `'tool_calls' in message`).
  std::string tool_calls_json;  // assistant: a JSON list of {"id", "type", "function": {"name", "arguments": object}}
  std::string tool_call_id;     // tool: the id of the call this message answers
  std::string name;             // tool: the function's name
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // strftime_now() in templates (Llama 3.2): < 0 renders the current local time; otherwise this
  // moment (seconds since the epoch) in UTC, for reproducible prompts and tests.
  std::int64_t now_unix_seconds = -1;
  // Extra template variables as a JSON object text, e.g. {"enable_thinking": false} (Qwen3);
  // "" for none. They are set after messages/bos/eos and override them.
  std::string extra_context_json;
  // The request's tools as a JSON list of {"type": "function", "function": {...}}; "" = no tools
  // (then `tools` is undefined in the template, as Hugging Face leaves it).
  std::string tools_json;
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  virtual std::string render(const ChatTemplateInputs& inputs) const = 0;  // throws journey::Error
  virtual std::string name() const = 0;  // "jinja:<source>" or "builtin:plain" ...
  // Whether the template renders a `tools` list itself (Qwen2.5, Llama 3.1 ...). When it does not,
  // the server describes the tools in a system message (server/tool_calls.h).
  virtual bool renders_tools() const { return false; }
  // The Jinja source ("" for the plain format): the tool-call format is read from it.
  virtual std::string_view source() const { return ""; }
};

// Parse Jinja source; unsupported syntax is reported with line/column.
std::unique_ptr<ChatTemplate> make_jinja_template(const std::string& source, const std::string& origin);
// Built-in formats: "plain" (contents joined, for base models), "chatml", "llama2", "llama3".
std::unique_ptr<ChatTemplate> make_builtin_template(const std::string& name);

struct ModelChatTemplate {
  std::unique_ptr<ChatTemplate> chat_template;
  std::string bos_token;  // as tokenizer_config.json names them ("" if unknown)
  std::string eos_token;
};
// Template for a model directory / GGUF file / tokenizer-only directory; falls back to "plain".
ModelChatTemplate load_chat_template(const std::filesystem::path& path);

class Tokenizer;

struct RenderedPrompt {
  std::string text;      // what the template produced
  std::vector<int> ids;  // [P] its tokens, special-token strings parsed as their ids
};

// Render a conversation with the model's template (its BOS/EOS strings filled in) and tokenize the
// result. The tokenizer adds BOS only if the template did not already write the BOS text: a
// second BOS is a different prompt, and models answer it differently.
RenderedPrompt render_and_encode(const ModelChatTemplate& model_template, const Tokenizer& tokenizer,
                                 ChatTemplateInputs inputs);

}  // namespace journey
