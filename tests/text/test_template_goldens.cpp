// Real model templates (Qwen2.5, Qwen3, Llama 3 / 3.1 / 3.2, DeepSeek-R1-distill, Phi-3.5,
// Gemma 2) and the llama.cpp case templates, rendered by journey and compared byte for byte with
// the goldens that tools/make_template_goldens.py wrote with the reference Jinja2 (Python).
#include <doctest/doctest.h>

#include "chat_test_util.h"
#include "core/error.h"

namespace journey {
namespace {

using json = nlohmann::ordered_json;

struct Tally {
  int renders = 0;
  int errors_expected = 0;
};

// Renders every entry of one golden "renders" list and checks it.
void check_renders(const ChatTemplate& tmpl, const std::string& label, const std::string& bos, const std::string& eos,
                   std::int64_t now, const json& renders, Tally& tally, const std::string& tools_json = "") {
  for (const auto& r : renders) {
    ChatTemplateInputs inputs;
    inputs.messages = test::messages_from_json(r.at("messages"));
    inputs.add_generation_prompt = r.at("add_generation_prompt").get<bool>();
    inputs.bos_token = bos;
    inputs.eos_token = eos;
    inputs.now_unix_seconds = now;
    inputs.tools_json = tools_json;
    if (!r.at("extra_context").empty()) inputs.extra_context_json = r.at("extra_context").dump();
    std::string where = label + " / " + r.at("conversation").get<std::string>() +
                        " / add_generation_prompt=" + (inputs.add_generation_prompt ? "true" : "false") +
                        (inputs.extra_context_json.empty() ? "" : " / " + inputs.extra_context_json);
    ++tally.renders;
    if (r.contains("expected_error")) {
      ++tally.errors_expected;
      const std::string message = r.at("expected_error").get<std::string>();
      try {
        std::string out = tmpl.render(inputs);
        FAIL_CHECK(where, ": expected the template to raise \"", message, "\", but it rendered ", out.size(), " bytes");
      } catch (const Error& e) {
        CHECK_MESSAGE(std::string(e.what()).find(message) != std::string::npos, where, ": error \"", e.what(),
                      "\" does not contain \"", message, "\"");
      }
      continue;
    }
    const std::string expected = r.at("expected").get<std::string>();
    try {
      std::string difference = test::first_difference(expected, tmpl.render(inputs));
      if (!difference.empty()) FAIL_CHECK(where, ": ", difference);
    } catch (const Error& e) {
      FAIL_CHECK(where, ": threw ", std::string(e.what()));
    }
  }
}

void check_header(const json& doc, const std::string& file) {
  REQUIRE_MESSAGE(doc.at("magic") == "journey-chat-template-golden", file);
  REQUIRE_MESSAGE(doc.at("version") == 1, file);
}

TEST_CASE("real model templates match the Jinja2 goldens") {
  const char* files[] = {"Qwen-Qwen2.5-7B-Instruct", "hf-qwen3", "hf-llama3-instruct",
                         "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
                         "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "microsoft-Phi-3.5-mini-instruct",
                         "google-gemma-2-2b-it"};
  Tally tally;
  for (const char* name : files) {
    const std::string file = std::string("tests/golden/templates/") + name + ".json";
    json doc = test::read_repo_json(file);
    check_header(doc, file);
    const std::string template_file = doc.at("template_file").get<std::string>();
    auto tmpl = make_jinja_template(test::read_repo_file(template_file), template_file);
    check_renders(*tmpl, name, doc.at("bos_token"), doc.at("eos_token"), doc.at("now_unix_seconds"), doc.at("renders"),
                  tally);
  }
  MESSAGE("model-template goldens: ", tally.renders, " renders (", tally.errors_expected, " expected errors)");
  CHECK(tally.renders >= 8 * 16);
}

TEST_CASE("templates with a tool section render tools, tool calls and tool answers as Jinja2 does") {
  const std::string file = "tests/golden/templates/tool-templates.json";
  json doc = test::read_repo_json(file);
  check_header(doc, file);
  Tally tally;
  for (const auto& entry : doc.at("templates")) {
    const std::string template_file = entry.at("template_file").get<std::string>();
    auto tmpl = make_jinja_template(test::read_repo_file(template_file), template_file);
    CHECK_MESSAGE(tmpl->renders_tools(), template_file);
    check_renders(*tmpl, template_file, entry.at("bos_token"), entry.at("eos_token"), doc.at("now_unix_seconds"),
                  entry.at("renders"), tally, doc.at("tools").dump());
  }
  MESSAGE("tool-template goldens: ", tally.renders, " renders");
  CHECK(tally.renders == 4 * 6);
  CHECK_FALSE(make_builtin_template("plain")->renders_tools());
  CHECK_FALSE(make_builtin_template("chatml")->renders_tools());
}

TEST_CASE("llama.cpp case templates rendered raw match the Jinja2 goldens") {
  const std::string file = "tests/golden/templates/llamacpp-case-templates.json";
  json doc = test::read_repo_json(file);
  check_header(doc, file);
  auto cases = test::read_repo_json(doc.at("cases_file").get<std::string>());
  REQUIRE(doc.at("templates").size() == cases.at("cases").size());
  Tally tally;
  for (std::size_t i = 0; i < cases.at("cases").size(); ++i) {
    const auto& entry = doc.at("templates")[i];
    const auto& c = cases.at("cases")[i];
    REQUIRE(entry.at("name") == c.at("name"));
    const std::string name = c.at("name").get<std::string>();
    auto tmpl = make_jinja_template(c.at("template_str").get<std::string>(), name);
    check_renders(*tmpl, name, entry.at("bos_token"), entry.at("eos_token"), doc.at("now_unix_seconds"),
                  entry.at("renders"), tally);
  }
  MESSAGE("llama.cpp case-template goldens: ", tally.renders, " renders (", tally.errors_expected, " expected errors)");
}

}  // namespace
}  // namespace journey
