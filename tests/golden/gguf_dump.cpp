// gguf_dump FILE OUT_DIR: what journey reads from a GGUF file, written where Python can compare
// it with llama.cpp's own reader (gguf-py): tests/golden/check_gguf_vs_gguf_py.py.
//
//   OUT_DIR/metadata.json  {"version", "alignment", "data_start", "keys": [{"key", "type", "value"}]}
//                          in file order; "type" is the GGUF type number, arrays hold their items
//   OUT_DIR/tensors.json   [{"name", "shape" (outermost first), "dtype", "offset", "nbytes", "file"}]
//   OUT_DIR/<i>.npy        each tensor widened / dequantized to f32 by journey (quant::dequantize)
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "assets/gguf.h"
#include "core/dtype.h"
#include "quant/dequantize.h"
#include "trace/npy.h"

namespace {

nlohmann::json value_json(const journey::GgufValue& v) {
  using journey::GgufType;
  switch (v.type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64: return v.u;
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64: return v.i;
    case GgufType::F32: case GgufType::F64: return v.f;
    case GgufType::Bool: return v.b;
    case GgufType::String: return v.s;
    case GgufType::Array: {
      nlohmann::json items = nlohmann::json::array();
      for (const auto& item : v.items) items.push_back(value_json(item));
      return {{"elem_type", static_cast<uint32_t>(v.elem_type)}, {"items", items}};
    }
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gguf_dump FILE.gguf OUT_DIR\n");
    return 2;
  }
  try {
    namespace fs = std::filesystem;
    const journey::GgufFile gguf = journey::GgufFile::open(argv[1]);
    const fs::path out = argv[2];
    fs::create_directories(out);
    nlohmann::json keys = nlohmann::json::array();
    for (const std::string& key : gguf.keys()) {
      const journey::GgufValue& v = gguf.value(key);
      keys.push_back({{"key", key}, {"type", static_cast<uint32_t>(v.type)}, {"value", value_json(v)}});
    }
    std::ofstream(out / "metadata.json") << nlohmann::json{{"version", gguf.version()}, {"alignment", gguf.alignment()},
                                                          {"data_start", gguf.data_start()}, {"keys", keys}}.dump();
    nlohmann::json tensors = nlohmann::json::array();
    int index = 0;
    for (const journey::GgufTensorInfo& t : gguf.tensors()) {
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      std::vector<float> values(static_cast<size_t>(numel));  // [numel], t.shape outermost first
      journey::quant::dequantize(t.dtype, gguf.tensor_data(t), values.data(), numel);
      const std::string file = std::to_string(index++) + ".npy";
      journey::write_npy(out / file, values, t.shape);
      tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", journey::dtype_name(t.dtype)},
                         {"offset", t.offset}, {"nbytes", t.nbytes}, {"file", file}});
    }
    std::ofstream(out / "tensors.json") << tensors.dump();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_dump: %s\n", e.what());
    return 1;
  }
}
