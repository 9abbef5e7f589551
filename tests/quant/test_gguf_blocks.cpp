// GGUF files with block types: llama.cpp's mixed files load and dequantize, and damaged copies fail
// with a message naming the tensor, the type and the numbers (never a crash or a wild read).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <fstream>
#include <string>

#include "assets/gguf_writer.h"
#include "assets/model.h"
#include "core/error.h"
#include "quant_test_util.h"

using namespace journey;
using namespace journey::test;

namespace {

std::vector<char> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_all(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

// Byte position of a tensor's index entry just after its name: u32 n_dims, u64 ne[n_dims], u32 type, u64 offset.
size_t entry_after_name(const std::vector<char>& bytes, const std::string& name) {
  std::string key(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(key.data(), &len, 8);
  key += name;
  const std::string_view all(bytes.data(), bytes.size());
  const size_t at = all.find(key);
  REQUIRE_MESSAGE(at != std::string_view::npos, "no index entry for " << name);
  return at + key.size();
}

template <typename T>
void put(std::vector<char>& bytes, size_t at, T value) { std::memcpy(bytes.data() + at, &value, sizeof(T)); }

std::string error_of_open(const fs::path& path) {
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const fs::path kQ4KM = quant_data("kq-q4_k_m.gguf");

}  // namespace

TEST_CASE("llama.cpp's mixed files load: Q4_K_M (Q4_K + Q6_K + F32 norms), Q3_K_M, Q2_K, t105 Q4_1 (Q8_0 output)") {
  struct Expect { const char* file; std::map<std::string, DType> types; };
  for (const Expect& e : {
           Expect{"kq-q4_k_m.gguf", {{"lm_head.weight", DType::Q6_K}, {"model.embed_tokens.weight", DType::Q4_K},
                                     {"model.layers.0.self_attn.v_proj.weight", DType::Q4_K},
                                     {"model.layers.1.self_attn.v_proj.weight", DType::Q6_K},
                                     {"model.layers.1.mlp.down_proj.weight", DType::Q6_K}, {"model.norm.weight", DType::F32}}},
           Expect{"kq-q3_k_m.gguf", {{"model.layers.0.self_attn.v_proj.weight", DType::Q5_K},
                                     {"model.layers.0.self_attn.o_proj.weight", DType::Q4_K},
                                     {"model.layers.0.mlp.gate_proj.weight", DType::Q3_K}}},
           Expect{"kq-q2_k.gguf", {{"lm_head.weight", DType::Q2_K}, {"model.layers.1.mlp.up_proj.weight", DType::Q2_K}}},
           Expect{"t105-q4_1.gguf", {{"lm_head.weight", DType::Q8_0}, {"model.layers.4.mlp.down_proj.weight", DType::Q4_1}}},
       }) {
    INFO(e.file);
    const LoadedModel m = load_model(quant_data(e.file));
    for (const auto& [name, type] : e.types) {
      INFO(name);
      CHECK(m.weights.get(name).dtype == type);
    }
    for (const auto& [name, t] : m.weights.all()) {
      INFO(name, " ", dtype_name(t.dtype));
      const std::vector<float> values = t.to_f32();
      CHECK(int64_t(values.size()) == t.numel());
      double sum2 = 0;
      for (float v : values) sum2 += double(v) * v;
      CHECK(std::isfinite(sum2));
      CHECK(sum2 > 0);  // nothing read as zeros
    }
  }
}

TEST_CASE("bad GGUF block tensors: each gets an error naming the tensor, the type and the numbers") {
  const fs::path dir = quant_scratch("bad-gguf");
  const std::vector<char> good = read_all(kQ4KM);
  const size_t attn_k = entry_after_name(good, "blk.0.attn_k.weight");  // Q4_K, ne = [256, 128]

  SUBCASE("an unknown ggml type number") {
    auto bytes = good;
    put<uint32_t>(bytes, attn_k + 4 + 16, 99);
    write_all(dir / "unknown-type.gguf", bytes);
    const std::string e = error_of_open(dir / "unknown-type.gguf");
    CHECK(e.find("tensor blk.0.attn_k.weight has ggml type #99") != std::string::npos);
    CHECK(e.find("it reads: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K") != std::string::npos);
  }
  SUBCASE("a ggml type journey knows by name but does not read") {
    auto bytes = good;
    put<uint32_t>(bytes, attn_k + 4 + 16, 16);  // IQ2_XXS
    write_all(dir / "iq2.gguf", bytes);
    CHECK(error_of_open(dir / "iq2.gguf").find("tensor blk.0.attn_k.weight has ggml type IQ2_XXS (#16)") != std::string::npos);
  }
  SUBCASE("a K type on a row length not divisible by 256") {
    auto bytes = good;
    put<uint64_t>(bytes, attn_k + 4, 128);      // ne0: 256 -> 128
    put<uint64_t>(bytes, attn_k + 4 + 8, 256);  // ne1: 128 -> 256 (same number of weights)
    write_all(dir / "row.gguf", bytes);
    CHECK(error_of_open(dir / "row.gguf") ==
          cat("GGUF ", (dir / "row.gguf").string(), ": tensor blk.0.attn_k.weight (q4_K): row length 128 is not a "
              "multiple of the q4_K block size 256 (144 bytes hold 256 weights)"));
  }
  SUBCASE("a shape whose bytes do not fit before the next tensor") {
    auto bytes = good;
    put<uint64_t>(bytes, attn_k + 4 + 8, 256);  // ne1: 128 -> 256 rows: 36864 bytes instead of 18432
    write_all(dir / "shape.gguf", bytes);
    const std::string e = error_of_open(dir / "shape.gguf");
    CHECK(e.find("tensor blk.0.attn_k.weight (q4_K, shape [256, 256]) needs 36864 bytes from data offset") != std::string::npos);
    CHECK(e.find("starts 18432 bytes after it: the shape and type do not match the data") != std::string::npos);
  }
  SUBCASE("a type whose blocks are bigger than the data stored") {
    auto bytes = good;
    put<uint32_t>(bytes, attn_k + 4 + 16, 14);  // Q4_K -> Q6_K: 210 instead of 144 bytes per block
    write_all(dir / "type.gguf", bytes);
    CHECK(error_of_open(dir / "type.gguf").find("tensor blk.0.attn_k.weight (q6_K, shape [128, 256]) needs 26880 bytes") != std::string::npos);
  }
  SUBCASE("a truncated tensor") {
    write_all(dir / "cut.gguf", std::vector<char>(good.begin(), good.end() - 1000));
    const std::string e = error_of_open(dir / "cut.gguf");
    CHECK(e.find("tensor blk.1.ffn_up.weight (q4_K, shape [768, 256], 110592 bytes at data offset") != std::string::npos);
    CHECK(e.find(cat("but the file has only ", good.size() - 1000, " bytes (truncated?)")) != std::string::npos);
  }
}

TEST_CASE("TensorRef::to_f32 checks rows and bytes of block tensors it did not get from a reader") {
  std::vector<std::byte> bytes(144 * 3);
  TensorRef t;
  t.name = "w";
  t.source = "test";
  t.dtype = DType::Q4_K;
  t.shape = {2, 384};  // 768 weights = 3 blocks, but rows of 384 are not whole blocks
  t.data = bytes.data();
  t.nbytes = bytes.size();
  CHECK_THROWS_WITH_AS(t.to_f32(), doctest::Contains("tensor w in test (q4_K): row length 384 is not a multiple of the q4_K block size 256"), Error);
  t.shape = {3, 256};
  t.nbytes = 144 * 2;
  CHECK_THROWS_WITH_AS(t.to_f32(), doctest::Contains("288 bytes do not hold 768 elements of q4_K (432 bytes)"), Error);
}

TEST_CASE("the GGUF writer: key/values and tensors read back, general.alignment is honoured, failures leave no file") {
  const fs::path dir = quant_scratch("writer");
  GgufWriter w;
  w.set("general.architecture", gguf_string("llama"));
  w.set("x.count", gguf_u32(7));
  w.set("x.scale", gguf_f32(0.25f));
  w.set("x.flag", gguf_bool(true));
  w.set("x.names", gguf_string_array({"a", "bb"}));
  w.set("x.count", gguf_u32(8));  // replaced: moves to the end, as llama.cpp's gguf_set_val does
  w.set("general.alignment", gguf_u32(64));
  w.add_tensor({"a", DType::F32, {3}});
  w.add_tensor({"b", DType::Q8_0, {2, 32}});
  w.write(dir / "w.gguf", [](size_t i, std::vector<std::byte>& out) {
    out.assign(i == 0 ? 12 : 68, std::byte(i == 0 ? 0 : 1));
  });
  const GgufFile g = GgufFile::open(dir / "w.gguf");
  CHECK(g.keys() == std::vector<std::string>{"general.architecture", "x.scale", "x.flag", "x.names", "x.count", "general.alignment"});
  CHECK(g.get_int("x.count") == 8);
  CHECK(g.get_float("x.scale") == 0.25);
  CHECK(g.get_bool("x.flag"));
  CHECK(g.get_string_array("x.names") == std::vector<std::string>{"a", "bb"});
  CHECK(g.alignment() == 64);
  CHECK(g.data_start() % 64 == 0);
  REQUIRE(g.tensors().size() == 2);
  CHECK(g.tensors()[1].offset == 64);
  CHECK(g.tensors()[1].shape == std::vector<int64_t>{2, 32});
  CHECK(std::to_integer<int>(g.tensor_data(g.tensors()[1])[67]) == 1);

  // a producer that gives the wrong number of bytes: an error naming the tensor, and no file
  CHECK_THROWS_WITH_AS(w.write(dir / "bad.gguf", [](size_t, std::vector<std::byte>& out) { out.resize(5); }),
                       doctest::Contains("tensor a (f32) produced 5 bytes, its shape and type need 12"), Error);
  CHECK_FALSE(fs::exists(dir / "bad.gguf"));
  CHECK_FALSE(fs::exists(dir / "bad.gguf.partial"));
  CHECK_THROWS_WITH_AS(w.add_tensor({"c", DType::Q4_K, {2, 128}}), doctest::Contains("row length 128 is not a multiple of the q4_K block size 256"), Error);
}
