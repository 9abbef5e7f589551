// Converting a llama2.c checkpoint into a Hugging Face Llama directory (config.json,
// model.safetensors, tokenizer files, generation_config.json).
//
// The one subtle step is RoPE order. llama2.c (like Meta's original Llama code) rotates dimension
// pairs (2i, 2i+1) of each head; Hugging Face's Llama rotates (i, i + head_dim/2) ("rotate_half").
// Hugging Face's convert_llama_weights_to_hf.py makes the checkpoint compute the same function by
// permuting the ROWS of q_proj and k_proj within each head:
//     permute(w, n_heads) = w.view(n_heads, head_dim/2, 2, in).transpose(1, 2).reshape(n_heads*head_dim, in)
// so that output row h*D + t*D/2 + i takes input row h*D + 2i + t. We do exactly the same, so the
// written directory is a genuine HF checkpoint (RopeLayout::HalfSplit).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/dtype.h"

namespace journey {

// Rows of an interleaved-RoPE projection [n_heads*head_dim, cols] -> half-split order (HF permute()).
std::vector<float> permute_interleaved_to_half_split(const std::vector<float>& w, int64_t n_heads, int64_t rows, int64_t cols);
// The inverse (llama2.c export.py's unpermute()).
std::vector<float> permute_half_split_to_interleaved(const std::vector<float>& w, int64_t n_heads, int64_t rows, int64_t cols);

struct ConvertLlama2cOptions {
  std::filesystem::path checkpoint;                       // llama2.c .bin (version 0, 1 or 2)
  std::optional<std::filesystem::path> tokenizer_model;   // SentencePiece tokenizer.model to copy
  std::filesystem::path out_dir;
  DType dtype = DType::F32;                               // F32, F16 or BF16 for model.safetensors
};

// Writes the directory; returns the list of files written.
std::vector<std::filesystem::path> convert_llama2c_to_hf(const ConvertLlama2cOptions& options);

}  // namespace journey
