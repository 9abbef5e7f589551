// journey tokenize — show how text becomes token ids (and back), with any supported tokenizer:
//   journey tokenize "Once upon a time"             table: index, id, piece, bytes
//   journey tokenize --ids-only "Once upon a time"  403 407 261 378
//   journey tokenize --decode "1 403 407 261 378"   Once upon a time
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace journey::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string decode;
  bool ids_only = false;
  bool add_special = false;
  bool no_parse_special = false;
  int vocab_size = -1;
};

// Bytes as readable text: valid UTF-8 characters as they are, control and stray bytes escaped.
std::string escape(std::string_view bytes) {
  std::string out;
  for (size_t pos = 0; pos < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[pos]);
    const int n = utf8::valid_char_length(bytes, pos);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (n > 1 || (n == 1 && c >= 0x20 && c < 0x7F)) out.append(bytes.substr(pos, n));
    else {
      std::ostringstream hex;
      hex << "\\x" << std::hex << std::setw(2) << std::setfill('0') << int(c);
      out += hex.str();
    }
    pos += n > 0 ? n : 1;
  }
  return out;
}

// Columns are counted in characters, not bytes ("▁Once" is 5 wide, 7 bytes).
size_t display_width(std::string_view text) {
  size_t width = 0;
  for (unsigned char c : text) width += (c & 0xC0) != 0x80;
  return width;
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    for (char& c : word) c = (c == ',' || c == '[' || c == ']') ? ' ' : c;
    std::istringstream part(word);
    for (std::string number; part >> number;) {
      try {
        size_t used = 0;
        ids.push_back(std::stoi(number, &used));
        if (used != number.size()) throw std::invalid_argument(number);
      } catch (const std::exception&) {
        fail("--decode: \"", number, "\" is not a token id (expected integers separated by spaces)");
      }
    }
  }
  return ids;
}

void run(const TokenizeArgs& args) {
  const std::string path = args.model.empty() ? std::string(default_model_path()) : args.model;
  std::unique_ptr<Tokenizer> tokenizer = args.vocab_size > 0 ? load_llama2c_tokenizer(path, args.vocab_size)
                                                              : load_tokenizer(path);
  if (!args.decode.empty()) {
    std::cout << tokenizer->decode(parse_ids(args.decode), /*skip_special=*/!args.add_special) << "\n";
    return;
  }
  const std::vector<int> ids = tokenizer->encode(args.text, args.add_special, !args.no_parse_special);
  if (args.ids_only) {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
    return;
  }
  std::cout << "tokenizer: " << tokenizer->kind() << " (" << tokenizer->vocab_size() << " tokens) from " << path << "\n";
  std::cout << std::left << std::setw(7) << "index" << std::setw(9) << "id" << std::setw(24) << "piece" << "bytes\n";
  int previous = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = "\"" + escape(tokenizer->piece(ids[i])) + "\"";
    const std::string bytes = "\"" + escape(tokenizer->token_bytes(ids[i], previous, /*skip_special=*/false)) + "\"";
    const size_t width = display_width(piece);
    std::cout << std::setw(7) << i << std::setw(9) << ids[i] << piece
              << std::string(width < 24 ? 24 - width : 1, ' ') << bytes
              << (tokenizer->is_special(ids[i]) ? "  (special)" : "") << "\n";
    previous = ids[i];
  }
  std::cout << ids.size() << " tokens\n";
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Show the token ids and pieces of a text (or decode ids)");
  cmd->add_option("text", args->text, "Text to tokenize");
  cmd->add_option("--model", args->model,
                  "Model directory, tokenizer-only directory, GGUF file, tokenizer.json, SentencePiece .model or "
                  "llama2.c .bin (default: the shipped stories260K)");
  cmd->add_flag("--ids-only", args->ids_only, "Print only the ids, space-separated, on one line");
  cmd->add_option("--decode", args->decode, "Decode these ids (\"1 2 3\") instead of encoding text");
  cmd->add_flag("--add-special", args->add_special,
                "Add BOS/EOS as the tokenizer's config says (with --decode: keep special tokens' text)");
  cmd->add_flag("--no-parse-special", args->no_parse_special,
                "Treat special-token text such as <|im_start|> as plain text");
  cmd->add_option("--vocab-size", args->vocab_size, "For a llama2.c tokenizer.bin: how many tokens to read");
  cmd->callback([args] {
    if (args->decode.empty() && args->text.empty() && !args->ids_only)
      fail("journey tokenize: give a text to tokenize, or --decode \"ids\"");
    run(*args);
  });
}

}  // namespace journey::cli
