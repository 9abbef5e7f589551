#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace journey {

namespace {

// One row per type: the one place its name and size live.
struct TypeInfo {
  DType type;
  std::string_view name;     // ggml's type_name (ggml.c type_traits), used in GGUF tools and messages
  int64_t block_size;        // elements per block (1 for plain types)
  int64_t block_bytes;       // bytes per block (the element size for plain types)
};

constexpr TypeInfo kTypes[] = {
    {DType::F32, "f32", 1, 4},     {DType::F16, "f16", 1, 2},     {DType::BF16, "bf16", 1, 2},
    {DType::I8, "i8", 1, 1},       {DType::I32, "i32", 1, 4},     {DType::I64, "i64", 1, 8},
    {DType::U8, "u8", 1, 1},
    {DType::Q8_0, "q8_0", 32, 34}, {DType::Q4_0, "q4_0", 32, 18}, {DType::Q4_1, "q4_1", 32, 20},
    {DType::Q5_0, "q5_0", 32, 22}, {DType::Q5_1, "q5_1", 32, 24},
    {DType::Q2_K, "q2_K", 256, 84}, {DType::Q3_K, "q3_K", 256, 110}, {DType::Q4_K, "q4_K", 256, 144},
    {DType::Q5_K, "q5_K", 256, 176}, {DType::Q6_K, "q6_K", 256, 210},
};

const TypeInfo& info(DType t) {
  for (const TypeInfo& i : kTypes)
    if (i.type == t) return i;
  fail("unknown dtype #", int(t));
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const TypeInfo& i : kTypes) {
    if (i.name.size() != name.size()) continue;
    bool same = true;
    for (size_t k = 0; k < name.size(); ++k) same &= lower(i.name[k]) == lower(name[k]);
    if (same) return i.type;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  if (name == "I8") return DType::I8;
  if (name == "I32") return DType::I32;
  if (name == "I64") return DType::I64;
  if (name == "U8") return DType::U8;
  return std::nullopt;
}

std::string_view dtype_safetensors_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I8: return "I8";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    default: fail("dtype ", dtype_name(t), " has no safetensors name");
  }
}

int64_t dtype_block_size(DType t) { return info(t).block_size; }

int64_t dtype_block_bytes(DType t) { return info(t).block_bytes; }

int64_t dtype_bytes_for(DType t, int64_t n_elements) {
  const int64_t block = dtype_block_size(t);
  if (n_elements % block != 0)
    fail("dtype ", dtype_name(t), ": ", n_elements, " elements is not a multiple of the block size ", block);
  return n_elements / block * dtype_block_bytes(t);
}

bool dtype_is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

bool dtype_is_quantized(DType t) { return dtype_block_size(t) > 1; }

bool dtype_is_weight(DType t) { return dtype_is_float(t) || dtype_is_quantized(t); }

double dtype_bits_per_weight(DType t) { return 8.0 * double(dtype_block_bytes(t)) / double(dtype_block_size(t)); }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;  // +-0
    } else {      // subnormal: renormalize
      int e = -1;
      do { ++e; mantissa <<= 1; } while ((mantissa & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mantissa & 0x3ff) << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;  // inf / nan
  } else {
    bits = sign | (exponent + (127 - 15)) << 23 | mantissa << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  // Round-to-nearest-even conversion (same approach as numpy's npy_floatbits_to_halfbits).
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow to inf
  if (abs < 0x38800000u) {                                 // subnormal or zero
    if (abs < 0x33000000u) return uint16_t(sign);
    const uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return uint16_t(sign | half);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

void convert_to_f32(DType t, const void* src, int64_t n, float* dst) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, bytes + 2 * i, 2); dst[i] = f16_to_f32(h); }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) { uint16_t h; std::memcpy(&h, bytes + 2 * i, 2); dst[i] = bf16_to_f32(h); }
      return;
    case DType::I8:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(int8_t(bytes[i]));
      return;
    case DType::U8:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(bytes[i]);
      return;
    case DType::I32:
      for (int64_t i = 0; i < n; ++i) { int32_t v; std::memcpy(&v, bytes + 4 * i, 4); dst[i] = float(v); }
      return;
    case DType::I64:
      for (int64_t i = 0; i < n; ++i) { int64_t v; std::memcpy(&v, bytes + 8 * i, 8); dst[i] = float(v); }
      return;
    default:
      fail("convert_to_f32: ", dtype_name(t), " is a block type; dequantize it with quant::dequantize (quant/dequantize.h)");
  }
}

}  // namespace journey
