#include "assets/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "quant/awq.h"
#include "quant/blocks.h"
#include "core/untrusted.h"

namespace journey {
namespace {

using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_nonneg_int(const json& j) { return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0); }

struct SafetensorsContents {
  std::shared_ptr<MappedFile> file;
  std::map<std::string, std::string> metadata;
  std::vector<TensorRef> tensors;  // point into file
};

SafetensorsContents parse_safetensors(const std::filesystem::path& path) {
  auto file = MappedFile::open(path);
  const std::string where = cat("safetensors ", path.string());
  if (file->size() < 8) fail(where, ": file is ", file->size(), " bytes, too short for the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file->data(), 8);
  if (header_len > kSafetensorsMaxHeaderBytes)
    fail(where, ": header length field says ", header_len, " bytes, more than the ", kSafetensorsMaxHeaderBytes,
         "-byte limit (not a safetensors file, or corrupted)");
  if (header_len > file->size() - 8)
    fail(where, ": header length field says ", header_len, " bytes but only ", file->size() - 8,
         " bytes follow it (truncated or not a safetensors file)");
  const char* header_begin = reinterpret_cast<const char*>(file->data()) + 8;
  // A header nested deeper than any real one is refused before parsing: printing a 60k-deep
  // "shape" in an error message overflowed the stack (fuzz/crashes/safetensors).
  if (json_nesting_depth({header_begin, size_t(header_len)}, kMaxJsonDepth) > kMaxJsonDepth)
    fail(where, ": header JSON is nested deeper than ", kMaxJsonDepth, " levels");
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    fail(where, ": header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) fail(where, ": header JSON is a ", header.type_name(), ", expected an object");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file->size() - data_start;
  std::map<std::string, std::string> metadata;
  struct Span { uint64_t begin, end; std::string name; };
  std::vector<Span> spans;
  std::vector<TensorRef> tensors;

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(where, ": __metadata__ is a ", entry.type_name(), ", expected an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(where, ": __metadata__.", k, " is a ", v.type_name(), ", expected a string");
        metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tw = cat(where, ": tensor ", name);
    if (!entry.is_object()) fail(tw, ": entry is a ", entry.type_name(), ", expected an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(tw, ": field \"dtype\" missing or not a string");
    if (!entry.contains("shape") || !entry["shape"].is_array()) fail(tw, ": field \"shape\" missing or not an array");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      fail(tw, ": field \"data_offsets\" missing or not an array of two integers");
    const std::string dtype_text = entry["dtype"].get<std::string>();
    const auto dtype = dtype_from_safetensors(dtype_text);
    if (!dtype || dtype_block_size(*dtype) != 1)
      fail(tw, ": dtype \"", dtype_text, "\" is not supported by journey (supported: F32, F16, BF16, I8, U8, I32, I64)");
    TensorRef t;
    t.name = name;
    t.dtype = *dtype;
    t.source = path.string();
    int64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!is_nonneg_int(d)) fail(tw, ": shape entry ", excerpt_json(d), " is not a non-negative integer");
      const int64_t n = d.get<int64_t>();
      if (n > 0 && numel > (int64_t(1) << 48) / n) fail(tw, ": shape ", excerpt_json(entry["shape"]), " is impossibly large");
      t.shape.push_back(n);
      numel *= n;
    }
    const json& offsets = entry["data_offsets"];
    if (!is_nonneg_int(offsets[0]) || !is_nonneg_int(offsets[1]))
      fail(tw, ": data_offsets ", excerpt_json(offsets), " are not non-negative integers");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) fail(tw, ": data_offsets [", begin, ", ", end, "] end before they begin");
    if (end > data_size)
      fail(tw, ": data_offsets [", begin, ", ", end, "] run past the end of the data section (", data_size,
           " bytes; file truncated?)");
    const uint64_t expected = uint64_t(numel) * uint64_t(dtype_block_bytes(t.dtype));
    if (end - begin != expected)
      fail(tw, ": data_offsets [", begin, ", ", end, "] span ", end - begin, " bytes but shape ", shape_str(t.shape),
           " of ", dtype_text, " needs ", expected, " bytes");
    t.data = file->data() + data_start + begin;
    t.nbytes = size_t(end - begin);
    spans.push_back({begin, end, name});
    tensors.push_back(std::move(t));
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end && spans[i].begin != spans[i].end)
      fail(where, ": tensors ", spans[i - 1].name, " (bytes ", spans[i - 1].begin, "..", spans[i - 1].end, ") and ",
           spans[i].name, " (bytes ", spans[i].begin, "..", spans[i].end, ") overlap");
  }
  return {file, std::move(metadata), std::move(tensors)};
}

}  // namespace

std::map<std::string, std::string> read_safetensors(const std::filesystem::path& path, WeightStore& into) {
  SafetensorsContents contents = parse_safetensors(path);
  for (auto& t : contents.tensors) into.add_mapped(std::move(t), contents.file);
  return contents.metadata;
}

void read_safetensors_index(const std::filesystem::path& index_file, WeightStore& into) {
  const std::string where = cat("safetensors index ", index_file.string());
  std::ifstream in(index_file, std::ios::binary);
  if (!in) fail("cannot open ", index_file.string());
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    fail(where, ": not valid JSON (", e.what(), ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(where, ": field \"weight_map\" missing or not an object");
  // shard file -> tensors it should hold
  std::map<std::string, std::set<std::string>> wanted;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) fail(where, ": weight_map[\"", name, "\"] is a ", shard.type_name(), ", expected a file name");
    const std::string file = shard.get<std::string>();
    const std::filesystem::path p(file);
    if (p.is_absolute() || file.find("..") != std::string::npos || p.has_parent_path())
      fail(where, ": weight_map[\"", name, "\"] = \"", file, "\" is not a plain file name beside the index");
    wanted[file].insert(name);
  }
  if (wanted.empty()) fail(where, ": weight_map is empty");
  const auto dir = index_file.parent_path();
  for (const auto& [shard, names] : wanted) {
    if (!std::filesystem::exists(dir / shard))
      fail(where, ": shard ", shard, " (holding e.g. ", *names.begin(), ") does not exist in ", dir.string());
    SafetensorsContents contents = parse_safetensors(dir / shard);
    std::set<std::string> present;
    for (const auto& t : contents.tensors) present.insert(t.name);
    for (const auto& name : names) {
      if (!present.count(name))
        fail(where, ": tensor ", name, " is listed in shard ", shard, " but that file does not contain it");
    }
    // The weight map is the authority: tensors a shard holds but the index does not list are skipped.
    for (auto& t : contents.tensors) {
      if (names.count(t.name)) into.add_mapped(std::move(t), contents.file);
    }
  }
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) fail("write_safetensors ", path.string(), ": tensor ", t.name, " given twice");
    const uint64_t expected = uint64_t(dtype_bytes_for(t.dtype, t.numel()));
    if (t.nbytes != expected)
      fail("write_safetensors ", path.string(), ": tensor ", t.name, " has ", t.nbytes, " bytes but shape ",
           shape_str(t.shape), " of ", dtype_name(t.dtype), " needs ", expected);
    header[t.name] = {{"dtype", std::string(dtype_safetensors_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned, as the HF writer does
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot create ", path.string());
  const uint64_t header_len = text.size();
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(t.data), std::streamsize(t.nbytes));
  if (!out) fail("error writing ", path.string());
}

namespace {

int64_t json_int(const json& q, std::initializer_list<const char*> keys, int64_t fallback, const std::string& where) {
  for (const char* key : keys) {
    if (!q.contains(key)) continue;
    if (!q[key].is_number_integer()) fail(where, ": quantization_config.", key, " is ", q[key].dump(), ", expected an integer");
    return q[key].get<int64_t>();
  }
  return fallback;
}

// One AWQ layer's three tensors, checked against each other before anything is read.
struct AwqLayer {
  const TensorRef *qweight = nullptr, *qzeros = nullptr, *scales = nullptr;
};

}  // namespace

std::optional<AwqConfig> read_awq_config(const std::filesystem::path& config_json) {
  const std::string where = config_json.string();
  std::ifstream in(config_json, std::ios::binary);
  if (!in) return std::nullopt;
  const json config = json::parse(in, nullptr, false);
  if (!config.is_object() || !config.contains("quantization_config")) return std::nullopt;
  const json& q = config["quantization_config"];
  if (!q.is_object()) fail(where, ": quantization_config is ", q.type_name(), ", expected an object");
  const std::string method = q.value("quant_method", "");
  if (method != "awq") {
    if (method.empty()) fail(where, ": quantization_config has no quant_method");
    fail(where, ": quantization_config.quant_method is \"", method, "\"; journey reads \"awq\" checkpoints only");
  }
  AwqConfig awq;
  awq.bits = json_int(q, {"bits", "w_bit"}, 4, where);
  awq.group_size = json_int(q, {"group_size", "q_group_size"}, 128, where);
  if (q.contains("version") && q["version"].is_string()) awq.version = q["version"].get<std::string>();
  std::string version = awq.version;
  for (char& ch : version) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (awq.bits != 4) fail(where, ": AWQ with ", awq.bits, "-bit weights; journey reads 4-bit AWQ only");
  if (awq.group_size <= 0) fail(where, ": AWQ group_size ", awq.group_size, " (journey needs a positive group size)");
  if (version != "gemm")
    fail(where, ": AWQ version \"", awq.version, "\"; journey reads the GEMM packing only (not GEMV, Marlin or ExLlama)");
  if (q.contains("zero_point") && q["zero_point"].is_boolean() && !q["zero_point"].get<bool>())
    fail(where, ": AWQ without zero points; journey reads zero_point = true checkpoints only");
  awq.version = "gemm";
  return awq;
}

namespace {
// An AWQ layer's scales as f16 bits, the type of Q4_1's scale: as stored when they are f16; from
// bf16 or f32 when every one of them is exactly an f16 value (a bf16 within f16's normal range is:
// 7 of f16's 10 mantissa bits; an f32 is when it was cast from AutoAWQ's f16); otherwise none, and
// the layer is widened to f32.
std::optional<std::vector<uint16_t>> awq_scales_as_f16(const TensorRef& scales) {
  const size_t count = size_t(scales.numel());
  std::vector<uint16_t> bits(count);  // [in/g, out]
  if (scales.dtype == DType::F16) {
    std::memcpy(bits.data(), scales.data, count * 2);
    return bits;
  }
  const std::vector<float> values = scales.to_f32();
  for (size_t i = 0; i < count; ++i) {
    bits[i] = f32_to_f16(values[i]);
    if (f16_to_f32(bits[i]) != values[i]) return std::nullopt;  // (a NaN fails too)
  }
  return bits;
}
}  // namespace

std::string AwqConversion::describe() const {
  if (as_f32 == 0) return cat(as_q4_1, " layers as Q4_1 blocks (4-bit in memory)");
  if (as_q4_1 == 0) return cat(as_f32, " layers dequantized to f32 at load");
  return cat(as_q4_1, " layers as Q4_1 blocks (4-bit in memory), ", as_f32, " dequantized to f32 at load");
}

AwqConversion convert_awq_weights(const AwqConfig& awq, WeightStore& weights, const std::string& where) {
  AwqConversion done;
  std::map<std::string, AwqLayer> layers;
  auto suffix = [](const std::string& name, const std::string& tail) {
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& [name, t] : weights.all()) {
    if (suffix(name, ".qweight")) layers[name.substr(0, name.size() - 8)].qweight = &t;
    else if (suffix(name, ".qzeros")) layers[name.substr(0, name.size() - 7)].qzeros = &t;
    else if (suffix(name, ".scales")) layers[name.substr(0, name.size() - 7)].scales = &t;
  }
  const int64_t g = awq.group_size;
  std::vector<std::pair<std::string, AwqLayer>> checked;
  for (const auto& [layer, l] : layers) {
    const std::string lw = cat(where, ": AWQ layer ", layer);
    if (!l.qweight || !l.qzeros || !l.scales)
      fail(lw, " lacks its ", !l.qweight ? "qweight" : !l.qzeros ? "qzeros" : "scales", " tensor");
    if (l.qweight->dtype != DType::I32 || l.qzeros->dtype != DType::I32)
      fail(lw, ": qweight and qzeros must be int32, found ", dtype_name(l.qweight->dtype), " and ", dtype_name(l.qzeros->dtype));
    if (!dtype_is_float(l.scales->dtype)) fail(lw, ": scales must be f16, bf16 or f32, found ", dtype_name(l.scales->dtype));
    if (l.qweight->shape.size() != 2 || l.qzeros->shape.size() != 2 || l.scales->shape.size() != 2)
      fail(lw, ": qweight, qzeros and scales must be 2-D, found ", shape_str(l.qweight->shape), ", ",
           shape_str(l.qzeros->shape), ", ", shape_str(l.scales->shape));
    const int64_t in = l.qweight->shape[0], out = l.qweight->shape[1] * 8;
    if (in % g != 0) fail(lw, ": ", in, " input features are not a multiple of the group size ", g);
    if (l.qzeros->shape != std::vector<int64_t>{in / g, out / 8} || l.scales->shape != std::vector<int64_t>{in / g, out})
      fail(lw, ": qweight ", shape_str(l.qweight->shape), " (", in, " inputs, ", out, " outputs, group ", g,
           ") needs qzeros [", in / g, ", ", out / 8, "] and scales [", in / g, ", ", out, "], found ",
           shape_str(l.qzeros->shape), " and ", shape_str(l.scales->shape));
    if (weights.has(layer + ".weight")) fail(lw, " also has a plain .weight tensor");
    checked.emplace_back(layer, l);
  }
  for (const auto& [layer, l] : checked) {
    const int64_t in = l.qweight->shape[0], out = l.qweight->shape[1] * 8;
    // copied out: safetensors offsets need not be 4-byte aligned
    std::vector<int32_t> qweight(l.qweight->nbytes / 4), qzeros(l.qzeros->nbytes / 4);  // [in, out/8], [in/g, out/8]
    std::memcpy(qweight.data(), l.qweight->data, qweight.size() * 4);
    std::memcpy(qzeros.data(), l.qzeros->data, qzeros.size() * 4);
    TensorRef t;
    t.name = layer + ".weight";
    t.shape = {out, in};
    std::shared_ptr<const void> owner;
    std::optional<std::vector<uint16_t>> f16_scales;  // [in/g, out] f16 bits
    if (g % quant::kQK == 0) f16_scales = awq_scales_as_f16(*l.scales);
    if (f16_scales) {
      // as Q4_1 blocks: the layer stays 4-bit in memory and in the fast backend's products
      const std::vector<uint16_t>& scales = *f16_scales;
      auto blocks = std::make_shared<std::vector<quant::block_q4_1>>(size_t(out * (in / quant::kQK)));  // [out, in/32]
      quant::awq_gemm_to_q4_1(qweight.data(), qzeros.data(), scales.data(), in, out, g, blocks->data());
      t.dtype = DType::Q4_1;
      t.data = reinterpret_cast<const std::byte*>(blocks->data());
      t.nbytes = blocks->size() * sizeof(quant::block_q4_1);
      t.source = cat(l.qweight->source, " (AWQ, as Q4_1 blocks)");
      owner = blocks;
      ++done.as_q4_1;
    } else {  // a group that splits Q4_1's blocks of 32, or scales that are not all f16 values: widened to f32
      const std::vector<float> scales = l.scales->to_f32();  // [in/g, out]
      auto values = std::make_shared<std::vector<float>>(size_t(in * out));  // [out, in]
      quant::dequantize_awq_gemm(qweight.data(), qzeros.data(), scales.data(), in, out, g, values->data());
      t.dtype = DType::F32;
      t.data = reinterpret_cast<const std::byte*>(values->data());
      t.nbytes = values->size() * sizeof(float);
      t.source = cat(l.qweight->source, " (AWQ, dequantized)");
      owner = values;
      ++done.as_f32;
    }
    for (const char* part : {".qweight", ".qzeros", ".scales"}) weights.remove(layer + part);
    weights.add(std::move(t), owner);
  }
  return done;
}

}  // namespace journey
