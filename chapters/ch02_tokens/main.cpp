// Chapter 2 — from text to token ids and back.
// Renders a message through the model's chat template, encodes it, prints every token with its
// piece and bytes, then streams the ids back through the incremental detokenizer to show why a
// token may end in the middle of a character. Fails if decode(encode(text)) != text.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

using namespace journey;

// Control characters escaped; bytes >= 0x80 escaped only when asked (a lone byte of a multi-byte
// character is not printable on its own, a complete character is).
static std::string escaped(const std::string& bytes, bool escape_non_ascii = false) {
  std::string out;
  for (unsigned char ch : bytes) {
    if (ch == '\n') out += "\\n";
    else if (ch < 0x20 || ch == 0x7f || (escape_non_ascii && ch >= 0x80)) { char hex[8]; std::snprintf(hex, sizeof hex, "\\x%02X", ch); out += hex; }
    else out += char(ch);
  }
  return out;
}

// Prints the journey of one text; returns false when the round trip loses anything.
static bool show(const Tokenizer& tokenizer, const ChatTemplate& chat_template, const std::string& text) {
  ChatTemplateInputs inputs;
  inputs.messages = {{"user", text}};
  const std::string rendered = chat_template.render(inputs);
  std::cout << "\ntext:      " << text << "\ntemplate:  " << chat_template.name() << " -> \"" << escaped(rendered)
            << "\"\n";
  const std::vector<int> ids = tokenizer.encode(rendered, /*add_special=*/true);
  std::printf("%zu tokens:\n  %5s  %-6s %-14s %s\n", ids.size(), "index", "id", "piece", "bytes");
  for (size_t i = 0; i < ids.size(); ++i)
    std::printf("  %5zu  %-6d %-14s \"%s\"\n", i, ids[i], tokenizer.piece(ids[i]).c_str(),
                escaped(tokenizer.token_bytes(ids[i], i ? ids[i - 1] : -1, /*skip_special=*/false), true).c_str());

  // Streaming: push ids one by one; bytes of an unfinished UTF-8 character are held back.
  IncrementalDetokenizer stream(tokenizer);
  std::string streamed;
  std::cout << "streamed:  ";
  for (int id : ids) {
    const std::string chunk = stream.push(id);
    std::cout << (chunk.empty() ? "·" : "[" + escaped(chunk) + "]");
    streamed += chunk;
  }
  streamed += stream.flush();
  std::cout << "   (· = bytes held back until the character is complete)\n";
  const bool round_trip = streamed == rendered && tokenizer.decode(ids) == rendered;
  std::cout << "round trip: " << (round_trip ? "exact" : "DIFFERS") << "\n";
  return round_trip;
}

int main(int argc, char** argv) try {
  const std::filesystem::path model = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const auto tokenizer = load_tokenizer(model);
  const ModelChatTemplate chat = load_chat_template(model);
  std::cout << "# Chapter 2: tokens (" << tokenizer->kind() << ", vocabulary " << tokenizer->vocab_size() << ")\n";
  bool ok = show(*tokenizer, *chat.chat_template, "Once upon a time, there was a little girl.");
  ok = show(*tokenizer, *chat.chat_template, "从前有一个小女孩。") && ok;  // "Once there was a little girl."
  return ok ? 0 : 1;
} catch (const journey::Error& e) {
  std::cerr << "ch02: " << e.what() << "\n";
  return 1;
}
