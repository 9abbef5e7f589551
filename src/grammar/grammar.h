// Structured output, part 1: what text is allowed. A Grammar is a context-free grammar over BYTES
// (not characters, not tokens): the token mask (grammar/token_mask.h) walks the tokenizer's byte
// strings through it, so a Qwen token that ends half-way through a UTF-8 character is judged by
// the bytes it really adds.
//
// The IR is small on purpose, so that callers compose it:
//
//   Grammar::literal("<tool_call>\n")               exactly these bytes
//   Grammar::json_object()                          any JSON object (response_format json_object)
//   Grammar::json_schema(schema, "response_format.json_schema.schema")
//                                                   a JSON value valid under the schema subset below
//   Grammar::sequence({a, b, c})                    a then b then c
//   Grammar::alternatives({a, b})                   a or b
//
// e.g. a Hermes tool call whose arguments match schema S:
//   Grammar::sequence({Grammar::literal("<tool_call>\n"), Grammar::json_schema(S, path),
//                      Grammar::literal("\n</tool_call>")})
// and "one of several tools" is Grammar::alternatives of such sequences.
//
// The JSON-schema subset (what real applications send as OpenAI structured outputs):
//   type: object / array / string / number / integer / boolean / null, or a list of them
//   properties + required: properties appear in the schema's order, required ones always, others
//     may be left out; no other keys are produced (additionalProperties false, as `strict`
//     assumes; generating a subset of the valid documents is always valid). An object schema
//     without properties is any JSON object.
//   enum, const (any JSON values, written compactly), anyOf / oneOf (as alternatives: a document
//     matching two oneOf branches is the schema author's ambiguity, not checked here)
//   items, minItems / maxItems; minLength / maxLength of strings (in characters)
//   $ref to "#", "#/$defs/NAME", "#/definitions/NAME" or any other local JSON pointer (recursion
//     allowed; its nesting is bounded by the matcher's stack limit, kMaxGrammarStackDepth)
//   annotations that constrain nothing: title, description, $schema, $id, $comment, default,
//     examples, additionalProperties (false/true), strict, deprecated, readOnly, writeOnly
// Anything else (pattern, format, minimum/maximum, allOf, not, if/then, patternProperties, remote
// $ref, ...) is refused with an Error naming the schema path, e.g.
//   "response_format.json_schema.schema.properties.age.minimum: 'minimum' is not supported ..."
// so that nothing is silently ignored.
//
// Bounds (hostile schemas): schema nesting <= kMaxSchemaDepth, schema objects <= kMaxSchemaNodes,
// minLength/maxLength/minItems/maxItems <= kMaxRepetition, the whole grammar <= kMaxGrammarElements.
// Numbers: at most 16 integer digits, 16 fraction digits, 3 exponent digits. Whitespace between
// JSON tokens: none, one space, or a newline and at most kMaxIndent spaces/tabs (llama.cpp's
// choice), so output can never run on in spaces.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace journey {

inline constexpr int kMaxSchemaDepth = 32;
inline constexpr int64_t kMaxSchemaNodes = 10000;
inline constexpr int64_t kMaxRepetition = 4096;
inline constexpr int64_t kMaxGrammarElements = int64_t{1} << 20;
inline constexpr int kMaxIndent = 20;

// A schema the compiler refuses: `path` is where (response_format.json_schema.schema.properties.x),
// what() the whole message (it starts with the path).
class SchemaError : public Error {
 public:
  SchemaError(std::string path_, const std::string& message) : Error(path_ + ": " + message), path(std::move(path_)) {}
  std::string path;
};

// A set of bytes (256 bits).
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
};

// One symbol of a rule's alternative. Alternatives are stored back to back in one array, each
// closed by an `end` element; a position in the grammar is an index into that array.
struct GrammarElement {
  enum class Kind : uint8_t { bytes, rule, end };
  Kind kind = Kind::end;
  uint32_t index = 0;  // bytes: index into byte_sets(); rule: rule id; end: unused
};

class Grammar {
 public:
  static Grammar literal(std::string_view text);
  static Grammar json_object();
  // path: how errors name the schema's root (e.g. "response_format.json_schema.schema").
  // An ordered_json keeps the schema's property order (the order the properties are generated
  // in, as OpenAI's structured outputs do); a plain json has its keys sorted.
  static Grammar json_schema(const nlohmann::ordered_json& schema, const std::string& path);
  static Grammar json_schema(const nlohmann::json& schema, const std::string& path);
  static Grammar sequence(const std::vector<Grammar>& parts);
  static Grammar alternatives(const std::vector<Grammar>& choices);

  // The compiled form the matcher runs.
  const std::vector<GrammarElement>& elements() const;            // [E] alternatives, `end`-closed
  const std::vector<std::vector<uint32_t>>& rules() const;        // [R][alternatives] start positions
  const std::vector<ByteSet>& byte_sets() const;                  // [S]
  uint32_t root() const;                                          // the rule the text must match
  int64_t size() const { return static_cast<int64_t>(elements().size()); }

  // The grammar in a GBNF-like notation (root first), for chapters and error reports.
  std::string describe(int64_t max_bytes = 4096) const;

  struct Cfg;  // the rule tables (grammar.cpp)

 private:
  explicit Grammar(std::shared_ptr<const Cfg> cfg) : cfg_(std::move(cfg)) {}
  std::shared_ptr<const Cfg> cfg_;
};

}  // namespace journey
