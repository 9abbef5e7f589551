// GGUF (llama.cpp's single-file model format, version 3): a typed key/value metadata table, a
// tensor index and an aligned data section, all little-endian. GgufFile maps the file, validates
// every length and offset against the file size, and answers typed metadata queries; the llama
// helpers below turn a GGUF llama model into journey's config and Hugging Face tensor names.
//
// Layout: "GGUF" u32 version u64 n_tensors u64 n_kv, then n_kv x {string key, u32 type, value},
// then n_tensors x {string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset},
// padding to general.alignment (default 32), then the tensor data (offsets relative to its start).
// Strings are u64 length + bytes (no terminator). ggml lists dimensions innermost first; journey
// reverses them so shapes read outermost first, as in PyTorch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "assets/weights.h"
#include "core/config.h"
#include "core/dtype.h"

namespace journey {

// GGUF metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars use the field that matches their type (integers: `i`, with `u` for
// the unsigned ones; floats: `f`); arrays keep their element type and items (which may be arrays).
struct GgufValue {
  GgufType type = GgufType::U8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  GgufType elem_type = GgufType::U8;  // arrays only
  std::vector<GgufValue> items;       // arrays only
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // outermost first, i.e. reversed ggml ne
  DType dtype = DType::F32;
  uint64_t offset = 0;         // relative to the start of the data section
  size_t nbytes = 0;
};

class GgufFile {
 public:
  static GgufFile open(const std::filesystem::path& path);  // throws journey::Error

  uint32_t version() const { return version_; }
  bool has(std::string_view key) const;
  std::vector<std::string> keys() const;  // in file order
  const GgufValue& value(std::string_view key) const;  // throws "missing key"

  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;  // any integer or bool type
  double get_float(std::string_view key) const; // any float or integer type
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;  // numeric elements
  std::vector<int64_t> get_int_array(std::string_view key) const;   // integer/bool elements
  // Short human-readable rendering of a value ("llama", "32000 x string", ...), for inspect.
  std::string summary(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const std::byte* tensor_data(const GgufTensorInfo& t) const;
  const std::filesystem::path& path() const { return path_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }
  std::shared_ptr<const MappedFile> mapping() const { return file_; }

 private:
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::vector<std::string> key_order_;
  std::map<std::string, GgufValue, std::less<>> values_;
  std::vector<GgufTensorInfo> tensors_;
  uint64_t alignment_ = 32;
  uint64_t data_start_ = 0;
};

// ggml type numbers (ggml.h: 0 = F32, 1 = F16, 2 = Q4_0, ..., 12 = Q4_K, ..., 30 = BF16) <-> DType.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);  // nullopt for types journey does not hold
uint32_t ggml_type_of(DType dtype);                         // throws for types GGUF cannot hold (U8)
std::string ggml_type_label(uint32_t ggml_type);            // "Q4_K (#12)", "#99 (unknown ...)"
std::string ggml_supported_types();                         // "F32, F16, Q4_0, ..." for messages

// general.file_type (llama_ftype, llama.h) <-> "mostly q4_k_m" and friends.
std::string gguf_file_type_name(int64_t file_type);      // "gguf file_type N" for numbers it does not know
int64_t gguf_file_type_number(std::string_view name);    // throws for names it does not know

// True when the file starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

// general.architecture "llama" -> ModelConfig (RopeLayout::Interleaved: llama.cpp's converter
// stores Q/K rows in Meta's interleaved order). Throws for other architectures.
ModelConfig gguf_model_config(const GgufFile& gguf);

// GGUF tensor name -> Hugging Face name ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight");
// names without a mapping are returned unchanged.
std::string gguf_to_hf_name(const std::string& gguf_name);
// The inverse ("model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"); unknown names unchanged.
std::string hf_to_gguf_name(const std::string& hf_name);

// Every tensor of the file, zero-copy, under its Hugging Face name.
WeightStore gguf_weights(const GgufFile& gguf);

}  // namespace journey
