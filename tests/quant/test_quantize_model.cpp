// `journey quantize` on whole models: from llama.cpp's f32 GGUF the output is llama.cpp's file byte for
// byte (legacy types on the real model t105; the K types and mixes are checked the same way on kq by
// the crops and the type rules, since kq-f32.gguf is too big to ship); from a Hugging Face directory
// the output loads, tokenizes and predicts like the directory.
#include <doctest/doctest.h>

#include <openssl/evp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <sys/wait.h>

#include "assets/gguf.h"
#include "assets/model.h"
#include "assets/safetensors.h"
#include "core/error.h"
#include "quant/quantize_model.h"
#include "quant/tensor_types.h"
#include "quant_test_util.h"
#include "text/tokenizer.h"
#include "whole_model.h"

using namespace journey;
using namespace journey::quant;
using namespace journey::test;

namespace {

std::string sha256_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  REQUIRE(EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) == 1);
  std::string hex;
  char buf[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", digest[i]);
    hex += buf;
  }
  return hex;
}

// sha256.txt: "FILE HEX" per line (llama.cpp's files, tools/quant/make_fixtures.py).
std::map<std::string, std::string> llama_cpp_sha256() {
  std::ifstream in(quant_data("sha256.txt"));
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, hex;
    fields >> file >> hex;
    out[file] = hex;
  }
  REQUIRE(out.size() == 20);
  return out;
}

}  // namespace

TEST_CASE("journey quantize t105-f32.gguf writes llama.cpp's t105-TYPE.gguf byte for byte (Q8_0 Q4_0 Q4_1 Q5_0 Q5_1)") {
  const auto expected = llama_cpp_sha256();
  const fs::path dir = quant_scratch("t105");
  for (const std::string type : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) {
    INFO(type);
    const fs::path out = dir / cat("t105-", type, ".gguf");
    const QuantizeReport r = quantize_model(options(quant_data("t105-f32.gguf"), out, type));
    CHECK(sha256_of(out) == expected.at(cat("t105-", type, ".gguf")));
    CHECK(r.tensors == 48);
    CHECK(r.type_counts.at(DType::Q8_0) == (type == "q8_0" ? 37 : 1));  // output.weight falls back to Q8_0
    if (type != "q8_0") {  // (Q8_0 files keep a Q8_0 output without falling back from Q6_K)
      REQUIRE(r.notes.size() == 1);
      CHECK(r.notes[0] == "output.weight: row length 128 is not a multiple of the q6_K block size 256: q8_0 instead");
    }
  }
  // rows are quantized in parallel: the thread count does not change a byte
  for (int threads : {1, 3}) {
    QuantizeOptions o = options(quant_data("t105-f32.gguf"), dir / cat("threads-", threads, ".gguf"), "q5_1");
    o.threads = threads;
    quantize_model(o);
    CHECK(sha256_of(dir / cat("threads-", threads, ".gguf")) == expected.at("t105-q5_1.gguf"));
  }
  // and one of them against the stored file itself, not only its hash
  std::ifstream a(dir / "t105-q4_1.gguf", std::ios::binary), b(quant_data("t105-q4_1.gguf"), std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
}

TEST_CASE("the type rules give every tensor of every llama.cpp file the type llama.cpp gave it") {
  // tensor-types.txt lists FILE TENSOR TYPE NE0 NE1 for all 18 quantized files (kq-*: single types with
  // --pure, the _m mixes without; t105-*: without). Both models have output.weight; kq has 2 layers
  // and 4/2 heads, t105 5 layers and 8/4 heads.
  std::ifstream in(quant_data("tensor-types.txt"));
  std::string line;
  int checked = 0;
  std::set<std::string> files;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::string file, tensor, type;
    int64_t ne0 = 0, ne1 = 0;
    f >> file >> tensor >> type >> ne0 >> ne1;
    const bool kq = file.starts_with("kq-");
    const std::string recipe_name = file.substr(file.find('-') + 1, file.size() - file.find('-') - 1 - 5);
    const auto recipe = find_recipe(recipe_name);
    REQUIRE_MESSAGE(recipe, recipe_name);
    const bool pure = kq && !recipe_name.ends_with("_m");
    const TensorFacts facts{tensor, ne0, ne1 > 1 ? 2 : 1, DType::F32};
    const ModelFacts model{kq ? 2 : 5, true, 2, false};
    const TypeChoice choice = choose_tensor_type(*recipe, pure, facts, model);
    INFO(file, " ", tensor);
    CHECK(dtype_from_name(type) == choice.type);
    files.insert(file);
    ++checked;
  }
  CHECK(files.size() == 18);
  CHECK(checked == 13 * 21 + 5 * 48);  // 13 kq files of 21 tensors, 5 t105 files of 48
}

TEST_CASE("type rules beyond the shipped files: the _M layer pattern, fallbacks, pure, norms") {
  const auto q4km = *find_recipe("q4_k_m");
  const ModelFacts m32{32, true, 4, false};
  std::string more;  // layers whose attn_v gets Q6_K in a 32-layer Q4_K_M (llama.cpp: 0-3, 28-31, every 3rd between)
  for (int layer = 0; layer < 32; ++layer)
    if (choose_tensor_type(q4km, false, {cat("blk.", layer, ".attn_v.weight"), 4096, 2, DType::F16}, m32).type == DType::Q6_K)
      more += cat(layer, " ");
  CHECK(more == "0 1 2 3 6 9 12 15 18 21 24 27 28 29 30 31 ");
  CHECK(choose_tensor_type(q4km, false, {"blk.5.attn_q.weight", 4096, 2, DType::F16}, m32).type == DType::Q4_K);
  CHECK(choose_tensor_type(q4km, false, {"output.weight", 4096, 2, DType::F16}, m32).type == DType::Q6_K);
  CHECK(choose_tensor_type(q4km, true, {"output.weight", 4096, 2, DType::F16}, m32).type == DType::Q4_K);
  // tied embeddings: the token embedding is the output
  CHECK(choose_tensor_type(q4km, false, {"token_embd.weight", 4096, 2, DType::F16}, {32, false, 4, false}).type == DType::Q6_K);
  // norms and 1-D tensors keep their type
  const TypeChoice norm = choose_tensor_type(q4km, false, {"blk.0.attn_norm.weight", 4096, 1, DType::F32}, m32);
  CHECK(norm.type == DType::F32);
  CHECK_FALSE(norm.quantized);
  // fallbacks: K types on rows that are not whole super-blocks, then F16
  const TypeChoice q5 = choose_tensor_type(q4km, true, {"blk.0.ffn_up.weight", 96, 2, DType::F32}, m32);
  CHECK(q5.type == DType::Q5_0);
  CHECK(q5.fallback_note == "row length 96 is not a multiple of the q4_K block size 256: q5_0 instead");
  CHECK(choose_tensor_type(*find_recipe("q6_k"), true, {"blk.0.ffn_up.weight", 96, 2, DType::F32}, m32).type == DType::Q8_0);
  CHECK(choose_tensor_type(*find_recipe("q2_k"), true, {"blk.0.ffn_up.weight", 96, 2, DType::F32}, m32).type == DType::Q4_0);
  CHECK(choose_tensor_type(*find_recipe("q5_k"), true, {"blk.0.ffn_up.weight", 96, 2, DType::F32}, m32).type == DType::Q5_1);
  CHECK(choose_tensor_type(*find_recipe("q4_0"), false, {"blk.0.ffn_down.weight", 172, 2, DType::F32}, m32).type == DType::F16);
  // Q2_K's own bumps, and the aliases
  CHECK(choose_tensor_type(*find_recipe("q2_k"), false, {"blk.0.attn_v.weight", 4096, 2, DType::F16}, m32).type == DType::Q4_K);
  CHECK(choose_tensor_type(*find_recipe("q2_k"), false, {"blk.0.attn_v.weight", 4096, 2, DType::F16}, {32, true, 1, false}).type == DType::Q3_K);
  CHECK(find_recipe("Q4_K")->mix == Mix::Q4_K_M);
  CHECK_FALSE(find_recipe("q4_k_xl").has_value());
}

TEST_CASE("quantize refuses what it cannot do well, naming the tensor or the type") {
  const fs::path dir = quant_scratch("refuse");
  CHECK_THROWS_WITH_AS(quantize_model(options(quant_data("kq-q4_k_m.gguf"), dir / "x.gguf", "q8_0")),
                       doctest::Contains("tensor output.weight is already q6_K; quantizing it to q8_0 loses precision twice"), Error);
  CHECK_FALSE(fs::exists(dir / "x.gguf"));
  CHECK_FALSE(fs::exists(dir / "x.gguf.partial"));
  CHECK_THROWS_WITH_AS(quantize_model(options(quant_data("t105-f32.gguf"), dir / "x.gguf", "q4_k_xl")),
                       doctest::Contains("unknown type \"q4_k_xl\" (known: q8_0, q4_0"), Error);
  // --allow-requantize does it, and the unchanged tensors are copied as they are
  QuantizeOptions o = options(quant_data("kq-q4_k_m.gguf"), dir / "re.gguf", "q4_k_m");
  o.allow_requantize = true;
  const QuantizeReport r = quantize_model(o);
  CHECK(r.output_bytes == r.input_bytes);  // same rules, same types: every tensor copied
}

TEST_CASE("a Hugging Face directory (stories260K) becomes a GGUF file that loads, tokenizes and predicts like it") {
  const fs::path dir = quant_scratch("hf");
  const fs::path hf = dir / "stories260K";
  fs::copy(fs::path(JOURNEY_SOURCE_DIR) / "data/stories260K", hf);
  const std::string tmpl = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}";
  std::ofstream(hf / "chat_template.jinja") << tmpl;

  int progress_calls = 0;
  QuantizeOptions o = options(hf, dir / "stories260K-q8_0.gguf", "q8_0");
  o.on_tensor_done = [&](const QuantizeProgress& p) {
    ++progress_calls;
    CHECK(p.count == 47);
    CHECK(p.weights_done <= p.weights_total);
  };
  const QuantizeReport r = quantize_model(o);
  CHECK(progress_calls == 47);
  CHECK(r.type_counts.at(DType::F16) == 5);  // ffn_down rows of 172 are not whole Q8_0 blocks
  CHECK(r.notes.size() == 5);

  const GgufFile g = GgufFile::open(dir / "stories260K-q8_0.gguf");
  CHECK(g.get_string("tokenizer.chat_template") == tmpl);
  CHECK(g.get_int("general.file_type") == 7);
  CHECK(g.get_string("tokenizer.ggml.model") == "llama");
  const auto hf_tok = load_tokenizer(hf);
  const auto gguf_tok = load_tokenizer(dir / "stories260K-q8_0.gguf");
  const std::string text = "Once upon a time, Lily saw a big red ball. \"Wow!\" she said.";
  CHECK(gguf_tok->encode(text, true) == hf_tok->encode(text, true));
  CHECK(gguf_tok->vocab_size() == 512);

  // Q/K rows were permuted back to Meta's order: the logits agree with the directory's within Q8_0's error
  const std::vector<int32_t> tokens = to_int32(hf_tok->encode(text, true));
  const Logits f32 = reference_logits(load_model(hf), tokens);
  const Logits q8 = reference_logits(load_model(dir / "stories260K-q8_0.gguf"), tokens);
  const LogitsError e = compare_logits(q8, f32);
  INFO("stories260K q8_0 vs the f32 directory: ", e.describe());
  CHECK(e.relative_rms < 0.02);
  CHECK(e.top1_agreement >= 0.9);
}

TEST_CASE("the journey binary: quantize the shipped stories260K, then generate from the GGUF file") {
  const fs::path dir = quant_scratch("cli");
  auto run = [&](const std::string& args) {
    const std::string command = cat("'", JOURNEY_CLI, "' ", args, " > '", (dir / "out.txt").string(), "' 2> '",
                                    (dir / "err.txt").string(), "' < /dev/null");
    const int raw = std::system(command.c_str());
    std::ifstream out(dir / "out.txt"), err(dir / "err.txt");
    return std::tuple{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, std::string(std::istreambuf_iterator<char>(out), {}),
                      std::string(std::istreambuf_iterator<char>(err), {})};
  };
  const fs::path gguf = dir / "stories260K-q8_0.gguf";
  const std::string model = (fs::path(JOURNEY_SOURCE_DIR) / "data/stories260K").string();
  auto [status, out, err] = run(cat("quantize '", model, "' --type q8_0 --out '", gguf.string(), "'"));
  INFO(err);
  REQUIRE(status == 0);
  CHECK(out.find(cat("wrote ", gguf.string(), ": 47 tensors, 260032 weights")) == 0);
  CHECK(out.find("types: f32 x 11, f16 x 5, q8_0 x 31") != std::string::npos);
  CHECK(err.empty());  // no progress bar when stderr is not a terminal

  // Greedy decoding: the Q8_0 file tells the f32 model's story word for word for its first sentences
  // (they part after ~290 characters: Q8_0 changes logits by about 1 %).
  auto [gen_status, story, gen_err] = run(cat("generate --model '", gguf.string(), "' --temperature 0 --max-tokens 60 --threads 1"));
  INFO(gen_err);
  CHECK(gen_status == 0);
  CHECK(story.starts_with("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                          "One day, she saw a big, red ball. She wanted to play with it, but it was too high"));

  auto [bad_status, bad_out, bad_err] = run(cat("quantize '", model, "' --type q3_k_xs --out '", (dir / "x.gguf").string(), "'"));
  CHECK(bad_status != 0);
  CHECK(bad_err.find("q3_k_xs") != std::string::npos);
}

namespace {

// A tiny llama directory that only carries a vocabulary: 1 layer, hidden 16, tied embeddings.
void write_tiny_llama(const fs::path& hf, int64_t vocab) {
  std::ofstream(hf / "config.json") << cat(R"({"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": )", vocab,
    R"(, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true})");
  std::vector<std::vector<float>> storage;
  std::vector<TensorRef> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    storage.emplace_back(size_t(n));
    for (size_t i = 0; i < storage.back().size(); ++i) storage.back()[i] = 0.01f * float(int64_t(i * 7919 % 200) - 100);
    TensorRef t;
    t.name = name;
    t.shape = shape;
    t.data = reinterpret_cast<const std::byte*>(storage.back().data());
    t.nbytes = size_t(n) * 4;
    tensors.push_back(t);
  };
  add("model.embed_tokens.weight", {vocab, 16});
  add("model.norm.weight", {16});
  for (const char* name : {"input_layernorm", "post_attention_layernorm"}) add(cat("model.layers.0.", name, ".weight"), {16});
  add("model.layers.0.self_attn.q_proj.weight", {16, 16});
  add("model.layers.0.self_attn.k_proj.weight", {8, 16});
  add("model.layers.0.self_attn.v_proj.weight", {8, 16});
  add("model.layers.0.self_attn.o_proj.weight", {16, 16});
  add("model.layers.0.mlp.gate_proj.weight", {32, 16});
  add("model.layers.0.mlp.up_proj.weight", {32, 16});
  add("model.layers.0.mlp.down_proj.weight", {16, 32});
  write_safetensors(hf / "model.safetensors", tensors);
}

fs::path hf_tokenizer_dir(const std::string& name) { return fs::path(JOURNEY_BINARY_DIR) / "tests/text/tokenizers/hf" / name; }

}  // namespace

TEST_CASE("a llama directory with a byte-level BPE tokenizer.json (Llama 3's, Qwen2.5's) keeps its tokenizer in GGUF") {
  struct Case { std::string tokenizer, pre; int64_t vocab; };
  for (const Case& c : {Case{"llama3-instruct", "llama-bpe", 128256}, Case{"qwen2.5-instruct", "qwen2", 151936}}) {
    INFO(c.tokenizer);
    const fs::path dir = quant_scratch("bpe-" + c.tokenizer);
    const fs::path hf = dir / "model";
    fs::create_directories(hf);
    const fs::path tok = hf_tokenizer_dir(c.tokenizer);
    fs::copy_file(tok / "tokenizer.json", hf / "tokenizer.json");
    fs::copy_file(tok / "tokenizer_config.json", hf / "tokenizer_config.json");
    write_tiny_llama(hf, c.vocab);

    // quantize_model itself refuses to write a vocabulary that tokenizes differently (check_tokenizer);
    // here the comparison is repeated on llama.cpp's 46 tokenizer test strings
    quantize_model(options(hf, dir / "model.gguf", "q8_0"));
    const GgufFile g = GgufFile::open(dir / "model.gguf");
    CHECK(g.get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(g.get_string("tokenizer.ggml.pre") == c.pre);
    const auto from_json = load_tokenizer(hf / "tokenizer.json");
    const auto from_gguf = load_tokenizer(dir / "model.gguf");
    std::ifstream inp(fs::path(JOURNEY_SOURCE_DIR) / "tests/data/tokenizers/llamacpp-vocab/ggml-vocab-llama-bpe.gguf.inp");
    const std::string all((std::istreambuf_iterator<char>(inp)), {});
    const std::string separator = "\n__ggml_vocab_test__\n";
    int compared = 0;
    for (size_t at = 0; at < all.size();) {
      size_t end = all.find(separator, at);
      if (end == std::string::npos) end = all.size();
      const std::string text = all.substr(at, end - at);
      INFO(text);
      CHECK(from_gguf->encode(text, true) == from_json->encode(text, true));
      ++compared;
      at = end + separator.size();
    }
    CHECK(compared >= 40);
  }
}

TEST_CASE("a vocabulary that would tokenize differently is refused, and no file is left") {
  // Llama 3's tokenizer.json whose pre-tokenizer no longer lets a word take the space before it:
  // journey still names it llama-bpe (the digit rule is there), whose regex does, so " World" would
  // become two pieces on one side and one on the other; the check catches it.
  const fs::path dir = quant_scratch("bpe-differs");
  const fs::path hf = dir / "model";
  fs::create_directories(hf);
  std::ifstream in(hf_tokenizer_dir("llama3-instruct") / "tokenizer.json");
  std::string json((std::istreambuf_iterator<char>(in)), {});
  const std::string rule = R"([^\\r\\n\\p{L}\\p{N}]?)";  // as escaped in the JSON text
  const size_t at = json.find(rule);
  REQUIRE(at != std::string::npos);
  json.erase(at, rule.size());
  std::ofstream(hf / "tokenizer.json") << json;
  fs::copy_file(hf_tokenizer_dir("llama3-instruct") / "tokenizer_config.json", hf / "tokenizer_config.json");
  write_tiny_llama(hf, 128256);
  const std::string error = [&] {
    try {
      quantize_model(options(hf, dir / "model.gguf", "q8_0"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK(error.find("tokenizes \"Once upon a time, there was a little girl named Lily.\" as [") != std::string::npos);
  CHECK(error.find("but the source's tokenizer gives [") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "model.gguf"));
}
