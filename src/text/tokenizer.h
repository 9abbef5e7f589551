// Text <-> token ids. One interface, several implementations:
//  - SentencePiece models (tokenizer.model) through libsentencepiece,
//  - byte-level BPE from a Hugging Face tokenizer.json (GPT-2 / Llama 3 / Qwen2 styles),
//  - the vocabularies stored in GGUF metadata (llama SPM-style and GPT-2-style BPE),
//  - llama2.c's tokenizer.bin.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace journey {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encode text. No special tokens are added unless add_special is true (then BOS, as the
  // tokenizer's config says). Special-token strings inside text ("<|im_start|>") are
  // recognised as their single id when parse_special is true (chat-template output needs this).
  virtual std::vector<int> encode(std::string_view text, bool add_special = false, bool parse_special = true) const = 0;

  // The raw bytes token `id` contributes to the text (spaces as spaces, byte tokens as the byte),
  // given the previous token (-1 at the start) so that SentencePiece's leading-space rule applies.
  // Special/control tokens give their text (e.g. "<|im_end|>") unless skip_special.
  virtual std::string token_bytes(int id, int previous_id, bool skip_special = true) const = 0;

  // The piece as stored in the vocabulary, for display ("▁Once", "Ġthe", "<0x0A>").
  virtual std::string piece(int id) const = 0;

  virtual int vocab_size() const = 0;
  virtual std::optional<int> bos_id() const = 0;
  virtual std::vector<int> eos_ids() const = 0;
  virtual bool is_special(int id) const = 0;
  virtual std::optional<int> token_id(std::string_view piece) const = 0;
  virtual std::string kind() const = 0;  // "sentencepiece", "bpe", "gguf-llama", "gguf-gpt2", "llama2c"

  // Whole-sequence decode: concatenation of token_bytes.
  std::string decode(const std::vector<int>& ids, bool skip_special = true) const;
};

// Path may be a model directory (tokenizer.json preferred over tokenizer.model), a tokenizer-only
// directory, a GGUF file, or a llama2.c tokenizer.bin. Throws journey::Error naming what is missing.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

// llama2.c's tokenizer.bin: int32 max_token_length, then vocab_size x {f32 score, i32 len, bytes}.
// The file does not store the count: pass the model's vocab_size, or -1 to read entries to EOF.
// Encoding follows run.c's encode() (dummy prefix " ", highest-score merges, byte fallback).
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::filesystem::path& path, int vocab_size = -1);

// Streaming decode that never emits half a UTF-8 character: bytes of a token that ends inside a
// multi-byte character are held back until the character is complete.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, int previous_id = -1, bool skip_special = true);
  std::string push(int id);  // returns the newly completed text (maybe empty)
  std::string flush();       // whatever is held back (invalid bytes become U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  int previous_id_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace journey
