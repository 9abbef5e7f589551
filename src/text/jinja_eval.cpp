// The evaluator: walks the AST with a stack of scopes and writes the rendered text.
// Scoping follows Jinja2 where templates depend on it: each for-loop iteration and each macro
// call gets a fresh scope (so `set` inside a loop does not leak; that is what namespace() is
// for), while `if` blocks share their enclosing scope.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "core/untrusted.h"
#include "text/jinja_internal.h"

namespace journey::jinja {
namespace {

enum class Flow { Normal, Break, Continue };

// Deepest recursion of the evaluator (statements and expressions, macro calls included): the
// parser bounds one template's nesting by kMaxNesting, recursive macros could go further.
constexpr int kMaxEvalDepth = 1000;

// ---- checked integer arithmetic (Python ints do not overflow; ours end in a template error) --

[[noreturn]] void overflow(std::int64_t a, const char* op, std::int64_t b) {
  problem(cat("integer overflow: ", a, " ", op, " ", b, " does not fit in 64 bits"));
}

std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow(a, "+", b);
  return r;
}
std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow(a, "-", b);
  return r;
}
std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow(a, "*", b);
  return r;
}
// Python's floor division and modulo (b != 0 is checked by the caller). INT64_MIN / -1 is the one
// quotient that does not fit (and traps on x86): an error for //, while % -1 is always 0.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (a == std::numeric_limits<std::int64_t>::min() && b == -1) overflow(a, "//", b);
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
std::int64_t floor_mod(std::int64_t a, std::int64_t b) {
  if (b == -1) return 0;
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
std::int64_t checked_pow(std::int64_t base, std::int64_t exponent) {  // exponent >= 0
  std::int64_t result = 1;
  for (std::int64_t b = base, e = exponent; e > 0; e >>= 1) {
    if (e & 1) result = checked_mul(result, b);
    if (e > 1) {
      if (__builtin_mul_overflow(b, b, &b)) overflow(base, "**", exponent);
    }
  }
  return result;
}
// A float that becomes an int (the int filter): it must fit.
std::int64_t float_to_int(double d) {
  // 2^63 is exactly representable; every double below it in magnitude truncates into range.
  if (!std::isfinite(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
    problem(cat("int: ", python_float(d), " does not fit in a 64-bit integer"));
  return static_cast<std::int64_t>(d);
}

// ---- string helpers (Python str semantics on UTF-8, by code point) ---------------------------

bool is_py_space(const std::string& ch) {
  return ch == " " || ch == "\t" || ch == "\n" || ch == "\r" || ch == "\v" || ch == "\f";
}

// Length in bytes of the UTF-8 character that starts at s[i] (as decode_utf8 reads it).
std::size_t char_length_at(const std::string& s, std::size_t i) {
  std::size_t length = 0;
  decode_utf8(s, i, &length);
  return length;
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<std::string> set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) problem(cat("strip: expected a string of characters, found ", chars.kind_name()));
    set = utf8_characters(chars.as_string());
  }
  auto strip_it = [&](const std::string& ch) {
    return whitespace ? is_py_space(ch) : std::find(set.begin(), set.end(), ch) != set.end();
  };
  // Walk by character boundaries from both ends; the middle is copied once.
  std::size_t begin = 0, end = s.size();
  if (left)
    while (begin < end) {
      std::size_t n = char_length_at(s, begin);
      if (!strip_it(s.substr(begin, n))) break;
      begin += n;
    }
  if (right)
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (char_length_at(s, start) != end - start) start = end - 1;  // a stray continuation byte
      if (!strip_it(s.substr(start, end - start))) break;
      end = start;
    }
  return s.substr(begin, end - begin);
}

Value py_split(const std::string& s, const Value& separator, const Value& max_split_value) {
  std::int64_t max_split = max_split_value.is_number() ? max_split_value.as_int() : -1;
  ValueList parts;
  if (separator.is_undefined() || separator.is_none()) {
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && std::int64_t(parts.size()) == max_split) {
        std::string rest = s.substr(i);
        while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) rest.pop_back();
        parts.emplace_back(rest);
        break;
      }
      std::size_t start = i;
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      parts.emplace_back(s.substr(start, i - start));
    }
    return Value(std::move(parts));
  }
  if (!separator.is_string()) problem(cat("split: separator must be a string, found ", separator.kind_name()));
  const std::string& sep = separator.as_string();
  if (sep.empty()) problem("split: empty separator");
  std::size_t start = 0;
  for (;;) {
    std::size_t found = s.find(sep, start);
    if (found == std::string::npos || (max_split >= 0 && std::int64_t(parts.size()) == max_split)) break;
    parts.emplace_back(s.substr(start, found - start));
    start = found + sep.size();
  }
  parts.emplace_back(s.substr(start));
  return Value(std::move(parts));
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  std::string out;
  std::size_t start = 0;
  std::int64_t done = 0;
  if (from.empty()) return s;
  for (;;) {
    std::size_t found = s.find(from, start);
    if (found == std::string::npos || (count >= 0 && done == count)) break;
    out += s.substr(start, found - start) + to;
    check_string_size(out.size());
    start = found + from.size();
    ++done;
  }
  return out + s.substr(start);
}

// ASCII case mapping; other characters pass through unchanged.
std::string map_case(const std::string& s, int (*fn)(int)) {
  std::string out = s;
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(fn(static_cast<unsigned char>(c)));
  return out;
}

// Python str.title(): a letter after a non-letter is upper-cased, other letters lower-cased.
std::string py_title(const std::string& s) {
  std::string out = s;
  bool previous_cased = false;
  for (auto& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    bool letter = std::isalpha(u) != 0;
    if (letter) c = static_cast<char>(previous_cased ? std::tolower(u) : std::toupper(u));
    previous_cased = letter || u >= 0x80;
  }
  return out;
}

// Jinja's |title filter: capitalizes words separated by whitespace, '-', and opening brackets.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    bool separator = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) out += c;
    else out += static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
    word_start = separator;
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool starts) {
  auto check = [&](const Value& v) {
    if (!v.is_string()) problem(cat(starts ? "startswith" : "endswith", ": expected a string, found ", v.kind_name()));
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return starts ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const auto& v : affix.as_list())
      if (check(v)) return true;
    return false;
  }
  return check(affix);
}

std::int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::String: {
      const std::string& s = v.as_string();
      std::int64_t count = 0;
      for (std::size_t i = 0; i < s.size(); i += char_length_at(s, i)) ++count;
      return count;
    }
    case Value::Kind::List: return std::int64_t(v.as_list().size());
    case Value::Kind::Dict: return std::int64_t(v.as_dict().size());
    case Value::Kind::Undefined: return 0;
    default: problem(cat("object of type ", v.kind_name(), " has no length"));
  }
}

// Python iteration: list items, dict keys, string characters; undefined iterates as empty.
ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::List: charge_steps(std::int64_t(v.as_list().size())); return v.as_list();
    case Value::Kind::Dict: {
      charge_steps(std::int64_t(v.as_dict().size()));
      ValueList keys;
      for (const auto& entry : v.as_dict()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;  // utf8_characters charges one step per character
      for (auto& ch : utf8_characters(v.as_string())) chars.emplace_back(ch);
      return chars;
    }
    case Value::Kind::Undefined: return {};
    default: problem(cat("a ", v.kind_name(), " value is not iterable"));
  }
}

ValueList dict_items(const Value& v) {
  if (!v.is_dict()) problem(cat("items: expected a dict, found ", v.kind_name()));
  ValueList items;
  for (const auto& [k, item] : v.as_dict()) items.emplace_back(ValueList{Value(k), item});
  return items;
}

// Python slicing for lists and strings (by code point).
template <typename Seq>
Seq slice_sequence(const Seq& seq, const Value& start_v, const Value& stop_v, const Value& step_v) {
  std::int64_t n = std::int64_t(seq.size());
  std::int64_t step = step_v.is_number() ? step_v.as_int() : 1;
  if (step == 0) problem("slice step cannot be zero");
  auto clamp = [&](const Value& v, std::int64_t fallback) {
    if (!v.is_number()) return fallback;
    std::int64_t i = v.as_int();
    if (i < 0) i += n;
    if (step > 0) return std::clamp<std::int64_t>(i, 0, n);
    return std::clamp<std::int64_t>(i, -1, n - 1);
  };
  std::int64_t start = clamp(start_v, step > 0 ? 0 : n - 1);
  std::int64_t stop = clamp(stop_v, step > 0 ? n : -1);
  Seq out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(seq[std::size_t(i)]);
    if (__builtin_add_overflow(i, step, &i)) break;  // a huge step: past either end anyway
  }
  return out;
}

bool compare_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_number() < b.as_number();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  problem(cat("cannot compare ", a.kind_name(), " with ", b.kind_name()));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string()) problem(cat("'in <string>' requires a string on the left, found ", item.kind_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      return std::find(container.as_list().begin(), container.as_list().end(), item) != container.as_list().end();
    case Value::Kind::Dict: return item.is_string() && container.has(item.as_string());
    case Value::Kind::Undefined: problem("'in' on an undefined value");
    default: problem(cat("'in' needs a string, list or dict on the right, found ", container.kind_name()));
  }
}

// ---- the renderer ---------------------------------------------------------------------------

class Renderer {
 public:
  Renderer(const std::string& origin, const Value& context) : origin_(origin) {
    scopes_.emplace_back();
    for (const auto& [k, v] : context.as_dict()) scopes_.back()[k] = v;
    scopes_.emplace_back();  // the template's own top-level variables
  }

  void render(const Node& root, std::string& out) { exec_body(root.body, out); }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec_body(const std::vector<NodePtr>& body, std::string& out) {
    for (const auto& node : body) {
      Flow flow = exec(*node, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  // Counts the evaluator's recursion (exec and eval, across macro calls) in levels and in stack.
  struct DepthGuard {
    explicit DepthGuard(int& d) : depth(d) {
      if (++depth > kMaxEvalDepth) {
        --depth;
        problem(cat("the template recursed deeper than ", kMaxEvalDepth, " levels (runaway recursion?)"));
      }
      if (RenderBudget* budget = RenderBudget::active()) {
        try {
          budget->check_stack();
        } catch (...) {
          --depth;
          throw;
        }
      }
    }
    ~DepthGuard() { --depth; }
    int& depth;
  };

  Flow exec(const Node& node, std::string& out) {
    try {
      charge_steps(1);
      DepthGuard guard(depth_);
      return exec_inner(node, out);
    } catch (const Problem& p) {
      error(node, p.what());
    }
  }

  Flow exec_inner(const Node& node, std::string& out) {
    switch (node.kind) {
      case Node::Kind::Sequence: return exec_body(node.body, out);
      case Node::Kind::Text:
        check_string_size(out.size() + node.text.size());
        out += node.text;
        return Flow::Normal;
      case Node::Kind::Output: {
        std::string text = eval(*node.a).str();
        check_string_size(out.size() + text.size());
        out += text;
        return Flow::Normal;
      }
      case Node::Kind::If:
        return eval(*node.a).truthy() ? exec_body(node.body, out) : exec_body(node.else_body, out);
      case Node::Kind::For: return exec_for(node, out);
      case Node::Kind::Set: exec_set(node); return Flow::Normal;
      case Node::Kind::SetBlock: {
        std::string captured;
        exec_body(node.body, captured);
        assign(node.names[0], Value(captured));
        return Flow::Normal;
      }
      case Node::Kind::Macro: define_macro(node); return Flow::Normal;
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      default: error(node, "internal error: expression node in statement position");
    }
  }

  Flow exec_for(const Node& node, std::string& out) {
    Value iterable = eval(*node.a);
    if (iterable.is_none()) error(*node.a, cat("cannot iterate over none (", describe(*node.a), ")"));
    ValueList items;
    try {
      items = iterate(iterable);
    } catch (const Problem& p) {
      error(*node.a, p.what());
    }
    if (node.b) {  // `for x in xs if cond`: filter first, so loop.* counts the kept items
      ValueList kept;
      for (const auto& item : items) {
        charge_steps(1);
        scopes_.emplace_back();
        bind_targets(node, item);
        if (eval(*node.b).truthy()) kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(node.else_body, out);
    const std::int64_t n = std::int64_t(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      charge_steps(1);  // an empty body still costs its iterations
      scopes_.emplace_back();
      bind_targets(node, items[std::size_t(i)]);
      ValueDict loop{{"index", Value(i + 1)},
                     {"index0", Value(i)},
                     {"revindex", Value(n - i)},
                     {"revindex0", Value(n - i - 1)},
                     {"first", Value(i == 0)},
                     {"last", Value(i == n - 1)},
                     {"length", Value(n)},
                     {"previtem", i > 0 ? items[std::size_t(i - 1)] : Value()},
                     {"nextitem", i + 1 < n ? items[std::size_t(i + 1)] : Value()}};
      ValueList cycle_items;
      loop.emplace_back("cycle", Value::function("loop.cycle", [i](const CallArgs& args) {
                          if (args.positional.empty()) problem("loop.cycle needs at least one argument");
                          return args.positional[std::size_t(i) % args.positional.size()];
                        }));
      scopes_.back()["loop"] = Value::dict(std::move(loop));
      Flow flow = exec_body(node.body, out);
      scopes_.pop_back();
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void bind_targets(const Node& node, const Value& item) {
    if (node.names.size() == 1) {
      scopes_.back()[node.names[0]] = item;
      return;
    }
    if (!item.is_list() || item.as_list().size() != node.names.size())
      error(node, cat("cannot unpack a ", item.kind_name(), " into ", node.names.size(), " loop variables"));
    for (std::size_t k = 0; k < node.names.size(); ++k) scopes_.back()[node.names[k]] = item.as_list()[k];
  }

  void exec_set(const Node& node) {
    Value value = eval(*node.b);
    if (node.a) {  // set ns.attr = value
      Value object = lookup(node.a->a->text);
      if (!object.is_namespace())
        error(node, cat("cannot assign attribute '", node.a->text, "' on '", node.a->a->text, "', a ", object.kind_name(),
                        " (only namespace() objects accept attribute assignment)"));
      object.set(node.a->text, value);
      return;
    }
    if (node.names.size() == 1) {
      assign(node.names[0], value);
      return;
    }
    if (!value.is_list() || value.as_list().size() != node.names.size())
      error(node, cat("cannot unpack a ", value.kind_name(), " into ", node.names.size(), " variables"));
    for (std::size_t k = 0; k < node.names.size(); ++k) assign(node.names[k], value.as_list()[k]);
  }

  void assign(const std::string& name, Value value) { scopes_.back()[name] = std::move(value); }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  void define_macro(const Node& node) {
    const Node* macro = &node;
    Renderer* self = this;
    assign(node.text, Value::function(node.text, [self, macro](const CallArgs& args) {
             if (args.positional.size() > macro->names.size())
               problem(cat("macro '", macro->text, "' takes ", macro->names.size(), " arguments, got ", args.positional.size()));
             if (self->macro_depth_ >= kMaxMacroDepth)
               problem(cat("macro '", macro->text, "' nested deeper than ", kMaxMacroDepth, " calls (runaway recursion?)"));
             ++self->macro_depth_;
             self->scopes_.emplace_back();
             for (std::size_t k = 0; k < macro->names.size(); ++k) {
               Value v = args.get(k, macro->names[k]);
               if (v.is_undefined() && macro->args[k]) v = self->eval(*macro->args[k]);
               self->scopes_.back()[macro->names[k]] = v;
             }
             std::string out;
             self->exec_body(macro->body, out);
             self->scopes_.pop_back();
             --self->macro_depth_;
             return Value(out);
           }));
  }

  // ---- expressions ----

  Value eval(const Node& node) {
    try {
      charge_steps(1);
      DepthGuard guard(depth_);
      return eval_inner(node);
    } catch (const Problem& p) {
      error(node, p.what());
    }
  }

  Value eval_inner(const Node& node) {
    switch (node.kind) {
      case Node::Kind::Literal: return node.literal;
      case Node::Kind::Name: return lookup(node.text);
      case Node::Kind::Attribute: {
        Value object = eval(*node.a);
        return attribute(object, node.text, node);
      }
      case Node::Kind::Item: {
        Value object = eval(*node.a);
        return subscript(object, eval(*node.b), node);
      }
      case Node::Kind::Slice: {
        Value object = eval(*node.a);
        Value start = node.b ? eval(*node.b) : Value(), stop = node.c ? eval(*node.c) : Value(),
              step = node.d ? eval(*node.d) : Value();
        if (object.is_list()) return Value(slice_sequence(object.as_list(), start, stop, step));
        if (object.is_string()) {
          std::string out;
          for (const auto& ch : slice_sequence(utf8_characters(object.as_string()), start, stop, step)) out += ch;
          return Value(out);
        }
        problem(cat("cannot slice ", describe(*node.a), ", a ", object.kind_name()));
      }
      case Node::Kind::Call: {
        Value callee = eval(*node.a);
        if (callee.kind() != Value::Kind::Function) {
          if (callee.is_undefined()) problem(cat("'", describe(*node.a), "' is undefined and cannot be called"));
          problem(cat("'", describe(*node.a), "' is a ", callee.kind_name(), ", not a function"));
        }
        return callee.as_function()(evaluate_arguments(node));
      }
      case Node::Kind::Filter: return apply_filter(node);
      case Node::Kind::Test: {
        bool result = apply_test(node);
        return Value(node.negated ? !result : result);
      }
      case Node::Kind::Unary: {
        Value operand = eval(*node.a);
        if (node.text == "not") return Value(!operand.truthy());
        if (!operand.is_number()) problem(cat("unary '", node.text, "' needs a number, found ", operand.kind_name()));
        if (node.text == "+") return operand;
        return operand.kind() == Value::Kind::Int ? Value(checked_sub(0, operand.as_int())) : Value(-operand.as_number());
      }
      case Node::Kind::Binary: return eval_binary(node);
      case Node::Kind::Ternary:
        if (eval(*node.a).truthy()) return eval(*node.b);
        return node.c ? eval(*node.c) : Value();
      case Node::Kind::ListLiteral: {
        ValueList items;
        for (const auto& item : node.args) items.push_back(eval(*item));
        return Value(std::move(items));
      }
      case Node::Kind::DictLiteral: {
        Value dict = Value::dict();
        for (const auto& [key_node, value_node] : node.pairs) {
          Value key = eval(*key_node);
          if (!key.is_string()) problem(cat("dict literal keys must be strings, found ", key.kind_name()));
          dict.set(key.as_string(), eval(*value_node));
        }
        return dict;
      }
      default: problem("internal error: statement node in expression position");
    }
  }

  CallArgs evaluate_arguments(const Node& node) {
    CallArgs args;
    for (const auto& a : node.args) args.positional.push_back(eval(*a));
    for (const auto& [k, v] : node.kwargs) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  Value eval_binary(const Node& node) {
    const std::string& op = node.text;
    Value left = eval(*node.a);
    if (op == "and") return left.truthy() ? eval(*node.b) : left;
    if (op == "or") return left.truthy() ? left : eval(*node.b);
    Value right = eval(*node.b);
    if (op == "==") return Value(left == right);
    if (op == "!=") return Value(!(left == right));
    if (op == "<") return Value(compare_less(left, right));
    if (op == ">") return Value(compare_less(right, left));
    if (op == "<=") return Value(!compare_less(right, left));
    if (op == ">=") return Value(!compare_less(left, right));
    if (op == "in") return Value(contains(right, left));
    if (op == "not in") return Value(!contains(right, left));
    if (op == "~") return Value(left.str() + right.str());
    auto undefined_operand = [&]() -> const Node* {
      if (left.is_undefined()) return node.a.get();
      if (right.is_undefined()) return node.b.get();
      return nullptr;
    };
    if (const Node* missing = undefined_operand())
      problem(cat("'", describe(*missing), "' is undefined (operator '", op, "')"));
    if (op == "+") {
      if (left.is_string() && right.is_string()) return Value(left.as_string() + right.as_string());
      if (left.is_list() && right.is_list()) {
        ValueList joined = left.as_list();
        joined.insert(joined.end(), right.as_list().begin(), right.as_list().end());
        return Value(std::move(joined));
      }
    }
    if (op == "*" && left.is_string() && right.kind() == Value::Kind::Int) {
      const std::string& s = left.as_string();
      const std::int64_t count = std::max<std::int64_t>(right.as_int(), 0);
      if (!s.empty() && std::uint64_t(count) > std::numeric_limits<std::size_t>::max() / s.size())
        overflow(std::int64_t(s.size()), "*", count);
      check_string_size(s.size() * std::size_t(count));
      std::string out;
      out.reserve(s.size() * std::size_t(count));
      for (std::int64_t k = 0; k < count; ++k) out += s;
      return Value(out);
    }
    if (!left.is_number() || !right.is_number())
      problem(cat("unsupported operand types for '", op, "': ", left.kind_name(), " and ", right.kind_name()));
    bool ints = left.kind() == Value::Kind::Int && right.kind() == Value::Kind::Int;
    double a = left.as_number(), b = right.as_number();
    if (op == "+") return ints ? Value(checked_add(left.as_int(), right.as_int())) : Value(a + b);
    if (op == "-") return ints ? Value(checked_sub(left.as_int(), right.as_int())) : Value(a - b);
    if (op == "*") return ints ? Value(checked_mul(left.as_int(), right.as_int())) : Value(a * b);
    if (op == "**") return ints && right.as_int() >= 0 ? Value(checked_pow(left.as_int(), right.as_int())) : Value(std::pow(a, b));
    if (b == 0) problem(cat("division by zero ('", op, "')"));
    if (op == "/") return Value(a / b);
    if (op == "//") {
      if (ints) return Value(floor_div(left.as_int(), right.as_int()));
      return Value(std::floor(a / b));
    }
    if (op == "%") {
      if (ints) return Value(floor_mod(left.as_int(), right.as_int()));
      double r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return Value(r);
    }
    problem(cat("unknown operator '", op, "'"));
  }

  Value attribute(const Value& object, const std::string& name, const Node& node) {
    if (object.is_undefined())
      problem(cat("'", describe(*node.a), "' is undefined (reading its attribute '", name, "')"));
    if (object.is_dict()) {
      if (object.has(name)) return object.get(name);
      if (!object.is_namespace() && (name == "items" || name == "keys" || name == "values" || name == "get"))
        return bound_method(object, name);
      return Value();
    }
    if (object.is_string()) return bound_method(object, name);
    if (object.is_list() && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
      std::int64_t index = 0;
      try {
        index = std::stoll(name);
      } catch (const std::exception&) {
        return Value();  // beyond 64 bits: no such item
      }
      return subscript(object, Value(index), node);
    }
    return Value();  // Jinja2: a missing attribute is undefined
  }

  Value subscript(const Value& object, const Value& key, const Node& node) {
    if (object.is_undefined()) problem(cat("'", describe(*node.a), "' is undefined (subscripting it)"));
    if (object.is_dict()) {
      if (!key.is_string()) return Value();
      return object.get(key.as_string());
    }
    if (object.is_list() || object.is_string()) {
      if (key.kind() != Value::Kind::Int) problem(cat("indices must be integers, found ", key.kind_name()));
      if (object.is_list()) {
        std::int64_t n = std::int64_t(object.as_list().size()), i = key.as_int();
        if (i < 0) i += n;
        return (i < 0 || i >= n) ? Value() : object.as_list()[std::size_t(i)];
      }
      auto chars = utf8_characters(object.as_string());
      std::int64_t n = std::int64_t(chars.size()), i = key.as_int();
      if (i < 0) i += n;
      return (i < 0 || i >= n) ? Value() : Value(chars[std::size_t(i)]);
    }
    if (object.is_none()) problem(cat("'", describe(*node.a), "' is none and cannot be subscripted"));
    return Value();
  }

  // Methods of str and dict that chat templates call (message.content.strip(), dict.items(), ...).
  Value bound_method(const Value& self, const std::string& name) {
    return Value::function(name, [self, name](const CallArgs& args) -> Value {
      if (self.is_dict()) {
        if (name == "items") return Value(dict_items(self));
        if (name == "keys" || name == "values") {
          ValueList out;
          for (const auto& [k, v] : self.as_dict()) out.push_back(name == "keys" ? Value(k) : v);
          return Value(std::move(out));
        }
        if (name == "get") {
          Value key = args.get(0, "key");
          Value found = key.is_string() ? self.get(key.as_string()) : Value();
          if (!found.is_undefined()) return found;
          Value fallback = args.get(1, "default");
          return fallback.is_undefined() ? Value::none() : fallback;
        }
      }
      const std::string& s = self.as_string();
      if (name == "strip") return Value(py_strip(s, args.get(0, "chars"), true, true));
      if (name == "lstrip") return Value(py_strip(s, args.get(0, "chars"), true, false));
      if (name == "rstrip") return Value(py_strip(s, args.get(0, "chars"), false, true));
      if (name == "split") return py_split(s, args.get(0, "sep"), args.get(1, "maxsplit"));
      if (name == "startswith") return Value(starts_or_ends(s, args.get(0, "prefix"), true));
      if (name == "endswith") return Value(starts_or_ends(s, args.get(0, "suffix"), false));
      if (name == "upper") return Value(map_case(s, ::toupper));
      if (name == "lower") return Value(map_case(s, ::tolower));
      if (name == "title") return Value(py_title(s));
      if (name == "capitalize") {
        std::string out = map_case(s, ::tolower);
        if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
        return Value(out);
      }
      if (name == "replace") {
        Value from = args.get(0, "old"), to = args.get(1, "new"), count = args.get(2, "count");
        if (!from.is_string() || !to.is_string()) problem("replace: expected two strings");
        return Value(py_replace(s, from.as_string(), to.as_string(), count.is_number() ? count.as_int() : -1));
      }
      if (name == "find") {
        Value needle = args.get(0, "sub");
        if (!needle.is_string()) problem("find: expected a string");
        std::size_t at = s.find(needle.as_string());
        return Value(at == std::string::npos ? std::int64_t(-1) : length_of(Value(s.substr(0, at))));
      }
      if (name == "join") {
        std::string out;
        bool first = true;
        for (const auto& item : iterate(args.get(0, "iterable"))) {
          out += (first ? "" : s) + item.str();
          check_string_size(out.size());
          first = false;
        }
        return Value(out);
      }
      problem(cat("unsupported string method '", name, "'"));
    });
  }

  // ---- filters ----

  Value apply_filter(const Node& node) {
    Value value = eval(*node.a);
    CallArgs args = evaluate_arguments(node);
    const std::string& f = node.text;
    auto arg = [&](std::size_t i, const char* n) { return args.get(i, n); };
    // Jinja2's string filters convert their input with str() (undefined becomes "").
    auto need_string = [&]() -> std::string { return value.str(); };
    if (f == "trim") return Value(py_strip(need_string(), arg(0, "chars"), true, true));
    if (f == "length" || f == "count") return Value(length_of(value));
    if (f == "upper") return Value(map_case(need_string(), ::toupper));
    if (f == "lower") return Value(map_case(need_string(), ::tolower));
    if (f == "title") return Value(jinja_title(need_string()));
    if (f == "capitalize") {
      std::string out = map_case(need_string(), ::tolower);
      if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
      return Value(out);
    }
    if (f == "string") return Value(value.str());
    if (f == "safe") return value;
    if (f == "tojson") {
      JsonStyle style;
      Value indent = arg(0, "indent");
      if (indent.is_number()) {
        style.indent = int(std::clamp<std::int64_t>(indent.as_int(), 0, std::numeric_limits<std::int32_t>::max()));
        style.item_separator = ",";
      }
      if (arg(99, "ensure_ascii").truthy()) style.ensure_ascii = true;
      if (arg(99, "sort_keys").truthy()) style.sort_keys = true;
      if (value.is_undefined()) problem(cat("tojson: '", describe(*node.a), "' is undefined"));
      return Value(to_python_json(value, style));
    }
    if (f == "first" || f == "last") {
      ValueList items = iterate(value);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      Value separator = arg(0, "d");
      Value attribute_name = arg(1, "attribute");
      std::string out;
      bool first = true;
      for (const auto& item : iterate(value)) {
        Value shown = attribute_name.is_string() ? item.get(attribute_name.as_string()) : item;
        out += (first ? "" : separator.str()) + shown.str();
        check_string_size(out.size());
        first = false;
      }
      return Value(out);
    }
    if (f == "replace") {
      Value from = arg(0, "old"), to = arg(1, "new"), count = arg(2, "count");
      if (!from.is_string() || !to.is_string()) problem("replace: expected two strings");
      return Value(py_replace(need_string(), from.as_string(), to.as_string(), count.is_number() ? count.as_int() : -1));
    }
    if (f == "default" || f == "d") {
      bool boolean = arg(1, "boolean").truthy();
      if (value.is_undefined() || (boolean && !value.truthy())) {
        Value fallback = arg(0, "default_value");
        return fallback.is_undefined() ? Value("") : fallback;
      }
      return value;
    }
    if (f == "items") return Value(dict_items(value));
    if (f == "list") return Value(iterate(value));
    if (f == "reverse") {
      if (value.is_string()) {
        auto chars = utf8_characters(value.as_string());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value(out);
      }
      ValueList items = iterate(value);
      std::reverse(items.begin(), items.end());
      return Value(std::move(items));
    }
    if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") {
      bool by_attribute = f == "selectattr" || f == "rejectattr";
      bool keep_if = f == "selectattr" || f == "select";
      std::size_t test_index = by_attribute ? 1 : 0;
      ValueList kept;
      for (const auto& item : iterate(value)) {
        Value subject = by_attribute ? item.get(arg(0, "attribute").str()) : item;
        bool passed;
        if (test_index < args.positional.size()) {
          CallArgs test_args;
          test_args.positional.assign(args.positional.begin() + std::ptrdiff_t(test_index) + 1, args.positional.end());
          passed = run_test(args.positional[test_index].str(), subject, test_args);
        } else {
          passed = subject.truthy();
        }
        if (passed == keep_if) kept.push_back(item);
      }
      return Value(std::move(kept));
    }
    if (f == "map") {
      ValueList mapped;
      Value attribute_name = arg(99, "attribute");
      for (const auto& item : iterate(value)) {
        if (attribute_name.is_string()) {
          Value got = item.get(attribute_name.as_string());
          mapped.push_back(got.is_undefined() ? arg(99, "default") : got);
        } else {
          problem("map: only map(attribute='name') is supported");
        }
      }
      return Value(std::move(mapped));
    }
    if (f == "unique") {
      ValueList out;
      for (const auto& item : iterate(value))
        if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
      return Value(std::move(out));
    }
    if (f == "int") {
      if (value.kind() == Value::Kind::Int) return value;
      if (value.is_number()) return Value(float_to_int(value.as_number()));
      if (value.is_string()) {
        try {
          return Value(std::int64_t(std::stoll(value.as_string())));
        } catch (...) {
          return Value(std::int64_t(0));
        }
      }
      return Value(std::int64_t(0));
    }
    if (f == "float") {
      if (value.is_number()) return Value(value.as_number());
      return Value(0.0);
    }
    if (f == "abs") {
      if (!value.is_number()) problem(cat("abs: expected a number, found ", value.kind_name()));
      return value.kind() == Value::Kind::Int ? Value(value.as_int() < 0 ? checked_sub(0, value.as_int()) : value.as_int())
                                              : Value(std::fabs(value.as_number()));
    }
    if (f == "indent") {
      std::int64_t width = arg(0, "width").kind() == Value::Kind::Int ? arg(0, "width").as_int() : 4;
      bool indent_first = arg(1, "first").truthy();
      const std::size_t pad_bytes = std::size_t(std::clamp<std::int64_t>(width, 0, std::numeric_limits<std::int32_t>::max()));
      check_string_size(pad_bytes);
      std::string pad(pad_bytes, ' ');
      const std::string s = need_string();
      std::string out = indent_first && !s.empty() ? pad : "";
      for (std::size_t i = 0; i < s.size(); ++i) {
        out += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') {
          check_string_size(out.size() + pad.size());
          out += pad;
        }
      }
      return Value(out);
    }
    problem(cat("unknown filter '", f, "'"));
  }

  // ---- tests ----

  bool apply_test(const Node& node) {
    Value value = eval(*node.a);
    return run_test(node.text, value, evaluate_arguments(node));
  }

  static bool run_test(const std::string& t, const Value& value, const CallArgs& args) {
    auto kind = value.kind();
    if (t == "defined") return !value.is_undefined();
    if (t == "undefined") return value.is_undefined();
    if (t == "none") return value.is_none();
    if (t == "string") return value.is_string();
    if (t == "number") return value.is_number();
    if (t == "integer") return kind == Value::Kind::Int;
    if (t == "float") return kind == Value::Kind::Float;
    if (t == "boolean") return kind == Value::Kind::Bool;
    if (t == "true") return kind == Value::Kind::Bool && value.as_bool();
    if (t == "false") return kind == Value::Kind::Bool && !value.as_bool();
    if (t == "mapping") return value.is_dict();
    if (t == "iterable") return value.is_list() || value.is_dict() || value.is_string() || value.is_undefined();
    if (t == "sequence") return value.is_list() || value.is_dict() || value.is_string();
    if (t == "callable") return kind == Value::Kind::Function;
    Value other = args.get(0, "other");
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas") return value == other;
    if (t == "ne" || t == "!=") return !(value == other);
    if (t == "lt" || t == "lessthan") return compare_less(value, other);
    if (t == "gt" || t == "greaterthan") return compare_less(other, value);
    if (t == "le") return !compare_less(other, value);
    if (t == "ge") return !compare_less(value, other);
    if (t == "in") return contains(other, value);
    if (t == "odd" || t == "even" || t == "divisibleby") {
      if (kind != Value::Kind::Int) problem(cat("test '", t, "' needs an integer, found ", value.kind_name()));
      if (t == "divisibleby") return other.kind() == Value::Kind::Int && other.as_int() != 0 && floor_mod(value.as_int(), other.as_int()) == 0;
      return (value.as_int() % 2 != 0) == (t == "odd");
    }
    if (t == "lower" || t == "upper") {
      if (!value.is_string()) return false;
      return value.as_string() == map_case(value.as_string(), t == "lower" ? ::tolower : ::toupper);
    }
    problem(cat("unknown test '", t, "'"));
  }

  // ---- diagnostics ----

  // The expression as written, for messages: message.content, messages[0]['role'], ...
  static std::string describe(const Node& node) {
    switch (node.kind) {
      case Node::Kind::Name: return node.text;
      case Node::Kind::Attribute: return describe(*node.a) + "." + node.text;
      case Node::Kind::Item:
        return describe(*node.a) + "[" + (node.b->kind == Node::Kind::Literal ? node.b->literal.repr() : "...") + "]";
      case Node::Kind::Call: return describe(*node.a) + "(...)";
      case Node::Kind::Filter: return describe(*node.a) + "|" + node.text;
      case Node::Kind::Literal: return node.literal.repr();
      default: return "expression";
    }
  }

  // Messages may quote values the template built or the request sent: they are cut short.
  [[noreturn]] void error(const Node& node, const std::string& message) const {
    fail(origin_, ":", node.line, ":", node.column, ": template error: ", excerpt(message, 400));
  }

  static constexpr int kMaxMacroDepth = 100;
  const std::string& origin_;
  std::vector<Scope> scopes_;
  int macro_depth_ = 0;
  int depth_ = 0;  // exec/eval recursion (DepthGuard)
};

}  // namespace

Template Template::parse(const std::string& source, const std::string& origin) {
  Template t;
  t.origin_ = origin;
  t.root_ = parse_tokens(tokenize(source, origin), origin);
  return t;
}

std::string Template::render(const Value& context, const RenderLimits& limits) const {
  if (!context.is_dict()) fail(origin_, ": template context must be a dict, found ", context.kind_name());
  std::string out;
  RenderBudget budget(limits);  // outlives the renderer: it releases the render's namespaces last
  try {
    Renderer renderer(origin_, context);
    renderer.render(*root_, out);
  } catch (const Problem& p) {  // charged outside any statement (e.g. building the context)
    fail(origin_, ": template error: ", excerpt(p.what(), 400));
  }
  return out;
}

Value default_globals(std::int64_t now_unix_seconds) {
  Value globals = Value::dict();
  globals.set("range", Value::function("range", [](const CallArgs& args) {
                std::int64_t start = 0, stop = 0, step = 1;
                auto integer = [](const Value& v) {
                  if (v.kind() != Value::Kind::Int) problem(cat("range: expected integers, found ", v.kind_name()));
                  return v.as_int();
                };
                if (args.positional.size() == 1) {
                  stop = integer(args.positional[0]);
                } else if (args.positional.size() >= 2) {
                  start = integer(args.positional[0]);
                  stop = integer(args.positional[1]);
                  if (args.positional.size() > 2) step = integer(args.positional[2]);
                } else {
                  problem("range: expected 1 to 3 arguments");
                }
                if (step == 0) problem("range: step cannot be zero");
                // The item count in 128 bits (stop - start can exceed 64), charged before building.
                const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
                const __int128 magnitude = step > 0 ? __int128(step) : -__int128(step);
                const __int128 count = span <= 0 ? 0 : (span + magnitude - 1) / magnitude;
                if (count > std::numeric_limits<std::int32_t>::max())
                  problem(cat("range(", start, ", ", stop, ", ", step, ") has more items than any render may build"));
                charge_steps(std::int64_t(count));
                ValueList out;
                out.reserve(std::size_t(count));
                for (std::int64_t k = 0; k < std::int64_t(count); ++k) out.emplace_back(std::int64_t(start + __int128(k) * step));
                return Value(std::move(out));
              }));
  globals.set("namespace", Value::function("namespace", [](const CallArgs& args) {
                ValueDict entries;
                for (const auto& v : args.positional)
                  if (v.is_dict())
                    for (const auto& e : v.as_dict()) entries.push_back(e);
                for (const auto& e : args.keyword) entries.push_back(e);
                return Value::namespace_object(std::move(entries));
              }));
  globals.set("dict", Value::function("dict", [](const CallArgs& args) {
                Value out = Value::dict();
                for (const auto& [k, v] : args.keyword) out.set(k, v);
                return out;
              }));
  globals.set("raise_exception", Value::function("raise_exception", [](const CallArgs& args) -> Value {
                problem(cat("raise_exception: ", args.get(0, "message").str()));
              }));
  globals.set("strftime_now", Value::function("strftime_now", [now_unix_seconds](const CallArgs& args) {
                Value format = args.get(0, "format");
                if (!format.is_string()) problem("strftime_now: expected a format string");
                std::time_t moment = now_unix_seconds >= 0
                                         ? std::time_t(now_unix_seconds)
                                         : std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                std::tm parts{};
                if (now_unix_seconds >= 0) gmtime_r(&moment, &parts);
                else localtime_r(&moment, &parts);
                char buffer[256];
                std::size_t n = std::strftime(buffer, sizeof buffer, format.as_string().c_str(), &parts);
                return Value(std::string(buffer, n));
              }));
  return globals;
}

}  // namespace journey::jinja
