#include <doctest/doctest.h>

#include <numeric>

#include "assets/convert.h"
#include "assets/hf_config.h"
#include "assets/llama2c.h"
#include "assets/safetensors.h"
#include "core/error.h"
#include "test_util.h"

using namespace journey;
using namespace journey::test;

namespace {
const fs::path kV0 = data_path("tests/data/models/stories260K/stories260K.bin");
const fs::path kTokModel = data_path("tests/data/models/stories260K/tok512.model");

// Row r of a [rows, 1] matrix holds r, so a permutation shows up as the list of source rows.
std::vector<float> iota_rows(int64_t rows) {
  std::vector<float> v(static_cast<size_t>(rows));  // [rows, 1]
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}
}  // namespace

TEST_CASE("RoPE permutation follows HF's view(n_heads, D/2, 2, in).transpose(1, 2)") {
  // Written out by hand from the PyTorch expression for 2 heads of head_dim 4: within a head the
  // even rows (0, 2) come first, then the odd rows (1, 3).
  CHECK(permute_interleaved_to_half_split(iota_rows(8), 2, 8, 1) == std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7});
  // head_dim 8: rows 0 2 4 6 then 1 3 5 7.
  CHECK(permute_interleaved_to_half_split(iota_rows(8), 1, 8, 1) == std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7});
  // Round trip on a wider matrix with several columns.
  std::vector<float> w(64 * 5);  // [64, 5]
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i) * 0.5f - 3.0f;
  const auto there = permute_interleaved_to_half_split(w, 8, 64, 5);
  CHECK(there != w);
  CHECK(permute_half_split_to_interleaved(there, 8, 64, 5) == w);
  CHECK(error_of([&] { permute_interleaved_to_half_split(w, 3, 64, 5); }).find("cannot be 3 heads") != std::string::npos);
}

TEST_CASE("convert llama2c: every tensor equals the original after undoing the permutation") {
  const fs::path dir = scratch_dir("convert-f32");
  ConvertLlama2cOptions opt;
  opt.checkpoint = kV0;
  opt.tokenizer_model = kTokModel;
  opt.out_dir = dir;
  convert_llama2c_to_hf(opt);

  const Llama2cCheckpoint original = read_llama2c(kV0);
  WeightStore converted;
  read_safetensors(dir / "model.safetensors", converted);
  REQUIRE(converted.all().size() == original.weights.all().size());
  for (const auto& [name, t] : original.weights.all()) {
    INFO(name);
    const TensorRef& c = converted.get(name);
    CHECK(c.dtype == DType::F32);
    CHECK(c.shape == t.shape);
    auto values = c.to_f32();
    if (name.find("q_proj") != std::string::npos) values = permute_half_split_to_interleaved(values, 8, 64, 64);
    if (name.find("k_proj") != std::string::npos) {
      CHECK(values != t.to_f32());  // the permutation really changed k
      values = permute_half_split_to_interleaved(values, 4, 32, 64);
    }
    CHECK(values == t.to_f32());
  }

  const ModelConfig c = read_hf_config(dir / "config.json");
  CHECK(c.architecture == "llama");
  CHECK(c.hidden_size == 64);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.max_position_embeddings == 512);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_layout == RopeLayout::HalfSplit);
  const auto config_json = read_json_file(dir / "config.json");
  CHECK(config_json["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
  CHECK(config_json["torch_dtype"] == "float32");
  const auto tok = read_json_file(dir / "tokenizer_config.json");
  CHECK(tok["bos_token"] == "<s>");
  CHECK(tok["add_bos_token"] == true);
  CHECK(tok["add_eos_token"] == false);
  CHECK_FALSE(tok.contains("chat_template"));
  CHECK(read_bytes(dir / "tokenizer.model") == read_bytes(kTokModel));
  const GenerationConfig g = read_generation_config(dir / "generation_config.json");
  CHECK(g.eos_token_ids == std::vector<int>{2, 1});  // run.c stops on BOS too (llama2c_generation_config)

  // The shipped default model is exactly this conversion (guards data/stories260K against drift).
  CHECK(read_bytes(dir / "model.safetensors") == read_bytes(data_path("data/stories260K/model.safetensors")));
  CHECK(read_bytes(dir / "config.json") == read_bytes(data_path("data/stories260K/config.json")));
  CHECK(read_bytes(dir / "generation_config.json") == read_bytes(data_path("data/stories260K/generation_config.json")));
}

TEST_CASE("convert llama2c: f16 and bf16 copies widen back within their rounding") {
  const Llama2cCheckpoint original = read_llama2c(kV0);
  for (DType dt : {DType::F16, DType::BF16}) {
    const fs::path dir = scratch_dir(cat("convert-", dtype_name(dt)));
    ConvertLlama2cOptions opt;
    opt.checkpoint = kV0;
    opt.out_dir = dir;
    opt.dtype = dt;
    convert_llama2c_to_hf(opt);
    CHECK_FALSE(fs::exists(dir / "tokenizer.model"));
    CHECK(read_json_file(dir / "config.json")["torch_dtype"] == (dt == DType::F16 ? "float16" : "bfloat16"));
    WeightStore converted;
    read_safetensors(dir / "model.safetensors", converted);
    // Relative rounding error of round-to-nearest: 2^-11 for f16 (normal range), 2^-8 for bf16.
    const float rel = dt == DType::F16 ? 1.0f / 2048 : 1.0f / 256;
    for (const auto& [name, t] : original.weights.all()) {
      INFO(name << " " << dtype_name(dt));
      const TensorRef& c = converted.get(name);
      CHECK(c.dtype == dt);
      auto values = c.to_f32();
      if (name.find("q_proj") != std::string::npos) values = permute_half_split_to_interleaved(values, 8, 64, 64);
      if (name.find("k_proj") != std::string::npos) values = permute_half_split_to_interleaved(values, 4, 32, 64);
      const auto ref = t.to_f32();
      size_t bad = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        if (std::abs(values[i] - ref[i]) > std::abs(ref[i]) * rel + 6e-8f) ++bad;  // 6e-8: f16 subnormal spacing / 2
      CHECK(bad == 0);
    }
  }
}
