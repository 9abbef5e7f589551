// A whole Hugging Face model into an AutoAWQ checkpoint: `journey quantize DIR --type awq
// --calibration TRACE_DIR... --out OUT_DIR`.
//
// Layer by layer (AutoAWQ's AwqQuantizer.quantize): the layer's float weights, its calibration inputs
// from the trace dumps, the scale search of awq_search.h (applied to the weights), then every linear
// whose shape allows it — inputs a multiple of the group size, outputs a multiple of 8 — is quantized
// to INT4 with a zero point (awq.h) and packed as AutoAWQ's GEMM layout. What cannot be packed stays a
// plain f16 `.weight` and is listed in quantization_config.modules_to_not_convert; embeddings, norms
// and the LM head are f16, as AutoAWQ saves them. The written directory is config.json (the source's,
// with quantization_config and torch_dtype float16), model.safetensors and the source's tokenizer,
// template and generation files — a checkpoint journey's loader (and AutoAWQ's) reads.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "quant/awq_search.h"

namespace journey::quant {

struct AwqQuantizeOptions {
  std::filesystem::path input;                     // a Hugging Face directory (llama/mistral, float weights)
  std::filesystem::path output;                    // the directory to write (must not exist)
  std::vector<std::filesystem::path> calibration;  // journey trace dumps of the input model
  AwqSearchOptions search;                         // group size, grid; search = false: plain RTN INT4
  std::function<void(int64_t layer, int64_t layers)> on_layer;  // after each layer, for a progress line
};

struct AwqQuantizeReport {
  int64_t group = 0;
  int64_t calibration_tokens = 0;
  size_t calibration_sequences = 0;
  std::vector<std::vector<AwqScaleSearch>> layers;  // [num_layers][4 groups] (empty without calibration)
  std::vector<std::string> quantized;               // module names stored as INT4
  std::vector<std::string> not_converted;           // linear modules kept in f16 (modules_to_not_convert)
  uint64_t weights = 0;                             // parameters of the source model
  uint64_t tensor_bytes = 0;                        // bytes of tensor data written
  uint64_t file_bytes = 0;                          // size of model.safetensors
  std::vector<std::string> notes;
};

AwqQuantizeReport quantize_model_awq(const AwqQuantizeOptions& options);  // throws journey::Error

// The tensor bytes quantize_model_awq writes for a model of this configuration, from config.json alone:
// each INT4 linear in * out / 2 (qweight) + (in / group) * out / 2 (qzeros) + (in / group) * out * 2
// (f16 scales), every other tensor f16. For memory estimates (chapter 13's 7B / 70B table).
uint64_t awq_checkpoint_bytes(const ModelConfig& config, int64_t group);

}  // namespace journey::quant
