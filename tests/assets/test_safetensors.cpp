#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "assets/safetensors.h"
#include "core/error.h"
#include "test_util.h"

using namespace journey;
using namespace journey::test;

namespace {

const fs::path kShipped = data_path("data/stories260K/model.safetensors");

// A copy of the shipped model's header, to damage field by field.
struct Parsed {
  std::vector<char> bytes;
  uint64_t header_len;
  nlohmann::json header;
};
Parsed parse(const fs::path& p) {
  Parsed out{read_bytes(p), 0, {}};
  std::memcpy(&out.header_len, out.bytes.data(), 8);
  out.header = nlohmann::json::parse(out.bytes.begin() + 8, out.bytes.begin() + 8 + long(out.header_len));
  return out;
}
// Rebuild the file with a new header and the original data section.
std::vector<char> with_header(const Parsed& p, const nlohmann::json& header) {
  std::string text = header.dump();
  std::vector<char> out(8);
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), p.bytes.begin() + 8 + long(p.header_len), p.bytes.end());
  return out;
}

std::string load_error(const fs::path& p) {
  return error_of([&] { WeightStore w; read_safetensors(p, w); });
}

}  // namespace

TEST_CASE("safetensors: the shipped model's header agrees with an independent JSON parse") {
  const Parsed p = parse(kShipped);
  WeightStore w;
  const auto meta = read_safetensors(kShipped, w);
  CHECK(meta.at("format") == "pt");
  size_t n_entries = 0;
  for (const auto& [name, e] : p.header.items()) {
    if (name == "__metadata__") continue;
    ++n_entries;
    INFO(name);
    const TensorRef& t = w.get(name);
    CHECK(t.shape == e["shape"].get<std::vector<int64_t>>());
    const auto begin = e["data_offsets"][0].get<size_t>();
    CHECK(std::memcmp(t.data, p.bytes.data() + 8 + p.header_len + begin, t.nbytes) == 0);
  }
  CHECK(n_entries == w.all().size());
  CHECK(n_entries == 1 + 5 * 9 + 1);  // embedding, 9 per layer, final norm (tied head)
}

TEST_CASE("safetensors: writer and reader round-trip every dtype") {
  const fs::path dir = scratch_dir("st-roundtrip");
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};   // [2, 3]
  std::vector<uint16_t> f16, bf16;                                     // [6]
  for (float v : f32) { f16.push_back(f32_to_f16(v)); bf16.push_back(f32_to_bf16(v)); }
  std::vector<int32_t> i32 = {1, -2, 3};                               // [3]
  std::vector<int8_t> i8 = {-128, 0, 127, 5};                          // [2, 2]
  auto ref = [](std::string name, DType dt, std::vector<int64_t> shape, const void* data, size_t nbytes) {
    TensorRef t;
    t.name = std::move(name); t.dtype = dt; t.shape = std::move(shape);
    t.data = static_cast<const std::byte*>(data); t.nbytes = nbytes;
    return t;
  };
  write_safetensors(dir / "all.safetensors",
                    {ref("a", DType::F32, {2, 3}, f32.data(), 24), ref("b", DType::F16, {6}, f16.data(), 12),
                     ref("c", DType::BF16, {3, 2}, bf16.data(), 12), ref("d", DType::I32, {3}, i32.data(), 12),
                     ref("e", DType::I8, {2, 2}, i8.data(), 4), ref("empty", DType::F32, {0, 4}, nullptr, 0)},
                    {{"note", "hello"}});
  WeightStore w;
  const auto meta = read_safetensors(dir / "all.safetensors", w);
  CHECK(meta.at("note") == "hello");
  CHECK(w.get("a").to_f32() == f32);
  CHECK(w.get("b").to_f32() == std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, f16_to_f32(f32_to_f16(1e-3f)), -7.0f});
  CHECK(w.get("c").shape == std::vector<int64_t>{3, 2});
  CHECK(w.get("d").to_f32() == std::vector<float>{1, -2, 3});
  CHECK(w.get("e").to_f32() == std::vector<float>{-128, 0, 127, 5});
  CHECK(w.get("empty").numel() == 0);
  // The data section starts 8-byte aligned, as the HF writer guarantees.
  uint64_t len;
  std::memcpy(&len, read_bytes(dir / "all.safetensors").data(), 8);
  CHECK(len % 8 == 0);
}

TEST_CASE("safetensors: damaged copies of the real model fail with a message naming the problem") {
  const fs::path dir = scratch_dir("st-damaged");
  const Parsed p = parse(kShipped);

  write_bytes(dir / "truncated.safetensors", std::vector<char>(p.bytes.begin(), p.bytes.end() - 1000));
  std::string e = load_error(dir / "truncated.safetensors");
  CHECK(e.find("truncated.safetensors") != std::string::npos);
  CHECK(e.find("run past the end of the data section") != std::string::npos);
  CHECK(e.find("tensor model.") != std::string::npos);

  write_bytes(dir / "header-only.safetensors", std::vector<char>(p.bytes.begin(), p.bytes.begin() + 100));
  CHECK(load_error(dir / "header-only.safetensors").find("but only 92 bytes follow it") != std::string::npos);

  auto big = p.bytes;
  put<uint64_t>(big, 0, p.bytes.size());  // claims more header than the file holds
  write_bytes(dir / "len.safetensors", big);
  CHECK(load_error(dir / "len.safetensors").find(cat("header length field says ", p.bytes.size(), " bytes")) != std::string::npos);

  auto huge = p.bytes;
  put<uint64_t>(huge, 0, uint64_t(1) << 40);
  write_bytes(dir / "huge.safetensors", huge);
  CHECK(load_error(dir / "huge.safetensors").find("-byte limit") != std::string::npos);

  std::vector<char> garbage(4096);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 7919 + 13) % 251);
  put<uint64_t>(garbage, 0, 1000);
  write_bytes(dir / "garbage.safetensors", garbage);
  CHECK(load_error(dir / "garbage.safetensors").find("header is not valid JSON") != std::string::npos);

  write_bytes(dir / "tiny.safetensors", {'a', 'b'});
  CHECK(load_error(dir / "tiny.safetensors").find("too short") != std::string::npos);

  const std::string victim = "model.layers.2.self_attn.k_proj.weight";
  {
    auto h = p.header;
    h[victim]["dtype"] = "F8_E4M3";
    write_bytes(dir / "dtype.safetensors", with_header(p, h));
    e = load_error(dir / "dtype.safetensors");
    CHECK(e.find(victim) != std::string::npos);
    CHECK(e.find("dtype \"F8_E4M3\" is not supported") != std::string::npos);
  }
  {
    auto h = p.header;
    h[victim]["shape"] = {"32", 64};
    write_bytes(dir / "shape-type.safetensors", with_header(p, h));
    CHECK(load_error(dir / "shape-type.safetensors").find("shape entry \"32\" is not a non-negative integer") != std::string::npos);
  }
  {
    auto h = p.header;
    h[victim]["dtype"] = 7;
    write_bytes(dir / "dtype-type.safetensors", with_header(p, h));
    CHECK(load_error(dir / "dtype-type.safetensors").find("field \"dtype\" missing or not a string") != std::string::npos);
  }
  {
    auto h = p.header;
    h[victim]["shape"] = {32, 65};  // offsets still span 32 x 64 floats
    write_bytes(dir / "size.safetensors", with_header(p, h));
    e = load_error(dir / "size.safetensors");
    CHECK(e.find("span 8192 bytes but shape [32, 65] of F32 needs 8320 bytes") != std::string::npos);
  }
  {
    auto h = p.header;
    const std::string other = "model.layers.2.self_attn.v_proj.weight";  // same size as k_proj
    h[victim]["data_offsets"] = h[other]["data_offsets"];
    write_bytes(dir / "overlap.safetensors", with_header(p, h));
    e = load_error(dir / "overlap.safetensors");
    CHECK(e.find("overlap") != std::string::npos);
    CHECK(e.find(victim) != std::string::npos);
  }
  {
    auto h = p.header;
    h[victim]["data_offsets"] = {100, 50};
    write_bytes(dir / "reversed.safetensors", with_header(p, h));
    CHECK(load_error(dir / "reversed.safetensors").find("end before they begin") != std::string::npos);
  }
  {
    write_bytes(dir / "array.safetensors", with_header(p, nlohmann::json::array({1, 2})));
    CHECK(load_error(dir / "array.safetensors").find("header JSON is a array, expected an object") != std::string::npos);
  }
}

TEST_CASE("safetensors: a sharded copy (two shards + index) loads identical tensors") {
  const fs::path dir = scratch_dir("st-sharded");
  WeightStore original;
  read_safetensors(kShipped, original);
  std::vector<TensorRef> first, second;
  nlohmann::json weight_map;
  for (const auto& [name, t] : original.all()) {
    const bool early = name.find("model.layers.0.") == 0 || name.find("model.layers.1.") == 0 || name == "model.embed_tokens.weight";
    (early ? first : second).push_back(t);
    weight_map[name] = early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir / "model-00002-of-00002.safetensors", second);
  write_text(dir / "model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", original.total_bytes()}}}, {"weight_map", weight_map}}.dump());

  WeightStore sharded;
  read_safetensors_index(dir / "model.safetensors.index.json", sharded);
  REQUIRE(sharded.all().size() == original.all().size());
  for (const auto& [name, t] : original.all()) {
    INFO(name);
    const TensorRef& s = sharded.get(name);
    CHECK(s.shape == t.shape);
    CHECK(s.dtype == t.dtype);
    CHECK(std::memcmp(s.data, t.data, t.nbytes) == 0);
  }

  // An index entry pointing at the wrong shard names the tensor and the shard.
  auto wrong = weight_map;
  wrong["model.norm.weight"] = "model-00001-of-00002.safetensors";
  write_text(dir / "wrong.index.json", nlohmann::json{{"weight_map", wrong}}.dump());
  const std::string e = error_of([&] { WeightStore w; read_safetensors_index(dir / "wrong.index.json", w); });
  CHECK(e.find("tensor model.norm.weight is listed in shard model-00001-of-00002.safetensors but that file does not contain it") != std::string::npos);

  auto escape = weight_map;
  escape["model.norm.weight"] = "../elsewhere.safetensors";
  write_text(dir / "escape.index.json", nlohmann::json{{"weight_map", escape}}.dump());
  CHECK(error_of([&] { WeightStore w; read_safetensors_index(dir / "escape.index.json", w); }).find("is not a plain file name") != std::string::npos);
}
