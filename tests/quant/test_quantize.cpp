// journey's quantizers against llama.cpp's: the f32 rows of blk.0.ffn_gate.weight quantized by
// journey must give the bytes llama-quantize wrote for the same rows (kq-TYPE.gguf was made with
// --pure, so the tensor is of that type; t105-TYPE.gguf with the default rules, same for this tensor).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "quant_test_util.h"

using namespace journey;
using namespace journey::quant;
using namespace journey::test;

namespace {

struct Comparison {
  int64_t blocks = 0, identical_blocks = 0;
  double relative_error = 0;  // ||deq(journey) - deq(llama.cpp)|| / ||deq(llama.cpp)||
};

Comparison compare(DType type, const std::vector<float>& source, const std::byte* llama_blocks) {
  const int64_t n = int64_t(source.size());
  std::vector<std::byte> ours(size_t(dtype_bytes_for(type, n)));
  quantize(type, source.data(), ours.data(), n);
  Comparison c;
  const int64_t block_bytes = dtype_block_bytes(type);
  c.blocks = n / dtype_block_size(type);
  for (int64_t b = 0; b < c.blocks; ++b)
    c.identical_blocks += std::memcmp(ours.data() + b * block_bytes, llama_blocks + b * block_bytes, size_t(block_bytes)) == 0;
  std::vector<float> a(source.size()), b(source.size());  // [n]
  dequantize(type, ours.data(), a.data(), n);
  dequantize(type, llama_blocks, b.data(), n);
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref2 += double(b[i]) * b[i];
  }
  c.relative_error = std::sqrt(diff2 / ref2);
  return c;
}

}  // namespace

TEST_CASE("journey's quantizers give llama.cpp's bytes on the crops of blk.0.ffn_gate.weight") {
  for (const CropCase& c : crop_cases()) {
    if (c.type.ends_with("_m")) continue;  // a mix: ffn_gate has the base type, already covered
    const GgufFile crops = GgufFile::open(quant_data("crops/" + c.model + "-crops.gguf"));
    const GgufTensorInfo& blocks = tensor_info(crops, c.type + ".blocks");
    const std::vector<float> source = f32_values(crops, "source");
    const Comparison r = compare(blocks.dtype, source, crops.tensor_data(blocks));
    INFO(c.model, "-", c.type, ": ", r.identical_blocks, " of ", r.blocks, " blocks identical, relative error ",
         r.relative_error);
    CHECK(r.identical_blocks == r.blocks);
  }
}

TEST_CASE("all-zero and constant blocks quantize to exact values") {
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                     DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    INFO(dtype_name(type));
    std::vector<float> zeros(256, 0.0f), back(256, 1.0f);
    std::vector<std::byte> bytes(size_t(dtype_bytes_for(type, 256)));
    quantize(type, zeros.data(), bytes.data(), 256);
    dequantize(type, bytes.data(), back.data(), 256);
    for (float v : back) CHECK(v == 0.0f);
  }
}

TEST_CASE("quantize then dequantize stays within each type's step size") {
  // A smooth ramp in [-1, 1]: every type must reproduce it within about half its quantization step.
  std::vector<float> ramp(512);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = std::sin(0.37f * float(i)) * (0.25f + float(i % 256) / 256.0f);
  struct Bound { DType type; double max_abs; };
  // About one quantization step of the block range (|x| <= 1.25 here), with slack for the K types'
  // quantized group scales. Q4_0/Q5_0 map the largest-magnitude weight to -8/-16, so weights of the
  // other sign clip at 7/8 (15/16) of it: their bound is amax/8 (amax/16).
  for (Bound b : {Bound{DType::Q8_0, 0.005}, Bound{DType::Q6_K, 0.03}, Bound{DType::Q5_0, 0.08}, Bound{DType::Q5_1, 0.04},
                  Bound{DType::Q5_K, 0.05}, Bound{DType::Q4_0, 0.16}, Bound{DType::Q4_1, 0.08}, Bound{DType::Q4_K, 0.1},
                  Bound{DType::Q3_K, 0.25}, Bound{DType::Q2_K, 0.4}}) {
    std::vector<std::byte> bytes(size_t(dtype_bytes_for(b.type, 512)));
    std::vector<float> back(512);
    quantize(b.type, ramp.data(), bytes.data(), 512);
    dequantize(b.type, bytes.data(), back.data(), 512);
    double worst = 0;
    for (size_t i = 0; i < ramp.size(); ++i) worst = std::max(worst, std::fabs(double(back[i]) - ramp[i]));
    INFO(dtype_name(b.type), ": max |x - deq(q(x))| = ", worst);
    CHECK(worst <= b.max_abs);
  }
}

TEST_CASE("quantize refuses counts that are not whole blocks") {
  std::vector<float> x(300, 1.0f);
  std::vector<std::byte> out(1024);
  CHECK_THROWS_WITH_AS(quantize(DType::Q6_K, x.data(), out.data(), 300), doctest::Contains("300 weights is not a multiple of the block size 256"), Error);
  CHECK_THROWS_WITH_AS(quantize(DType::I32, x.data(), out.data(), 4), doctest::Contains("not a weight type"), Error);
}
