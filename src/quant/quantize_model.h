// Quantizing a whole model into a GGUF file: `journey quantize IN --type q4_k_m --out OUT.gguf`.
//
// From a GGUF file, the output is what llama-quantize writes: every metadata key copied in order
// (general.quantization_version and general.file_type set last), tensors in llama.cpp's order (the
// global ones by name, then layer by layer), each given its type by llama.cpp's rules
// (tensor_types.h) and quantized by the reference quantizers (quantize.h). For the legacy types the
// file is byte-identical to llama.cpp's (tests/quant).
// From a Hugging Face directory (or a llama2.c checkpoint), the llama metadata, the tokenizer
// (byte-level BPE tokenizer.json -> "gpt2", SentencePiece tokenizer.model -> "llama") and the chat
// template are written the way llama.cpp's convert_hf_to_gguf.py writes them, Q/K rows are put back
// in Meta's interleaved RoPE order, and the tensors go through the same rules. The written
// vocabulary must tokenize sample texts exactly like the source's tokenizer, or no file is kept.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"

namespace journey::quant {

struct QuantizeProgress {
  size_t index = 0, count = 0;  // tensor index (0-based) of count
  std::string tensor;           // its GGUF name
  DType from = DType::F32, to = DType::F32;
  uint64_t weights_done = 0, weights_total = 0;  // weights of the tensors finished so far / all
};

struct QuantizeOptions {
  std::filesystem::path input;    // a GGUF file, a Hugging Face directory or a llama2.c .bin
  std::filesystem::path output;   // the .gguf to write
  std::string type;               // a recipe name (tensor_types.h): q8_0, q4_k_m, ...
  bool pure = false;              // every quantizable matrix gets the base type (llama-quantize --pure)
  bool allow_requantize = false;  // quantize tensors that already are (precision is lost twice)
  int threads = 0;                // rows of a tensor are quantized in parallel; 0 = every core (core/threads.h)
  std::function<void(const QuantizeProgress&)> on_tensor_done;  // after each tensor, for a progress bar
};

struct QuantizeReport {
  size_t tensors = 0;
  uint64_t weights = 0;        // elements of all tensors
  uint64_t input_bytes = 0;    // tensor bytes in the source
  uint64_t output_bytes = 0;   // tensor bytes written (without metadata)
  std::map<DType, int> type_counts;
  std::vector<std::string> notes;  // fallbacks and other things the user should know
};

QuantizeReport quantize_model(const QuantizeOptions& options);  // throws journey::Error

// What quantize_model would write for a model of this configuration, planned from config.json alone
// (no weight is read): each tensor's GGUF name, shape, the type llama.cpp's rules give it and its bytes.
// For memory estimates of models too large to have at hand (chapter 13: Llama-2 7B and 70B).
struct PlannedTensor {
  std::string gguf_name;
  std::vector<int64_t> shape;  // outermost first
  DType type = DType::F32;
  uint64_t bytes = 0;
};
std::vector<PlannedTensor> plan_quantized_model(const ModelConfig& config, const std::string& type, bool pure = false);

}  // namespace journey::quant
