#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

using namespace journey;

TEST_CASE("f16 round trip of exactly representable values") {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f /* min normal */, 5.960464477539063e-08f /* min subnormal */}) {
    CHECK(f16_to_f32(f32_to_f16(v)) == v);
  }
  CHECK(f32_to_f16(1.0f) == 0x3c00);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
  CHECK(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  CHECK(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("f16 rounds to nearest even") {
  // 1 + 2^-11 is exactly halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
}

TEST_CASE("bf16 conversion keeps the top 16 bits with rounding") {
  CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  const float x = 1.00390625f;  // 1 + 2^-8: halfway between bf16 1.0 and 1.0078125 -> even (1.0)
  CHECK(bf16_to_f32(f32_to_bf16(x)) == 1.0f);
  CHECK(bf16_to_f32(f32_to_bf16(3.14159f)) == doctest::Approx(3.140625f));
}

TEST_CASE("block types are dequantized by quant::dequantize, not by convert_to_f32") {
  unsigned char q8[34] = {};
  float out[32];
  CHECK_THROWS_WITH_AS(convert_to_f32(DType::Q8_0, q8, 32, out), doctest::Contains("quant::dequantize"), Error);
}

TEST_CASE("sizes and names") {
  CHECK(dtype_bytes_for(DType::BF16, 10) == 20);
  CHECK(dtype_bytes_for(DType::Q8_0, 64) == 68);
  CHECK_THROWS_AS(dtype_bytes_for(DType::Q4_0, 33), Error);
  CHECK(dtype_from_safetensors("BF16") == DType::BF16);
  CHECK_FALSE(dtype_from_safetensors("F8_E4M3").has_value());
  // ggml's names and sizes (ggml.c type_traits): K types end in a capital K.
  CHECK(dtype_name(DType::Q4_K) == "q4_K");
  CHECK(dtype_from_name("Q4_K") == DType::Q4_K);
  CHECK(dtype_from_name("q5_1") == DType::Q5_1);
  CHECK_FALSE(dtype_from_name("q4_k_m").has_value());
  CHECK(dtype_bytes_for(DType::Q6_K, 512) == 420);
  CHECK(dtype_bits_per_weight(DType::Q4_K) == 4.5);
  CHECK(dtype_bits_per_weight(DType::Q3_K) == 3.4375);
  CHECK(dtype_is_weight(DType::Q2_K));
  CHECK_FALSE(dtype_is_weight(DType::I32));
  CHECK_THROWS_WITH_AS(dtype_bytes_for(DType::Q4_K, 384), doctest::Contains("not a multiple of the block size 256"), Error);
}
