// The grammar IR and the JSON-schema compiler (grammar.h says what is supported and why).
// A grammar is built by CfgBuilder: rules are declared, then given alternatives made of byte sets
// and references to other rules. Composition (sequence, alternatives) copies the parts' tables
// into one with offsets, so every Grammar is one self-contained table.
#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "core/untrusted.h"

namespace journey {

struct Grammar::Cfg {
  std::vector<GrammarElement> elements;      // [E]
  std::vector<std::vector<uint32_t>> rules;  // [R][alternatives] start positions into elements
  std::vector<std::string> rule_names;       // [R]
  std::vector<ByteSet> byte_sets;            // [S]
  uint32_t root = 0;
};

namespace {

using Kind = GrammarElement::Kind;
using json = nlohmann::ordered_json;

class CfgBuilder {
 public:
  explicit CfgBuilder(std::string where) : where_(std::move(where)) {}

  uint32_t new_rule(std::string name) {
    cfg_.rules.emplace_back();
    cfg_.rule_names.push_back(std::move(name));
    return static_cast<uint32_t>(cfg_.rules.size() - 1);
  }
  void add_alternative(uint32_t rule, const std::vector<GrammarElement>& symbols) {
    if (static_cast<int64_t>(cfg_.elements.size() + symbols.size() + 1) > kMaxGrammarElements)
      throw SchemaError(where_, cat("the grammar would exceed ", kMaxGrammarElements,
                                    " elements (the schema is too large once expanded; lower maxLength/maxItems)"));
    cfg_.rules[rule].push_back(static_cast<uint32_t>(cfg_.elements.size()));
    cfg_.elements.insert(cfg_.elements.end(), symbols.begin(), symbols.end());
    cfg_.elements.push_back(GrammarElement{Kind::end, 0});
  }

  GrammarElement bytes(const ByteSet& set) {
    auto [it, inserted] = byte_set_ids_.try_emplace(set.bits, static_cast<uint32_t>(cfg_.byte_sets.size()));
    if (inserted) cfg_.byte_sets.push_back(set);
    return {Kind::bytes, it->second};
  }
  GrammarElement byte(uint8_t b) {
    ByteSet s;
    s.add(b);
    return bytes(s);
  }
  GrammarElement range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return bytes(s);
  }
  static GrammarElement ref(uint32_t rule) { return {Kind::rule, rule}; }

  void append_text(std::vector<GrammarElement>& out, std::string_view text) {
    for (char c : text) out.push_back(byte(static_cast<uint8_t>(c)));
  }
  uint32_t literal_rule(std::string_view text, std::string name) {
    uint32_t r = new_rule(std::move(name));
    std::vector<GrammarElement> symbols;
    append_text(symbols, text);
    add_alternative(r, symbols);
    return r;
  }

  // item{min,max} (max < 0: unbounded). The optional part is a chain O_k ::= "" | item O_{k+1}
  // (each rule ends in a tail call, so the matcher's stack does not grow with the count).
  uint32_t repeat(GrammarElement item, int64_t min, int64_t max, const std::string& name) {
    uint32_t optional_part;
    if (max < 0) {
      optional_part = new_rule(name + "-tail");
      add_alternative(optional_part, {});
      add_alternative(optional_part, {item, ref(optional_part)});
    } else {
      optional_part = new_rule(name + "-end");
      add_alternative(optional_part, {});
      for (int64_t k = max - 1; k >= min; --k) {
        uint32_t r = new_rule(cat(name, "-", k));
        add_alternative(r, {});
        add_alternative(r, {item, ref(optional_part)});
        optional_part = r;
      }
    }
    uint32_t whole = new_rule(name);
    std::vector<GrammarElement> symbols(static_cast<size_t>(min), item);
    symbols.push_back(ref(optional_part));
    add_alternative(whole, symbols);
    return whole;
  }

  // Rules of plain JSON, made once per builder.
  uint32_t ws() {
    if (!ws_) {
      ByteSet indent;
      indent.add(' ');
      indent.add('\t');
      uint32_t indents = repeat(bytes(indent), 0, kMaxIndent, "indent");
      ws_ = new_rule("ws");
      add_alternative(*ws_, {});
      add_alternative(*ws_, {byte(' ')});
      add_alternative(*ws_, {byte('\n'), ref(indents)});
    }
    return *ws_;
  }
  // One character of a JSON string: valid UTF-8 other than '"', '\' and controls, or an escape.
  uint32_t string_char() {
    if (string_char_) return *string_char_;
    uint32_t r = new_rule("char");
    ByteSet plain;
    plain.add_range(0x20, 0x7F);
    plain.bits[0] &= ~(uint64_t{1} << '"');
    plain.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
    add_alternative(r, {bytes(plain)});
    const GrammarElement cont = range(0x80, 0xBF);
    add_alternative(r, {range(0xC2, 0xDF), cont});
    add_alternative(r, {byte(0xE0), range(0xA0, 0xBF), cont});
    ByteSet e_common;
    e_common.add_range(0xE1, 0xEC);
    e_common.add_range(0xEE, 0xEF);
    add_alternative(r, {bytes(e_common), cont, cont});
    add_alternative(r, {byte(0xED), range(0x80, 0x9F), cont});
    add_alternative(r, {byte(0xF0), range(0x90, 0xBF), cont, cont});
    add_alternative(r, {range(0xF1, 0xF3), cont, cont, cont});
    add_alternative(r, {byte(0xF4), range(0x80, 0x8F), cont, cont});
    ByteSet escaped;
    for (char c : std::string_view("\"\\/bfnrt")) escaped.add(static_cast<uint8_t>(c));
    add_alternative(r, {byte('\\'), bytes(escaped)});
    ByteSet hex;
    hex.add_range('0', '9');
    hex.add_range('a', 'f');
    hex.add_range('A', 'F');
    const GrammarElement h = bytes(hex);
    add_alternative(r, {byte('\\'), byte('u'), h, h, h, h});
    string_char_ = r;
    return r;
  }
  uint32_t string(int64_t min_length, int64_t max_length) {
    auto key = std::make_pair(min_length, max_length);
    if (auto it = strings_.find(key); it != strings_.end()) return it->second;
    uint32_t chars = repeat(ref(string_char()), min_length, max_length,
                            max_length < 0 && min_length == 0 ? "chars" : cat("chars", min_length, "-", max_length));
    uint32_t r = new_rule(max_length < 0 && min_length == 0 ? "string" : cat("string", min_length, "-", max_length));
    add_alternative(r, {byte('"'), ref(chars), byte('"')});
    strings_[key] = r;
    return r;
  }
  uint32_t integer() {
    if (integer_) return *integer_;
    uint32_t more_digits = repeat(range('0', '9'), 0, 15, "digits15");
    uint32_t r = new_rule("integer");
    uint32_t sign = new_rule("minus");
    add_alternative(sign, {});
    add_alternative(sign, {byte('-')});
    add_alternative(r, {ref(sign), byte('0')});
    add_alternative(r, {ref(sign), range('1', '9'), ref(more_digits)});
    integer_ = r;
    return r;
  }
  uint32_t number() {
    if (number_) return *number_;
    uint32_t fraction = new_rule("fraction");
    add_alternative(fraction, {});
    add_alternative(fraction, {byte('.'), ref(repeat(range('0', '9'), 1, 16, "digits1-16"))});
    uint32_t exponent = new_rule("exponent");
    ByteSet e, sign;
    e.add('e');
    e.add('E');
    sign.add('+');
    sign.add('-');
    uint32_t exp_sign = new_rule("exponent-sign");
    add_alternative(exp_sign, {});
    add_alternative(exp_sign, {bytes(sign)});
    add_alternative(exponent, {});
    add_alternative(exponent, {bytes(e), ref(exp_sign), ref(repeat(range('0', '9'), 1, 3, "digits1-3"))});
    uint32_t r = new_rule("number");
    add_alternative(r, {ref(integer()), ref(fraction), ref(exponent)});
    number_ = r;
    return r;
  }
  uint32_t boolean() {
    if (!boolean_) {
      boolean_ = new_rule("boolean");
      std::vector<GrammarElement> t, f;
      append_text(t, "true");
      append_text(f, "false");
      add_alternative(*boolean_, t);
      add_alternative(*boolean_, f);
    }
    return *boolean_;
  }
  uint32_t null() {
    if (!null_) null_ = literal_rule("null", "null");
    return *null_;
  }
  // Any JSON value / object / array (json_object mode, and schemas that leave a value open).
  uint32_t any_value() {
    if (any_value_) return *any_value_;
    any_value_ = new_rule("value");
    any_object_ = new_rule("object");
    uint32_t array = new_rule("array");
    for (uint32_t r : {*any_object_, array, string(0, -1), number(), boolean(), null()}) add_alternative(*any_value_, {ref(r)});
    // object ::= "{" ws "}" | "{" ws member ws members "}";  members ::= "" | "," ws member ws members
    uint32_t member = new_rule("member");
    add_alternative(member, {ref(string(0, -1)), ref(ws()), byte(':'), ref(ws()), ref(*any_value_)});
    uint32_t members = new_rule("members");
    add_alternative(members, {});
    add_alternative(members, {byte(','), ref(ws()), ref(member), ref(ws()), ref(members)});
    add_alternative(*any_object_, {byte('{'), ref(ws()), byte('}')});
    add_alternative(*any_object_, {byte('{'), ref(ws()), ref(member), ref(ws()), ref(members), byte('}')});
    uint32_t values = new_rule("values");
    add_alternative(values, {});
    add_alternative(values, {byte(','), ref(ws()), ref(*any_value_), ref(ws()), ref(values)});
    add_alternative(array, {byte('['), ref(ws()), byte(']')});
    add_alternative(array, {byte('['), ref(ws()), ref(*any_value_), ref(ws()), ref(values), byte(']')});
    return *any_value_;
  }
  uint32_t any_object() {
    any_value();
    return *any_object_;
  }

  Grammar::Cfg finish(uint32_t root) {
    cfg_.root = root;
    return std::move(cfg_);
  }
  void set_where(std::string where) { where_ = std::move(where); }

 private:
  Grammar::Cfg cfg_;
  std::string where_;  // named by a size error
  std::map<std::array<uint64_t, 4>, uint32_t> byte_set_ids_;
  std::optional<uint32_t> ws_, string_char_, integer_, number_, boolean_, null_, any_value_, any_object_;
  std::map<std::pair<int64_t, int64_t>, uint32_t> strings_;
};

// ---- JSON schema -> rules ---------------------------------------------------------------------

const std::unordered_set<std::string>& annotation_keywords() {
  static const std::unordered_set<std::string> k = {"title", "description", "$schema", "$id", "$comment", "default",
                                                    "examples", "strict", "deprecated", "readOnly", "writeOnly",
                                                    "$defs", "definitions", "additionalProperties"};
  return k;
}
const std::unordered_set<std::string>& constraint_keywords() {
  static const std::unordered_set<std::string> k = {"type", "properties", "required", "enum", "const", "anyOf", "oneOf",
                                                    "items", "minItems", "maxItems", "minLength", "maxLength", "$ref"};
  return k;
}

std::string json_type_of(const json& v) {
  switch (v.type()) {
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::null: return "null";
    case json::value_t::number_float: return "number";
    default: return "integer";
  }
}

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, std::string root_path) : root_(root), root_path_(std::move(root_path)), b_(root_path_) {}

  Grammar::Cfg compile() {
    uint32_t r = value(root_, root_path_, 0);
    return b_.finish(r);
  }

 private:
  [[noreturn]] static void bad(const std::string& path, const std::string& message) { throw SchemaError(path, message); }

  int64_t count(const json& s, const std::string& path, const char* key, int64_t fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      bad(path + "." + key, cat("'", key, "' must be a non-negative integer, got ", excerpt_json(*it)));
    const int64_t v = it->get<int64_t>();
    if (v > kMaxRepetition)
      bad(path + "." + key, cat("'", key, "' is ", v, "; journey enforces at most ", kMaxRepetition));
    return v;
  }

  uint32_t value(const json& s, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) bad(path, cat("the schema is nested deeper than ", kMaxSchemaDepth, " levels"));
    if (++nodes_ > kMaxSchemaNodes) bad(path, cat("the schema has more than ", kMaxSchemaNodes, " subschemas"));
    b_.set_where(path);
    if (s.is_boolean()) {
      if (s.get<bool>()) return b_.any_value();
      bad(path, "the schema 'false' admits no value");
    }
    if (!s.is_object()) bad(path, cat("a schema must be an object or a boolean, got ", s.type_name()));
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!annotation_keywords().count(it.key()) && !constraint_keywords().count(it.key()))
        bad(path + "." + it.key(), cat("'", it.key(), "' is not supported by journey's structured output (supported: ",
                                       "type, properties, required, enum, const, anyOf, oneOf, items, minItems, maxItems, ",
                                       "minLength, maxLength, $ref, $defs; see docs/structured-output.md)"));
    if (auto it = s.find("additionalProperties"); it != s.end() && !it->is_boolean())
      bad(path + ".additionalProperties", "only true or false is supported (no extra keys are ever generated)");

    if (auto it = s.find("$ref"); it != s.end()) {
      for (auto k = s.begin(); k != s.end(); ++k)
        if (constraint_keywords().count(k.key()) && k.key() != "$ref")
          bad(path + "." + k.key(), "'$ref' beside other constraints is not supported");
      return reference(*it, path + ".$ref", depth);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      for (auto k = s.begin(); k != s.end(); ++k)
        if (constraint_keywords().count(k.key()) && k.key() != key)
          bad(path + "." + k.key(), cat("'", key, "' beside '", k.key(), "' is not supported (put it inside each branch)"));
      if (!it->is_array() || it->empty()) bad(path + "." + key, cat("'", key, "' must be a non-empty array of schemas"));
      std::vector<uint32_t> branches;
      for (size_t i = 0; i < it->size(); ++i) branches.push_back(value((*it)[i], cat(path, ".", key, "[", i, "]"), depth + 1));
      return alternatives(branches, cat(key, "@", path));
    }

    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      auto add_type = [&](const json& t, const std::string& where) {
        static const std::unordered_set<std::string> known = {"object", "array", "string", "number", "integer", "boolean", "null"};
        if (!t.is_string() || !known.count(t.get<std::string>()))
          bad(where, cat("unknown type ", excerpt_json(t), " (expected object, array, string, number, integer, boolean or null)"));
        types.push_back(t.get<std::string>());
      };
      if (it->is_array()) {
        if (it->empty()) bad(path + ".type", "an empty type list admits no value");
        for (size_t i = 0; i < it->size(); ++i) add_type((*it)[i], cat(path, ".type[", i, "]"));
      } else {
        add_type(*it, path + ".type");
      }
    }

    for (const char* key : {"const", "enum"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      json values = std::string(key) == "const" ? json::array({*it}) : *it;
      if (!values.is_array() || values.empty()) bad(path + "." + key, "'enum' must be a non-empty array");
      std::vector<uint32_t> literals;
      for (size_t i = 0; i < values.size(); ++i) {
        const std::string t = json_type_of(values[i]);
        const bool fits = types.empty() || std::count(types.begin(), types.end(), t) ||
                          (t == "integer" && std::count(types.begin(), types.end(), "number"));
        if (!fits) bad(cat(path, ".", key, std::string(key) == "enum" ? cat("[", i, "]") : ""), cat("the value ", excerpt_json(values[i]), " is not of the schema's type"));
        literals.push_back(b_.literal_rule(values[i].dump(-1, ' ', false, json::error_handler_t::replace), "literal"));
      }
      return alternatives(literals, cat(key, "@", path));
    }

    if (types.empty()) {  // inferred from the keywords present, else any value
      if (s.contains("properties") || s.contains("required")) types.push_back("object");
      else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength")) types.push_back("string");
      else return b_.any_value();
    }
    std::vector<uint32_t> per_type;
    for (const std::string& t : types) per_type.push_back(typed(t, s, path, depth));
    return alternatives(per_type, "types@" + path);
  }

  uint32_t alternatives(const std::vector<uint32_t>& rules, const std::string& name) {
    if (rules.size() == 1) return rules[0];
    uint32_t r = b_.new_rule(name);
    for (uint32_t x : rules) b_.add_alternative(r, {CfgBuilder::ref(x)});
    return r;
  }

  uint32_t typed(const std::string& type, const json& s, const std::string& path, int depth) {
    if (type == "string") {
      const int64_t lo = count(s, path, "minLength", 0), hi = count(s, path, "maxLength", -1);
      if (hi >= 0 && hi < lo) bad(path + ".maxLength", cat("maxLength ", hi, " is below minLength ", lo));
      return b_.string(lo, hi);
    }
    if (type == "integer") return b_.integer();
    if (type == "number") return b_.number();
    if (type == "boolean") return b_.boolean();
    if (type == "null") return b_.null();
    if (type == "array") return array(s, path, depth);
    return object(s, path, depth);
  }

  uint32_t array(const json& s, const std::string& path, int depth) {
    const int64_t lo = count(s, path, "minItems", 0), hi = count(s, path, "maxItems", -1);
    if (hi >= 0 && hi < lo) bad(path + ".maxItems", cat("maxItems ", hi, " is below minItems ", lo));
    uint32_t item = b_.any_value();
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) bad(path + ".items", "tuple 'items' (an array of schemas) is not supported");
      item = value(*it, path + ".items", depth + 1);
    }
    const uint32_t ws = b_.ws();
    uint32_t r = b_.new_rule("array@" + path);
    if (lo == 0) b_.add_alternative(r, {b_.byte('['), CfgBuilder::ref(ws), b_.byte(']')});
    if (hi != 0) {
      // "," ws item ws, repeated lo-1 .. hi-1 times after the first item
      uint32_t next = b_.new_rule("next-item@" + path);
      b_.add_alternative(next, {b_.byte(','), CfgBuilder::ref(ws), CfgBuilder::ref(item), CfgBuilder::ref(ws)});
      uint32_t rest = b_.repeat(CfgBuilder::ref(next), std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1, "items@" + path);
      b_.add_alternative(r, {b_.byte('['), CfgBuilder::ref(ws), CfgBuilder::ref(item), CfgBuilder::ref(ws),
                             CfgBuilder::ref(rest), b_.byte(']')});
    }
    return r;
  }

  uint32_t object(const json& s, const std::string& path, int depth) {
    auto props = s.find("properties");
    if (props == s.end()) {
      if (s.contains("required")) bad(path + ".required", "'required' without 'properties' is not supported");
      return b_.any_object();
    }
    if (!props->is_object()) bad(path + ".properties", "'properties' must be an object");
    std::unordered_set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) bad(path + ".required", "'required' must be an array of property names");
      for (size_t i = 0; i < it->size(); ++i) {
        const json& name = (*it)[i];
        if (!name.is_string()) bad(cat(path, ".required[", i, "]"), "property names must be strings");
        if (!props->contains(name.get<std::string>()))
          bad(cat(path, ".required[", i, "]"), cat("required property ", name.dump(), " has no schema in 'properties'"));
        required.insert(name.get<std::string>());
      }
    }
    const uint32_t ws = b_.ws();
    // kv_i ::= "name" ws ":" ws value ws
    std::vector<uint32_t> kv;
    std::vector<bool> is_required;
    for (auto it = props->begin(); it != props->end(); ++it) {
      uint32_t v = value(it.value(), path + ".properties." + it.key(), depth + 1);
      uint32_t r = b_.new_rule("property@" + path + "." + it.key());
      std::vector<GrammarElement> symbols;
      b_.append_text(symbols, json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace));
      for (GrammarElement e : {CfgBuilder::ref(ws), b_.byte(':'), CfgBuilder::ref(ws), CfgBuilder::ref(v), CfgBuilder::ref(ws)})
        symbols.push_back(e);
      b_.add_alternative(r, symbols);
      kv.push_back(r);
      is_required.push_back(required.count(it.key()) > 0);
    }
    // Properties in order; optional ones may be skipped; commas only between emitted ones.
    //   rest_i  ::= ""                                     (i == n)
    //            |  "," ws kv_i rest_{i+1}  [| rest_{i+1} if kv_i is optional]
    //   start_i ::= kv_i rest_{i+1}         [| start_{i+1} if optional]      (nothing emitted yet)
    const size_t n = kv.size();
    std::vector<uint32_t> rest(n + 1), start(n + 1);
    rest[n] = b_.new_rule("rest-end");
    b_.add_alternative(rest[n], {});
    start[n] = rest[n];
    for (size_t i = n; i-- > 0;) {
      rest[i] = b_.new_rule("rest@" + path);
      b_.add_alternative(rest[i], {b_.byte(','), CfgBuilder::ref(ws), CfgBuilder::ref(kv[i]), CfgBuilder::ref(rest[i + 1])});
      if (!is_required[i]) b_.add_alternative(rest[i], {CfgBuilder::ref(rest[i + 1])});
      start[i] = b_.new_rule("start@" + path);
      b_.add_alternative(start[i], {CfgBuilder::ref(kv[i]), CfgBuilder::ref(rest[i + 1])});
      if (!is_required[i]) b_.add_alternative(start[i], {CfgBuilder::ref(start[i + 1])});
    }
    uint32_t r = b_.new_rule("object@" + path);
    b_.add_alternative(r, {b_.byte('{'), CfgBuilder::ref(ws), CfgBuilder::ref(start[0]), b_.byte('}')});
    return r;
  }

  // A local reference: "#" or "#/json/pointer". Each target is compiled once into a rule, so a
  // recursive schema becomes a recursive rule.
  uint32_t reference(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) bad(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#')
      bad(path, cat("only local references (\"#\", \"#/$defs/NAME\") are supported, got ", excerpt_json(ref)));
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const json* schema = &root_;
    std::string target_path = root_path_;
    if (target.size() > 1) {
      if (target[1] != '/') bad(path, cat("a local reference must be \"#\" or start with \"#/\", got ", excerpt_json(ref)));
      try {
        json::json_pointer pointer(target.substr(1));
        if (!root_.contains(pointer)) bad(path, cat("the reference ", excerpt_json(ref), " names nothing in the schema"));
        schema = &root_.at(pointer);
      } catch (const json::exception& e) {
        bad(path, cat("the reference ", excerpt_json(ref), " is not a valid JSON pointer: ", excerpt(e.what())));
      }
      std::string dotted = target.substr(2);
      std::replace(dotted.begin(), dotted.end(), '/', '.');
      target_path += "." + dotted;
    }
    uint32_t r = b_.new_rule("ref" + target);
    refs_[target] = r;
    uint32_t body = value(*schema, target_path, depth + 1);
    b_.add_alternative(r, {CfgBuilder::ref(body)});
    return r;
  }

  const json& root_;
  std::string root_path_;
  CfgBuilder b_;
  int64_t nodes_ = 0;
  std::map<std::string, uint32_t> refs_;
};

// Copies `part` into `out` with its rule, element and byte-set ids shifted; returns its root.
uint32_t append_cfg(Grammar::Cfg& out, const Grammar::Cfg& part) {
  const uint32_t rule_offset = static_cast<uint32_t>(out.rules.size());
  const uint32_t element_offset = static_cast<uint32_t>(out.elements.size());
  const uint32_t set_offset = static_cast<uint32_t>(out.byte_sets.size());
  if (static_cast<int64_t>(out.elements.size() + part.elements.size()) > kMaxGrammarElements)
    fail("the composed grammar would exceed ", kMaxGrammarElements, " elements");
  for (GrammarElement e : part.elements) {
    if (e.kind == Kind::rule) e.index += rule_offset;
    if (e.kind == Kind::bytes) e.index += set_offset;
    out.elements.push_back(e);
  }
  for (const auto& alternatives : part.rules) {
    out.rules.emplace_back();
    for (uint32_t start : alternatives) out.rules.back().push_back(start + element_offset);
  }
  out.rule_names.insert(out.rule_names.end(), part.rule_names.begin(), part.rule_names.end());
  out.byte_sets.insert(out.byte_sets.end(), part.byte_sets.begin(), part.byte_sets.end());
  return part.root + rule_offset;
}

Grammar::Cfg compose(const std::vector<const Grammar::Cfg*>& parts, bool as_sequence) {
  if (parts.empty()) fail(as_sequence ? "Grammar::sequence" : "Grammar::alternatives", " needs at least one part");
  Grammar::Cfg out;
  std::vector<uint32_t> roots;
  for (const Grammar::Cfg* p : parts) roots.push_back(append_cfg(out, *p));
  const uint32_t root = static_cast<uint32_t>(out.rules.size());
  out.rules.emplace_back();
  out.rule_names.push_back(as_sequence ? "sequence" : "alternatives");
  auto add = [&](const std::vector<uint32_t>& refs) {
    out.rules[root].push_back(static_cast<uint32_t>(out.elements.size()));
    for (uint32_t r : refs) out.elements.push_back({Kind::rule, r});
    out.elements.push_back({Kind::end, 0});
  };
  if (as_sequence) add(roots);
  else
    for (uint32_t r : roots) add({r});
  out.root = root;
  return out;
}

std::string byte_text(uint8_t b) {
  if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\' && b != ']' && b != '[' && b != '-') return std::string(1, char(b));
  static const char* hex = "0123456789ABCDEF";
  return std::string("\\x") + hex[b >> 4] + hex[b & 15];
}

}  // namespace

Grammar Grammar::literal(std::string_view text) {
  CfgBuilder b("literal");
  uint32_t r = b.literal_rule(text, "literal");
  return Grammar(std::make_shared<const Cfg>(b.finish(r)));
}

Grammar Grammar::json_object() {
  CfgBuilder b("json_object");
  uint32_t r = b.any_object();
  return Grammar(std::make_shared<const Cfg>(b.finish(r)));
}

Grammar Grammar::json_schema(const nlohmann::json& schema, const std::string& path) {
  return json_schema(nlohmann::ordered_json::parse(schema.dump()), path);
}

Grammar Grammar::json_schema(const nlohmann::ordered_json& schema, const std::string& path) {
  SchemaCompiler compiler(schema, path);
  return Grammar(std::make_shared<const Cfg>(compiler.compile()));
}

Grammar Grammar::sequence(const std::vector<Grammar>& parts) {
  std::vector<const Cfg*> cfgs;
  for (const Grammar& g : parts) cfgs.push_back(g.cfg_.get());
  return Grammar(std::make_shared<const Cfg>(compose(cfgs, true)));
}

Grammar Grammar::alternatives(const std::vector<Grammar>& choices) {
  std::vector<const Cfg*> cfgs;
  for (const Grammar& g : choices) cfgs.push_back(g.cfg_.get());
  return Grammar(std::make_shared<const Cfg>(compose(cfgs, false)));
}

const std::vector<GrammarElement>& Grammar::elements() const { return cfg_->elements; }
const std::vector<std::vector<uint32_t>>& Grammar::rules() const { return cfg_->rules; }
const std::vector<ByteSet>& Grammar::byte_sets() const { return cfg_->byte_sets; }
uint32_t Grammar::root() const { return cfg_->root; }

std::string Grammar::describe(int64_t max_bytes) const {
  const Cfg& g = *cfg_;
  auto set_text = [&](const ByteSet& s) {
    std::vector<uint8_t> members;
    for (int b = 0; b < 256; ++b)
      if (s.has(static_cast<uint8_t>(b))) members.push_back(static_cast<uint8_t>(b));
    if (members.size() == 1) {
      std::string c = byte_text(members[0]);
      return members[0] == '"' ? std::string("'\"'") : "\"" + c + "\"";
    }
    std::string out = "[";
    for (size_t i = 0; i < members.size();) {
      size_t j = i;
      while (j + 1 < members.size() && members[j + 1] == members[j] + 1) ++j;
      out += byte_text(members[i]);
      if (j > i) out += "-" + byte_text(members[j]);
      i = j + 1;
    }
    return out + "]";
  };
  // Rules in the order they are reached from the root.
  std::vector<uint32_t> order{g.root};
  std::vector<char> seen(g.rules.size());
  seen[g.root] = 1;
  std::string out;
  for (size_t k = 0; k < order.size(); ++k) {
    const uint32_t r = order[k];
    std::string line = cat(g.rule_names[r], "#", r, " ::=");
    for (size_t a = 0; a < g.rules[r].size(); ++a) {
      if (a > 0) line += " |";
      if (g.elements[g.rules[r][a]].kind == Kind::end) line += " \"\"";
      for (uint32_t p = g.rules[r][a]; g.elements[p].kind != Kind::end; ++p) {
        const GrammarElement e = g.elements[p];
        if (e.kind == Kind::bytes) {
          line += " " + set_text(g.byte_sets[e.index]);
        } else {
          line += cat(" ", g.rule_names[e.index], "#", e.index);
          if (!seen[e.index]) {
            seen[e.index] = 1;
            order.push_back(e.index);
          }
        }
      }
    }
    out += line + "\n";
    if (static_cast<int64_t>(out.size()) > max_bytes) {
      out = std::string(utf8_prefix(out, static_cast<size_t>(max_bytes))) + cat("… (", g.rules.size(), " rules in all)\n");
      break;
    }
  }
  return out;
}

}  // namespace journey
