// Chat templates: the model's own Jinja template rendered by the subset in jinja.h, the named
// built-in formats, and finding a model's template on disk (tokenizer_config.json,
// chat_template.jinja, GGUF metadata).
#include "text/chat_template.h"
#include "text/tokenizer.h"


#include <nlohmann/json.hpp>

#include "assets/gguf.h"
#include "core/error.h"
#include "core/untrusted.h"
#include "text/jinja.h"

namespace journey {
namespace {

using json = nlohmann::ordered_json;

class JinjaChatTemplate : public ChatTemplate {
 public:
  JinjaChatTemplate(const std::string& source, std::string name)
      : template_(jinja::Template::parse(source, name)),
        name_(std::move(name)),
        // A template that names `tools` anywhere is taken to have a tool section (a heuristic: a
        // template that never reads the variable cannot show the tools to the model).
        renders_tools_(source.find("tools") != std::string::npos),
        source_(source) {}

  std::string render(const ChatTemplateInputs& inputs) const override {
    jinja::Value context = jinja::default_globals(inputs.now_unix_seconds);
    jinja::ValueList messages;
    for (const auto& m : inputs.messages) {
      jinja::Value message = jinja::Value::dict(
          {{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}});
      if (!m.tool_calls_json.empty())
        message.set("tool_calls", jinja::Value::from_json(parse_untrusted_json<json>(m.tool_calls_json, name_ + ": tool_calls")));
      if (!m.tool_call_id.empty()) message.set("tool_call_id", jinja::Value(m.tool_call_id));
      if (!m.name.empty()) message.set("name", jinja::Value(m.name));
      messages.push_back(std::move(message));
    }
    context.set("messages", jinja::Value(std::move(messages)));
    context.set("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
    context.set("bos_token", jinja::Value(inputs.bos_token));
    context.set("eos_token", jinja::Value(inputs.eos_token));
    if (!inputs.tools_json.empty())
      context.set("tools", jinja::Value::from_json(parse_untrusted_json<json>(inputs.tools_json, name_ + ": tools")));
    if (!inputs.extra_context_json.empty()) {
      json extra = parse_untrusted_json<json>(inputs.extra_context_json, name_ + ": extra template variables");
      if (!extra.is_object()) fail(name_, ": extra template variables must be a JSON object, found ", extra.type_name());
      for (const auto& [key, value] : extra.items()) context.set(key, jinja::Value::from_json(value));
    }
    return template_.render(context);
  }

  std::string name() const override { return name_; }
  bool renders_tools() const override { return renders_tools_; }
  std::string_view source() const override { return source_; }

 private:
  jinja::Template template_;
  std::string name_;
  bool renders_tools_;
  std::string source_;
};

// "plain": for base models with no chat format (stories260K). The message contents, in order
// and whatever their role, joined with "\n"; nothing is added for add_generation_prompt and no
// BOS/EOS text is written (the tokenizer adds BOS as the model expects).
class PlainChatTemplate : public ChatTemplate {
 public:
  std::string render(const ChatTemplateInputs& inputs) const override {
    std::string out;
    for (std::size_t i = 0; i < inputs.messages.size(); ++i) out += (i ? "\n" : "") + inputs.messages[i].content;
    return out;
  }
  std::string name() const override { return "builtin:plain"; }
};

// The named formats are written as Jinja and rendered by the same interpreter, so the
// built-ins and model templates share one code path (and one set of tests).
// chatml: the ChatML template of teknium/OpenHermes-2.5-Mistral-7B (llama.cpp test case).
constexpr const char* kChatmlSource =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
// llama3: Meta-Llama-3-8B-Instruct's template (byte-identical to llama.cpp's "Llama-3" case),
// except that the generation prompt is only added when add_generation_prompt is true.
constexpr const char* kLlama3Source =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
// llama2: the Llama-2-chat format ([INST] ... [/INST], <<SYS>> folded into the first user
// turn), as meta-llama/Llama-2-7b-chat-hf publishes it.
constexpr const char* kLlama2Source =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

std::string read_text_file(const std::filesystem::path& path) { return read_whole_file(path.string()); }

// bos_token / eos_token in tokenizer_config.json: a string, or an AddedToken {"content": ...}.
std::string special_token(const json& config, const char* key, const std::filesystem::path& file) {
  if (!config.contains(key) || config[key].is_null()) return "";
  const json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  fail(file.string(), ": field '", key, "': expected a string or {\"content\": string}, found ", excerpt_json(value));
}

// "chat_template": a string, or a list of {"name", "template"} of which "default" is used.
std::string template_from_config(const json& config, const std::filesystem::path& file) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return "";
  const json& value = config["chat_template"];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string names;
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
          !entry["template"].is_string())
        fail(file.string(), ": field 'chat_template': list entries must be {\"name\": string, \"template\": string}, found ",
             excerpt_json(entry));
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    fail(file.string(), ": field 'chat_template': no template named \"default\" among [", excerpt(names), "]");
  }
  fail(file.string(), ": field 'chat_template': expected a string or a list of {name, template}, found ", value.type_name());
}

json read_json_file(const std::filesystem::path& path) { return read_untrusted_ordered_json_file(path.string()); }

ModelChatTemplate from_tokenizer_config(const std::filesystem::path& config_path,
                                        const std::filesystem::path& jinja_path) {
  ModelChatTemplate result;
  std::string source;
  std::string origin;
  if (std::filesystem::exists(config_path)) {
    json config = read_json_file(config_path);
    if (!config.is_object()) fail(config_path.string(), ": expected a JSON object, found ", config.type_name());
    result.bos_token = special_token(config, "bos_token", config_path);
    result.eos_token = special_token(config, "eos_token", config_path);
    source = template_from_config(config, config_path);
    origin = config_path.string();
  }
  // A separate chat_template.jinja (newer HF layout) takes precedence over the JSON field.
  if (!jinja_path.empty() && std::filesystem::exists(jinja_path)) {
    source = read_text_file(jinja_path);
    origin = jinja_path.string();
  }
  result.chat_template = source.empty() ? make_builtin_template("plain") : make_jinja_template(source, origin);
  return result;
}

ModelChatTemplate from_gguf(const std::filesystem::path& path) {
  GgufFile file = GgufFile::open(path);
  ModelChatTemplate result;
  auto token_text = [&](const char* id_key) -> std::string {
    if (!file.has(id_key) || !file.has("tokenizer.ggml.tokens")) return "";
    std::int64_t id = file.get_int(id_key);
    auto tokens = file.get_string_array("tokenizer.ggml.tokens");
    if (id < 0 || id >= std::int64_t(tokens.size()))
      fail(path.string(), ": ", id_key, " = ", id, " is outside the vocabulary of ", tokens.size(), " tokens");
    return tokens[std::size_t(id)];
  };
  result.bos_token = token_text("tokenizer.ggml.bos_token_id");
  result.eos_token = token_text("tokenizer.ggml.eos_token_id");
  if (file.has("tokenizer.chat_template"))
    result.chat_template = make_jinja_template(file.get_string("tokenizer.chat_template"),
                                               path.string() + ":tokenizer.chat_template");
  else
    result.chat_template = make_builtin_template("plain");
  return result;
}

}  // namespace

std::unique_ptr<ChatTemplate> make_jinja_template(const std::string& source, const std::string& origin) {
  return std::make_unique<JinjaChatTemplate>(source, "jinja:" + origin);
}

std::unique_ptr<ChatTemplate> make_builtin_template(const std::string& name) {
  if (name == "plain") return std::make_unique<PlainChatTemplate>();
  if (name == "chatml") return std::make_unique<JinjaChatTemplate>(kChatmlSource, "builtin:chatml");
  if (name == "llama2") return std::make_unique<JinjaChatTemplate>(kLlama2Source, "builtin:llama2");
  if (name == "llama3") return std::make_unique<JinjaChatTemplate>(kLlama3Source, "builtin:llama3");
  fail("unknown built-in chat template '", name, "' (known: plain, chatml, llama2, llama3)");
}

ModelChatTemplate load_chat_template(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail("chat template: no such file or directory: ", path.string());
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.path().extension() == ".gguf" && !fs::exists(path / "tokenizer_config.json"))
        return from_gguf(entry.path());
    return from_tokenizer_config(path / "tokenizer_config.json", path / "chat_template.jinja");
  }
  const std::string extension = path.extension().string();
  if (extension == ".gguf") return from_gguf(path);
  if (extension == ".jinja") {
    ModelChatTemplate result;
    result.chat_template = make_jinja_template(read_text_file(path), path.string());
    return result;
  }
  // A tokenizer_config.json (under any name: "qwen2.5.tokenizer_config.json" ...).
  if (extension == ".json") return from_tokenizer_config(path, fs::path());
  // A single-file checkpoint without a template (llama2.c .bin): the plain format.
  ModelChatTemplate result;
  result.chat_template = make_builtin_template("plain");
  return result;
}

RenderedPrompt render_and_encode(const ModelChatTemplate& model_template, const Tokenizer& tokenizer,
                                 ChatTemplateInputs inputs) {
  inputs.bos_token = model_template.bos_token;
  inputs.eos_token = model_template.eos_token;
  RenderedPrompt prompt;
  prompt.text = model_template.chat_template->render(inputs);
  const bool template_wrote_bos =
      !inputs.bos_token.empty() && prompt.text.find(inputs.bos_token) != std::string::npos;
  prompt.ids = tokenizer.encode(prompt.text, /*add_special=*/!template_wrote_bos, /*parse_special=*/true);
  return prompt;
}

}  // namespace journey
