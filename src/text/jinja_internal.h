// Internals of the Jinja subset shared by its lexer, parser and evaluator (not a public API).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/jinja.h"

namespace journey::jinja {

// ---- lexer ----------------------------------------------------------------------------------

enum class TokenKind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Operator, End };

struct Token {
  TokenKind kind;
  std::string text;  // text data, name, decoded string literal, number spelling or operator
  int line = 1;
  int column = 1;
};

// Splits a template into text and tag tokens, applying HF's whitespace rules:
// {%- / -%} strip, trim_blocks, lstrip_blocks, no trailing newline kept. Comments vanish.
std::vector<Token> tokenize(const std::string& source, const std::string& origin);

// ---- AST ------------------------------------------------------------------------------------

struct Node;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  enum class Kind {
    // statements
    Sequence,   // body
    Text,       // text
    Output,     // a
    If,         // a = condition, body, else_body (elif chains nest an If in else_body)
    For,        // names = targets, a = iterable, b = filter condition (or null), body, else_body
    Set,        // a = target (Name or Attribute) or names for tuple targets, b = value
    SetBlock,   // a = target, body
    Macro,      // text = name, names = parameters, args = defaults (null if none), body
    Break,
    Continue,
    // expressions
    Literal,    // literal
    Name,       // text
    Attribute,  // a.text
    Item,       // a[b]
    Slice,      // a[b:c:d], each may be null
    Call,       // a(args, kwargs)
    Filter,     // a | text(args, kwargs)
    Test,       // a is [not] text(args)
    Unary,      // text a   ("not", "-", "+")
    Binary,     // a text b ("and", "or", "==", "in", "not in", "~", "+", ...)
    Ternary,    // b if a else c (c may be null)
    ListLiteral,  // args
    DictLiteral,  // kwargs-like pairs in pairs (key expr, value expr)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  int height = 1;  // 1 + the tallest child expression: bounded by the parser (kMaxNesting)
  std::string text;
  Value literal;
  bool negated = false;
  NodePtr a, b, c, d;
  std::vector<NodePtr> args;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  std::vector<std::pair<NodePtr, NodePtr>> pairs;
  std::vector<std::string> names;
  std::vector<NodePtr> body;
  std::vector<NodePtr> else_body;
};

NodePtr parse_tokens(const std::vector<Token>& tokens, const std::string& origin);

// ---- limits --------------------------------------------------------------------------------
// A template comes from a model file and its variables from a request: both are hostile input.
// These bounds hold by construction (docs/reliability.md).

// Deepest expression tree or block nesting the parser builds (also bounds the evaluator's
// recursion per macro level).
inline constexpr int kMaxNesting = 200;
// Deepest value (lists, dicts, namespaces inside each other) that is built, compared, printed or
// serialized. JSON handed to a template is at most kMaxJsonDepth (core/untrusted.h) deep.
inline constexpr int kMaxValueDepth = 256;

// A runtime problem without a location; the innermost expression being evaluated adds it (a
// journey::Error, so one that escapes elsewhere still carries its message).
struct Problem : Error {
  using Error::Error;
};
[[noreturn]] void problem(const std::string& message);

// The active render's budget (RenderLimits). Value construction, comparison, printing and the
// globals charge it through a thread-local pointer, so that a template cannot spend without
// bound anywhere; outside a render nothing is charged. One render per thread at a time.
class RenderBudget {
 public:
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  const RenderLimits& limits() const { return limits_; }
  static RenderBudget* active();
  // Count n units of work; a Problem once the render's step budget is spent.
  void charge(std::int64_t n);
  // A Problem once the calling frame lies more than max_stack_bytes below the render's first.
  void check_stack() const;
  // Every namespace() made during the render, so that end_render() can break the reference cycles
  // a template may build (`set ns.me = ns`) and nothing outlives the render.
  void adopt_namespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  RenderLimits limits_;
  std::int64_t steps_ = 0;
  std::uintptr_t stack_base_;  // the frame that started the render (stacks grow down)
  RenderBudget* previous_;
  std::vector<Value> namespaces_;
};
// Charge the active render (no-op outside one).
void charge_steps(std::int64_t n);
// A string of this many bytes is about to exist: a Problem if that exceeds the render's
// max_string_bytes (no-op outside a render).
void check_string_size(std::size_t bytes);
// The same check, and the bytes are charged as work (one step per 64 bytes): every string Value
// built does this.
void charge_string(std::size_t bytes);

// ---- helpers --------------------------------------------------------------------------------

struct JsonStyle {
  int indent = -1;  // -1: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
std::string to_python_json(const Value& v, const JsonStyle& style);
std::string python_float(double d);

char32_t decode_utf8(const std::string& s, std::size_t i, std::size_t* length);
std::vector<std::string> utf8_characters(const std::string& s);  // one string per code point

}  // namespace journey::jinja
