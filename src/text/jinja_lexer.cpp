// The lexer: text outside tags is data; inside {{ }} and {% %} it produces expression tokens.
// Whitespace control follows Jinja2's lexer exactly as HF configures it (see jinja.h).
#include <cctype>

#include "core/error.h"
#include "text/jinja_internal.h"
#include "text/utf8.h"

namespace journey::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(std::string source, const std::string& origin) : src_(std::move(source)), origin_(origin) {}

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool strip_next_text = false;  // the previous tag ended with '-'
    while (pos <= src_.size()) {
      std::size_t open = find_open(pos);
      std::string text = src_.substr(pos, open - pos);
      std::size_t text_start = pos;
      if (strip_next_text) {
        std::size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
        text_start += k;
      }
      strip_next_text = false;
      if (open == src_.size()) {
        if (!text.empty()) push(TokenKind::Text, text, text_start);
        break;
      }
      char type = src_[open + 1];  // '{', '%' or '#'
      char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
        std::size_t line_pos = text.rfind('\n');
        line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
        bool line_starting = text_start == 0 || src_[text_start - 1] == '\n';
        if ((line_pos > 0 || line_starting) && line_pos < text.size()) {
          bool only_space = true;
          for (std::size_t k = line_pos; k < text.size(); ++k) only_space = only_space && is_space(text[k]);
          if (only_space) text.resize(line_pos);
        }
      }
      if (!text.empty()) push(TokenKind::Text, text, text_start);
      std::size_t inner = open + 2 + ((sign == '-' || (sign == '+' && type != '{')) ? 1 : 0);
      if (type == '#') {
        std::size_t close = src_.find("#}", inner);
        if (close == std::string::npos) error_at(open, "unclosed comment: '{#' without a matching '#}'");
        bool strip = close > inner && src_[close - 1] == '-';
        pos = close + 2;
        if (strip) strip_next_text = true;
        else if (pos < src_.size() && src_[pos] == '\n') ++pos;  // trim_blocks applies to comments too
        continue;
      }
      bool is_block = type == '%';
      push(is_block ? TokenKind::BlockBegin : TokenKind::VarBegin, is_block ? "{%" : "{{", open);
      pos = lex_expression(inner, is_block, open, &strip_next_text);
    }
    push(TokenKind::End, "", src_.size());
    return std::move(tokens_);
  }

 private:
  std::size_t find_open(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  // Lex tokens until the closing delimiter at bracket depth 0; returns the position after it.
  std::size_t lex_expression(std::size_t pos, bool is_block, std::size_t open, bool* strip_next_text) {
    std::vector<char> brackets;
    const char close_char = is_block ? '%' : '}';
    for (;;) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size())
        error_at(open, is_block ? "unclosed tag: '{%' without a matching '%}'"
                                : "unclosed expression: '{{' without a matching '}}'");
      if (brackets.empty()) {
        std::size_t p = pos;
        bool minus = false, plus = false;
        if (src_[p] == '-' || src_[p] == '+') {
          minus = src_[p] == '-';
          plus = src_[p] == '+';
          ++p;
        }
        if (p + 1 < src_.size() && src_[p] == close_char && src_[p + 1] == '}' && (!plus || is_block)) {
          push(is_block ? TokenKind::BlockEnd : TokenKind::VarEnd, is_block ? "%}" : "}}", pos);
          p += 2;
          if (minus) *strip_next_text = true;
          else if (is_block && !plus && p < src_.size() && src_[p] == '\n') ++p;  // trim_blocks
          return p;
        }
      }
      char c = src_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t start = pos;
        while (pos < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_')) ++pos;
        push(TokenKind::Name, src_.substr(start, pos - start), start);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        std::size_t start = pos;
        bool is_float = false;
        while (pos < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_')) ++pos;
        if (pos + 1 < src_.size() && src_[pos] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos + 1]))) {
          is_float = true;
          ++pos;
          while (pos < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos]))) ++pos;
        }
        if (pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
          std::size_t q = pos + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            is_float = true;
            pos = q;
            while (pos < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos]))) ++pos;
          }
        }
        std::string spelling;
        for (std::size_t k = start; k < pos; ++k)
          if (src_[k] != '_') spelling += src_[k];
        push(is_float ? TokenKind::Float : TokenKind::Int, spelling, start);
      } else if (c == '\'' || c == '"') {
        std::size_t start = pos;
        push(TokenKind::String, lex_string(pos), start);
      } else {
        static const char* const two_char[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* candidate : two_char)
          if (src_.compare(pos, 2, candidate) == 0) op = candidate;
        if (op.empty()) {
          static const std::string single = "+-*/%~<>()[]{},.:|=";
          if (single.find(c) == std::string::npos)
            error_at(pos, cat("unexpected character '", c, "' inside ", is_block ? "{% %}" : "{{ }}"));
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty() || brackets.back() != op[0]) error_at(pos, cat("unexpected '", op, "'"));
          brackets.pop_back();
        }
        push(TokenKind::Operator, op, pos);
        pos += op.size();
      }
    }
  }

  // A Python string literal with the usual escapes; pos moves past the closing quote.
  std::string lex_string(std::size_t& pos) {
    char quote = src_[pos];
    std::size_t start = pos++;
    std::string out;
    while (pos < src_.size() && src_[pos] != quote) {
      char c = src_[pos++];
      if (c != '\\' || pos >= src_.size()) {
        out += c;
        continue;
      }
      char e = src_[pos++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'u':
        case 'x': {
          std::size_t digits = e == 'u' ? 4 : 2;
          if (pos + digits > src_.size()) error_at(pos, "truncated escape in string literal");
          for (std::size_t k = 0; k < digits; ++k)
            if (!std::isxdigit(static_cast<unsigned char>(src_[pos + k]))) error_at(pos, "invalid \\u or \\x escape in string literal");
          char32_t cp = static_cast<char32_t>(std::stoul(src_.substr(pos, digits), nullptr, 16));
          pos += digits;
          out += utf8::encode(cp);
          break;
        }
        default: out += '\\'; out += e;  // Python keeps unknown escapes as written
      }
    }
    if (pos >= src_.size()) error_at(start, "unterminated string literal");
    ++pos;
    return out;
  }

  void line_column(std::size_t offset, int* line, int* column) const {
    *line = 1;
    *column = 1;
    for (std::size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++*line;
        *column = 1;
      } else {
        ++*column;
      }
    }
  }

  void push(TokenKind kind, std::string text, std::size_t offset) {
    Token token{kind, std::move(text)};
    // Incremental line tracking keeps lexing linear.
    while (tracked_offset_ < offset && tracked_offset_ < src_.size()) {
      if (src_[tracked_offset_] == '\n') {
        ++tracked_line_;
        tracked_column_ = 1;
      } else {
        ++tracked_column_;
      }
      ++tracked_offset_;
    }
    token.line = tracked_line_;
    token.column = tracked_column_;
    tokens_.push_back(std::move(token));
  }

  [[noreturn]] void error_at(std::size_t offset, const std::string& message) const {
    int line = 0, column = 0;
    line_column(offset, &line, &column);
    fail(origin_, ":", line, ":", column, ": template syntax error: ", message);
  }

  std::string src_;
  std::string origin_;
  std::vector<Token> tokens_;
  std::size_t tracked_offset_ = 0;
  int tracked_line_ = 1;
  int tracked_column_ = 1;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& origin) {
  // Jinja2 normalizes newlines to "\n" and, with keep_trailing_newline=False, drops one final newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized), origin).run();
}

}  // namespace journey::jinja
