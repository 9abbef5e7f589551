// Every block type's dequantizer against values dequantized by llama.cpp's Python package gguf-py
// (an independent implementation, in NumPy) from files quantized by llama.cpp's own quantizer:
// blk.0.ffn_gate.weight of kq-TYPE.gguf (every legacy and K type, and the Q3_K_M/Q4_K_M/Q5_K_M mixes)
// and t105-TYPE.gguf (a real trained model, legacy types). The expected difference is zero: both
// sides compute each weight with the same float operations in the same order ((d*scale)*q - dmin*m),
// so any difference at all is a bug in the layout, not rounding.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/dequantize.h"
#include "quant_test_util.h"

using namespace journey;
using namespace journey::quant;
using namespace journey::test;

TEST_CASE("every block type dequantizes exactly as gguf-py does (llama.cpp files, blk.0.ffn_gate.weight)") {
  for (const CropCase& c : crop_cases()) {
    const GgufFile crops = GgufFile::open(quant_data("crops/" + c.model + "-crops.gguf"));
    const GgufTensorInfo& blocks = tensor_info(crops, c.type + ".blocks");
    const std::vector<float> expected = f32_values(crops, c.type + ".gguf_py");  // [rows, cols]
    std::vector<float> got(expected.size());                                     // [rows, cols]
    dequantize(blocks.dtype, crops.tensor_data(blocks), got.data(), int64_t(got.size()));
    size_t differ = 0, first = got.size();
    double max_error = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(double(got[i]) - double(expected[i]));
      if (got[i] != expected[i]) {
        ++differ;
        if (first == got.size()) first = i;
      }
      max_error = std::max(max_error, e);
    }
    INFO(c.model, "-", c.type, ".gguf blk.0.ffn_gate.weight (", dtype_name(blocks.dtype), ", ", got.size(),
         " weights): ", differ, " differ, max |journey - gguf-py| = ", max_error);
    if (first < got.size()) INFO("first difference at weight ", first, ": journey ", got[first], " gguf-py ", expected[first]);
    CHECK(differ == 0);
  }
}

TEST_CASE("the crops hold the block types their files are named for") {
  const GgufFile kq = GgufFile::open(quant_data("crops/kq-crops.gguf"));
  CHECK(tensor_info(kq, "q2_k.blocks").dtype == DType::Q2_K);
  CHECK(tensor_info(kq, "q3_k.blocks").dtype == DType::Q3_K);
  CHECK(tensor_info(kq, "q4_k.blocks").dtype == DType::Q4_K);
  CHECK(tensor_info(kq, "q5_k.blocks").dtype == DType::Q5_K);
  CHECK(tensor_info(kq, "q6_k.blocks").dtype == DType::Q6_K);
  CHECK(tensor_info(kq, "q4_1.blocks").dtype == DType::Q4_1);
  CHECK(tensor_info(kq, "q5_0.blocks").dtype == DType::Q5_0);
  CHECK(tensor_info(kq, "q5_1.blocks").dtype == DType::Q5_1);
  CHECK(tensor_info(kq, "q3_k_m.blocks").dtype == DType::Q3_K);  // ffn_gate keeps the mix's base type
  const GgufFile t105 = GgufFile::open(quant_data("crops/t105-crops.gguf"));
  CHECK(tensor_info(t105, "q8_0.blocks").dtype == DType::Q8_0);
  CHECK(tensor_info(t105, "source").shape == std::vector<int64_t>{64, 128});
}

TEST_CASE("hand-made legacy blocks: element order and offsets") {
  float out[32];
  block_q8_0 q8{};
  q8.d = f32_to_f16(0.5f);
  for (int i = 0; i < 32; ++i) q8.qs[i] = int8_t(i - 16);
  dequantize_row_q8_0(&q8, out, 32);
  CHECK(out[0] == -8.0f);
  CHECK(out[31] == 7.5f);

  block_q4_0 q4{};
  q4.d = f32_to_f16(0.5f);
  q4.qs[0] = 0x9F;  // weight 0: low nibble 15 -> (15-8)*0.5 = 3.5 ; weight 16: high nibble 9 -> 0.5
  dequantize_row_q4_0(&q4, out, 32);
  CHECK(out[0] == 3.5f);
  CHECK(out[16] == 0.5f);
  CHECK(out[1] == -4.0f);  // nibble 0 -> -8 * 0.5

  block_q5_1 q5{};
  q5.d = f32_to_f16(1.0f);
  q5.m = f32_to_f16(-2.0f);
  q5.qs[3] = 0x21;                          // weight 3: low 1, weight 19: high 2
  const uint32_t high = 1u << 3 | 1u << 19;  // both get their 5th bit
  std::memcpy(q5.qh, &high, 4);
  dequantize_row_q5_1(&q5, out, 32);
  CHECK(out[3] == 17.0f - 2.0f);
  CHECK(out[19] == 18.0f - 2.0f);
  CHECK(out[4] == -2.0f);
}

TEST_CASE("hand-made K blocks: the 6-bit scale/min packing and the high bits") {
  block_q4_k q4{};
  q4.d = f32_to_f16(1.0f);
  q4.dmin = f32_to_f16(1.0f);
  // group 5: scale 0b110111 = 55, min 0b101010 = 42 -> scale low 4 bits in scales[9] lo, high 2 in scales[1] >> 6
  q4.scales[9] = uint8_t((55 & 0xF) | (42 & 0xF) << 4);
  q4.scales[1] = uint8_t((55 >> 4) << 6);
  q4.scales[5] = uint8_t((42 >> 4) << 6);
  uint8_t sc, m;
  scale_min_k4(5, q4.scales, &sc, &m);
  CHECK(sc == 55);
  CHECK(m == 42);
  // weight 32*5 + 3 = 163 sits in chunk 2 (weights 128..191), second half: high nibble of qs[64 + 3]
  q4.qs[64 + 3] = 0x70;
  float out[256];
  dequantize_row_q4_k(&q4, out, 256);
  CHECK(out[163] == 55.0f * 7 - 42.0f);
  CHECK(out[131] == 0.0f);  // group 4 has scale 0 and min 0

  block_q6_k q6{};
  q6.d = f32_to_f16(0.25f);
  q6.scales[14] = 3;  // group 14 = weights 224..239
  // weight 230 = half 1, quarter 3 (96..127 of the half), l = 6: high nibble of ql[64 + 32 + 6], qh[32 + 6] bits 6-7
  q6.ql[64 + 38] = 0xA0;
  q6.qh[32 + 6] = 0x80;  // high 2 bits = 2
  dequantize_row_q6_k(&q6, out, 256);
  CHECK(out[230] == 0.25f * 3 * float((0xA | 2 << 4) - 32));
}

TEST_CASE("a weight count that is not whole blocks is refused with the numbers") {
  block_q4_k block{};
  float out[300];
  CHECK_THROWS_WITH_AS(dequantize(DType::Q4_K, &block, out, 300), doctest::Contains("300 weights is not a multiple of the block size 256"), Error);
  CHECK_THROWS_WITH_AS(dequantize(DType::Q5_0, &block, out, 40), doctest::Contains("q5_0"), Error);
}
