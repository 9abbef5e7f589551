// The grammar IR and the JSON-schema compiler, checked byte by byte with a matcher that has no
// vocabulary (accept_bytes): which texts a grammar admits, which it refuses, and the errors that
// name the schema path of what is not supported.
#include <doctest/doctest.h>

#include <string>

#include "grammar/token_mask.h"

namespace journey {
namespace {

using json = nlohmann::ordered_json;

// Does the grammar admit exactly this text (all of it, ending complete)?
bool admits(const Grammar& g, std::string_view text) {
  GrammarMatcher m(g, nullptr, {});
  return m.accept_bytes(text) && m.complete();
}
// Is the text a prefix of something the grammar admits?
bool admits_prefix(const Grammar& g, std::string_view text) {
  GrammarMatcher m(g, nullptr, {});
  return m.accept_bytes(text);
}
Grammar schema(const char* text) { return Grammar::json_schema(json::parse(text), "schema"); }

// The path of the SchemaError a schema raises ("" if it compiles).
std::string error_path(const char* text) {
  try {
    schema(text);
  } catch (const SchemaError& e) {
    return e.path;
  }
  return "";
}

TEST_CASE("literal: exactly its bytes") {
  Grammar g = Grammar::literal("<tool_call>\n");
  CHECK(admits(g, "<tool_call>\n"));
  CHECK_FALSE(admits(g, "<tool_call>"));
  CHECK(admits_prefix(g, "<tool_"));
  CHECK_FALSE(admits_prefix(g, "<tool_calls"));
  GrammarMatcher m(g, nullptr, {});
  CHECK(m.accept_bytes("<tool_call>\n"));
  CHECK(m.finished());
}

TEST_CASE("json_object: any JSON object, nothing else") {
  Grammar g = Grammar::json_object();
  for (const char* ok : {"{}", "{ }", "{\"a\":1}", "{\"a\": [1, 2.5e3, -0.25E-7, \"x\", true, false, null, {\"b\": {}}]}",
                         "{\n  \"k\": \"v\",\n  \"n\": [\n    1\n  ]\n}", "{\"esc\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"}",
                         "{\"utf8\": \"北京 é 😀\"}", "{\"\": []}"})
    CHECK_MESSAGE(admits(g, ok), ok);
  for (const char* bad : {"[]", "1", "\"s\"", "{\"a\" 1}", "{\"a\":01}", "{'a':1}", "{\"a\":1,}", "{\"a\":tru}",
                          "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\xC0\xAF\"}", "{\"a\":\"\xED\xA0\x80\"}",
                          "{\"a\":\"\\x\"}", "{\"a\":1.}", "{\"a\":+1}", " {}", "{}}"})
    CHECK_FALSE_MESSAGE(admits(g, bad), bad);
}

TEST_CASE("whitespace between tokens is bounded") {
  Grammar g = Grammar::json_object();
  CHECK(admits(g, "{\n" + std::string(kMaxIndent, ' ') + "\"a\": 1}"));
  CHECK_FALSE(admits_prefix(g, "{\n" + std::string(kMaxIndent + 1, ' ')));
  CHECK_FALSE(admits_prefix(g, "{  "));  // two spaces: neither " " nor a newline + indent
}

TEST_CASE("numbers have bounded digits") {
  Grammar g = schema(R"({"type":"number"})");
  CHECK(admits(g, "1234567890123456.1234567890123456e-123"));
  CHECK_FALSE(admits_prefix(g, "12345678901234567"));
  CHECK_FALSE(admits_prefix(g, "1e1234"));
  Grammar i = schema(R"({"type":"integer"})");
  CHECK(admits(i, "-42"));
  CHECK_FALSE(admits(i, "4.2"));
}

TEST_CASE("object: properties in order, required always, optional may be skipped, nothing else") {
  Grammar g = schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                         "tags":{"type":"array","items":{"type":"string"}}},"required":["name","tags"]})");
  CHECK(admits(g, R"({"name":"Ann","age":3,"tags":[]})"));
  CHECK(admits(g, R"({"name":"Ann","tags":["a","b"]})"));
  CHECK(admits(g, "{ \"name\" : \"Ann\" , \"tags\" : [ \"a\" ] }"));
  CHECK_FALSE(admits(g, R"({"name":"Ann"})"));              // tags is required
  CHECK_FALSE(admits(g, R"({"age":3,"name":"Ann","tags":[]})"));  // order
  CHECK_FALSE(admits(g, R"({"name":"Ann","tags":[],"x":1})"));   // no other keys
  CHECK_FALSE(admits(g, R"({"name":1,"tags":[]})"));             // type
  CHECK_FALSE(admits(g, R"({"name":"Ann",,"tags":[]})"));
  CHECK_FALSE(admits(g, R"({,"name":"Ann","tags":[]})"));
  Grammar all_optional = schema(R"({"properties":{"a":{"type":"null"},"b":{"type":"boolean"}}})");
  for (const char* ok : {"{}", R"({"a":null})", R"({"b":true})", R"({"a":null,"b":false})"}) CHECK_MESSAGE(admits(all_optional, ok), ok);
  CHECK_FALSE(admits(all_optional, R"({"b":true,"a":null})"));
  CHECK_FALSE(admits(all_optional, R"({,"b":true})"));
}

TEST_CASE("strings and arrays: lengths in characters and items") {
  Grammar s = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  CHECK_FALSE(admits(s, R"("a")"));
  CHECK(admits(s, R"("ab")"));
  CHECK(admits(s, "\"北京é\""));    // 3 characters, 8 bytes
  CHECK(admits(s, R"("a\n\u0041")"));  // escapes are one character each
  CHECK_FALSE(admits(s, R"("abcd")"));
  Grammar a = schema(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})");
  CHECK_FALSE(admits(a, "[]"));
  CHECK(admits(a, "[1]"));
  CHECK(admits(a, "[1, 2]"));
  CHECK_FALSE(admits(a, "[1,2,3]"));
  CHECK(admits(schema(R"({"type":"array","maxItems":0})"), "[]"));
}

TEST_CASE("enum, const, anyOf, type lists, $ref with recursion") {
  Grammar e = schema(R"({"enum":["red","green",3,null,{"k":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"k":[1]})"}) CHECK_MESSAGE(admits(e, ok), ok);
  CHECK_FALSE(admits(e, R"("blue")"));
  CHECK(admits(schema(R"({"const":"x"})"), R"("x")"));
  Grammar any = schema(R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}]})");
  CHECK(admits(any, "7"));
  CHECK(admits(any, R"({"a":"b"})"));
  CHECK_FALSE(admits(any, R"("s")"));
  Grammar types = schema(R"({"type":["string","null"],"maxLength":1})");
  CHECK(admits(types, "null"));
  CHECK(admits(types, R"("x")"));
  CHECK_FALSE(admits(types, R"("xy")"));
  Grammar tree = schema(R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
                            "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value"]}},
                            "$ref":"#/$defs/node"})");
  CHECK(admits(tree, R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4}]}]})"));
  CHECK_FALSE(admits(tree, R"({"value":1,"children":[{"children":[]}]})"));
}

TEST_CASE("composition: a Hermes tool call, one of two tools") {
  Grammar args = schema(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  auto call = [&](const char* name) {
    return Grammar::sequence({Grammar::literal(std::string("<tool_call>\n{\"name\": \"") + name + "\", \"arguments\": "), args,
                              Grammar::literal("}\n</tool_call>")});
  };
  Grammar g = Grammar::alternatives({call("weather"), call("time")});
  CHECK(admits(g, "<tool_call>\n{\"name\": \"time\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"));
  CHECK_FALSE(admits(g, "<tool_call>\n{\"name\": \"date\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"));
  CHECK_FALSE(admits(g, "<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>"));
}

TEST_CASE("unsupported keywords and bad schemas name their path") {
  CHECK(error_path(R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})") == "schema.properties.age.minimum");
  CHECK(error_path(R"({"type":"string","pattern":"^a"})") == "schema.pattern");
  CHECK(error_path(R"({"type":"string","format":"date"})") == "schema.format");
  CHECK(error_path(R"({"allOf":[{"type":"string"}]})") == "schema.allOf");
  CHECK(error_path(R"({"$ref":"https://example.com/s.json"})") == "schema.$ref");
  CHECK(error_path(R"({"$ref":"#/$defs/missing"})") == "schema.$ref");
  CHECK(error_path(R"({"type":"strin"})") == "schema.type");
  CHECK(error_path(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"type":"date"}]}})") == "schema.items.anyOf[1].type");
  CHECK(error_path(R"({"type":"string","maxLength":100000})") == "schema.maxLength");
  CHECK(error_path(R"({"type":"string","minLength":3,"maxLength":2})") == "schema.maxLength");
  CHECK(error_path(R"({"type":"object","properties":{"a":{}},"required":["b"]})") == "schema.required[0]");
  CHECK(error_path(R"({"type":"string","enum":[1]})") == "schema.enum[0]");
  CHECK(error_path("false") == "schema");
  CHECK(error_path("[1]") == "schema");
  CHECK(error_path(R"({"type":"object","additionalProperties":{"type":"string"}})") == "schema.additionalProperties");
  CHECK(error_path(R"({"type":"integer","title":"t","description":"d"})") == "");
  std::string deep = R"({"type":"array","items":)";
  std::string nested;
  for (int i = 0; i < kMaxSchemaDepth + 2; ++i) nested += R"({"type":"array","items":)";
  nested += "{}";
  for (int i = 0; i < kMaxSchemaDepth + 2; ++i) nested += "}";
  try {
    Grammar::json_schema(json::parse(nested), "s");
    FAIL("a schema deeper than the limit compiled");
  } catch (const SchemaError& e) {
    CHECK(std::string(e.what()).find("deeper than") != std::string::npos);
  }
}

TEST_CASE("the compiled grammar's size is bounded") {
  // Each string property with maxLength 4096 costs ~4096 rules; many of them exceed the bound.
  json s = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 200; ++i) s["properties"]["p" + std::to_string(i)] = {{"type", "string"}, {"minLength", 1}, {"maxLength", 4096 - i}};
  CHECK_THROWS_AS(Grammar::json_schema(s, "schema"), SchemaError);
}

TEST_CASE("recursion without progress and runaway nesting stay bounded") {
  // A rule that refers to itself without consuming anything admits no text.
  CHECK_THROWS_AS(GrammarMatcher(schema(R"({"$ref":"#"})"), nullptr, {}), Error);
  // Nesting deeper than the matcher's stack limit is refused, not followed.
  GrammarMatcher m(Grammar::json_object(), nullptr, {});
  std::string deep = "{\"a\":";
  for (int i = 0; i < kMaxGrammarStackDepth; ++i) deep += "[";
  CHECK_FALSE(m.accept_bytes(deep));
}

TEST_CASE("describe prints the rules from the root") {
  const std::string text = schema(R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]})").describe();
  CHECK(text.find("object@schema") == 0);
  CHECK(text.find("\"t\" \"r\" \"u\" \"e\"") != std::string::npos);
}

}  // namespace
}  // namespace journey
