// The parts of the tokenizer API that do not depend on the algorithm: whole-sequence decode, the
// streaming detokenizer and load_tokenizer(), which looks at a path and picks the loader.
#include "text/tokenizer.h"

#include <fstream>

#include "core/error.h"
#include "text/loaders.h"
#include "text/utf8.h"

namespace journey {

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  std::string text;
  int previous = -1;
  for (int id : ids) {
    text += token_bytes(id, previous, skip_special);
    previous = id;
  }
  return text;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, int previous_id, bool skip_special)
    : tokenizer_(tokenizer), previous_id_(previous_id), skip_special_(skip_special) {}

// Emit every complete character of pending_; keep only a trailing character that is still being
// built. A byte that can never become part of a valid character is emitted as U+FFFD right away,
// so every chunk returned is valid UTF-8.
std::string IncrementalDetokenizer::push(int id) {
  pending_ += tokenizer_.token_bytes(id, previous_id_, skip_special_);
  previous_id_ = id;
  std::string ready;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const int n = utf8::valid_char_length(pending_, pos);
    if (n > 0) {
      ready.append(pending_, pos, n);
      pos += n;
    } else if (utf8::is_truncated_prefix(pending_, pos)) {
      break;  // wait for the next token to finish this character
    } else {
      ready += utf8::kReplacement;
      ++pos;
    }
  }
  pending_.erase(0, pos);
  return ready;
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = utf8::sanitize(pending_);
  pending_.clear();
  return rest;
}

namespace {

bool has_gguf_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

// The only file in `dir` ending in `extension`, if there is exactly one.
std::optional<std::filesystem::path> single_file_with_extension(const std::filesystem::path& dir,
                                                                const std::string& extension) {
  std::optional<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != extension) continue;
    if (found) return std::nullopt;
    found = entry.path();
  }
  return found;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail("tokenizer: ", path.string(), " does not exist");
  if (fs::is_directory(path)) {
    const TokenizerConfig config = read_tokenizer_config(path / "tokenizer_config.json");
    std::unique_ptr<Tokenizer> tokenizer;
    if (fs::exists(path / "tokenizer.json")) {
      tokenizer = load_hf_tokenizer(path / "tokenizer.json", config);
    } else if (fs::exists(path / "tokenizer.model")) {
      tokenizer = load_sentencepiece_tokenizer(path / "tokenizer.model", config);
    } else if (auto model = single_file_with_extension(path, ".model")) {
      tokenizer = load_sentencepiece_tokenizer(*model, config);  // e.g. stories260K's tok512.model
    } else if (fs::exists(path / "tokenizer.bin")) {
      tokenizer = load_llama2c_tokenizer(path / "tokenizer.bin");
    } else {
      fail("tokenizer: ", path.string(),
           " has no tokenizer; looked for tokenizer.json (Hugging Face), tokenizer.model (SentencePiece), "
           "exactly one other *.model file, and tokenizer.bin (llama2.c)");
    }
    return tokenizer;
  }
  if (has_gguf_magic(path)) return load_gguf_tokenizer(path);
  const std::string extension = path.extension().string();
  if (path.filename() == "tokenizer.json" || extension == ".json") {
    return load_hf_tokenizer(path, read_tokenizer_config(path.parent_path() / "tokenizer_config.json"));
  }
  if (extension == ".model") {
    return load_sentencepiece_tokenizer(path, read_tokenizer_config(path.parent_path() / "tokenizer_config.json"));
  }
  if (extension == ".bin") return load_llama2c_tokenizer(path);
  fail("tokenizer: don't know how to read ", path.string(),
       "; expected a directory, a GGUF file, tokenizer.json, a SentencePiece .model or a llama2.c .bin");
}

}  // namespace journey
