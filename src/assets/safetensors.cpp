#include "assets/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
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
  for (auto& t : contents.tensors) into.add(std::move(t), contents.file);
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
      if (names.count(t.name)) into.add(std::move(t), contents.file);
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

}  // namespace journey
