// The per-format loaders behind load_tokenizer(). Each returns a ready Tokenizer or throws
// journey::Error naming the file and what is wrong with it.
#pragma once
#include <filesystem>
#include <memory>

#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace journey {

// tokenizer.model through libsentencepiece; BOS/EOS/added tokens from `config` when it has them.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_path,
                                                        const TokenizerConfig& config);

// Hugging Face tokenizer.json (byte-level BPE, or BPE with byte fallback and metaspace).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& json_path, const TokenizerConfig& config);

// The vocabulary stored in a GGUF file's tokenizer.ggml.* metadata.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& gguf_path);

}  // namespace journey
