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

TEST_CASE("q8_0 and q4_0 dequantize with llama.cpp's layout") {
  unsigned char q8[34] = {};
  const uint16_t half_scale = f32_to_f16(0.5f);
  std::memcpy(q8, &half_scale, 2);
  for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<unsigned char>(int8_t(i - 16));
  float out[32];
  convert_to_f32(DType::Q8_0, q8, 32, out);
  CHECK(out[0] == -8.0f);
  CHECK(out[31] == 7.5f);

  unsigned char q4[18] = {};
  std::memcpy(q4, &half_scale, 2);
  q4[2] = 0x9F;  // element 0: low nibble 15 -> (15-8)*0.5 = 3.5 ; element 16: high nibble 9 -> 0.5
  convert_to_f32(DType::Q4_0, q4, 32, out);
  CHECK(out[0] == 3.5f);
  CHECK(out[16] == 0.5f);
  CHECK(out[1] == -4.0f);  // nibble 0 -> -8 * 0.5
}

TEST_CASE("sizes and names") {
  CHECK(dtype_bytes_for(DType::BF16, 10) == 20);
  CHECK(dtype_bytes_for(DType::Q8_0, 64) == 68);
  CHECK_THROWS_AS(dtype_bytes_for(DType::Q4_0, 33), Error);
  CHECK(dtype_from_safetensors("BF16") == DType::BF16);
  CHECK_FALSE(dtype_from_safetensors("F8_E4M3").has_value());
}
