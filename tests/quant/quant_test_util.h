// Helpers for the quantization tests: paths into tests/data/quantized/, the crop fixtures (llama.cpp's
// blocks, the f32 source rows and gguf-py's dequantization of them; tools/quant/make_fixtures.py),
// and a scratch directory.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "assets/gguf.h"
#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/quantize_model.h"

namespace journey::test {

namespace fs = std::filesystem;

inline fs::path quant_data(const std::string& name) { return fs::path(JOURNEY_SOURCE_DIR) / "tests/data/quantized" / name; }

inline fs::path quant_scratch(const std::string& tag) {
  fs::path dir = fs::path(JOURNEY_BINARY_DIR) / "test-scratch" / "quant" / tag;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// How many weights of a loaded AWQ layer `t` ([out, in]) differ from AutoAWQ's unpacking `expected`
// by more than the one rounding the loader makes: as Q4_1 blocks (convert_awq_weights) the minimum
// -scale * zero is stored in f16, so a weight may move by half an f16 ulp of it (relative 2^-11);
// as f32 nothing may move. A wrong nibble, scale or zero moves a weight by a whole quantization step.
inline size_t awq_weights_beyond_rounding(const TensorRef& t, const std::vector<float>& expected) {
  const std::vector<float> got = t.to_f32();
  REQUIRE(got.size() == expected.size());
  const size_t in = size_t(t.shape.at(1)), blocks_per_row = in / quant::kQK;
  size_t beyond = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double bound = 0;
    if (t.dtype == DType::Q4_1) {
      const auto* blocks = reinterpret_cast<const quant::block_q4_1*>(t.data);
      bound = std::abs(f16_to_f32(blocks[i / in * blocks_per_row + i % in / quant::kQK].m)) * 0x1p-11 + 1e-7;
    } else {
      REQUIRE(t.dtype == DType::F32);
    }
    beyond += std::abs(double(got[i]) - expected[i]) > bound;
  }
  return beyond;
}

// The f32 values of an F32 tensor of a GGUF file.
inline std::vector<float> f32_values(const GgufFile& g, const std::string& name) {
  for (const auto& t : g.tensors())
    if (t.name == name) {
      REQUIRE(t.dtype == DType::F32);
      const auto* p = reinterpret_cast<const float*>(g.tensor_data(t));
      return std::vector<float>(p, p + t.nbytes / 4);
    }
  FAIL("no tensor " << name << " in " << g.path());
  return {};
}

inline const GgufTensorInfo& tensor_info(const GgufFile& g, const std::string& name) {
  for (const auto& t : g.tensors())
    if (t.name == name) return t;
  FAIL("no tensor " << name << " in " << g.path());
  throw;
}

inline quant::QuantizeOptions options(fs::path input, fs::path output, std::string type) {
  quant::QuantizeOptions o;
  o.input = std::move(input);
  o.output = std::move(output);
  o.type = std::move(type);
  return o;
}

// One crop fixture: which file, which llama.cpp file type, which block type its blk.0.ffn_gate has.
struct CropCase {
  std::string model;  // "kq" or "t105"
  std::string type;   // the llama.cpp file's type name: "q4_k", "q4_k_m", ...
};

inline std::vector<CropCase> crop_cases() {
  std::vector<CropCase> out;
  for (const char* t : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q3_k_m",
                        "q4_k_m", "q5_k_m"})
    out.push_back({"kq", t});
  for (const char* t : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) out.push_back({"t105", t});
  return out;
}

}  // namespace journey::test
