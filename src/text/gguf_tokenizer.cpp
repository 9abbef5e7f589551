// Tokenizers from the vocabulary a GGUF file carries in its tokenizer.ggml.* metadata:
//  - model "llama": SentencePiece-style pieces with scores -> the score-merge algorithm;
//  - model "gpt2":  byte-level BPE with tokenizer.ggml.merges, pre-tokenized with the regex that
//    tokenizer.ggml.pre names (llama.cpp keeps the regexes in code, keyed by that name; so do we).
// tokenizer.ggml.token_type marks control tokens (special), user-defined tokens (matched in text
// like added tokens) and byte pieces.
#include "assets/gguf.h"
#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "text/loaders.h"
#include "text/score_merge_tokenizer.h"

namespace journey {

namespace {

// llama.cpp's token types (llama_token_type).
enum GgufTokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The regex splits tokenizer.ggml.pre names, applied in order: "smollm" (SmolLM/SmolLM2, like
// llama.cpp's starcoder family) first isolates every digit, then splits with the GPT-2 regex,
// as Hugging Face's Sequence[Digits(individual_digits), ByteLevel(use_regex)] does.
std::vector<std::string> pre_tokenizer_patterns(const std::string& pre, const std::string& source) {
  if (pre == "gpt-2" || pre == "default" || pre.empty()) return {kGpt2Pattern};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe") return {kLlama3Pattern};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {kQwen2Pattern};
  if (pre == "smollm") return {R"(\p{N})", kGpt2Pattern};
  fail(source, ": tokenizer.ggml.pre \"", pre, "\" is not supported (supported: gpt-2, default, llama-bpe, llama3, "
       "smaug-bpe, qwen2, deepseek-r1-qwen, smollm)");
}

int parse_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  try {
    return std::stoi(piece.substr(3, 2), nullptr, 16);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& gguf_path) {
  const GgufFile gguf = GgufFile::open(gguf_path);
  const std::string source = gguf_path.string();
  if (!gguf.has("tokenizer.ggml.model") || !gguf.has("tokenizer.ggml.tokens"))
    fail(source, ": has no tokenizer (tokenizer.ggml.model / tokenizer.ggml.tokens missing)");
  const std::string model = gguf.get_string("tokenizer.ggml.model");
  std::vector<std::string> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  const int n = static_cast<int>(tokens.size());

  std::vector<int64_t> types(n, kNormal);
  if (gguf.has("tokenizer.ggml.token_type")) {
    types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (static_cast<int>(types.size()) != n)
      fail(source, ": tokenizer.ggml.token_type has ", types.size(), " entries, expected ", n, " (one per token)");
  }
  auto optional_id = [&](const char* key) -> std::optional<int> {
    if (!gguf.has(key)) return std::nullopt;
    const int64_t id = gguf.get_int(key);
    if (id < 0 || id >= n) {
      if (id == -1) return std::nullopt;  // some converters write -1 for "none"
      fail(source, ": ", key, " = ", id, " is outside the vocabulary [0, ", n, ")");
    }
    return static_cast<int>(id);
  };
  auto flag = [&](const char* key, bool fallback) { return gguf.has(key) ? gguf.get_bool(key) : fallback; };

  std::vector<bool> special(n);
  std::vector<AddedToken> added;
  for (int id = 0; id < n; ++id) {
    special[id] = types[id] == kControl;
    if (types[id] == kControl || types[id] == kUnknown || types[id] == kUserDefined)
      added.push_back({tokens[id], id, types[id] != kUserDefined});
  }
  const std::optional<int> bos = optional_id("tokenizer.ggml.bos_token_id");
  std::vector<int> eos;
  if (auto id = optional_id("tokenizer.ggml.eos_token_id")) eos.push_back(*id);
  if (auto id = optional_id("tokenizer.ggml.eot_token_id"); id && (eos.empty() || *id != eos[0])) eos.push_back(*id);

  if (model == "llama") {
    ScoreMergeVocab vocab;
    vocab.source = source;
    vocab.kind = "gguf-llama";
    if (!gguf.has("tokenizer.ggml.scores")) fail(source, ": tokenizer.ggml.model is \"llama\" but tokenizer.ggml.scores is missing");
    const std::vector<double> scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (static_cast<int>(scores.size()) != n)
      fail(source, ": tokenizer.ggml.scores has ", scores.size(), " entries, expected ", n);
    vocab.scores.assign(scores.begin(), scores.end());
    for (int id = 0; id < n; ++id) vocab.byte_value.push_back(types[id] == kByte ? parse_byte_piece(tokens[id]) : -1);
    vocab.pieces = std::move(tokens);
    vocab.special = std::move(special);
    vocab.added = std::move(added);
    vocab.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
    vocab.bos = bos;
    vocab.eos = eos;
    vocab.unk = optional_id("tokenizer.ggml.unknown_token_id");
    vocab.add_bos = flag("tokenizer.ggml.add_bos_token", true) && bos.has_value();
    vocab.add_eos = flag("tokenizer.ggml.add_eos_token", false) && !eos.empty();
    return make_score_merge_tokenizer(std::move(vocab));
  }
  if (model == "gpt2") {
    BpeSpec spec;
    spec.source = source;
    spec.kind = "gguf-gpt2";
    if (!gguf.has("tokenizer.ggml.merges")) fail(source, ": tokenizer.ggml.model is \"gpt2\" but tokenizer.ggml.merges is missing");
    for (const std::string& merge : gguf.get_string_array("tokenizer.ggml.merges")) {
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) fail(source, ": tokenizer.ggml.merges entry \"", merge, "\" has no space");
      spec.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
    }
    const std::string pre = gguf.has("tokenizer.ggml.pre") ? gguf.get_string("tokenizer.ggml.pre") : "default";
    for (const std::string& pattern : pre_tokenizer_patterns(pre, source)) {
      PreTokenizerStep split{};
      split.kind = PreTokenizerStep::Kind::Split;
      split.pattern = pattern;
      spec.pre_tokenizers.push_back(split);
    }
    spec.ignore_merges = pre == "llama-bpe" || pre == "llama3";
    spec.pieces = std::move(tokens);
    spec.special = std::move(special);
    spec.added = std::move(added);
    spec.bos = bos;
    spec.eos = eos;
    spec.unk = optional_id("tokenizer.ggml.unknown_token_id");
    spec.add_bos = flag("tokenizer.ggml.add_bos_token", false) && bos.has_value();
    spec.add_eos = flag("tokenizer.ggml.add_eos_token", false) && !eos.empty();
    return make_bpe_tokenizer(std::move(spec));
  }
  fail(source, ": tokenizer.ggml.model \"", model, "\" is not supported (supported: llama, gpt2)");
}

}  // namespace journey
