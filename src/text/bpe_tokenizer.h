// Rank-based BPE, the Hugging Face "BPE" model: the text is normalized, cut into words by the
// pre-tokenizers (regex splits), each word is mapped to symbols (for byte-level BPE every byte is
// first mapped to a printable character, GPT-2's bytes_to_unicode), and adjacent symbols are merged
// in the order of the merges list (lowest rank first, leftmost on ties) until no listed merge
// applies. The same engine serves tokenizer.json files and GGUF "gpt2" vocabularies; the loaders
// only fill in a BpeSpec.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace journey {

// One normalizer of tokenizer.json ("normalizer": {...}); Sequence is flattened into a list.
struct NormalizerStep {
  enum class Kind { NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace } kind;
  std::string pattern;  // Replace: the literal text to find
  std::string content;  // Replace: what to put instead; Prepend: what to put in front
};

// One pre-tokenizer step; each turns every current piece into zero or more pieces.
struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace } kind;
  enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };
  std::string pattern;       // Split: PCRE2 pattern (or literal text when literal is set)
  bool literal = false;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;       // Split: the pieces are the matches' complement's roles swapped
  bool add_prefix_space = false;  // ByteLevel: prepend ' ' to a piece that lacks one
  bool use_regex = false;    // ByteLevel: also split with the GPT-2 regex
  std::string replacement = "\xE2\x96\x81";  // Metaspace: what spaces become ("▁")
  std::string prepend_scheme = "always";     // Metaspace: "always", "first" or "never"
  bool split = true;                         // Metaspace: cut before each replacement
};

struct BpeSpec {
  std::string source;  // file, for messages
  std::string kind;    // "bpe" or "gguf-gpt2"
  std::vector<std::string> pieces;  // [V] id -> piece ("" for holes)
  std::vector<std::pair<std::string, std::string>> merges;  // [M] in rank order
  std::vector<bool> special;        // [V] control tokens
  std::vector<AddedToken> added;    // matched in the raw text before anything else
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  bool byte_level = true;     // bytes <-> GPT-2 characters around the model
  bool ignore_merges = false; // a word that is itself in the vocabulary is one token (Llama 3)
  bool byte_fallback = false; // characters missing from the vocabulary become <0xHH> pieces
  std::optional<int> unk;
  bool decode_metaspace = false;         // decoder turns "▁" back into ' '
  bool decode_strip_first_space = false; // ... and drops the first token's leading space
  std::optional<int> bos;
  std::vector<int> eos;
  bool add_bos = false;
  bool add_eos = false;
};

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeSpec spec);

// The regex ByteLevel(use_regex=true) splits with, i.e. GPT-2's.
extern const char* const kGpt2Pattern;

}  // namespace journey
