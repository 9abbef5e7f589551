// safetensors: the Hugging Face weight format. An 8-byte little-endian header length N, N bytes
// of JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}), then the raw tensor bytes (offsets relative to byte 8 + N).
// Large checkpoints split into shards listed by model.safetensors.index.json ("weight_map":
// tensor name -> shard file). Reading maps the files and checks every offset, size and dtype
// before any tensor is used; the writer is what `journey convert` and the tests use.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "assets/weights.h"

namespace journey {

// Largest header journey accepts: real checkpoints stay far below it (a few MB for thousands of tensors).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull * 1000 * 1000;

// Add every tensor of one .safetensors file to `into` (zero-copy, the file stays mapped).
// Returns the file's __metadata__ table.
std::map<std::string, std::string> read_safetensors(const std::filesystem::path& file, WeightStore& into);

// Add the tensors listed by a model.safetensors.index.json (shards are looked up beside it).
void read_safetensors_index(const std::filesystem::path& index_file, WeightStore& into);

// Write tensors (in the given order, data taken from each TensorRef) as one .safetensors file.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace journey
