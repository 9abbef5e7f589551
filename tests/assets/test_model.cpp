#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "assets/hf_config.h"
#include "assets/inspect.h"
#include "assets/model.h"
#include "core/model_weights.h"
#include "assets/safetensors.h"
#include "core/error.h"
#include "test_util.h"

using namespace journey;
using namespace journey::test;
using nlohmann::json;

namespace {
const fs::path kShipped = data_path("data/stories260K");

// Published config.json values of Qwen/Qwen2.5-0.5B-Instruct and Qwen/Qwen3-0.6B (Hugging Face).
json qwen25_config() {
  return json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}
json qwen3_config() {
  return json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

std::string config_error(const json& j) { return error_of([&] { parse_hf_config(j, "config.json"); }); }

// A copy of the shipped model in a scratch dir, to damage.
fs::path copy_shipped(const std::string& tag) {
  const fs::path dir = scratch_dir(tag);
  for (const auto& e : fs::directory_iterator(kShipped))
    if (e.path().extension() != ".py" && e.path().filename() != "PROVENANCE.md") fs::copy_file(e.path(), dir / e.path().filename());
  for (const auto& e : fs::directory_iterator(dir)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  return dir;
}
}  // namespace

TEST_CASE("hf config: qwen2 and qwen3 map to biases, q/k norm and explicit head_dim") {
  std::vector<std::string> notes;
  const ModelConfig q2 = parse_hf_config(qwen25_config(), "qwen2.5", &notes);
  CHECK(q2.attention_bias);
  CHECK_FALSE(q2.qk_norm);
  CHECK(q2.head_dim == 64);
  CHECK(q2.num_kv_heads == 2);
  CHECK(q2.rope_theta == 1e6);
  CHECK(q2.tie_word_embeddings);
  CHECK(q2.eos_token_ids == std::vector<int>{151645});
  CHECK(notes.empty());  // use_sliding_window false: nothing ignored

  const ModelConfig q3 = parse_hf_config(qwen3_config(), "qwen3");
  CHECK(q3.qk_norm);
  CHECK_FALSE(q3.attention_bias);
  CHECK(q3.head_dim == 128);  // explicit, not 1024 / 16 = 64
  CHECK(q3.q_dim() == 2048);
  CHECK(q3.rope_layout == RopeLayout::HalfSplit);

  const auto expected = model_weights(q3);
  auto find = [&](const std::string& n) {
    for (const auto& e : expected) if (e.name == n) return e;
    FAIL("no expected tensor " << n);
    return WeightSpec{};
  };
  CHECK(find("model.layers.27.self_attn.q_proj.weight").shape == std::vector<int64_t>{2048, 1024});
  CHECK(find("model.layers.0.self_attn.o_proj.weight").shape == std::vector<int64_t>{1024, 2048});
  CHECK(find("model.layers.0.self_attn.k_norm.weight").shape == std::vector<int64_t>{128});
  CHECK(find("lm_head.weight").optional);
  const auto e2 = model_weights(q2);
  CHECK(std::any_of(e2.begin(), e2.end(), [](const WeightSpec& e) { return e.name == "model.layers.3.self_attn.v_proj.bias" && e.shape == std::vector<int64_t>{128}; }));

  json mistral = qwen25_config();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4096;
  mistral.erase("use_sliding_window");
  notes.clear();
  const ModelConfig m = parse_hf_config(mistral, "mistral", &notes);
  CHECK_FALSE(m.attention_bias);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("sliding_window 4096 is ignored") != std::string::npos);
}

TEST_CASE("hf config: bad configs are named precisely") {
  json c = qwen25_config();
  c["model_type"] = "gpt_neox";
  CHECK(config_error(c).find("unknown architecture model_type \"gpt_neox\" (journey supports: llama, mistral, qwen2, qwen3)") != std::string::npos);
  c = qwen25_config();
  c.erase("hidden_size");
  CHECK(config_error(c).find("required field \"hidden_size\" is missing") != std::string::npos);
  c = qwen25_config();
  c["num_hidden_layers"] = "24";
  CHECK(config_error(c).find("field \"num_hidden_layers\" must be an integer, found string \"24\"") != std::string::npos);
  c = qwen25_config();
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  CHECK(config_error(c).find("rope_scaling {\"factor\":4.0,\"type\":\"yarn\"} is unsupported") != std::string::npos);
  c = qwen25_config();
  c["num_key_value_heads"] = 3;
  CHECK(config_error(c).find("num_attention_heads 14 is not a multiple of num_key_value_heads 3") != std::string::npos);
  c = qwen25_config();
  c["hidden_act"] = "gelu";
  CHECK(config_error(c).find("hidden_act \"gelu\" is unsupported") != std::string::npos);
  CHECK(config_error(json::array()).find("expected a JSON object") != std::string::npos);

  const GenerationConfig g = parse_generation_config(json::parse(R"({"eos_token_id": [151645, 151643], "top_k": 20, "temperature": 0.7, "do_sample": true})"), "gen");
  CHECK(g.eos_token_ids == std::vector<int>{151645, 151643});
  CHECK(g.top_k == 20);
  CHECK(g.temperature == 0.7);
  CHECK(g.do_sample == true);
  CHECK(error_of([] { parse_generation_config(json::parse(R"({"eos_token_id": "2"})"), "gen"); }).find("must be an integer or a list of integers") != std::string::npos);
}

TEST_CASE("load_model: the shipped default model, its llama2.c source and the GGUF") {
  const LoadedModel hf = load_model(kShipped);
  CHECK(hf.format == ModelFormat::HuggingFace);
  CHECK(hf.config.rope_layout == RopeLayout::HalfSplit);
  CHECK(hf.config.num_layers == 5);
  // BOS (1) ends a llama2.c story as in run.c (llama2c_generation_config); the config keeps EOS only.
  CHECK(hf.generation.eos_token_ids == std::vector<int>{2, 1});
  CHECK(hf.config.eos_token_ids == std::vector<int>{2});
  std::map<std::string, std::string> roles;
  for (const auto& f : hf.files) roles[f.path.filename().string()] = f.role;
  CHECK(roles["model.safetensors"] == "weights");
  CHECK(roles["config.json"] == "config");
  CHECK(roles["tokenizer.model"] == "tokenizer");
  CHECK(roles["generation_config.json"] == "generation config");

  const LoadedModel bin = load_model(data_path("tests/data/models/stories260K/stories260K.bin"));
  CHECK(bin.format == ModelFormat::Llama2c);
  CHECK(bin.config.rope_layout == RopeLayout::Interleaved);
  CHECK(bin.generation.eos_token_ids == hf.generation.eos_token_ids);  // the same model, the same end ids
  CHECK(bin.weights.all().size() == hf.weights.all().size());
  CHECK(bin.weights.get("model.layers.0.mlp.up_proj.weight").to_f32() == hf.weights.get("model.layers.0.mlp.up_proj.weight").to_f32());

  const LoadedModel q80 = load_model(data_path("tests/data/models/stories260K/stories260K_q80.bin"));
  CHECK(q80.format == ModelFormat::Llama2c);

  const LoadedModel gguf = load_model(data_path("tests/data/models/gguf-tiny-random/llama-2-tiny-random.gguf"));
  CHECK(gguf.format == ModelFormat::Gguf);
  CHECK(gguf.config.rope_layout == RopeLayout::Interleaved);
  CHECK(gguf.weights.get("model.layers.0.self_attn.k_proj.weight").dtype == DType::F16);

  const LoadedModel meta = load_model_metadata(kShipped);
  CHECK(meta.weights.all().empty());
  CHECK(meta.config.vocab_size == 512);
}

TEST_CASE("load_model: damaged directories fail naming the tensor, the shapes or the files looked for") {
  {
    const fs::path dir = scratch_dir("model-empty");
    write_text(dir / "README.md", "nothing here");
    CHECK(error_of([&] { load_model(dir); }) == cat("no weights found in ", dir.string(), " (looked for model.safetensors, model.safetensors.index.json, *.gguf)"));
  }
  {
    // Remove one tensor from the index of a sharded copy.
    const fs::path dir = copy_shipped("model-missing");
    WeightStore w;
    read_safetensors(dir / "model.safetensors", w);
    std::vector<TensorRef> all;
    json weight_map;
    for (const auto& [name, t] : w.all()) {
      all.push_back(t);
      if (name != "model.layers.3.mlp.up_proj.weight") weight_map[name] = "model-00001-of-00001.safetensors";
    }
    write_safetensors(dir / "model-00001-of-00001.safetensors", all);
    write_text(dir / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
    fs::remove(dir / "model.safetensors");
    const std::string e = error_of([&] { load_model(dir); });
    CHECK(e.find("missing tensor model.layers.3.mlp.up_proj.weight (expected shape [172, 64]") != std::string::npos);
  }
  {
    // Rewrite one tensor with a wrong shape (same bytes, so only the validation can catch it).
    const fs::path dir = copy_shipped("model-misshapen");
    WeightStore w;
    read_safetensors(dir / "model.safetensors", w);
    std::vector<TensorRef> all;
    for (const auto& [name, t] : w.all()) {
      all.push_back(t);
      if (name == "model.layers.1.self_attn.k_proj.weight") all.back().shape = {64, 32};
    }
    write_safetensors(dir / "rewritten.safetensors", all);
    fs::rename(dir / "rewritten.safetensors", dir / "model.safetensors");
    const std::string e = error_of([&] { load_model(dir); });
    CHECK(e.find("tensor model.layers.1.self_attn.k_proj.weight has shape [64, 32], expected [32, 64]") != std::string::npos);
  }
  {
    // An integer tensor where a weight belongs.
    const fs::path dir = copy_shipped("model-dtype");
    WeightStore w;
    read_safetensors(dir / "model.safetensors", w);
    std::vector<TensorRef> all;
    for (const auto& [name, t] : w.all()) {
      all.push_back(t);
      if (name == "model.norm.weight") all.back().dtype = DType::I32;
    }
    write_safetensors(dir / "rewritten.safetensors", all);
    fs::rename(dir / "rewritten.safetensors", dir / "model.safetensors");
    CHECK(error_of([&] { load_model(dir); }).find("tensor model.norm.weight has dtype i32, expected a float type") != std::string::npos);
  }
  {
    const fs::path dir = copy_shipped("model-arch");
    json config = read_json_file(dir / "config.json");
    config["model_type"] = "falcon";
    write_text(dir / "config.json", config.dump());
    const std::string e = error_of([&] { load_model(dir); });
    CHECK(e.find("config.json: unknown architecture model_type \"falcon\"") != std::string::npos);
  }
  {
    const fs::path dir = copy_shipped("model-untied");
    json config = read_json_file(dir / "config.json");
    config["tie_word_embeddings"] = false;
    write_text(dir / "config.json", config.dump());
    CHECK(error_of([&] { load_model(dir); }).find("missing tensor lm_head.weight") != std::string::npos);
  }
  CHECK(error_of([] { load_model("/nonexistent/model"); }).find("does not exist") != std::string::npos);
}

TEST_CASE("inspect: parameter count and memory figures of stories260K") {
  const InspectReport r = inspect_model(kShipped);
  // PROVENANCE.md: 264128 floats in the .bin, of which 4096 are the RoPE tables (not parameters).
  CHECK(r.parameters == 264128 - 4096);
  CHECK(r.bytes_f32 == uint64_t(r.parameters) * 4);
  CHECK(r.stored_bytes == r.bytes_f32);
  CHECK(r.bytes_bf16 == uint64_t(r.parameters) * 2);
  CHECK(r.bytes_q8_0 < r.bytes_bf16);
  CHECK(r.bytes_q4_0 < r.bytes_q8_0);
  REQUIRE(r.tensors.size() == 47);
  CHECK(r.tensors.front().name == "model.embed_tokens.weight");
  CHECK(r.tensors[1].name == "model.layers.0.input_layernorm.weight");
  CHECK(r.tensors.back().name == "model.norm.weight");
  const auto j = to_json(r);
  CHECK(j["architecture"]["rope_layout"] == "half-split");
  CHECK(j["parameters"] == 260032);
  CHECK(j["tensors"].size() == 47);
}
