// "What did I download?" — the facts `journey inspect` prints, gathered in one place so chapters
// and tools can ask for them too: files and their roles, the architecture, every tensor, the
// parameter count, how much memory the weights need at different precisions, what the KV cache
// costs per token and how many sequences fit in a memory budget. A directory that holds only
// config.json (downloaded before the weights, to plan) gets the same answers from the config.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "assets/model.h"

namespace journey {

struct TensorSummary {
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;  // outermost first
  DType dtype = DType::F32;
  uint64_t bytes = 0;          // as stored
};

struct InspectReport {
  std::filesystem::path path;
  ModelFormat format = ModelFormat::HuggingFace;
  ModelConfig config;
  GenerationConfig generation;
  std::vector<FileRole> files;
  std::vector<std::string> notes;
  std::vector<TensorSummary> tensors;  // model order: embedding, layers 0..L-1, final norm, head
  int64_t parameters = 0;              // elements over all stored tensors (a tied head counts once)
  uint64_t stored_bytes = 0;           // as the files hold them (after dequantization for llama2.c v2)
  // What the same weights need in memory at each precision.
  uint64_t bytes_f32 = 0, bytes_bf16 = 0;
  uint64_t bytes_q8_0 = 0;  // 34 bytes per 32 weights (f16 scale + 32 x int8)
  uint64_t bytes_q4_0 = 0;  // 18 bytes per 32 weights (f16 scale + 32 x 4 bits)
  // K and V of every layer for one position: 2 x layers x KV heads x head_dim x bytes per value.
  uint64_t kv_bytes_per_token_f32 = 0, kv_bytes_per_token_f16 = 0;
  bool config_only = false;  // no weights in the directory: tensors and sizes derived from config.json
};

// path: a model directory or file; a directory with config.json and no weights is inspected from
// the config alone (tensors listed with the shapes the config implies, in the declared dtype).
InspectReport inspect_model(const std::filesystem::path& path);

// How many sequences of seq_len positions fit in `budget` bytes beside weights of `weight_bytes`,
// each sequence holding seq_len x kv_bytes_per_token of KV cache (what vLLM sizes its pool by).
struct MemoryFit {
  uint64_t budget = 0, weights = 0, kv_per_sequence = 0;
  uint64_t left_for_kv = 0;  // budget - weights (0 when the weights alone do not fit)
  int64_t sequences = 0;     // floor(left_for_kv / kv_per_sequence)
  bool weights_fit = false;
};
MemoryFit fit_in_memory(uint64_t budget, uint64_t weight_bytes, uint64_t kv_bytes_per_token, int64_t seq_len);

// "24GiB", "80GB", "16G" (GiB), "512MiB", "1.5TB", "123456" (bytes) -> bytes. Throws journey::Error
// naming the text and the accepted forms.
uint64_t parse_memory_size(const std::string& text);
nlohmann::ordered_json to_json(const InspectReport& report);

}  // namespace journey
