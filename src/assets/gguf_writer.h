// Writing GGUF v3 (the layout gguf.h draws): metadata key/values in the order they were set, the
// tensor index, then each tensor's bytes at its aligned offset. Tensors are declared first (name,
// type, shape) so every offset is known before any data is produced; their bytes are then streamed
// one tensor at a time, so a model never has to be held in memory whole. The file appears under its
// name only when complete (written to NAME.partial, then renamed).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "assets/gguf.h"

namespace journey {

// Metadata values for the writer (GgufValue holds what the reader found; these build new ones).
GgufValue gguf_string(std::string s);
GgufValue gguf_u32(uint32_t v);
GgufValue gguf_i32(int32_t v);
GgufValue gguf_f32(float v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string_array(const std::vector<std::string>& items);
GgufValue gguf_f32_array(const std::vector<float>& items);
GgufValue gguf_i32_array(const std::vector<int32_t>& items);

struct GgufTensorPlan {
  std::string name;            // as stored ("blk.0.attn_q.weight")
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // outermost first (journey's order); written reversed, as ggml's ne
};

class GgufWriter {
 public:
  // Append a key, or replace it: like llama.cpp's gguf_set_val, the old entry is removed and the new
  // one goes to the end.
  void set(const std::string& key, GgufValue value);
  void remove(const std::string& key);
  bool has(const std::string& key) const;

  void add_tensor(GgufTensorPlan plan);  // throws when rows are not whole blocks of its type
  const std::vector<GgufTensorPlan>& tensors() const { return tensors_; }

  // Write the file. `produce(i, out)` fills out with tensor i's bytes (dtype_bytes_for its shape);
  // it is called once per tensor, in order. Throws journey::Error (and leaves no file) on any failure.
  void write(const std::filesystem::path& path,
             const std::function<void(size_t index, std::vector<std::byte>& out)>& produce) const;

  static constexpr uint64_t kAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT, unless general.alignment is set

 private:
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorPlan> tensors_;
};

}  // namespace journey
