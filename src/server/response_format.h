// The OpenAI request field `response_format`, turned into a grammar (grammar/grammar.h):
//   absent or {"type": "text"}                           -> no grammar
//   {"type": "json_object"}                              -> any JSON object
//   {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
//                                                        -> JSON valid under the schema subset
// Anything else is an ApiError (400) whose `param` names the field, down to the schema keyword:
// "response_format.json_schema.schema.properties.age.pattern".
// The request body reaches here as nlohmann::ordered_json (server/openai_api.h), so a schema's
// properties are generated in the order the client wrote them, as OpenAI's structured outputs do.
#pragma once
#include <optional>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace journey::server {

std::optional<Grammar> parse_response_format(const nlohmann::ordered_json& body);

}  // namespace journey::server
