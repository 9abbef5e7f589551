// Element types that appear in model files. Weights are stored in many types on disk;
// the CPU reference path computes in f32, so every type knows how to widen itself to f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace journey {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I8,
  I32,
  I64,
  U8,
  Q8_0,  // blocks of 32: f16 scale + 32 x int8        (llama.cpp GGML_TYPE_Q8_0, 34 bytes / block)
  Q4_0,  // blocks of 32: f16 scale + 16 bytes of nibbles (llama.cpp GGML_TYPE_Q4_0, 18 bytes / block)
};

std::string_view dtype_name(DType t);                        // "f32", "bf16", "q8_0", ...
std::optional<DType> dtype_from_safetensors(std::string_view name);  // "F32" -> F32, ...
std::string_view dtype_safetensors_name(DType t);            // F32 -> "F32"
int64_t dtype_block_size(DType t);                           // elements per block (1 for plain types)
int64_t dtype_block_bytes(DType t);                          // bytes per block (element size for plain types)
int64_t dtype_bytes_for(DType t, int64_t n_elements);        // storage bytes for n elements (n % block == 0)
bool dtype_is_float(DType t);                                // F32/F16/BF16

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);  // round to nearest even

// Widen n elements of type t starting at src into dst (f32). Quantized types dequantize.
// Throws journey::Error for types that are not numeric weights (I32/I64/U8 are converted as integers).
void convert_to_f32(DType t, const void* src, int64_t n, float* dst);

}  // namespace journey
