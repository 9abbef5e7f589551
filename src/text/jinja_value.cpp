// Template values: construction, Python-like truthiness/str/repr/equality, JSON in and out.
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "text/jinja.h"
#include "text/jinja_internal.h"

namespace journey::jinja {

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int i) : kind_(Kind::Int), i_(i) {}
Value::Value(std::int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double d) : kind_(Kind::Float), d_(d) {}
Value::Value(const char* s) : kind_(Kind::String), s_(std::make_shared<std::string>(s)) {}
Value::Value(std::string s) : kind_(Kind::String), s_(std::make_shared<std::string>(std::move(s))) {}
Value::Value(ValueList list) : kind_(Kind::List), list_(std::make_shared<ValueList>(std::move(list))) {}

Value Value::dict(ValueDict entries) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<ValueDict>(std::move(entries));
  return v;
}

Value Value::namespace_object(ValueDict entries) {
  Value v = dict(std::move(entries));
  v.is_namespace_ = true;
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.s_ = std::make_shared<std::string>(std::move(name));
  v.fn_ = std::make_shared<NativeFunction>(std::move(fn));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList list;
      for (const auto& item : json) list.push_back(from_json(item));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict entries;
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, from_json(item));
      return dict(std::move(entries));
    }
    default: fail("jinja: cannot convert JSON value of type ", json.type_name(), " to a template value");
  }
}

Value Value::get(const std::string& key) const {
  if (kind_ != Kind::Dict) return Value();
  for (const auto& [k, v] : *dict_)
    if (k == key) return v;
  return Value();
}

bool Value::has(const std::string& key) const {
  if (kind_ != Kind::Dict) return false;
  for (const auto& entry : *dict_)
    if (entry.first == key) return true;
  return false;
}

void Value::set(const std::string& key, Value v) {
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

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return python_float(d_);
    case Kind::String: return python_string_repr(*s_);
    case Kind::List: {
      std::string out = "[";
      for (std::size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      return out + "]";
    }
    case Kind::Dict: {
      std::string out = is_namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : *dict_) {
        out += (first ? "" : ", ") + python_string_repr(k) + ": " + v.repr();
        first = false;
      }
      return out + (is_namespace_ ? "}>" : "}");
    }
    case Kind::Function: return "<function " + *s_ + ">";
  }
  return "";
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::None: return nullptr;
    case Kind::Bool: return b_;
    case Kind::Int: return i_;
    case Kind::Float: return d_;
    case Kind::String: return *s_;
    case Kind::List: {
      auto out = nlohmann::ordered_json::array();
      for (const auto& item : *list_) out.push_back(item.to_json());
      return out;
    }
    case Kind::Dict: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : *dict_) out[k] = v.to_json();
      return out;
    }
    default: fail("jinja: a ", kind_name(), " value cannot be converted to JSON");
  }
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind_ == Value::Kind::Int && b.kind_ == Value::Kind::Int) return a.i_ == b.i_;
    return a.as_number() == b.as_number();
  }
  // Python: True == 1; keep it simple and compare booleans only with booleans.
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Bool: return a.b_ == b.b_;
    case Value::Kind::String: return *a.s_ == *b.s_;
    case Value::Kind::List: return *a.list_ == *b.list_;
    case Value::Kind::Dict: {
      if (a.dict_ == b.dict_) return true;
      if (a.dict_->size() != b.dict_->size()) return false;
      for (const auto& [k, v] : *a.dict_)
        if (!b.has(k) || !(b.get(k) == v)) return false;
      return true;
    }
    case Value::Kind::Function: return a.fn_ == b.fn_;
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

static void dump_json(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  auto newline = [&](int level) {
    if (style.indent < 0) return;
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
      out += '[';
      bool first = true;
      for (const auto& item : v.as_list()) {
        if (!first) out += style.item_separator;
        first = false;
        newline(depth + 1);
        dump_json(out, item, style, depth + 1);
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
        dump_json(out, item, style, depth + 1);
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
  dump_json(out, v, style, 0);
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
