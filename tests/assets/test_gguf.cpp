#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

#include "assets/gguf.h"
#include "assets/model.h"
#include "core/error.h"
#include "test_util.h"

using namespace journey;
using namespace journey::test;

namespace {
const fs::path kTinyGguf = data_path("tests/data/models/gguf-tiny-random/llama-2-tiny-random.gguf");
}

TEST_CASE("gguf: the tiny random llama loads with the metadata its provenance lists") {
  const GgufFile g = GgufFile::open(kTinyGguf);
  CHECK(g.version() == 3);
  CHECK(g.get_string("general.architecture") == "llama");
  CHECK(g.get_int("llama.embedding_length") == 8);
  CHECK(g.get_int("llama.block_count") == 1);
  CHECK(g.get_int("llama.feed_forward_length") == 32);
  CHECK(g.get_int("llama.attention.head_count") == 2);
  CHECK(g.get_int("llama.attention.head_count_kv") == 2);
  CHECK(g.get_int("llama.context_length") == 4096);
  CHECK(g.get_int("general.file_type") == 1);
  CHECK(g.get_string("tokenizer.ggml.model") == "llama");
  const auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 32000);
  CHECK(tokens[0] == "<unk>");
  CHECK(tokens[1] == "<s>");
  CHECK(tokens[2] == "</s>");
  CHECK(g.get_float_array("tokenizer.ggml.scores").size() == 32000);
  CHECK(g.get_int_array("tokenizer.ggml.token_type").size() == 32000);
  CHECK(g.get_int("tokenizer.ggml.bos_token_id") == 1);
  CHECK(g.get_int("tokenizer.ggml.eos_token_id") == 2);
  CHECK(g.get_int("tokenizer.ggml.unknown_token_id") == 0);
  CHECK(g.summary("tokenizer.ggml.tokens") == "32000 x string");

  REQUIRE(g.tensors().size() == 12);
  // The data section is exactly the aligned tensors, back to back: the last one ends at the end of the file.
  uint64_t end = 0;
  for (const auto& t : g.tensors()) end = std::max<uint64_t>(end, g.data_start() + t.offset + t.nbytes);
  CHECK(end == fs::file_size(kTinyGguf));
  for (const auto& t : g.tensors()) {
    INFO(t.name);
    if (t.shape.size() == 2) CHECK(t.dtype == DType::F16);  // file_type 1: F16 matrices, F32 norms
    else CHECK(t.dtype == DType::F32);
  }
}

TEST_CASE("gguf: llama config and Hugging Face names") {
  const GgufFile g = GgufFile::open(kTinyGguf);
  const ModelConfig c = gguf_model_config(g);
  CHECK(c.hidden_size == 8);
  CHECK(c.num_layers == 1);
  CHECK(c.intermediate_size == 32);
  CHECK(c.num_heads == 2);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.head_dim == 4);
  CHECK(c.vocab_size == 32000);
  CHECK(c.max_position_embeddings == 4096);
  CHECK(c.tie_word_embeddings == false);
  CHECK(c.rope_layout == RopeLayout::Interleaved);

  const WeightStore w = gguf_weights(g);
  CHECK(w.get("model.embed_tokens.weight").shape == std::vector<int64_t>{32000, 8});
  CHECK(w.get("lm_head.weight").shape == std::vector<int64_t>{32000, 8});
  CHECK(w.get("model.layers.0.self_attn.q_proj.weight").shape == std::vector<int64_t>{8, 8});
  CHECK(w.get("model.layers.0.mlp.gate_proj.weight").shape == std::vector<int64_t>{32, 8});
  CHECK(w.get("model.layers.0.mlp.down_proj.weight").shape == std::vector<int64_t>{8, 32});
  CHECK(w.has("model.layers.0.input_layernorm.weight"));
  CHECK(w.has("model.layers.0.post_attention_layernorm.weight"));
  CHECK(w.has("model.norm.weight"));
  // F16 widening gives finite numbers of the size a random init has.
  for (float v : w.get("model.layers.0.self_attn.q_proj.weight").to_f32()) {
    CHECK(std::isfinite(v));
    CHECK(std::abs(v) < 10.0f);
  }
  CHECK(gguf_to_hf_name("blk.12.attn_output.weight") == "model.layers.12.self_attn.o_proj.weight");
  CHECK(gguf_to_hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight");
}

TEST_CASE("gguf: typed getters name the key and the type") {
  const GgufFile g = GgufFile::open(kTinyGguf);
  CHECK(error_of([&] { g.get_int("general.architecture"); }).find("general.architecture is string, expected an integer") != std::string::npos);
  CHECK(error_of([&] { g.get_string("no.such.key"); }).find("missing key no.such.key") != std::string::npos);
  CHECK(error_of([&] { g.get_string_array("tokenizer.ggml.scores"); }).find("array of float32, expected array of string") != std::string::npos);
}

TEST_CASE("gguf: damaged copies fail with a message naming the problem") {
  const fs::path dir = scratch_dir("gguf-damaged");
  const std::vector<char> good = read_bytes(kTinyGguf);

  auto bad_magic = good;
  bad_magic[0] = 'X';
  write_bytes(dir / "magic.gguf", bad_magic);
  CHECK(error_of([&] { GgufFile::open(dir / "magic.gguf"); }).find("not a GGUF file (magic is \"XGUF\"") != std::string::npos);

  auto wrong_version = good;
  put<uint32_t>(wrong_version, 4, 7);
  write_bytes(dir / "version.gguf", wrong_version);
  CHECK(error_of([&] { GgufFile::open(dir / "version.gguf"); }).find("unsupported GGUF version 7") != std::string::npos);

  // Cut inside the metadata (the token list takes most of the first half of the file).
  write_bytes(dir / "cut-meta.gguf", std::vector<char>(good.begin(), good.begin() + 200000));
  const std::string meta_error = error_of([&] { GgufFile::open(dir / "cut-meta.gguf"); });
  CHECK(meta_error.find("truncated") != std::string::npos);
  CHECK(meta_error.find("cut-meta.gguf") != std::string::npos);

  // Cut inside the tensor data: the index reads fine but the last tensor runs past the end.
  write_bytes(dir / "cut-data.gguf", std::vector<char>(good.begin(), good.end() - 100));
  const std::string data_error = error_of([&] { GgufFile::open(dir / "cut-data.gguf"); });
  CHECK(data_error.find("tensor ") != std::string::npos);
  CHECK(data_error.find("but the file has only 1750460 bytes") != std::string::npos);

  // An absurd metadata count.
  auto huge_count = good;
  put<uint64_t>(huge_count, 16, uint64_t(1) << 60);
  write_bytes(dir / "count.gguf", huge_count);
  CHECK(error_of([&] { GgufFile::open(dir / "count.gguf"); }).find("metadata count") != std::string::npos);

  write_bytes(dir / "empty.gguf", {});
  CHECK(error_of([&] { GgufFile::open(dir / "empty.gguf"); }).find("truncated while reading magic") != std::string::npos);
}

TEST_CASE("gguf: vocab-only files of llama.cpp's tokenizer tests (no tensors)") {
  // The tokenizer tests keep these xz-compressed; unpack into the scratch dir with the xz tool.
  const fs::path dir = scratch_dir("gguf-vocab");
  for (const std::string name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    const fs::path xz = data_path("tests/data/tokenizers/llamacpp-vocab/" + name + ".xz");
    if (!fs::exists(xz)) {
      MESSAGE("skipping " << name << ": " << xz << " not present");
      continue;
    }
    const std::string command = cat("xz -dc '", xz.string(), "' > '", (dir / name).string(), "'");
    REQUIRE(std::system(command.c_str()) == 0);
  }
  if (fs::exists(dir / "ggml-vocab-llama-spm.gguf")) {
    const GgufFile spm = GgufFile::open(dir / "ggml-vocab-llama-spm.gguf");
    CHECK(spm.version() == 3);
    CHECK(spm.tensors().empty());
    CHECK(spm.get_string("tokenizer.ggml.model") == "llama");
    CHECK(spm.get_string_array("tokenizer.ggml.tokens").size() == 32000);
    CHECK(spm.get_bool("tokenizer.ggml.add_bos_token") == true);
    CHECK(error_of([&] { load_model(dir / "ggml-vocab-llama-spm.gguf"); }).find("holds no tensors (vocab-only file?)") != std::string::npos);
    // Same vocabulary as the tiny model (its provenance says so).
    const GgufFile tiny = GgufFile::open(kTinyGguf);
    CHECK(spm.get_string_array("tokenizer.ggml.tokens") == tiny.get_string_array("tokenizer.ggml.tokens"));
    CHECK(spm.get_float_array("tokenizer.ggml.scores") == tiny.get_float_array("tokenizer.ggml.scores"));
  }
  if (fs::exists(dir / "ggml-vocab-gpt-2.gguf")) {
    const GgufFile gpt2 = GgufFile::open(dir / "ggml-vocab-gpt-2.gguf");
    CHECK(gpt2.get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(gpt2.get_string("tokenizer.ggml.pre") == "gpt-2");
    CHECK(gpt2.get_string_array("tokenizer.ggml.tokens").size() == 50257);
    CHECK(gpt2.get_string_array("tokenizer.ggml.merges").size() == 50000);
    CHECK(gpt2.get_int("tokenizer.ggml.bos_token_id") == 50256);
    CHECK(gpt2.get_int("tokenizer.ggml.eos_token_id") == 50256);
  }
}
