// safetensors: the Hugging Face weight format. An 8-byte little-endian header length N, N bytes
// of JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}), then the raw tensor bytes (offsets relative to byte 8 + N).
// Large checkpoints split into shards listed by model.safetensors.index.json ("weight_map":
// tensor name -> shard file). Reading maps the files and checks every offset, size and dtype
// before any tensor is used; the writer is what `journey convert` and the tests use.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
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

// AWQ checkpoints (AutoAWQ's GEMM format; quant/awq.h draws it): config.json carries
// "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true,
// "version": "gemm"} and every quantized linear layer X is stored as X.qweight, X.qzeros, X.scales.
struct AwqConfig {
  int64_t bits = 4;
  int64_t group_size = 128;
  std::string version = "gemm";
};

// The AWQ settings of a config.json; nullopt when it declares no AWQ quantization. Throws for AWQ
// variants journey cannot read (other bit widths, GEMV/Marlin/ExLlama packing, no zero point).
std::optional<AwqConfig> read_awq_config(const std::filesystem::path& config_json);

// Replaces every X.qweight / X.qzeros / X.scales triple by X.weight [out, in]: Q4_1 blocks when the
// group is a multiple of 32 and the scales are f16 (quant::awq_gemm_to_q4_1: AWQ's integers and
// scales as they are, the minimum rounded to f16), else f32 (quant::dequantize_awq_gemm). Every
// shape, dtype and group is checked first, naming the layer. Returns what it did, for the load note.
struct AwqConversion {
  int as_q4_1 = 0, as_f32 = 0;  // layers
  std::string describe() const;  // "14 layers as Q4_1 blocks (4-bit in memory)", ", 2 dequantized to f32 at load"
};
AwqConversion convert_awq_weights(const AwqConfig& awq, WeightStore& weights, const std::string& where);

}  // namespace journey
