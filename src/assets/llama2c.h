// llama2.c checkpoints (karpathy/llama2.c): the legacy version-0 file written by run.c's era of
// export (7 x int32 header, then float32 weights) and the "ak42" files of export.py: version 1
// (float32) and version 2 (int8 with one float32 scale per group). Weights come out under
// Hugging Face names in Meta's Interleaved RoPE order, exactly as stored: loading never permutes.
#pragma once
#include <cstdint>
#include <filesystem>

#include "assets/weights.h"
#include "core/config.h"

namespace journey {

struct Llama2cCheckpoint {
  int version = 0;              // 0 (legacy), 1 (fp32 "ak42"), 2 (int8 "ak42")
  ModelConfig config;
  bool shared_classifier = true;
  int64_t group_size = 0;       // version 2 only
  WeightStore weights;
};

// True when the file looks like a llama2.c checkpoint: the "ak42" magic, or a plausible legacy
// header whose implied size equals the file size.
bool is_llama2c_file(const std::filesystem::path& path);

// The generation defaults of every llama2.c model: BOS id 1, and end ids {2, 1}. run.c stops when
// the model samples BOS (`if (next == 1) break;`): llama2.c's training data (tinystories.py
// pretokenize: `enc.encode(text, bos=True, eos=False)`) separates stories with BOS alone and never
// contains EOS, so a model trained on it ends a story by starting the next one. Listing BOS among
// the end ids makes journey stop where run.c stops, through the ordinary stop rules. The loader
// uses this for .bin files and `journey convert llama2c` writes it into generation_config.json.
GenerationConfig llama2c_generation_config();

// Read a checkpoint; errors name the file, the field and expected vs found sizes.
// With with_weights = false only the header is read and checked (including the exact file size).
Llama2cCheckpoint read_llama2c(const std::filesystem::path& path, bool with_weights = true);

}  // namespace journey
