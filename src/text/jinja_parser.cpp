// The parser: tokens -> AST, by recursive descent with Jinja2's operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < postfix, filters, tests).
#include <algorithm>

#include "core/error.h"
#include "core/untrusted.h"
#include "text/jinja_internal.h"

namespace journey::jinja {
namespace {

using MutableNode = std::shared_ptr<Node>;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin) : tokens_(tokens), origin_(origin) {}

  NodePtr parse_template() {
    auto root = make(Node::Kind::Sequence, peek());
    std::string end_tag = parse_body(root->body, {});
    (void)end_tag;
    return root;
  }

 private:
  // ---- statements ---------------------------------------------------------------------------

  // Parses text, outputs and statements into `body` until a block tag whose keyword is one of
  // `end_tags` (returned, with the parser positioned after the keyword) or the end of input.
  std::string parse_body(std::vector<NodePtr>& body, const std::vector<std::string>& end_tags) {
    for (;;) {
      const Token& token = peek();
      if (token.kind == TokenKind::End) {
        if (!end_tags.empty())
          error(token, cat("unexpected end of template, expected ", describe_tags(end_tags), " to close ",
                           open_statement_));
        return "";
      }
      if (token.kind == TokenKind::Text) {
        auto node = make(Node::Kind::Text, token);
        node->text = token.text;
        body.push_back(node);
        ++pos_;
      } else if (token.kind == TokenKind::VarBegin) {
        ++pos_;
        auto node = make(Node::Kind::Output, token);
        node->a = parse_tuple(true);
        expect(TokenKind::VarEnd, "'}}'");
        body.push_back(node);
      } else if (token.kind == TokenKind::BlockBegin) {
        ++pos_;
        const Token& keyword = peek();
        if (keyword.kind != TokenKind::Name) error(keyword, cat("expected a statement keyword after '{%', found ", describe(keyword)));
        for (const auto& tag : end_tags)
          if (keyword.text == tag) {
            ++pos_;
            return tag;
          }
        body.push_back(parse_statement());
      } else {
        error(token, cat("unexpected ", describe(token)));
      }
    }
  }

  NodePtr parse_statement() {
    NestingGuard guard(*this);
    const Token& keyword = next();
    const std::string& k = keyword.text;
    if (k == "if") return parse_if(keyword);
    if (k == "for") return parse_for(keyword);
    if (k == "set") return parse_set(keyword);
    if (k == "macro") return parse_macro(keyword);
    if (k == "break" || k == "continue") {
      expect(TokenKind::BlockEnd, "'%}'");
      return make(k == "break" ? Node::Kind::Break : Node::Kind::Continue, keyword);
    }
    if (k == "generation") {  // HF's assistant-mask marker: renders its body unchanged
      expect(TokenKind::BlockEnd, "'%}'");
      auto node = make(Node::Kind::Sequence, keyword);
      with_open("{% generation %}", keyword, [&] { parse_body(node->body, {"endgeneration"}); });
      expect(TokenKind::BlockEnd, "'%}'");
      return node;
    }
    static const char* const known_end[] = {"endif", "endfor", "endset", "endmacro", "elif", "else", "endgeneration"};
    for (const char* end : known_end)
      if (k == end) error(keyword, cat("unexpected '{% ", k, " %}' with no open block that it could close"));
    error(keyword, cat("unsupported statement '{% ", k, " %}' (supported: if, for, set, macro, break, continue, generation)"));
  }

  NodePtr parse_if(const Token& keyword) {
    auto node = make(Node::Kind::If, keyword);
    node->a = parse_tuple(true);
    expect(TokenKind::BlockEnd, "'%}'");
    std::string tag;
    with_open("{% if %}", keyword, [&] { tag = parse_body(node->body, {"elif", "else", "endif"}); });
    if (tag == "elif") {
      node->else_body.push_back(parse_if(tokens_[pos_ - 1]));
      return node;  // the nested if consumed the endif
    }
    if (tag == "else") {
      expect(TokenKind::BlockEnd, "'%}'");
      with_open("{% if %}", keyword, [&] { parse_body(node->else_body, {"endif"}); });
    }
    expect(TokenKind::BlockEnd, "'%}'");
    return node;
  }

  NodePtr parse_for(const Token& keyword) {
    auto node = make(Node::Kind::For, keyword);
    do {
      node->names.push_back(expect(TokenKind::Name, "a loop variable name").text);
    } while (accept_operator(","));
    expect_name("in");
    node->a = parse_tuple(false);
    if (accept_name("if")) node->b = parse_expression(false);
    if (peek().kind == TokenKind::Name && peek().text == "recursive")
      error(peek(), "unsupported: recursive for loops");
    expect(TokenKind::BlockEnd, "'%}'");
    std::string tag;
    with_open("{% for %}", keyword, [&] { tag = parse_body(node->body, {"else", "endfor"}); });
    if (tag == "else") {
      expect(TokenKind::BlockEnd, "'%}'");
      with_open("{% for %}", keyword, [&] { parse_body(node->else_body, {"endfor"}); });
    }
    expect(TokenKind::BlockEnd, "'%}'");
    return node;
  }

  NodePtr parse_set(const Token& keyword) {
    auto node = make(Node::Kind::Set, keyword);
    const Token& first = expect(TokenKind::Name, "a variable name");
    if (accept_operator(".")) {
      auto target = make(Node::Kind::Attribute, first);
      auto object = make(Node::Kind::Name, first);
      object->text = first.text;
      target->a = object;
      target->text = expect(TokenKind::Name, "an attribute name").text;
      node->a = target;
    } else {
      node->names.push_back(first.text);
      while (accept_operator(",")) node->names.push_back(expect(TokenKind::Name, "a variable name").text);
    }
    if (accept_operator("=")) {
      node->b = parse_tuple(true);
      expect(TokenKind::BlockEnd, "'%}'");
      return node;
    }
    if (node->names.size() != 1 || node->a) error(peek(), cat("expected '=' in {% set %}, found ", describe(peek())));
    if (peek().kind == TokenKind::Operator && peek().text == "|") error(peek(), "unsupported: filters on {% set %} blocks");
    expect(TokenKind::BlockEnd, "'=' or '%}'");
    node->kind = Node::Kind::SetBlock;
    with_open("{% set %}", keyword, [&] { parse_body(node->body, {"endset"}); });
    expect(TokenKind::BlockEnd, "'%}'");
    return node;
  }

  NodePtr parse_macro(const Token& keyword) {
    auto node = make(Node::Kind::Macro, keyword);
    node->text = expect(TokenKind::Name, "a macro name").text;
    expect_operator("(");
    while (!accept_operator(")")) {
      if (!node->names.empty()) expect_operator(",");
      if (accept_operator(")")) break;
      node->names.push_back(expect(TokenKind::Name, "a parameter name").text);
      node->args.push_back(accept_operator("=") ? parse_expression(true) : nullptr);
    }
    expect(TokenKind::BlockEnd, "'%}'");
    with_open("{% macro %}", keyword, [&] { parse_body(node->body, {"endmacro"}); });
    expect(TokenKind::BlockEnd, "'%}'");
    return node;
  }

  // ---- expressions --------------------------------------------------------------------------

  // An expression, or several separated by commas (a tuple, represented as a list).
  NodePtr parse_tuple(bool with_condexpr) {
    const Token& start = peek();
    NodePtr first = parse_expression(with_condexpr);
    if (!(peek().kind == TokenKind::Operator && peek().text == ",")) return first;
    auto list = make(Node::Kind::ListLiteral, start);
    list->args.push_back(first);
    while (accept_operator(",")) {
      if (at_expression_end()) break;
      list->args.push_back(parse_expression(with_condexpr));
    }
    return seal(list);
  }

  NodePtr parse_expression(bool with_condexpr) {
    NestingGuard guard(*this);
    NodePtr expr = parse_or();
    while (with_condexpr && peek().kind == TokenKind::Name && peek().text == "if") {
      auto ternary = make(Node::Kind::Ternary, next());
      ternary->b = expr;
      ternary->a = parse_or();
      if (accept_name("else")) ternary->c = parse_expression(true);
      expr = seal(ternary);
    }
    return expr;
  }

  NodePtr parse_or() {
    NodePtr left = parse_and();
    while (peek().kind == TokenKind::Name && peek().text == "or") {
      const Token& op = next();
      left = binary(op, "or", left, parse_and());
    }
    return left;
  }

  NodePtr parse_and() {
    NodePtr left = parse_not();
    while (peek().kind == TokenKind::Name && peek().text == "and") {
      const Token& op = next();
      left = binary(op, "and", left, parse_not());
    }
    return left;
  }

  NodePtr parse_not() {
    if (peek().kind == TokenKind::Name && peek().text == "not") {
      NestingGuard guard(*this);
      auto node = make(Node::Kind::Unary, next());
      node->text = "not";
      node->a = parse_not();
      return seal(node);
    }
    return parse_compare();
  }

  NodePtr parse_compare() {
    NodePtr left = parse_math1();
    for (;;) {
      const Token& token = peek();
      if (token.kind == TokenKind::Operator &&
          (token.text == "==" || token.text == "!=" || token.text == "<" || token.text == ">" ||
           token.text == "<=" || token.text == ">=")) {
        ++pos_;
        left = binary(token, token.text, left, parse_math1());
      } else if (token.kind == TokenKind::Name && token.text == "in") {
        ++pos_;
        left = binary(token, "in", left, parse_math1());
      } else if (token.kind == TokenKind::Name && token.text == "not" && peek(1).kind == TokenKind::Name &&
                 peek(1).text == "in") {
        pos_ += 2;
        left = binary(token, "not in", left, parse_math1());
      } else {
        return left;
      }
    }
  }

  NodePtr parse_math1() {
    NodePtr left = parse_concat();
    while (peek().kind == TokenKind::Operator && (peek().text == "+" || peek().text == "-")) {
      const Token& op = next();
      left = binary(op, op.text, left, parse_concat());
    }
    return left;
  }

  NodePtr parse_concat() {
    NodePtr left = parse_math2();
    while (peek().kind == TokenKind::Operator && peek().text == "~") {
      const Token& op = next();
      left = binary(op, "~", left, parse_math2());
    }
    return left;
  }

  NodePtr parse_math2() {
    NodePtr left = parse_pow();
    while (peek().kind == TokenKind::Operator &&
           (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
      const Token& op = next();
      left = binary(op, op.text, left, parse_pow());
    }
    return left;
  }

  NodePtr parse_pow() {
    NodePtr left = parse_unary(true);
    while (peek().kind == TokenKind::Operator && peek().text == "**") {
      const Token& op = next();
      left = binary(op, "**", left, parse_unary(true));
    }
    return left;
  }

  NodePtr parse_unary(bool with_filter) {
    const Token& token = peek();
    NodePtr node;
    if (token.kind == TokenKind::Operator && (token.text == "-" || token.text == "+")) {
      NestingGuard guard(*this);
      ++pos_;
      auto unary = make(Node::Kind::Unary, token);
      unary->text = token.text;
      unary->a = parse_unary(false);
      node = seal(unary);
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filters_and_tests(node);
    return node;
  }

  NodePtr parse_primary() {
    const Token& token = next();
    switch (token.kind) {
      case TokenKind::Name: {
        const std::string& n = token.text;
        if (n == "true" || n == "True") return literal(token, Value(true));
        if (n == "false" || n == "False") return literal(token, Value(false));
        if (n == "none" || n == "None") return literal(token, Value::none());
        static const char* const reserved[] = {"if", "else", "elif", "endif", "for", "endfor", "in", "and", "or", "not", "is", "set"};
        for (const char* r : reserved)
          if (n == r) error(token, cat("expected an expression, found keyword '", n, "'"));
        auto node = make(Node::Kind::Name, token);
        node->text = n;
        return node;
      }
      case TokenKind::String: {
        std::string text = token.text;
        while (peek().kind == TokenKind::String) text += next().text;  // "a" "b" concatenates
        return literal(token, Value(text));
      }
      case TokenKind::Int:
      case TokenKind::Float:
        try {
          if (token.kind == TokenKind::Int) return literal(token, Value(static_cast<std::int64_t>(std::stoll(token.text))));
          return literal(token, Value(std::stod(token.text)));
        } catch (const std::exception&) {
          error(token, cat("number ", token.text, " is out of range"));
        }
      case TokenKind::Operator:
        if (token.text == "(") {
          if (accept_operator(")")) return make(Node::Kind::ListLiteral, token);
          NodePtr inner = parse_tuple(true);
          expect_operator(")");
          return inner;
        }
        if (token.text == "[") {
          auto list = make(Node::Kind::ListLiteral, token);
          while (!accept_operator("]")) {
            if (!list->args.empty()) {
              expect_operator(",");
              if (accept_operator("]")) break;
            }
            list->args.push_back(parse_expression(true));
          }
          return seal(list);
        }
        if (token.text == "{") {
          auto dict = make(Node::Kind::DictLiteral, token);
          while (!accept_operator("}")) {
            if (!dict->pairs.empty()) {
              expect_operator(",");
              if (accept_operator("}")) break;
            }
            NodePtr key = parse_expression(true);
            expect_operator(":");
            dict->pairs.emplace_back(key, parse_expression(true));
          }
          return seal(dict);
        }
        break;
      default: break;
    }
    error(token, cat("expected an expression, found ", describe(token)));
  }

  NodePtr parse_postfix(NodePtr node) {
    for (;;) {
      const Token& token = peek();
      if (token.kind != TokenKind::Operator) return node;
      if (token.text == ".") {
        ++pos_;
        const Token& name = next();
        if (name.kind != TokenKind::Name && name.kind != TokenKind::Int)
          error(name, cat("expected an attribute name after '.', found ", describe(name)));
        auto attr = make(Node::Kind::Attribute, token);
        attr->a = node;
        attr->text = name.text;
        node = seal(attr);
      } else if (token.text == "[") {
        ++pos_;
        node = parse_subscript(token, node);
      } else if (token.text == "(") {
        ++pos_;
        auto call = make(Node::Kind::Call, token);
        call->a = node;
        parse_call_arguments(*call);
        node = seal(call);
      } else {
        return node;
      }
    }
  }

  NodePtr parse_subscript(const Token& open, NodePtr object) {
    NodePtr parts[3];
    int colons = 0;
    for (;;) {
      if (accept_operator("]")) break;
      if (accept_operator(":")) {
        if (++colons > 2) error(open, "too many ':' in a slice");
        continue;
      }
      if (parts[colons]) error(peek(), cat("expected ':' or ']' in subscript, found ", describe(peek())));
      parts[colons] = parse_expression(true);
    }
    if (colons == 0) {
      if (!parts[0]) error(open, "empty subscript '[]'");
      auto item = make(Node::Kind::Item, open);
      item->a = object;
      item->b = parts[0];
      return seal(item);
    }
    auto slice = make(Node::Kind::Slice, open);
    slice->a = object;
    slice->b = parts[0];
    slice->c = parts[1];
    slice->d = parts[2];
    return seal(slice);
  }

  // After '(' : positional and keyword arguments up to ')'.
  void parse_call_arguments(Node& call) {
    bool first = true;
    while (!accept_operator(")")) {
      if (!first) {
        expect_operator(",");
        if (accept_operator(")")) break;
      }
      first = false;
      if (peek().kind == TokenKind::Name && peek(1).kind == TokenKind::Operator && peek(1).text == "=") {
        std::string name = next().text;
        ++pos_;
        call.kwargs.emplace_back(name, parse_expression(true));
      } else {
        if (!call.kwargs.empty()) error(peek(), "positional argument after keyword argument");
        call.args.push_back(parse_expression(true));
      }
    }
  }

  NodePtr parse_filters_and_tests(NodePtr node) {
    for (;;) {
      const Token& token = peek();
      if (token.kind == TokenKind::Operator && token.text == "|") {
        ++pos_;
        auto filter = make(Node::Kind::Filter, token);
        filter->a = node;
        filter->text = expect(TokenKind::Name, "a filter name").text;
        if (accept_operator("(")) parse_call_arguments(*filter);
        node = seal(filter);
      } else if (token.kind == TokenKind::Name && token.text == "is") {
        ++pos_;
        auto test = make(Node::Kind::Test, token);
        test->a = node;
        test->negated = accept_name("not");
        const Token& name = next();
        if (name.kind != TokenKind::Name) error(name, cat("expected a test name after 'is', found ", describe(name)));
        test->text = name.text;
        if (accept_operator("(")) {
          parse_call_arguments(*test);
        } else if (starts_test_argument()) {
          test->args.push_back(parse_postfix(parse_primary()));
        }
        node = seal(test);
      } else if (token.kind == TokenKind::Operator && token.text == "(") {
        ++pos_;
        auto call = make(Node::Kind::Call, token);
        call->a = node;
        parse_call_arguments(*call);
        node = seal(call);
      } else {
        return node;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::String || t.kind == TokenKind::Int || t.kind == TokenKind::Float) return true;
    if (t.kind == TokenKind::Name)
      return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" && t.text != "in" && t.text != "not";
    return t.kind == TokenKind::Operator && (t.text == "[" || t.text == "{");
  }

  bool at_expression_end() const {
    const Token& t = peek();
    return t.kind == TokenKind::VarEnd || t.kind == TokenKind::BlockEnd ||
           (t.kind == TokenKind::Operator && (t.text == ")" || t.text == "]"));
  }

  // ---- token helpers ------------------------------------------------------------------------

  const Token& peek(std::size_t ahead = 0) const {
    std::size_t index = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[index];
  }
  const Token& next() {
    const Token& token = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return token;
  }
  const Token& expect(TokenKind kind, const std::string& what) {
    const Token& token = peek();
    if (token.kind != kind) error(token, cat("expected ", what, ", found ", describe(token)));
    return next();
  }
  void expect_operator(const std::string& op) {
    if (!accept_operator(op)) error(peek(), cat("expected '", op, "', found ", describe(peek())));
  }
  void expect_name(const std::string& name) {
    if (!accept_name(name)) error(peek(), cat("expected '", name, "', found ", describe(peek())));
  }
  bool accept_operator(const std::string& op) {
    if (peek().kind == TokenKind::Operator && peek().text == op) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool accept_name(const std::string& name) {
    if (peek().kind == TokenKind::Name && peek().text == name) {
      ++pos_;
      return true;
    }
    return false;
  }

  template <typename F>
  void with_open(const std::string& what, const Token& at, F&& body) {
    std::string saved = open_statement_;
    open_statement_ = cat(what, " opened at line ", at.line, ", column ", at.column);
    body();
    open_statement_ = saved;
  }

  static std::string describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::Text: return "template text";
      case TokenKind::VarBegin: return "'{{'";
      case TokenKind::VarEnd: return "'}}'";
      case TokenKind::BlockBegin: return "'{%'";
      case TokenKind::BlockEnd: return "'%}'";
      case TokenKind::Name: return cat("name '", token.text, "'");
      case TokenKind::String: return "a string literal";
      case TokenKind::Int:
      case TokenKind::Float: return cat("number ", token.text);
      case TokenKind::Operator: return cat("'", token.text, "'");
      case TokenKind::End: return "the end of the template";
    }
    return "?";
  }

  static std::string describe_tags(const std::vector<std::string>& tags) {
    std::string out;
    for (std::size_t i = 0; i < tags.size(); ++i) out += (i ? " or " : "") + cat("'{% ", tags[i], " %}'");
    return out;
  }

  MutableNode make(Node::Kind kind, const Token& at) const {
    auto node = std::make_shared<Node>();
    node->kind = kind;
    node->line = at.line;
    node->column = at.column;
    return node;
  }
  NodePtr literal(const Token& at, Value v) const {
    auto node = make(Node::Kind::Literal, at);
    node->literal = std::move(v);
    return node;
  }
  NodePtr binary(const Token& at, const std::string& op, NodePtr left, NodePtr right) const {
    auto node = make(Node::Kind::Binary, at);
    node->text = op;
    node->a = std::move(left);
    node->b = std::move(right);
    return seal(node);
  }

  // A finished expression node: its height from its children, refused past kMaxNesting. Chains
  // that the parser builds in a loop (a.b.c…, 1+1+…, x|f|g…) never recurse here, but evaluating,
  // describing and destroying the tree does, once per level: this keeps every walk shallow.
  MutableNode seal(MutableNode node) const {
    int tallest = 0;
    auto see = [&](const NodePtr& child) {
      if (child) tallest = std::max(tallest, child->height);
    };
    see(node->a), see(node->b), see(node->c), see(node->d);
    for (const auto& child : node->args) see(child);
    for (const auto& [name, child] : node->kwargs) see(child);
    for (const auto& [key, value] : node->pairs) see(key), see(value);
    node->height = tallest + 1;
    if (node->height > kMaxNesting)
      error(node->line, node->column, cat("an expression nested deeper than ", kMaxNesting, " levels"));
    return node;
  }

  [[noreturn]] void error(const Token& at, const std::string& message) const { error(at.line, at.column, message); }
  [[noreturn]] void error(int line, int column, const std::string& message) const {
    fail(origin_, ":", line, ":", column, ": template syntax error: ", excerpt(message, 400));
  }

  // Deeply nested input would otherwise overflow the stack of this recursive-descent parser.
  struct NestingGuard {
    explicit NestingGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting)
        parser.error(parser.peek(), cat("expressions or blocks nested deeper than ", kMaxNesting, " levels"));
    }
    ~NestingGuard() { --parser.depth_; }
    Parser& parser;
  };
  int depth_ = 0;

  const std::vector<Token>& tokens_;
  const std::string& origin_;
  std::size_t pos_ = 0;
  std::string open_statement_;
};

}  // namespace

NodePtr parse_tokens(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_template();
}

}  // namespace journey::jinja
