// The OpenAI request surface without a server: the field table against docs/serving.md, the tool
// list checks, and the tool-call parser (every way a stream can cut the text gives the same result
// as the whole text). The server end to end is in test_openai_client.py / test_smollm2_chat.py.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "grammar/token_mask.h"
#include "server/openai_api.h"
#include "server/tool_calls.h"
#include "text/chat_template.h"

namespace journey::server {
namespace {

std::string read_repo_file(const std::string& relative) {
  std::ifstream in(std::string(JOURNEY_SOURCE_DIR) + "/" + relative, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot open ", relative);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_CASE("docs/serving.md's table of request fields is the one the server checks") {
  const std::string doc = read_repo_file("docs/serving.md");
  const std::string begin = "<!-- api-fields:begin (generated from kApiFields in src/server/openai_api.cpp) -->\n";
  const std::string end = "<!-- api-fields:end -->";
  const size_t from = doc.find(begin);
  const size_t to = doc.find(end);
  REQUIRE_MESSAGE(from != std::string::npos, "docs/serving.md has no line ", begin);
  REQUIRE(to != std::string::npos);
  const std::string table = doc.substr(from + begin.size(), to - from - begin.size());
  CHECK_MESSAGE(table == api_fields_markdown(),
                "docs/serving.md's field table differs from the server's; paste the output of "
                "`journey serve --print-fields` between the markers");
}

TEST_CASE("fields: unknown, of the other endpoint, unsupported, and null as absent") {
  auto refused = [](const json& body, unsigned endpoint, const std::string& param, const std::string& words) {
    try {
      check_fields(body, endpoint);
      FAIL_CHECK("accepted ", body.dump());
    } catch (const ApiError& e) {
      CHECK(e.status == 400);
      CHECK(e.param == param);
      CHECK_MESSAGE(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
  };
  refused({{"prompt", "x"}, {"temprature", 1}}, kCompletionsEndpoint, "temprature", "unknown field 'temprature'");
  refused({{"prompt", "x"}, {"messages", json::array()}}, kCompletionsEndpoint, "messages", "not a field of /v1/completions");
  refused({{"messages", json::array()}, {"echo", true}}, kChatEndpoint, "echo", "not a field of /v1/chat/completions");
  refused({{"prompt", "x"}, {"suffix", "y"}}, kCompletionsEndpoint, "suffix", "not supported");
  refused({{"messages", json::array()}, {"functions", json::array()}}, kChatEndpoint, "functions", "legacy");
  CHECK_NOTHROW(check_fields({{"prompt", "x"}, {"suffix", nullptr}, {"seed", 1}, {"logit_bias", json::object()}},
                             kCompletionsEndpoint));
  for (const ApiField& f : api_fields()) CHECK_MESSAGE(f.endpoints != 0, f.name);
}

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}])");
}

TEST_CASE("tools and tool_choice are checked, naming the field") {
  auto refused = [](const json& body, const std::string& param) {
    try {
      parse_tool_request(body);
      FAIL_CHECK("accepted ", body.dump());
    } catch (const ApiError& e) {
      CHECK_MESSAGE(e.param == param, e.what());
    }
  };
  json ok = {{"tools", weather_tools()}};
  auto parsed = parse_tool_request(ok);
  REQUIRE(parsed);
  CHECK(parsed->names == std::vector<std::string>{"get_weather", "add"});
  CHECK(parsed->choice == ToolChoiceKind::automatic);
  CHECK(parsed->tools.dump() == weather_tools().dump());  // key order kept for the template
  CHECK_FALSE(parse_tool_request(json{{"tool_choice", "none"}}));

  json t = weather_tools();
  t[0]["function"]["name"] = "get weather";
  refused({{"tools", t}}, "tools[0].function.name");
  t = weather_tools();
  t[1]["function"]["name"] = "get_weather";
  refused({{"tools", t}}, "tools[1].function.name");
  t = weather_tools();
  t[0]["type"] = "retrieval";
  refused({{"tools", t}}, "tools[0].type");
  t = weather_tools();
  t[0]["function"]["parameters"] = "object";
  refused({{"tools", t}}, "tools[0].function.parameters");
  t = weather_tools();
  json deep = json::object();
  for (int i = 0; i < 40; ++i) deep = json{{"items", deep}};
  t[0]["function"]["parameters"] = deep;
  refused({{"tools", t}}, "tools[0].function.parameters");
  t = weather_tools();
  t[0]["function"]["extra"] = 1;
  refused({{"tools", t}}, "tools[0].function.extra");
  refused({{"tools", json::array()}}, "tools");
  refused({{"tools", weather_tools()}, {"tool_choice", "sometimes"}}, "tool_choice");
  refused({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
          "tool_choice.function.name");
  refused({{"tool_choice", "auto"}}, "tool_choice");
  refused({{"tools", weather_tools()}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls");
  auto named = parse_tool_request({{"tools", weather_tools()},
                                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}}});
  CHECK(named->choice == ToolChoiceKind::named);
  CHECK(named->chosen_name == "add");
}

ToolRequest offered() { return *parse_tool_request({{"tools", weather_tools()}}); }

// The same text fed whole and cut at every byte: the same content and calls.
void check_every_cut(const std::string& text, ToolCallFormat format, const std::string& content,
                     const std::vector<std::pair<std::string, std::string>>& calls) {
  ToolRequest tools = offered();
  auto whole = parse_tool_calls(text, format, tools);
  CHECK(whole.content == content);
  REQUIRE(whole.calls.size() == calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(whole.calls[i].name == calls[i].first);
    CHECK(whole.calls[i].arguments == calls[i].second);
    CHECK(whole.calls[i].id.rfind("call_", 0) == 0);
  }
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ToolCallParser parser(format, tools.names, true);
    auto a = parser.feed(text.substr(0, cut));
    auto b = parser.feed(text.substr(cut));
    auto c = parser.finish();
    INFO("cut at ", cut);
    CHECK(a.content + b.content + c.content == content);
    CHECK(a.calls.size() + b.calls.size() + c.calls.size() == calls.size());
  }
  // one byte at a time
  ToolCallParser parser(format, tools.names, true);
  std::string streamed;
  size_t n = 0;
  for (char ch : text) {
    auto o = parser.feed(std::string(1, ch));
    streamed += o.content;
    n += o.calls.size();
  }
  auto o = parser.finish();
  CHECK(streamed + o.content == content);
  CHECK(n + o.calls.size() == calls.size());
}

TEST_CASE("Hermes calls: content around them, several calls, an unclosed last call, invalid calls given back") {
  const auto hermes = ToolCallFormat::hermes;
  check_every_cut("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", hermes,
                  "", {{"get_weather", R"({"city":"Paris"})"}});
  check_every_cut("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"巴黎\"}}\n</tool_call>\n"
                  "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>\n",
                  hermes, "Let me check.", {{"get_weather", R"({"city":"巴黎"})"}, {"add", R"({"a":2,"b":3})"}});
  check_every_cut("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}", hermes, "", {{"add", R"({"a":1})"}});
  // arguments written as a JSON string
  check_every_cut("<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", hermes, "",
                  {{"add", R"({"a":1})"}});
  // not calls: plain text with a '<', an unknown function, broken JSON
  check_every_cut("a < b and <tool but not a call ", hermes, "a < b and <tool but not a call ", {});
  check_every_cut("<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", hermes,
                  "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", {});
  check_every_cut("<tool_call>{\"name\": \"add\", \"arguments\": {</tool_call>", hermes,
                  "<tool_call>{\"name\": \"add\", \"arguments\": {</tool_call>", {});
}

TEST_CASE("Llama 3 JSON calls: a whole-answer object, python_tag, ';' between calls, text left alone") {
  const auto llama = ToolCallFormat::llama3_json;
  check_every_cut("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", llama, "",
                  {{"get_weather", R"({"city":"Paris"})"}});
  check_every_cut("<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", llama, "",
                  {{"add", R"({"a":1,"b":2})"}});
  check_every_cut("{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"name\": \"add\", \"parameters\": {\"a\": 2}}", llama,
                  "", {{"add", R"({"a":1})"}, {"add", R"({"a":2})"}});
  check_every_cut("It is sunny. {\"name\": \"add\"}", llama, "It is sunny. {\"name\": \"add\"}", {});
  check_every_cut("{\"not\": \"a call\"}", llama, "{\"not\": \"a call\"}", {});
}

TEST_CASE("parallel_tool_calls false keeps the first call") {
  ToolRequest tools = offered();
  tools.parallel = false;
  auto out = parse_tool_calls("<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call>"
                              "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 2}}</tool_call>",
                              ToolCallFormat::hermes, tools);
  REQUIRE(out.calls.size() == 1);
  CHECK(out.calls[0].arguments == R"({"a":1})");
}

TEST_CASE("the call format comes from the template; templates without a tool section get the default system text") {
  auto qwen = make_jinja_template(read_repo_file("tests/data/chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"), "qwen");
  auto llama = make_jinja_template(
      read_repo_file("tests/data/chat-templates/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), "llama3.1");
  auto plain = make_builtin_template("plain");
  CHECK(tool_call_format(*qwen) == ToolCallFormat::hermes);
  CHECK(tool_call_format(*llama) == ToolCallFormat::llama3_json);
  CHECK(tool_call_format(*plain) == ToolCallFormat::hermes);

  ToolRequest tools = offered();
  ChatTemplateInputs inputs;
  inputs.messages = {{"user", "Weather in Paris?"}, {"assistant", ""}, {"tool", "{\"t\": 21}"}};
  inputs.messages[1].tool_calls_json =
      R"([{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])";
  inputs.messages[2].tool_call_id = "c1";
  inputs.messages[2].name = "get_weather";
  ChatTemplateInputs for_plain = inputs;
  add_tools_to_prompt(tools, *plain, for_plain);
  REQUIRE(for_plain.messages.size() == 4);
  CHECK(for_plain.messages[0].role == "system");
  CHECK(for_plain.messages[0].content == default_tools_system_text(tools.tools));
  CHECK(for_plain.messages[2].content == "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  CHECK(for_plain.messages[3].role == "user");
  CHECK(for_plain.messages[3].content == "<tool_response>\n{\"t\": 21}\n</tool_response>");
  CHECK(for_plain.tools_json.empty());

  ChatTemplateInputs for_qwen = inputs;
  add_tools_to_prompt(tools, *qwen, for_qwen);
  CHECK(for_qwen.messages.size() == 3);  // the template renders tools itself
  CHECK(for_qwen.tools_json == tools.tools.dump());
  const std::string rendered = qwen->render(for_qwen);
  CHECK(rendered.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") != std::string::npos);
  CHECK(rendered.find("<tool_response>\n{\"t\": 21}\n</tool_response>") != std::string::npos);

  tools.choice = ToolChoiceKind::none;  // "none": the model is not told about the tools
  ChatTemplateInputs none_qwen = inputs;
  add_tools_to_prompt(tools, *qwen, none_qwen);
  CHECK(none_qwen.tools_json.empty());
}

TEST_CASE("required / named tool_choice: a grammar of exactly one call in the template's format") {
  auto accepts = [](const Grammar& g, const std::string& text) {
    GrammarMatcher m(g, nullptr, {});
    return m.accept_bytes(text) && m.complete();
  };
  ToolRequest tools = offered();
  CHECK_FALSE(tool_call_grammar(tools, ToolCallFormat::hermes));  // "auto": nothing forced
  tools.choice = ToolChoiceKind::required;
  Grammar any = *tool_call_grammar(tools, ToolCallFormat::hermes);
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  CHECK(accepts(any, weather));
  CHECK(accepts(any, "<tool_call>\n{\"name\": \"add\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(accepts(any, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // city required
  CHECK_FALSE(accepts(any, "Sure!"));
  // what the grammar lets through, the parser reads back as the call
  auto parsed = parse_tool_calls(weather, ToolCallFormat::hermes, tools);
  REQUIRE(parsed.calls.size() == 1);
  CHECK(parsed.calls[0].arguments == R"({"city":"Paris"})");

  tools.choice = ToolChoiceKind::named;
  tools.chosen_name = "add";
  Grammar named = *tool_call_grammar(tools, ToolCallFormat::llama3_json);
  CHECK(accepts(named, "{\"name\": \"add\", \"parameters\": {\"a\": 1}}"));
  CHECK_FALSE(accepts(named, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"));

  // a parameters schema the grammar cannot enforce: a 400 naming where
  json t = weather_tools();
  t[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]";
  ToolRequest strict = *parse_tool_request({{"tools", t}, {"tool_choice", "required"}});
  try {
    tool_call_grammar(strict, ToolCallFormat::hermes);
    FAIL_CHECK("a pattern was accepted");
  } catch (const ApiError& e) {
    CHECK(e.param.rfind("tools[0].function.parameters.properties.city", 0) == 0);
  }
}

}  // namespace
}  // namespace journey::server
