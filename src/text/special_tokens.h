// Added tokens ("<|im_start|>", "<s>", user-defined pieces) are matched in the raw text before any
// tokenizer algorithm runs: the text is cut into plain stretches and whole added tokens, and only
// the plain stretches go through normalization, pre-tokenization and BPE/SPM. This is what
// Hugging Face's AddedVocabulary and llama.cpp's tokenizer_st_partition both do, so it lives here
// once for every tokenizer kind. tokenizer_config.json, which names BOS/EOS and the added tokens of
// a Hugging Face model directory, is read here too.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace journey {

struct AddedToken {
  std::string content;
  int id = -1;
  bool special = true;       // special tokens are only matched when parse_special is set
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matched when not inside a word
};

// One stretch of input: plain text (token_id < 0) or one matched added token.
struct TextSegment {
  std::string_view text;
  int token_id = -1;
};

// Leftmost-longest matching of the added tokens in `text`. Non-special added tokens are always
// matched; special ones only when parse_special is true.
std::vector<TextSegment> split_on_added_tokens(std::string_view text, const std::vector<AddedToken>& tokens,
                                               bool parse_special);

// What a Hugging Face tokenizer_config.json says about special tokens.
struct TokenizerConfig {
  bool present = false;
  std::optional<std::string> bos_token;  // "bos_token": "<s>" or {"content": "<s>", ...}
  std::optional<std::string> eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::vector<AddedToken> added_tokens;  // from "added_tokens_decoder"
};

// Reads `path` if it exists (present=false otherwise). Malformed JSON or fields of the wrong type
// throw journey::Error naming the file and the field.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& path);

}  // namespace journey
