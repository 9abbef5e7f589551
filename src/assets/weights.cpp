// MappedFile, TensorRef and WeightStore: the on-disk view of weights every format reader fills.
#include "assets/weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "quant/dequantize.h"

namespace journey {

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", path.string(), ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat ", path.string(), ": ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path.string(), " is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(st.st_size);
  if (file->size_ > 0) {
    void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("cannot memory-map ", path.string(), " (", file->size_, " bytes): ", std::strerror(err));
    }
    file->data_ = static_cast<const std::byte*>(addr);
  }
  ::close(fd);  // the mapping stays valid after the descriptor is closed
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> TensorRef::to_f32() const {
  const int64_t n = numel();
  const int64_t block = dtype_block_size(dtype);
  const int64_t row = shape.empty() ? 1 : shape.back();
  if (row % block != 0)  // blocks never straddle rows
    fail("tensor ", name, " in ", source, " (", dtype_name(dtype), "): row length ", row,
         " is not a multiple of the ", dtype_name(dtype), " block size ", block);
  if (int64_t(nbytes) != dtype_bytes_for(dtype, n))
    fail("tensor ", name, " in ", source, ": ", nbytes, " bytes do not hold ", n, " elements of ", dtype_name(dtype),
         " (", dtype_bytes_for(dtype, n), " bytes)");
  std::vector<float> out(static_cast<size_t>(n));  // [numel]
  quant::dequantize(dtype, data, out.data(), n);
  return out;
}

void WeightStore::add(TensorRef t, std::shared_ptr<const void> keep_alive) {
  if (tensors_.count(t.name) != 0)
    fail("tensor ", t.name, " appears twice: in ", tensors_.at(t.name).source, " and in ", t.source);
  if (keep_alive) keep_alive_.push_back(std::move(keep_alive));
  std::string name = t.name;
  tensors_.emplace(std::move(name), std::move(t));
}

const TensorRef& WeightStore::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string sources;
    for (const auto& [_, t] : tensors_) {
      if (sources.find(t.source) == std::string::npos) sources += (sources.empty() ? "" : ", ") + t.source;
    }
    fail("missing tensor ", name, " (not found in ", sources.empty() ? std::string("an empty weight store") : sources, ")");
  }
  return it->second;
}

size_t WeightStore::total_bytes() const {
  size_t total = 0;
  for (const auto& [_, t] : tensors_) total += t.nbytes;
  return total;
}

std::string weight_type_summary(const WeightStore& weights) {
  std::map<std::string, int> counts;
  for (const auto& [name, t] : weights.all()) ++counts[std::string(dtype_name(t.dtype))];
  std::string out;
  for (const auto& [type, n] : counts) out += (out.empty() ? "" : ", ") + type + " x " + std::to_string(n);
  return out;
}

}  // namespace journey
