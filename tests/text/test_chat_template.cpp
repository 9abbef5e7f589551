// Built-in formats and finding a model's template on disk.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "chat_test_util.h"
#include "core/error.h"

namespace journey {
namespace {

std::vector<ChatMessage> llamacpp_conversation() {
  return test::messages_from_json(
      test::read_repo_json("tests/data/chat-templates/test-chat-template.cases.json").at("conversation"));
}

std::string expected_case(const std::string& name) {
  const auto cases = test::read_repo_json("tests/data/chat-templates/test-chat-template.cases.json");
  for (const auto& c : cases.at("cases"))
    if (c.at("name") == name) return c.at("expected_output").get<std::string>();
  throw std::runtime_error("no case " + name);
}

TEST_CASE("built-in chatml and llama3 match llama.cpp's expected strings") {
  ChatTemplateInputs inputs;
  inputs.messages = llamacpp_conversation();
  CHECK(make_builtin_template("chatml")->render(inputs) == expected_case("teknium/OpenHermes-2.5-Mistral-7B"));
  CHECK(make_builtin_template("llama3")->render(inputs) == expected_case("Llama-3"));
  CHECK(make_builtin_template("llama3")->name() == "builtin:llama3");
}

// Expected string from python3-jinja2 rendering the same template source (trim/lstrip blocks).
TEST_CASE("built-in llama2 folds the system prompt into the first user turn") {
  ChatTemplateInputs inputs;
  inputs.messages = {{"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello"}, {"user", "Bye"}};
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  CHECK(make_builtin_template("llama2")->render(inputs) ==
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
}

TEST_CASE("built-in plain joins contents with newlines and adds nothing") {
  ChatTemplateInputs inputs;
  inputs.messages = {{"system", "Once upon a time"}, {"user", "there was a cat"}};
  inputs.bos_token = "<s>";
  auto plain = make_builtin_template("plain");
  CHECK(plain->render(inputs) == "Once upon a time\nthere was a cat");
  CHECK(plain->name() == "builtin:plain");
  CHECK_THROWS_WITH_AS(make_builtin_template("vicuna"), doctest::Contains("unknown built-in chat template 'vicuna'"), Error);
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("journey-chat-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
  static inline int counter = 0;
};

TEST_CASE("load_chat_template reads tokenizer_config.json (Qwen2.5)") {
  TempDir dir;
  dir.write("tokenizer_config.json", test::read_repo_file("tests/data/chat-templates/qwen2.5-instruct.tokenizer_config.json"));
  auto loaded = load_chat_template(dir.path);
  CHECK(loaded.bos_token == "");  // null in the file
  CHECK(loaded.eos_token == "<|im_end|>");
  CHECK(loaded.chat_template->name().rfind("jinja:", 0) == 0);
  ChatTemplateInputs inputs;
  inputs.messages = {{"user", "Hi"}};
  // Qwen2.5 inserts its default system prompt when none is given (template text, not ours).
  CHECK(loaded.chat_template->render(inputs) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("load_chat_template: list of named templates, AddedToken objects, chat_template.jinja, fallbacks") {
  SUBCASE("list picks default; bos/eos as {content}") {
    TempDir dir;
    dir.write("tokenizer_config.json",
              R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
                  "chat_template": [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "{{ bos_token }}D"}]})");
    auto loaded = load_chat_template(dir.path);
    CHECK(loaded.bos_token == "<s>");
    CHECK(loaded.eos_token == "</s>");
    ChatTemplateInputs inputs;
    inputs.bos_token = loaded.bos_token;
    CHECK(loaded.chat_template->render(inputs) == "<s>D");
  }
  SUBCASE("chat_template.jinja wins over the JSON field") {
    TempDir dir;
    dir.write("tokenizer_config.json", R"({"chat_template": "json"})");
    dir.write("chat_template.jinja", "file\n");
    CHECK(load_chat_template(dir.path).chat_template->render({}) == "file");
  }
  SUBCASE("no template falls back to plain") {
    TempDir dir;
    dir.write("config.json", "{}");
    CHECK(load_chat_template(dir.path).chat_template->name() == "builtin:plain");
  }
  SUBCASE("bad field types are errors naming the file and field") {
    TempDir dir;
    dir.write("tokenizer_config.json", R"({"chat_template": 42})");
    CHECK_THROWS_WITH_AS(load_chat_template(dir.path), doctest::Contains("field 'chat_template'"), Error);
    dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "other", "template": "x"}]})");
    CHECK_THROWS_WITH_AS(load_chat_template(dir.path), doctest::Contains("no template named \"default\""), Error);
    dir.write("tokenizer_config.json", R"({"eos_token": 7})");
    CHECK_THROWS_WITH_AS(load_chat_template(dir.path), doctest::Contains("field 'eos_token'"), Error);
    dir.write("tokenizer_config.json", R"({"chat_template": )");
    CHECK_THROWS_WITH_AS(load_chat_template(dir.path), doctest::Contains("not valid JSON"), Error);
  }
  SUBCASE("missing path") {
    CHECK_THROWS_WITH_AS(load_chat_template("/nonexistent/model"), doctest::Contains("no such file"), Error);
  }
}

}  // namespace
}  // namespace journey

namespace journey {
namespace {

// A minimal GGUF v3 file (metadata only, no tensors), written byte by byte per the GGUF spec.
struct GgufWriter {
  std::string bytes = std::string("GGUF", 4);
  template <typename T>
  void put(T v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void put_string(const std::string& s) {
    put<std::uint64_t>(s.size());
    bytes += s;
  }
  void kv_string(const std::string& key, const std::string& value) {
    put_string(key);
    put<std::uint32_t>(8);  // GGUF_TYPE_STRING
    put_string(value);
  }
  void kv_u32(const std::string& key, std::uint32_t value) {
    put_string(key);
    put<std::uint32_t>(4);  // GGUF_TYPE_UINT32
    put<std::uint32_t>(value);
  }
  void kv_string_array(const std::string& key, const std::vector<std::string>& values) {
    put_string(key);
    put<std::uint32_t>(9);  // GGUF_TYPE_ARRAY
    put<std::uint32_t>(8);
    put<std::uint64_t>(values.size());
    for (const auto& v : values) put_string(v);
  }
};

std::filesystem::path write_gguf(const std::filesystem::path& dir, bool with_template) {
  GgufWriter w;
  w.put<std::uint32_t>(3);                          // version
  w.put<std::uint64_t>(0);                          // tensor count
  w.put<std::uint64_t>(with_template ? 5 : 4);      // metadata count
  w.kv_string("general.architecture", "llama");
  w.kv_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hi"});
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  if (with_template)
    w.kv_string("tokenizer.chat_template",
                "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}");
  while (w.bytes.size() % 32) w.bytes += '\0';  // data section alignment
  auto path = dir / (with_template ? "with-template.gguf" : "no-template.gguf");
  std::ofstream(path, std::ios::binary) << w.bytes;
  return path;
}

TEST_CASE("load_chat_template reads tokenizer.chat_template and BOS/EOS from GGUF metadata") {
  TempDir dir;
  auto loaded = load_chat_template(write_gguf(dir.path, true));
  CHECK(loaded.bos_token == "<s>");
  CHECK(loaded.eos_token == "</s>");
  ChatTemplateInputs inputs;
  inputs.messages = {{"user", "Hi"}};
  inputs.bos_token = loaded.bos_token;
  inputs.eos_token = loaded.eos_token;
  CHECK(loaded.chat_template->render(inputs) == "<s>[user]Hi</s>");

  auto plain = load_chat_template(write_gguf(dir.path, false));
  CHECK(plain.chat_template->name() == "builtin:plain");
  CHECK(plain.bos_token == "<s>");
}

}  // namespace
}  // namespace journey
