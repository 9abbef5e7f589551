// Element types that appear in model files. Weights are stored in many types on disk;
// the CPU reference path computes in f32, so every type knows how to widen itself to f32.
// The block types are GGML's (llama.cpp's GGUF files): a block of 32 or 256 weights stored as
// small integers plus one or two f16 scales. Their byte layouts are drawn in quant/blocks.h and
// they are (de)quantized by quant/dequantize.h and quant/quantize.h; this file only knows sizes.
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
  // GGML block types (elements per block, bytes per block, bits per weight):
  Q8_0,  // 32,  34 B, 8.5   f16 scale + 32 x int8
  Q4_0,  // 32,  18 B, 4.5   f16 scale + 32 x 4-bit (minus 8)
  Q4_1,  // 32,  20 B, 5.0   f16 scale + f16 minimum + 32 x 4-bit
  Q5_0,  // 32,  22 B, 5.5   f16 scale + 32 x 5-bit (minus 16): 4 low bits packed, 5th bits in a u32
  Q5_1,  // 32,  24 B, 6.0   f16 scale + f16 minimum + 32 x 5-bit
  Q2_K,  // 256, 84 B, 2.625 super-block: 16 groups of 16, 4-bit scale and min per group, 2-bit weights
  Q3_K,  // 256, 110 B, 3.4375 16 groups of 16, 6-bit signed scales, 3-bit weights (2 low bits + a high-bit mask)
  Q4_K,  // 256, 144 B, 4.5  8 groups of 32, 6-bit scale and min per group, 4-bit weights
  Q5_K,  // 256, 176 B, 5.5  8 groups of 32, 6-bit scale and min per group, 5-bit weights
  Q6_K,  // 256, 210 B, 6.5625 16 groups of 16, int8 scales, 6-bit weights (4 low bits + 2 high bits)
};

std::string_view dtype_name(DType t);                        // ggml's names: "f32", "bf16", "q8_0", "q4_K", ...
std::optional<DType> dtype_from_name(std::string_view name); // dtype_name's inverse, any letter case ("q4_k" -> Q4_K)
std::optional<DType> dtype_from_safetensors(std::string_view name);  // "F32" -> F32, ...
std::string_view dtype_safetensors_name(DType t);            // F32 -> "F32"
int64_t dtype_block_size(DType t);                           // elements per block (1 for plain types)
int64_t dtype_block_bytes(DType t);                          // bytes per block (element size for plain types)
int64_t dtype_bytes_for(DType t, int64_t n_elements);        // storage bytes for n elements (n % block == 0)
bool dtype_is_float(DType t);                                // F32/F16/BF16
bool dtype_is_quantized(DType t);                            // a GGML block type (Q8_0 ... Q6_K)
bool dtype_is_weight(DType t);                               // float or quantized: widens to f32 as a weight
double dtype_bits_per_weight(DType t);                       // 8 * bytes per block / elements per block

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);  // round to nearest even

// Widen n elements of a plain (one element per block) type t starting at src into dst (f32);
// I8/I32/I64/U8 are converted as integers. Block types throw: they dequantize through
// quant::dequantize (quant/dequantize.h), which calls this for the plain types.
void convert_to_f32(DType t, const void* src, int64_t n, float* dst);

}  // namespace journey
