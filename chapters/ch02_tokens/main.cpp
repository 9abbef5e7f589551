// Chapter 2 — from text to token ids and back, with two real tokenizers.
// 1. stories260K's SentencePiece model (512 pieces): an English and a Chinese sentence.
// 2. Qwen2.5's byte-level BPE (151,665 tokens, tokens for whole Chinese words): the seeds'
//    examples 北京今天下雨吗？ and 我喜欢编程, then a system + user conversation through Qwen2.5's
//    own chat template, whose markers <|im_start|> / <|im_end|> are single special tokens.
// 3. A Chinese stop string matched on the streamed text (the engine's StopStringMatcher).
// Each text is encoded, printed token by token (id, piece as stored, the bytes it stands for),
// streamed back through the incremental detokenizer and decoded; the chapter fails (and so does
// its ctest) if any round trip is not exactly the text.
//
// 4. With --chat-model, only a real chat model instead (SmolLM2-135M-Instruct, which
//    scripts/install-deps.sh fetches into models/): its tokenizer and ChatML template from the GGUF
//    metadata, a system + user conversation and the one without a system message, its special
//    tokens and the end ids a generation stops on.
//
// usage: ch02_tokens [MODEL] [QWEN_TOKENIZER_DIR]   (defaults: data/stories260K and the Qwen2.5
//        tokenizer unpacked into the build directory from tests/data/tokenizers/hf/qwen2.5-instruct)
//        ch02_tokens --chat-model PATH                (a GGUF file or a directory holding one)
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "engine/stop.h"
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

// Whether `bytes` is whole UTF-8 (a token may end inside a character).
static bool complete_utf8(const std::string& bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > bytes.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(bytes[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// `text` followed by spaces up to `width` characters (UTF-8 aware, so that columns line up).
static std::string padded(const std::string& text, size_t width) {
  size_t chars = 0;
  for (unsigned char c : text) chars += (c & 0xC0) != 0x80;
  return text + std::string(chars < width ? width - chars : 1, ' ');
}

// Prints the journey of one text (already rendered by a template, or plain) and returns whether
// the round trip is exact. Special tokens are kept on the way back: this is the text the model saw.
static bool show(const Tokenizer& tokenizer, const std::string& label, const std::string& text, bool add_bos) {
  std::cout << "\n" << label << ": \"" << escaped(text) << "\"\n";
  const std::vector<int> ids = tokenizer.encode(text, add_bos, /*parse_special=*/true);
  std::printf("%zu tokens:\n  %5s  %-7s %-18s %s\n", ids.size(), "index", "id", "piece", "bytes");
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string bytes = tokenizer.token_bytes(ids[i], i ? ids[i - 1] : -1, /*skip_special=*/false);
    std::printf("  %5zu  %-7d %s\"%s\"%s\n", i, ids[i], padded(tokenizer.piece(ids[i]), 18).c_str(),
                escaped(bytes, !complete_utf8(bytes)).c_str(), tokenizer.is_special(ids[i]) ? "  (special)" : "");
  }
  // Streaming: push ids one by one; bytes of an unfinished UTF-8 character are held back.
  IncrementalDetokenizer stream(tokenizer, -1, /*skip_special=*/false);
  std::string streamed;
  std::cout << "streamed:  ";
  for (int id : ids) {
    const std::string chunk = stream.push(id);
    std::cout << (chunk.empty() ? "·" : "[" + escaped(chunk) + "]");
    streamed += chunk;
  }
  streamed += stream.flush();
  std::cout << "\n           (· = a token whose bytes are held back until their character is complete)\n";
  // BOS is added by the tokenizer, not part of the text: compare what follows it.
  const std::string bos = add_bos && tokenizer.bos_id() && !ids.empty() && ids[0] == *tokenizer.bos_id()
                              ? tokenizer.token_bytes(ids[0], -1, false) : std::string();
  const bool round_trip = streamed == bos + text && tokenizer.decode(ids, /*skip_special=*/false) == bos + text;
  std::cout << "round trip: " << (round_trip ? "exact" : "DIFFERS") << "\n";
  return round_trip;
}

// A stop string is matched on the text, not on tokens: "。" ends the answer inside the stream,
// and the text after it never reaches the user (the engine's StopStringMatcher).
static bool stop_string(const Tokenizer& tokenizer, const std::string& text, const std::string& stop) {
  const std::vector<int> ids = tokenizer.encode(text, false, false);
  IncrementalDetokenizer stream(tokenizer);
  StopStringMatcher matcher({stop});
  std::string released;
  std::cout << "\nstop string \"" << stop << "\" on the stream of \"" << text << "\" (" << ids.size() << " tokens):\n  ";
  size_t fed = 0;
  for (int id : ids) {
    ++fed;
    const std::string out = matcher.push(stream.push(id));
    std::cout << "[" << out << "]";
    released += out;
    if (matcher.matched()) break;
  }
  std::cout << "\n  stopped after token " << fed << " of " << ids.size() << "; the user sees \"" << released << "\"\n";
  return matcher.matched() && released == text.substr(0, text.find(stop));
}

// A chat model's side of the lesson: the template the model was trained on, rendered by journey
// from the file's own metadata, and the ids that end a turn.
static bool chat_model(const std::filesystem::path& path) {
  const LoadedModel meta = load_model_metadata(path);  // a directory holding one .gguf resolves to it
  const auto tokenizer = load_tokenizer(meta.path);
  const ModelChatTemplate chat = load_chat_template(meta.path);
  std::cout << "# " << meta.path.filename().string() << ": " << tokenizer->kind() << ", " << tokenizer->vocab_size()
            << " tokens, chat template " << chat.chat_template->name() << "\n";
  std::cout << "special tokens:";
  for (int id = 0; id < tokenizer->vocab_size(); ++id)
    if (tokenizer->is_special(id)) std::cout << " " << id << " " << tokenizer->piece(id);
  const auto bos = tokenizer->bos_id();
  std::cout << "\nBOS " << (bos ? std::to_string(*bos) + " " + tokenizer->piece(*bos) : std::string("none"))
            << ", added by the tokenizer: " << (tokenizer->encode("", /*add_special=*/true).empty() ? "no" : "yes") << "\n";
  std::cout << "end ids (generation stops on any):";
  for (int32_t id : collect_eos_ids(meta.generation, meta.config, *tokenizer)) std::cout << " " << id << " " << tokenizer->piece(id);
  std::cout << "\n";

  bool ok = true;
  ChatTemplateInputs inputs;
  inputs.messages = {{"system", "You are a concise assistant. Answer in one sentence."},
                     {"user", "What is the capital of France?"}};
  inputs.add_generation_prompt = true;
  const RenderedPrompt rendered = render_and_encode(chat, *tokenizer, inputs);
  ok = show(*tokenizer, "system + user through the model's chat template", rendered.text, false) && ok;
  if (tokenizer->encode(rendered.text, false, true) != rendered.ids) {
    std::cout << "the template's ids differ from encoding its text\n";
    ok = false;
  }
  inputs.messages.erase(inputs.messages.begin());  // no system message: the template may add its own
  std::cout << "\nuser only, rendered: \"" << escaped(render_and_encode(chat, *tokenizer, inputs).text) << "\"\n";

  for (const char* text : {"北京今天下雨吗？", "我喜欢编程"})
    std::cout << "\n" << text << " is " << tokenizer->encode(text, false, false).size() << " tokens in this vocabulary";
  std::cout << "\n";
  return ok;
}

int main(int argc, char** argv) try {
  if (argc == 3 && std::string(argv[1]) == "--chat-model") return chat_model(argv[2]) ? 0 : 1;
  const std::filesystem::path model = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const std::filesystem::path qwen = argc > 2 ? argv[2] : JOURNEY_QWEN_TOKENIZER;
  bool ok = true;

  const auto tokenizer = load_tokenizer(model);
  const ModelChatTemplate chat = load_chat_template(model);
  std::cout << "# 1. stories260K: " << tokenizer->kind() << ", " << tokenizer->vocab_size()
            << " tokens, chat template " << chat.chat_template->name() << "\n";
  ok = show(*tokenizer, "text", "Once upon a time, there was a little girl.", true) && ok;
  ok = show(*tokenizer, "text", "从前有一个小女孩。", true) && ok;  // "Once there was a little girl."

  const auto qwen_tokenizer = load_tokenizer(qwen);
  const ModelChatTemplate qwen_chat = load_chat_template(qwen);
  std::cout << "\n# 2. Qwen2.5: " << qwen_tokenizer->kind() << ", " << qwen_tokenizer->vocab_size() << " tokens\n";
  ok = show(*qwen_tokenizer, "text", "北京今天下雨吗？", false) && ok;  // "Is it raining in Beijing today?"
  ok = show(*qwen_tokenizer, "text", "我喜欢编程", false) && ok;       // "I like programming"
  ChatTemplateInputs inputs;
  inputs.messages = {{"system", "你是一个有帮助的助手。"}, {"user", "北京今天下雨吗？"}};  // "You are a helpful assistant."
  inputs.add_generation_prompt = true;
  const RenderedPrompt rendered = render_and_encode(qwen_chat, *qwen_tokenizer, inputs);
  ok = show(*qwen_tokenizer, "system + user through the Qwen2.5 chat template", rendered.text, false) && ok;
  if (qwen_tokenizer->encode(rendered.text, false, true) != rendered.ids) {
    std::cout << "the template's ids differ from encoding its text\n";
    ok = false;
  }

  std::cout << "\n# 3. A Chinese stop string\n";
  ok = stop_string(*qwen_tokenizer, "我喜欢编程。我也喜欢画画。", "。") && ok;  // "I like programming. I also like drawing."
  return ok ? 0 : 1;
} catch (const journey::Error& e) {
  std::cerr << "ch02: " << e.what() << "\n";
  return 1;
}
