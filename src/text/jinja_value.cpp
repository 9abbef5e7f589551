// Template values: construction, Python-like truthiness/str/repr/equality, JSON in and out, and
// the render budget that every one of them charges (jinja_internal.h).
#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "text/jinja.h"
#include "text/jinja_internal.h"

namespace journey::jinja {

// ---- the render budget ----------------------------------------------------------------------

void problem(const std::string& message) { throw Problem(message); }

namespace {
thread_local RenderBudget* active_budget = nullptr;
}

RenderBudget::RenderBudget(const RenderLimits& limits)
    : limits_(limits), stack_base_(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0))), previous_(active_budget) {
  active_budget = this;
}

void RenderBudget::check_stack() const {
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  if (here < stack_base_ && stack_base_ - here > limits_.max_stack_bytes)
    problem(cat("the template recursed through more than ", limits_.max_stack_bytes / 1024,
                " KiB of stack (runaway recursion?)"));
}

RenderBudget::~RenderBudget() {
  active_budget = previous_;
  // Break every cycle among the render's namespaces, then let them go: each namespace is still
  // held by namespaces_ while the others are cleared, so no destructor recurses into another.
  for (Value& ns : namespaces_) ns.clear_namespace();
}

RenderBudget* RenderBudget::active() { return active_budget; }

void RenderBudget::charge(std::int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    problem(cat("the render exceeded its budget of ", limits_.max_steps,
                " steps (a loop that does not end, or work that grows without bound?)"));
}

void charge_steps(std::int64_t n) {
  if (active_budget) active_budget->charge(n);
}

void check_string_size(std::size_t bytes) {
  if (active_budget && bytes > active_budget->limits().max_string_bytes)
    problem(cat("a string of ", bytes, " bytes would exceed the render's limit of ",
                active_budget->limits().max_string_bytes, " bytes"));
}

void charge_string(std::size_t bytes) {
  check_string_size(bytes);
  charge_steps(static_cast<std::int64_t>(bytes / 64));
}

namespace {
// Depth of a container built from these items; a namespace counts as 1 (see Value::depth).
int container_depth(int deepest_item) {
  const int depth = deepest_item + 1;
  if (depth > kMaxValueDepth) problem(cat("a value nested deeper than ", kMaxValueDepth, " levels"));
  return depth;
}
void guard_walk_depth(int depth, const char* what) {
  if (depth > kMaxValueDepth)
    problem(cat(what, ": the value is nested deeper than ", kMaxValueDepth, " levels (does it contain itself?)"));
}
}  // namespace

// ---- values ---------------------------------------------------------------------------------

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int i) : kind_(Kind::Int), i_(i) {}
Value::Value(std::int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double d) : kind_(Kind::Float), d_(d) {}
Value::Value(const char* s) : kind_(Kind::String), s_(std::make_shared<std::string>(s)) { charge_string(s_->size()); }
Value::Value(std::string s) : kind_(Kind::String) {
  charge_string(s.size());
  s_ = std::make_shared<std::string>(std::move(s));
}
Value::Value(ValueList list) : kind_(Kind::List) {
  charge_steps(static_cast<std::int64_t>(list.size()));
  int deepest = 0;
  for (const Value& item : list) deepest = std::max(deepest, item.depth_);
  depth_ = container_depth(deepest);
  list_ = std::make_shared<ValueList>(std::move(list));
}

Value Value::dict(ValueDict entries) {
  charge_steps(static_cast<std::int64_t>(entries.size()));
  Value v;
  v.kind_ = Kind::Dict;
  int deepest = 0;
  for (const auto& entry : entries) deepest = std::max(deepest, entry.second.depth_);
  v.depth_ = container_depth(deepest);
  v.dict_ = std::make_shared<ValueDict>(std::move(entries));
  return v;
}

Value Value::namespace_object(ValueDict entries) {
  Value v = dict(std::move(entries));
  v.is_namespace_ = true;
  v.depth_ = 1;
  if (RenderBudget* budget = RenderBudget::active()) budget->adopt_namespace(v);
  return v;
}

const void* Value::identity() const {
  if (kind_ == Kind::List) return list_.get();
  if (kind_ == Kind::Dict) return dict_.get();
  return nullptr;
}

void Value::clear_namespace() {
  if (is_namespace()) dict_->clear();
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.s_ = std::make_shared<std::string>(std::move(name));
  v.fn_ = std::make_shared<NativeFunction>(std::move(fn));
  return v;
}

namespace {
Value from_json_at(const nlohmann::ordered_json& json, int depth);
}

Value Value::from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 0); }

namespace {
Value from_json_at(const nlohmann::ordered_json& json, int depth) {
  guard_walk_depth(depth, "a JSON variable");
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList list;
      for (const auto& item : json) list.push_back(from_json_at(item, depth + 1));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict entries;
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, from_json_at(item, depth + 1));
      return Value::dict(std::move(entries));
    }
    default: fail("jinja: cannot convert JSON value of type ", json.type_name(), " to a template value");
  }
}
}  // namespace

Value Value::get(const std::string& key) const {
  if (kind_ != Kind::Dict) return Value();
  charge_steps(static_cast<std::int64_t>(dict_->size() / 8));  // a linear search
  for (const auto& [k, v] : *dict_)
    if (k == key) return v;
  return Value();
}

bool Value::has(const std::string& key) const {
  if (kind_ != Kind::Dict) return false;
  charge_steps(static_cast<std::int64_t>(dict_->size() / 8));
  for (const auto& entry : *dict_)
    if (entry.first == key) return true;
  return false;
}

void Value::set(const std::string& key, Value v) {
  // A namespace stays at depth 1 (its attributes change after it is placed in other values);
  // any other dict is still being built here, so its depth follows its entries.
  if (!is_namespace_) depth_ = std::max(depth_, container_depth(v.depth_));
  for (auto& entry : *dict_)
    if (entry.first == key) {
      entry.second = std::move(v);
      return;
    }
  dict_->emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return d_ != 0.0;
    case Kind::String: return !s_->empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->empty();
    case Kind::Function: return true;
  }
  return false;
}

const char* Value::kind_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "none";
    case Kind::Bool: return "boolean";
    case Kind::Int: return "integer";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::List: return "list";
    case Kind::Dict: return is_namespace_ ? "namespace" : "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

// Python's repr(float): shortest round-trip digits, always with a '.' or an exponent.
std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, d);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

static std::string python_string_repr(const std::string& s) {
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
    else out += static_cast<char>(c);
  }
  return out + quote;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return *s_;
    default: return repr();
  }
}

// Python's repr, including its answer to a container that contains itself: [...] / {...}.
// `visiting` holds the containers being printed (the path from the root).
static void repr_into(const Value& v, std::string& out, std::vector<const void*>& visiting) {
  charge_steps(1);
  check_string_size(out.size());
  switch (v.kind()) {
    case Value::Kind::List:
    case Value::Kind::Dict: {
      const bool is_list = v.is_list();
      if (std::find(visiting.begin(), visiting.end(), v.identity()) != visiting.end()) {
        out += is_list ? "[...]" : v.is_namespace() ? "<Namespace {...}>" : "{...}";
        return;
      }
      guard_walk_depth(int(visiting.size()) + 1, "printing a value");
      visiting.push_back(v.identity());
      if (is_list) {
        out += '[';
        bool first = true;
        for (const Value& item : v.as_list()) {
          if (!first) out += ", ";
          first = false;
          repr_into(item, out, visiting);
        }
        out += ']';
      } else {
        out += v.is_namespace() ? "<Namespace {" : "{";
        bool first = true;
        for (const auto& [k, item] : v.as_dict()) {
          if (!first) out += ", ";
          first = false;
          out += python_string_repr(k) + ": ";
          repr_into(item, out, visiting);
        }
        out += v.is_namespace() ? "}>" : "}";
      }
      visiting.pop_back();
      return;
    }
    default: out += v.repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return python_float(d_);
    case Kind::String: return python_string_repr(*s_);
    case Kind::List:
    case Kind::Dict: {
      std::string out;
      std::vector<const void*> visiting;
      repr_into(*this, out, visiting);
      check_string_size(out.size());
      return out;
    }
    case Kind::Function: return "<function " + *s_ + ">";
  }
  return "";
}

static nlohmann::ordered_json to_json_at(const Value& v, int depth) {
  guard_walk_depth(depth, "converting to JSON");
  charge_steps(1);
  switch (v.kind()) {
    case Value::Kind::None: return nullptr;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int();
    case Value::Kind::Float: return v.as_number();
    case Value::Kind::String: return v.as_string();
    case Value::Kind::List: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& item : v.as_list()) out.push_back(to_json_at(item, depth + 1));
      return out;
    }
    case Value::Kind::Dict: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [k, item] : v.as_dict()) out[k] = to_json_at(item, depth + 1);
      return out;
    }
    default: fail("jinja: a ", v.kind_name(), " value cannot be converted to JSON");
  }
}

nlohmann::ordered_json Value::to_json() const { return to_json_at(*this, 0); }

// Python's ==. Two distinct structures that contain themselves would compare for ever (Python
// raises RecursionError): the depth guard ends that with an error.
static bool equal_at(const Value& a, const Value& b, int depth);

bool operator==(const Value& a, const Value& b) { return equal_at(a, b, 0); }

static bool equal_at(const Value& a, const Value& b, int depth) {
  guard_walk_depth(depth, "comparing values");
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::Int && b.kind() == Value::Kind::Int) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  // Python: True == 1; keep it simple and compare booleans only with booleans.
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Bool: return a.as_bool() == b.as_bool();
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      if (a.identity() == b.identity()) return true;
      const ValueList &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.identity() == b.identity()) return true;
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : a.as_dict()) {
        charge_steps(static_cast<std::int64_t>(b.as_dict().size()));  // the linear key lookup
        if (!b.has(k) || !equal_at(b.get(k), v, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

Value CallArgs::get(std::size_t index, const std::string& name) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return Value();
}

// Python's json.dumps with ensure_ascii=False (HF's tojson), or ensure_ascii=True on request.
static void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buffer[16];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else if (c >= 0x80 && ensure_ascii) {
          std::size_t length = 0;
          char32_t cp = decode_utf8(s, i, &length);
          auto emit = [&](unsigned unit) {
            char buffer[16];
            std::snprintf(buffer, sizeof buffer, "\\u%04x", unit);
            out += buffer;
          };
          if (cp >= 0x10000) {
            cp -= 0x10000;
            emit(0xD800 + (cp >> 10));
            emit(0xDC00 + (cp & 0x3FF));
          } else {
            emit(cp);
          }
          i += length - 1;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Python's json.dumps, which refuses a container that contains itself ("Circular reference
// detected"): `visiting` holds the containers on the path from the root.
static void dump_json(std::string& out, const Value& v, const JsonStyle& style, int depth,
                      std::vector<const void*>& visiting) {
  charge_steps(1);
  check_string_size(out.size());
  if (v.is_list() || v.is_dict()) {
    if (std::find(visiting.begin(), visiting.end(), v.identity()) != visiting.end())
      problem(cat("tojson: circular reference: a ", v.kind_name(), " contains itself"));
    guard_walk_depth(depth + 1, "tojson");
  }
  struct Visit {  // the container is on the path while its items are written
    std::vector<const void*>& path;
    Visit(std::vector<const void*>& p, const void* id) : path(p) { path.push_back(id); }
    ~Visit() { path.pop_back(); }
  };
  auto newline = [&](int level) {
    if (style.indent < 0) return;
    check_string_size(out.size() + std::size_t(style.indent) * std::size_t(level));
    out += '\n';
    out.append(std::size_t(style.indent) * level, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; break;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; break;
    case Value::Kind::Int: out += std::to_string(v.as_int()); break;
    case Value::Kind::Float: {
      double d = v.as_number();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float(d);
      break;
    }
    case Value::Kind::String: append_json_string(out, v.as_string(), style.ensure_ascii); break;
    case Value::Kind::List: {
      if (v.as_list().empty()) {
        out += "[]";
        break;
      }
      Visit visit(visiting, v.identity());
      out += '[';
      bool first = true;
      for (const auto& item : v.as_list()) {
        if (!first) out += style.item_separator;
        first = false;
        newline(depth + 1);
        dump_json(out, item, style, depth + 1, visiting);
      }
      newline(depth);
      out += ']';
      break;
    }
    case Value::Kind::Dict: {
      if (v.as_dict().empty()) {
        out += "{}";
        break;
      }
      Visit visit(visiting, v.identity());
      ValueDict entries = v.as_dict();
      if (style.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      bool first = true;
      for (const auto& [k, item] : entries) {
        if (!first) out += style.item_separator;
        first = false;
        newline(depth + 1);
        append_json_string(out, k, style.ensure_ascii);
        out += style.key_separator;
        dump_json(out, item, style, depth + 1, visiting);
      }
      newline(depth);
      out += '}';
      break;
    }
    default: fail("tojson: a ", v.kind_name(), " value is not JSON serializable");
  }
}

std::string to_python_json(const Value& v, const JsonStyle& style) {
  std::string out;
  std::vector<const void*> visiting;
  dump_json(out, v, style, 0, visiting);
  check_string_size(out.size());
  return out;
}

char32_t decode_utf8(const std::string& s, std::size_t i, std::size_t* length) {
  unsigned char c = s[i];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *length = n;
  return cp;
}

std::vector<std::string> utf8_characters(const std::string& s) {
  charge_steps(static_cast<std::int64_t>(s.size()));  // one string per character: charged first
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t length = 0;
    decode_utf8(s, i, &length);
    out.push_back(s.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace journey::jinja
