// GGUF v3 writer: the mirror of GgufFile::open, byte for byte in llama.cpp's order.
#include "assets/gguf_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace journey {
namespace fs = std::filesystem;
namespace {

class Out {
 public:
  explicit Out(const fs::path& path) : path_(path), file_(path, std::ios::binary | std::ios::trunc) {
    if (!file_) fail("cannot create ", path.string());
  }
  void bytes(const void* p, size_t n) {
    file_.write(static_cast<const char*>(p), std::streamsize(n));
    if (!file_) fail("error writing ", path_.string(), " (disk full?)");
    pos_ += n;
  }
  template <typename T>
  void put(T v) { bytes(&v, sizeof(T)); }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[64] = {};
    while (pos_ % alignment != 0) bytes(zeros, std::min<uint64_t>(sizeof(zeros), alignment - pos_ % alignment));
  }
  uint64_t pos() const { return pos_; }
  void close() {
    file_.close();
    if (!file_) fail("error closing ", path_.string());
  }

 private:
  fs::path path_;
  std::ofstream file_;
  uint64_t pos_ = 0;
};

void write_value(Out& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8: out.put<uint8_t>(uint8_t(v.u)); break;
    case GgufType::I8: out.put<int8_t>(int8_t(v.i)); break;
    case GgufType::U16: out.put<uint16_t>(uint16_t(v.u)); break;
    case GgufType::I16: out.put<int16_t>(int16_t(v.i)); break;
    case GgufType::U32: out.put<uint32_t>(uint32_t(v.u)); break;
    case GgufType::I32: out.put<int32_t>(int32_t(v.i)); break;
    case GgufType::U64: out.put<uint64_t>(v.u); break;
    case GgufType::I64: out.put<int64_t>(v.i); break;
    case GgufType::F32: out.put<float>(float(v.f)); break;
    case GgufType::F64: out.put<double>(v.f); break;
    case GgufType::Bool: out.put<uint8_t>(v.b ? 1 : 0); break;
    case GgufType::String: out.string(v.s); break;
    case GgufType::Array:
      out.put<uint32_t>(uint32_t(v.elem_type));
      out.put<uint64_t>(v.items.size());
      for (const GgufValue& item : v.items) write_value(out, item);
      break;
  }
}

uint64_t aligned(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

GgufValue gguf_string(std::string s) {
  GgufValue v;
  v.type = GgufType::String;
  v.s = std::move(s);
  return v;
}

GgufValue gguf_u32(uint32_t x) {
  GgufValue v;
  v.type = GgufType::U32;
  v.u = x;
  v.i = x;
  return v;
}

GgufValue gguf_i32(int32_t x) {
  GgufValue v;
  v.type = GgufType::I32;
  v.i = x;
  v.u = uint64_t(int64_t(x));
  return v;
}

GgufValue gguf_f32(float x) {
  GgufValue v;
  v.type = GgufType::F32;
  v.f = x;
  return v;
}

GgufValue gguf_bool(bool x) {
  GgufValue v;
  v.type = GgufType::Bool;
  v.b = x;
  v.i = x;
  return v;
}

namespace {
template <typename T, typename Make>
GgufValue array_of(GgufType elem, const std::vector<T>& items, Make make) {
  GgufValue v;
  v.type = GgufType::Array;
  v.elem_type = elem;
  v.items.reserve(items.size());
  for (const T& item : items) v.items.push_back(make(item));
  return v;
}
}  // namespace

GgufValue gguf_string_array(const std::vector<std::string>& items) { return array_of(GgufType::String, items, gguf_string); }
GgufValue gguf_f32_array(const std::vector<float>& items) { return array_of(GgufType::F32, items, gguf_f32); }
GgufValue gguf_i32_array(const std::vector<int32_t>& items) { return array_of(GgufType::I32, items, gguf_i32); }

void GgufWriter::set(const std::string& key, GgufValue value) {
  remove(key);
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::remove(const std::string& key) {
  kv_.erase(std::remove_if(kv_.begin(), kv_.end(), [&](const auto& kv) { return kv.first == key; }), kv_.end());
}

bool GgufWriter::has(const std::string& key) const {
  return std::any_of(kv_.begin(), kv_.end(), [&](const auto& kv) { return kv.first == key; });
}

void GgufWriter::add_tensor(GgufTensorPlan plan) {
  if (plan.shape.empty() || plan.shape.size() > 4) fail("GGUF writer: tensor ", plan.name, " has ", plan.shape.size(), " dimensions (1 to 4)");
  if (plan.shape.back() % dtype_block_size(plan.dtype) != 0)
    fail("GGUF writer: tensor ", plan.name, ": row length ", plan.shape.back(), " is not a multiple of the ",
         dtype_name(plan.dtype), " block size ", dtype_block_size(plan.dtype));
  for (const auto& t : tensors_)
    if (t.name == plan.name) fail("GGUF writer: tensor ", plan.name, " added twice");
  ggml_type_of(plan.dtype);  // throws for types GGUF cannot hold
  tensors_.push_back(std::move(plan));
}

void GgufWriter::write(const fs::path& path, const std::function<void(size_t, std::vector<std::byte>&)>& produce) const {
  // general.alignment, when set (copied from a source file), is honoured as readers will expect it
  uint64_t alignment = kAlignment;
  for (const auto& [key, value] : kv_)
    if (key == "general.alignment") {
      alignment = value.u;
      if (value.type != GgufType::U32 || alignment == 0 || (alignment & (alignment - 1)) != 0)
        fail("GGUF writer: general.alignment must be a u32 power of two, found ", value.i);
    }
  const fs::path partial = path.string() + ".partial";
  try {
    Out out(partial);
    out.bytes("GGUF", 4);
    out.put<uint32_t>(3);
    out.put<uint64_t>(tensors_.size());
    out.put<uint64_t>(kv_.size());
    for (const auto& [key, value] : kv_) {
      out.string(key);
      out.put<uint32_t>(uint32_t(value.type));
      write_value(out, value);
    }
    std::vector<uint64_t> sizes;  // [n_tensors] bytes of each tensor
    uint64_t offset = 0;
    for (const GgufTensorPlan& t : tensors_) {
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      sizes.push_back(uint64_t(dtype_bytes_for(t.dtype, numel)));
      out.string(t.name);
      out.put<uint32_t>(uint32_t(t.shape.size()));
      for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) out.put<uint64_t>(uint64_t(*d));  // ggml ne: innermost first
      out.put<uint32_t>(ggml_type_of(t.dtype));
      out.put<uint64_t>(offset);
      offset += aligned(sizes.back(), alignment);
    }
    out.pad_to(alignment);
    std::vector<std::byte> data;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      data.clear();
      produce(i, data);
      if (data.size() != sizes[i])
        fail("GGUF writer: tensor ", tensors_[i].name, " (", dtype_name(tensors_[i].dtype), ") produced ", data.size(),
             " bytes, its shape and type need ", sizes[i]);
      out.bytes(data.data(), data.size());
      out.pad_to(alignment);
    }
    out.close();
    fs::rename(partial, path);
  } catch (...) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    throw;
  }
}

}  // namespace journey
