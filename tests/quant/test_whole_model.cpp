// Whole quantized models through the reference forward: the logits of every quantized file stay close
// to those of the f32 model it was made from. t105 (a real trained model): journey's own quantization
// of t105-f32.gguf into each legacy type (byte-identical to llama.cpp's files, test_quantize_model)
// and llama.cpp's t105-q4_1.gguf itself. kq (random weights, K-friendly shapes): llama.cpp's Q2_K,
// Q3_K_M and Q4_K_M files against the f32 logits stored in kq-f32.logits.npy (journey's reference on
// kq-f32.gguf, which is too big to ship; tools/quant/make_fixtures.py).
//
// The error is measured against the spread of the f32 logits (their standard deviation over the
// vocabulary), so "0.05" reads "5 % of how much the logits vary". Tolerances are about twice what
// was measured (docs/quantization.md has the figures).
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "quant/quantize_model.h"
#include "quant_test_util.h"
#include "text/tokenizer.h"
#include "trace/npy.h"
#include "whole_model.h"

using namespace journey;
using namespace journey::test;

TEST_CASE("t105 in every legacy type: logits close to the f32 model's") {
  const fs::path dir = quant_scratch("t105-whole");
  const LoadedModel f32_model = load_model(quant_data("t105-f32.gguf"));
  const auto tokenizer = load_tokenizer(quant_data("t105-f32.gguf"));
  const std::vector<int32_t> tokens = to_int32(tokenizer->encode("Once upon a time, there was a little dog. He liked to run.", true));
  REQUIRE(tokens.size() > 40);
  const Logits f32 = reference_logits(f32_model, tokens);
  struct Case { const char* type; double max_relative_rms; double min_top1; };
  // measured (docs/quantization.md): q8_0 0.012, q5_1 0.095, q5_0 0.078, q4_1 0.21, q4_0 0.20 relative RMS;
  // top-1 agreement 0.97-1.0 over the 60 positions
  for (const Case& c : {Case{"q8_0", 0.02, 0.95}, Case{"q5_1", 0.15, 0.95}, Case{"q5_0", 0.12, 0.95},
                        Case{"q4_1", 0.32, 0.9}, Case{"q4_0", 0.3, 0.9}}) {
    const fs::path file = dir / cat("t105-", c.type, ".gguf");
    quant::quantize_model(options(quant_data("t105-f32.gguf"), file, c.type));
    const LogitsError e = compare_logits(reference_logits(load_model(file), tokens), f32);
    const std::string what = cat("t105 ", c.type, ": ", e.describe());
    INFO(what);
    CHECK(e.relative_rms < c.max_relative_rms);
    CHECK(e.top1_agreement >= c.min_top1);
    MESSAGE(what);
  }
  // llama.cpp's own file (Q4_1 + a Q8_0 output) gives the same logits as journey's copy of it, exactly
  const Logits llama = reference_logits(load_model(quant_data("t105-q4_1.gguf")), tokens);
  const Logits ours = reference_logits(load_model(dir / "t105-q4_1.gguf"), tokens);
  CHECK(llama.values == ours.values);
}

TEST_CASE("kq K-type files from llama.cpp (Q2_K, Q3_K_M, Q4_K_M): logits close to the f32 model's") {
  std::ifstream meta_in(quant_data("kq-f32.logits.json"));
  const nlohmann::json meta = nlohmann::json::parse(meta_in);
  const NpyArray f32_npy = read_npy(quant_data("kq-f32.logits.npy"));  // [T, 512]
  REQUIRE(f32_npy.shape.size() == 2);
  const Logits f32{f32_npy.shape[0], f32_npy.shape[1], f32_npy.f32};
  // Random weights give nearly flat logits, so top-1 agreement says little here; the relative RMS does.
  // Measured: Q4_K_M 0.18, Q3_K_M 0.24, Q2_K 0.85 (every matrix Q2_K, output too: 29 % error per weight).
  struct Case { const char* file; double max_relative_rms; };
  std::vector<double> errors;
  for (const Case& c : {Case{"kq-q4_k_m.gguf", 0.28}, Case{"kq-q3_k_m.gguf", 0.37}, Case{"kq-q2_k.gguf", 1.0}}) {
    const auto tokenizer = load_tokenizer(quant_data(c.file));
    const std::vector<int32_t> tokens = to_int32(tokenizer->encode(meta["prompt"].get<std::string>(), true));
    REQUIRE(int64_t(tokens.size()) == f32.rows);
    for (size_t i = 0; i < tokens.size(); ++i) CHECK(tokens[i] == meta["manifest_tokens"][i]["id"].get<int>());
    const LogitsError e = compare_logits(reference_logits(load_model(quant_data(c.file)), tokens), f32);
    const std::string what = cat(c.file, ": ", e.describe());
    INFO(what);
    CHECK(e.relative_rms < c.max_relative_rms);
    MESSAGE(what);
    errors.push_back(e.relative_rms);
  }
  CHECK(errors[0] < errors[1]);  // fewer bits, more error
  CHECK(errors[1] < errors[2]);
}
