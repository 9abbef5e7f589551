// Loading a model: whatever the user points at (a Hugging Face directory, a llama2.c .bin,
// a GGUF file) becomes config + weights + where its tokenizer and template live.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "assets/weights.h"
#include "core/config.h"

namespace journey {

enum class ModelFormat { HuggingFace, Llama2c, Gguf };

struct FileRole {
  std::filesystem::path path;
  std::string role;  // "weights", "tokenizer", "config", "template", "generation config", "other"
  uint64_t bytes = 0;
};

struct LoadedModel {
  std::filesystem::path path;
  ModelFormat format = ModelFormat::HuggingFace;
  ModelConfig config;
  GenerationConfig generation;
  WeightStore weights;
  std::vector<FileRole> files;
  std::vector<std::string> notes;  // fields read but ignored, assumptions made (shown by inspect)
};

std::string_view format_name(ModelFormat f);  // "Hugging Face", "llama2.c", "GGUF"

// Every tensor of core/model_weights.h's model_weights(config) present with the expected shape and a float dtype; throws journey::Error
// naming the tensor, the expected and the found shape/dtype.
void validate_weights(const ModelConfig& config, const WeightStore& weights, const std::filesystem::path& where);

// Load a model from a directory or a file (format detected from content). Throws journey::Error.
LoadedModel load_model(const std::filesystem::path& path);

// Only config (+ generation config) and the file list, without mapping weights.
LoadedModel load_model_metadata(const std::filesystem::path& path);

}  // namespace journey
