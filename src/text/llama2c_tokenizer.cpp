// llama2.c's tokenizer.bin: the SentencePiece vocabulary flattened for run.c. The file stores
// int32 max_token_length, then per token {f32 score, i32 byte length, bytes}; spaces are already
// ' ' (not '▁'), BOS/EOS are stored as "\n<s>\n" / "\n</s>\n" at ids 1 and 2, byte pieces keep their
// "<0xHH>" text. run.c's encode() is the score-merge algorithm with a " " dummy prefix.
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "text/score_merge_tokenizer.h"
#include "text/tokenizer.h"

namespace journey {

namespace {

int parse_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::filesystem::path& path, int vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open llama2.c tokenizer");
  int32_t max_token_length = 0;
  if (!in.read(reinterpret_cast<char*>(&max_token_length), 4))
    fail(path.string(), ": too short for a llama2.c tokenizer (no max_token_length header)");
  if (max_token_length <= 0 || max_token_length > 4096)
    fail(path.string(), ": max_token_length is ", max_token_length, ", expected 1..4096 (is this a llama2.c tokenizer.bin?)");

  ScoreMergeVocab vocab;
  vocab.source = path.string();
  vocab.kind = "llama2c";
  vocab.space_symbol.assign(1, ' ');
  while (vocab_size < 0 || static_cast<int>(vocab.pieces.size()) < vocab_size) {
    const int id = static_cast<int>(vocab.pieces.size());
    float score = 0;
    int32_t length = 0;
    if (!in.read(reinterpret_cast<char*>(&score), 4)) {
      if (vocab_size < 0 && in.gcount() == 0) break;  // clean end of file
      fail(path.string(), ": ends inside token ", id, (vocab_size >= 0 ? cat(" of the expected ", vocab_size) : ""));
    }
    if (!in.read(reinterpret_cast<char*>(&length), 4)) fail(path.string(), ": ends inside the length of token ", id);
    if (length < 0 || length > max_token_length)
      fail(path.string(), ": token ", id, " has length ", length, ", expected 0..", max_token_length);
    std::string piece(static_cast<size_t>(length), '\0');
    if (!in.read(piece.data(), length)) fail(path.string(), ": ends inside the bytes of token ", id);
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
  }
  const int n = static_cast<int>(vocab.pieces.size());
  if (n < 3) fail(path.string(), ": holds ", n, " tokens; a llama2.c vocabulary has at least <unk>, <s>, </s>");
  for (const std::string& piece : vocab.pieces) vocab.byte_value.push_back(parse_byte_piece(piece));
  vocab.special.assign(n, false);
  vocab.special[1] = vocab.special[2] = true;
  vocab.unk = 0;
  vocab.bos = 1;
  vocab.eos = {2};
  return make_score_merge_tokenizer(std::move(vocab));
}

}  // namespace journey
