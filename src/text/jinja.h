// A Jinja2 subset, written here, that renders the chat templates models ship.
//
// Why not a library: Debian has no C++ Jinja package, and chat templates use a small, stable
// part of the language. This interpreter is lexer -> parser -> AST -> evaluator, with the
// environment Hugging Face uses (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline
// False, loop controls, a tojson that keeps non-ASCII text, raise_exception, strftime_now).
// docs/chat-templates.md lists what is supported and what is not. Anything outside the
// subset is a journey::Error naming the origin, line and column and what was found.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace journey::jinja {

// What one render may spend. A chat template comes from a model file, so a render is bounded
// like any other hostile input: a template that loops for ever or builds ever-larger strings
// ends with a template error instead of stalling or exhausting the process.
struct RenderLimits {
  // Units of work: one per statement or expression evaluated, per loop iteration, per item of a
  // list or dict built, compared, printed or serialized, and per 64 bytes of string built.
  // Real chat templates spend a few thousand per conversation.
  std::int64_t max_steps = 2'000'000;
  // Largest rendered text and largest string built along the way.
  std::size_t max_string_bytes = 8u << 20;
  // Stack the evaluator's recursion may use (threads get 8 MiB by default). Counted in bytes, not
  // levels, because a level costs ~0.5 KiB in a release build and ~10 KiB under AddressSanitizer.
  std::size_t max_stack_bytes = 2u << 20;
};

class Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, like Python dicts
struct CallArgs;
using NativeFunction = std::function<Value(const CallArgs&)>;

// A dynamically typed template value (Python semantics where templates rely on them).
class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // undefined
  static Value none();
  Value(bool b);
  Value(int i);
  Value(std::int64_t i);
  Value(double d);
  Value(const char* s);
  Value(std::string s);
  Value(ValueList list);
  static Value dict(ValueDict entries = {});
  static Value namespace_object(ValueDict entries = {});  // namespace(): attributes assignable by `set ns.x`
  static Value function(std::string name, NativeFunction fn);
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Dict && is_namespace_; }
  // Nesting of lists and dicts, counted when the value is built (a namespace counts as 1: its
  // attributes change later, so walks over values guard their depth themselves).
  int depth() const { return depth_; }
  // The shared container (list or dict) this value refers to, for cycle checks; null otherwise.
  const void* identity() const;
  // Drop a namespace's attributes (what ends a render: breaks cycles such as `set ns.me = ns`).
  void clear_namespace();

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::Int ? double(i_) : d_; }
  const std::string& as_string() const { return *s_; }
  const ValueList& as_list() const { return *list_; }
  ValueList& as_list() { return *list_; }
  const ValueDict& as_dict() const { return *dict_; }
  const NativeFunction& as_function() const { return *fn_; }
  const std::string& function_name() const { return *s_; }

  // Dict access (string keys); get returns undefined when missing.
  Value get(const std::string& key) const;
  bool has(const std::string& key) const;
  void set(const std::string& key, Value v);  // mutates the shared dict (namespace, contexts)

  bool truthy() const;          // Python truthiness; undefined is false
  std::string str() const;      // Python str(): what {{ x }} prints; undefined prints ""
  std::string repr() const;     // Python repr(): strings quoted, used inside str() of containers
  nlohmann::ordered_json to_json() const;  // fails for undefined and functions
  const char* kind_name() const;           // "string", "list", ... for error messages

  friend bool operator==(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool is_namespace_ = false;
  int depth_ = 0;
  std::int64_t i_ = 0;
  double d_ = 0.0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<NativeFunction> fn_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Argument `index` by position, or by keyword `name`; undefined when absent.
  Value get(std::size_t index, const std::string& name) const;
};

struct Node;  // AST, defined in jinja_ast.h

// A parsed template. Parsing fails on unsupported syntax; rendering fails on runtime errors
// (undefined arithmetic, unknown filter, raise_exception, ...), always with line/column.
class Template {
 public:
  // origin names the template in error messages (a file path, "tokenizer_config.json", ...).
  static Template parse(const std::string& source, const std::string& origin);
  // context: a dict of top-level variables (messages, bos_token, add_generation_prompt, ...).
  // The render is bounded by limits; exceeding them is a journey::Error like any template error.
  std::string render(const Value& context, const RenderLimits& limits = {}) const;
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::shared_ptr<const Node> root_;
};

// Globals every render gets (HF's chat-template environment): range, namespace, dict,
// raise_exception, strftime_now. now_unix_seconds < 0 means "the current local time";
// otherwise strftime_now formats that moment in UTC (for reproducible renders and tests).
Value default_globals(std::int64_t now_unix_seconds);

}  // namespace journey::jinja
