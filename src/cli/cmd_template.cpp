// journey template — render a conversation with a model's chat template and print the prompt
// exactly as the model will see it (no trailing newline is added), so templates can be checked
// by eye or diffed against another implementation.
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "assets/llama2c.h"
#include "cli/commands.h"
#include "core/error.h"
#include "text/chat_template.h"

namespace journey::cli {
namespace {

struct TemplateArgs {
  std::string model;
  std::string messages_file;
  bool add_generation_prompt = false;
  std::string system;
};

// An OpenAI-style list of {"role": string, "content": string}.
std::vector<ChatMessage> read_messages(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot open messages file ", file);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail(file, ": not valid JSON: ", e.what());
  }
  if (!doc.is_array())
    fail(file, ": expected a JSON list of messages like [{\"role\": \"user\", \"content\": \"Hi\"}], found ",
         doc.type_name());
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& m = doc[i];
    if (!m.is_object()) fail(file, ": message ", i, ": expected an object with role and content, found ", m.type_name());
    for (const char* field : {"role", "content"}) {
      if (!m.contains(field)) fail(file, ": message ", i, ": missing field '", field, "'");
      if (!m[field].is_string())
        fail(file, ": message ", i, ": field '", field, "': expected a string, found ", m[field].type_name());
    }
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

// A FILE named with --model must hold a chat template (or be a checkpoint that has none, which
// renders with the plain format); anything else is a mistake worth saying, not a silent fallback.
void check_template_file(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(path)) return;  // directories (and missing paths) are the loader's to judge
  const std::string ext = path.extension().string();
  if (ext == ".jinja" || ext == ".gguf" || is_llama2c_file(path)) return;
  if (ext == ".json") {
    std::ifstream in(path, std::ios::binary);
    nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("chat_template")) return;
    fail(path.string(), " is not a chat template: ",
         doc.is_discarded() ? std::string("it is not valid JSON")
                            : cat("it has no \"chat_template\" field (", doc.is_object() ? "a JSON object with " + std::to_string(doc.size()) + " fields" : std::string(doc.type_name()), ")"),
         "; give a model directory, a tokenizer_config.json with a chat_template, a .jinja file or a GGUF file");
  }
  fail(path.string(), " is not a chat template (expected a model directory, a tokenizer_config.json, a .jinja file, "
       "a GGUF file or a llama2.c checkpoint)");
}

void run_template(const TemplateArgs& args) {
  const std::string path = args.model.empty() ? std::string(default_model_path()) : args.model;
  check_template_file(path);
  ModelChatTemplate model_template = load_chat_template(path);
  if (model_template.chat_template->name() == "builtin:plain")
    std::cerr << "(" << path << " has no chat template: the built-in plain format passes the messages' text through)\n";
  ChatTemplateInputs inputs;
  inputs.messages = read_messages(args.messages_file);
  if (!args.system.empty()) {
    if (!inputs.messages.empty() && inputs.messages.front().role == "system")
      inputs.messages.front().content = args.system;  // --system replaces the file's system message
    else
      inputs.messages.insert(inputs.messages.begin(), ChatMessage{"system", args.system});
  }
  inputs.add_generation_prompt = args.add_generation_prompt;
  inputs.bos_token = model_template.bos_token;
  inputs.eos_token = model_template.eos_token;
  std::cout << model_template.chat_template->render(inputs) << std::flush;
}

}  // namespace

void register_template(CLI::App& app) {
  auto args = std::make_shared<TemplateArgs>();
  auto* cmd = app.add_subcommand("template", "Render a conversation with the model's chat template and print the prompt");
  cmd->add_option("--model", args->model, "Model directory, GGUF file, tokenizer_config.json or .jinja file (default: the shipped model)");
  cmd->add_option("--messages", args->messages_file, "JSON file: a list of {\"role\", \"content\"} messages")->required();
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt, "End with the header that starts the assistant's reply");
  cmd->add_option("--system", args->system, "System message (replaces the file's first system message, or is prepended)");
  cmd->callback([args] { run_template(*args); });
}

}  // namespace journey::cli
