// "What did I download?" — the facts `journey inspect` prints, gathered in one place so chapters
// and tools can ask for them too: files and their roles, the architecture, every tensor, the
// parameter count and how much memory the weights need at different precisions.
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
};

InspectReport inspect_model(const std::filesystem::path& path);
nlohmann::ordered_json to_json(const InspectReport& report);

}  // namespace journey
