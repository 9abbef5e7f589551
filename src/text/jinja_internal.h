// Internals of the Jinja subset shared by its lexer, parser and evaluator (not a public API).
#pragma once
#include <memory>
#include <string>
#include <vector>

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
