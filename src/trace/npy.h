// NumPy's .npy format, the one file type of a trace dump: a magic string, a version, a small
// Python-dict header ('descr', 'fortran_order', 'shape') and the raw array. We write version 1.0,
// little-endian, C order, and only the two dtypes a dump holds: '<f4' (tensors) and '<i4'
// (token ids, block tables). The reader accepts exactly what we and numpy.save write for those
// dtypes and rejects anything else with a message that names the file and the offending field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "core/shape.h"

namespace journey {

enum class NpyDType { F32, I32 };

std::string_view npy_descr(NpyDType dtype);  // "<f4", "<i4"

struct NpyArray {
  NpyDType dtype = NpyDType::F32;
  std::vector<int64_t> shape;  // outermost first; {} is a scalar (one element)
  std::vector<float> f32;      // [numel] when dtype == F32
  std::vector<int32_t> i32;    // [numel] when dtype == I32

  int64_t numel() const;
};


// Write a float32 / int32 array. values.size() must equal the product of shape. Throws journey::Error.
void write_npy(const std::filesystem::path& path, std::span<const float> values, std::span<const int64_t> shape);
void write_npy(const std::filesystem::path& path, std::span<const int32_t> values, std::span<const int64_t> shape);

// Read a .npy file; throws journey::Error naming the file and what is wrong (magic, version, header,
// dtype, fortran_order, size).
NpyArray read_npy(const std::filesystem::path& path);

}  // namespace journey
