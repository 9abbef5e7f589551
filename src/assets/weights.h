// Weights as they lie on disk: a name -> (dtype, shape, bytes) index over memory-mapped files.
// Every format reader (safetensors, llama2.c, GGUF) produces a WeightStore with Hugging Face
// tensor names ("model.layers.0.self_attn.q_proj.weight"), so backends see one naming scheme.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace journey {

// A read-only memory map of a whole file; shared by all tensors that live in it.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);  // throws journey::Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

struct TensorRef {
  std::string name;                 // Hugging Face name
  DType dtype = DType::F32;
  std::vector<int64_t> shape;       // outermost first, as in PyTorch ([out_features, in_features] for Linear)
  const std::byte* data = nullptr;  // points into a MappedFile (or into owned storage)
  size_t nbytes = 0;
  std::string source;               // file it came from, for messages
  // data points into a MappedFile (WeightStore::add_mapped): its pages can be given back and read
  // again from the file (MADV_DONTNEED), which would zero owned storage
  bool file_mapped = false;

  int64_t numel() const;
  std::vector<float> to_f32() const;  // widen/dequantize a copy
};

class WeightStore {
 public:
  void add(TensorRef t, std::shared_ptr<const void> keep_alive);
  void add_mapped(TensorRef t, std::shared_ptr<const MappedFile> file) {  // t.data points into file
    t.file_mapped = true;
    add(std::move(t), std::move(file));
  }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  void remove(const std::string& name) { tensors_.erase(name); }  // its file stays mapped
  const TensorRef& get(const std::string& name) const;  // throws "missing tensor NAME" with the source
  const std::map<std::string, TensorRef>& all() const { return tensors_; }
  size_t total_bytes() const;
  // The owners of the tensors' bytes (file mappings, owned buffers): a backend that uses tensors
  // in place holds these so that the store may be released.
  const std::vector<std::shared_ptr<const void>>& owners() const { return keep_alive_; }

 private:
  std::map<std::string, TensorRef> tensors_;
  std::vector<std::shared_ptr<const void>> keep_alive_;
};

// "q4_K x 133, q6_K x 23, f32 x 45": how many tensors of each stored type (traces and bench print it).
std::string weight_type_summary(const WeightStore& weights);

}  // namespace journey
