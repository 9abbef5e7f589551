#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "assets/llama2c.h"
#include "core/error.h"
#include "test_util.h"

using namespace journey;
using namespace journey::test;

namespace {
const fs::path kV0 = data_path("tests/data/models/stories260K/stories260K.bin");
const fs::path kV2 = data_path("tests/data/models/stories260K/stories260K_q80.bin");

// The float at index `i` of the raw v0 file after the 28-byte header (independent of the reader).
float raw_float(const std::vector<char>& bytes, size_t i) {
  float v;
  std::memcpy(&v, bytes.data() + 28 + 4 * i, 4);
  return v;
}
}  // namespace

TEST_CASE("llama2c v0: stories260K header and tensors as PROVENANCE.md describes them") {
  const Llama2cCheckpoint ck = read_llama2c(kV0);
  const ModelConfig& c = ck.config;
  CHECK(ck.version == 0);
  CHECK(c.hidden_size == 64);
  CHECK(c.intermediate_size == 172);
  CHECK(c.num_layers == 5);
  CHECK(c.num_heads == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.vocab_size == 512);
  CHECK(c.max_position_embeddings == 512);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rope_layout == RopeLayout::Interleaved);
  CHECK(ck.weights.all().size() == 1 + 5 * 9 + 1);
  CHECK_FALSE(ck.weights.has("lm_head.weight"));

  // Spot-check positions computed from the documented order: tok_emb [512*64], rms_att [5*64],
  // wq [5*64*64], wk [5*32*64], wv [5*32*64], wo [5*64*64], rms_ffn [5*64], w1 [5*172*64], w2, w3, rms_final.
  const auto raw = read_bytes(kV0);
  const size_t emb = 512 * 64, att = 5 * 64, wq = 5 * 64 * 64, wk = 5 * 32 * 64, ffn = 5 * 172 * 64;
  CHECK(ck.weights.get("model.embed_tokens.weight").to_f32()[777] == raw_float(raw, 777));
  CHECK(ck.weights.get("model.layers.1.input_layernorm.weight").to_f32()[3] == raw_float(raw, emb + 64 + 3));
  CHECK(ck.weights.get("model.layers.2.self_attn.q_proj.weight").to_f32()[100] == raw_float(raw, emb + att + 2 * 64 * 64 + 100));
  CHECK(ck.weights.get("model.layers.4.self_attn.v_proj.weight").to_f32()[5] == raw_float(raw, emb + att + wq + wk + 4 * 32 * 64 + 5));
  const size_t rms_ffn = emb + att + wq + 2 * wk + wq;
  CHECK(ck.weights.get("model.layers.0.post_attention_layernorm.weight").to_f32()[0] == raw_float(raw, rms_ffn));
  CHECK(ck.weights.get("model.layers.3.mlp.down_proj.weight").to_f32()[9] == raw_float(raw, rms_ffn + att + ffn + 3 * 172 * 64 + 9));
  CHECK(ck.weights.get("model.norm.weight").to_f32()[63] == raw_float(raw, rms_ffn + att + 3 * ffn + 63));
}

TEST_CASE("llama2c v2 (int8) matches v0 within half a quantization step") {
  const Llama2cCheckpoint v0 = read_llama2c(kV0);
  const Llama2cCheckpoint v2 = read_llama2c(kV2);
  CHECK(v2.version == 2);
  CHECK(v2.group_size == 32);
  REQUIRE(v2.weights.all().size() == v0.weights.all().size());
  for (const auto& [name, t0] : v0.weights.all()) {
    INFO(name);
    const auto a = t0.to_f32();
    const auto b = v2.weights.get(name).to_f32();
    REQUIRE(a.size() == b.size());
    if (t0.shape.size() == 1) {  // norms are stored in float32 in both
      CHECK(a == b);
      continue;
    }
    // export.py: scale = max|w| / 127 per group of 32; rounding error is at most half a step.
    size_t violations = 0;
    for (size_t g = 0; g < a.size() / 32; ++g) {
      float max_abs = 0;
      for (size_t i = g * 32; i < g * 32 + 32; ++i) max_abs = std::max(max_abs, std::abs(a[i]));
      const float half_step = max_abs / 127.0f / 2.0f;
      for (size_t i = g * 32; i < g * 32 + 32; ++i)
        if (std::abs(a[i] - b[i]) > half_step * 1.001f + 1e-7f) ++violations;
    }
    CHECK(violations == 0);
  }
}

TEST_CASE("llama2c: damaged checkpoints name expected vs found") {
  const fs::path dir = scratch_dir("llama2c-damaged");
  const auto v0 = read_bytes(kV0);
  write_bytes(dir / "cut.bin", std::vector<char>(v0.begin(), v0.end() - 4));
  std::string e = error_of([&] { read_llama2c(dir / "cut.bin"); });
  CHECK(e.find("cut.bin") != std::string::npos);
  CHECK(e.find("implies 1056540 bytes but the file has 1056536 bytes") != std::string::npos);

  auto bad_heads = v0;
  put<int32_t>(bad_heads, 12, 7);  // n_heads 7 does not divide dim 64
  write_bytes(dir / "heads.bin", bad_heads);
  CHECK(error_of([&] { read_llama2c(dir / "heads.bin"); }).find("header field n_heads 7") != std::string::npos);

  const auto v2 = read_bytes(kV2);
  write_bytes(dir / "cut2.bin", std::vector<char>(v2.begin(), v2.end() - 100));
  e = error_of([&] { read_llama2c(dir / "cut2.bin"); });
  CHECK(e.find("version 2 header") != std::string::npos);
  CHECK(e.find("implies 294816 bytes but the file has 294716 bytes") != std::string::npos);

  auto v3 = v2;
  put<int32_t>(v3, 4, 3);
  write_bytes(dir / "v3.bin", v3);
  CHECK(error_of([&] { read_llama2c(dir / "v3.bin"); }).find("version 3 is unsupported") != std::string::npos);

  write_bytes(dir / "short.bin", std::vector<char>(10, 1));
  CHECK(error_of([&] { read_llama2c(dir / "short.bin"); }).find("too short for the 28-byte header") != std::string::npos);
  CHECK_FALSE(is_llama2c_file(dir / "cut.bin"));
  CHECK(is_llama2c_file(kV0));
  CHECK(is_llama2c_file(kV2));
}
