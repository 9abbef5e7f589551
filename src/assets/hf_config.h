// Hugging Face config.json / generation_config.json -> journey's ModelConfig / GenerationConfig.
// Only the decoder-only families journey runs are accepted (llama, mistral, qwen2, qwen3); any
// field journey cannot honour (rope_scaling, a non-SiLU activation) is an error, not a silent guess.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.h"

namespace journey {

// The model_type values journey understands.
const std::vector<std::string>& supported_architectures();

// Parse config.json; `notes` (optional) receives remarks about fields read but ignored (e.g. sliding_window).
ModelConfig parse_hf_config(const nlohmann::json& config, const std::string& where, std::vector<std::string>* notes = nullptr);
ModelConfig read_hf_config(const std::filesystem::path& config_json, std::vector<std::string>* notes = nullptr);

GenerationConfig parse_generation_config(const nlohmann::json& config, const std::string& where);
GenerationConfig read_generation_config(const std::filesystem::path& generation_config_json);

// Read a JSON file, with errors naming the file.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace journey
