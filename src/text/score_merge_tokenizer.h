// SentencePiece-style BPE driven by piece scores, as llama.cpp runs it for GGUF "llama" vocabularies
// and as llama2.c's run.c runs it for tokenizer.bin: split the text into UTF-8 characters, then keep
// merging the adjacent pair whose concatenation is a vocabulary piece with the highest score
// (leftmost on ties); characters that are not pieces fall back to their <0xHH> byte pieces.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace journey {

struct ScoreMergeVocab {
  std::string source;  // file the vocabulary came from, for messages
  std::string kind;    // "gguf-llama" or "llama2c"
  std::vector<std::string> pieces;  // [V] piece text as stored
  std::vector<float> scores;        // [V] merge priority: higher merges first
  std::vector<bool> special;        // [V] control tokens: not text, dropped when skip_special
  std::vector<int> byte_value;      // [V] 0..255 for byte pieces "<0xHH>", -1 otherwise
  std::string space_symbol = "\xE2\x96\x81";  // what a space is stored as: "▁" (GGUF) or " " (llama2.c)
  bool add_space_prefix = true;     // prepend one space symbol to text (SentencePiece's dummy prefix)
  std::optional<int> bos;
  std::optional<int> unk;
  std::vector<int> eos;
  bool add_bos = true;
  bool add_eos = false;
  std::vector<AddedToken> added;    // matched in the text before merging (control/user-defined)
};

std::unique_ptr<Tokenizer> make_score_merge_tokenizer(ScoreMergeVocab vocab);

}  // namespace journey
