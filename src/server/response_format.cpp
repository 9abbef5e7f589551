#include "server/response_format.h"

#include "core/untrusted.h"
#include "grammar/token_mask.h"
#include "server/openai_api.h"

namespace journey::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// Every key of `object` must be one of `known`; the first other one is named.
void only_keys(const json& object, const std::string& where, std::initializer_list<const char*> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) bad(where + "." + it.key(), cat("'", where, ".", it.key(), "' is not a field journey knows"));
  }
}

}  // namespace

std::optional<Grammar> parse_response_format(const json& body) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return std::nullopt;
  const json& rf = *it;
  if (!rf.is_object()) bad("response_format", cat("'response_format' must be an object, got ", rf.type_name()));
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    bad("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string kind = type->get<std::string>();
  if (kind == "text" || kind == "json_object") {
    only_keys(rf, "response_format", {"type"});
    if (kind == "text") return std::nullopt;
    return Grammar::json_object();
  }
  if (kind != "json_schema")
    bad("response_format.type", cat("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got ",
                                    excerpt_json(*type)));
  only_keys(rf, "response_format", {"type", "json_schema"});
  auto spec = rf.find("json_schema");
  if (spec == rf.end() || !spec->is_object())
    bad("response_format.json_schema", "'response_format.json_schema' must be an object holding 'name' and 'schema'");
  only_keys(*spec, "response_format.json_schema", {"name", "description", "schema", "strict"});
  if (auto name = spec->find("name"); name != spec->end() && (!name->is_string() || name->get<std::string>().size() > 64))
    bad("response_format.json_schema.name", "'name' must be a string of at most 64 characters");
  if (auto strict = spec->find("strict"); strict != spec->end() && !strict->is_boolean() && !strict->is_null())
    bad("response_format.json_schema.strict", "'strict' must be a boolean");
  auto schema = spec->find("schema");
  if (schema == spec->end()) bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is missing");
  try {
    Grammar grammar = Grammar::json_schema(*schema, "response_format.json_schema.schema");
    GrammarMatcher check(grammar, nullptr, {});  // throws when the grammar admits no text at all
    return grammar;
  } catch (const SchemaError& e) {
    bad(e.path, e.what());
  } catch (const Error& e) {
    bad("response_format.json_schema.schema", cat("response_format.json_schema.schema: ", e.what()));
  }
}

}  // namespace journey::server
