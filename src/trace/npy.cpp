#include "trace/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/error.h"
#include "core/untrusted.h"

namespace journey {
namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then major, minor version bytes
constexpr size_t kMagicLen = 6;

static_assert(std::endian::native == std::endian::little, "the .npy writer assumes a little-endian host");

std::string make_header(NpyDType dtype, std::span<const int64_t> shape) {
  std::string dict = cat("{'descr': '", npy_descr(dtype), "', 'fortran_order': False, 'shape': (");
  for (size_t i = 0; i < shape.size(); ++i) dict += cat(i ? ", " : "", shape[i]);
  if (shape.size() == 1) dict += ",";  // Python's one-element tuple: (5,)
  dict += "), }";
  // Pad with spaces and end with '\n' so that magic + version + length + header is a multiple of 64.
  const size_t prefix = kMagicLen + 2 + 2;
  size_t total = prefix + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  return dict;
}

void write_any(const std::filesystem::path& path, NpyDType dtype, const void* data, size_t count,
               std::span<const int64_t> shape) {
  for (int64_t d : shape)
    if (d < 0) fail(path.string(), ": negative dimension in shape ", shape_string(shape));
  if (static_cast<int64_t>(count) != shape_numel(shape))
    fail(path.string(), ": ", count, " values do not fill shape ", shape_string(shape), " (", shape_numel(shape),
         " elements)");
  const std::string header = make_header(dtype, shape);
  if (header.size() > 65535) fail(path.string(), ": shape too long for a version 1.0 .npy header");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot open ", path.string(), " for writing");
  out.write(kMagic, kMagicLen);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t header_len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(header_len & 0xff), static_cast<char>(header_len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
  if (!out) fail("error while writing ", path.string());
}

// The header is a Python dict literal; numpy writes the keys in a fixed order but we parse by key
// so that hand-written files with another order are accepted too.
std::string dict_value(const std::string& dict, const std::string& key, const std::filesystem::path& path) {
  const std::string quoted = cat("'", key, "'");
  size_t at = dict.find(quoted);
  if (at == std::string::npos) fail(path.string(), ": .npy header has no ", quoted, " entry: ", dict);
  at = dict.find(':', at + quoted.size());
  if (at == std::string::npos) fail(path.string(), ": .npy header entry ", quoted, " has no value");
  ++at;
  while (at < dict.size() && dict[at] == ' ') ++at;
  size_t end = at;
  if (at < dict.size() && dict[at] == '(') {
    end = dict.find(')', at);
    if (end == std::string::npos) fail(path.string(), ": .npy header: unterminated shape tuple");
    return dict.substr(at, end - at + 1);
  }
  if (at < dict.size() && dict[at] == '\'') {
    end = dict.find('\'', at + 1);
    if (end == std::string::npos) fail(path.string(), ": .npy header: unterminated string for ", quoted);
    return dict.substr(at + 1, end - at - 1);
  }
  while (end < dict.size() && dict[end] != ',' && dict[end] != '}') ++end;
  std::string value = dict.substr(at, end - at);
  while (!value.empty() && value.back() == ' ') value.pop_back();
  return value;
}

std::vector<int64_t> parse_shape(const std::string& tuple, const std::filesystem::path& path) {
  std::vector<int64_t> shape;
  std::string inner = tuple.substr(1, tuple.size() - 2);
  std::stringstream items(inner);
  std::string item;
  while (std::getline(items, item, ',')) {
    size_t b = item.find_first_not_of(' ');
    if (b == std::string::npos) continue;  // trailing comma of "(5,)"
    size_t e = item.find_last_not_of(" L");  // Python 2 wrote long integers as 5L
    std::string digits = item.substr(b, e - b + 1);
    // At most 18 digits: std::stoll cannot overflow (a longer dimension could not fit a file anyway).
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
      fail(path.string(), ": .npy header: bad dimension '", excerpt(digits), "' in shape ", excerpt(tuple));
    shape.push_back(std::stoll(digits));
  }
  return shape;
}

}  // namespace

std::string_view npy_descr(NpyDType dtype) { return dtype == NpyDType::F32 ? "<f4" : "<i4"; }

int64_t NpyArray::numel() const { return shape_numel(shape); }

void write_npy(const std::filesystem::path& path, std::span<const float> values, std::span<const int64_t> shape) {
  write_any(path, NpyDType::F32, values.data(), values.size(), shape);
}

void write_npy(const std::filesystem::path& path, std::span<const int32_t> values, std::span<const int64_t> shape) {
  write_any(path, NpyDType::I32, values.data(), values.size(), shape);
}

NpyArray read_npy(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path.string(), " (.npy file)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kMagicLen + 4 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    fail(path.string(), ": not a .npy file (expected the magic \\x93NUMPY at the start)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(path.string(), ": truncated .npy header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    fail(path.string(), ": unsupported .npy version ", major, ".", int(static_cast<unsigned char>(bytes[7])),
         " (expected 1.0, 2.0 or 3.0)");
  }
  if (header_start + header_len > bytes.size())
    fail(path.string(), ": .npy header claims ", header_len, " bytes but the file has only ", bytes.size());
  const std::string dict = bytes.substr(header_start, header_len);

  NpyArray array;
  const std::string descr = dict_value(dict, "descr", path);
  if (descr == "<f4") array.dtype = NpyDType::F32;
  else if (descr == "<i4") array.dtype = NpyDType::I32;
  else fail(path.string(), ": dtype '", descr, "' is not supported (expected '<f4' or '<i4')");
  const std::string fortran = dict_value(dict, "fortran_order", path);
  if (fortran != "False") fail(path.string(), ": fortran_order is ", fortran, "; only C order (False) is supported");
  const std::string tuple = dict_value(dict, "shape", path);
  if (tuple.empty() || tuple.front() != '(') fail(path.string(), ": .npy header shape is not a tuple: ", tuple);
  array.shape = parse_shape(tuple, path);
  // The element count, checked as it is multiplied: (2^32, 2^32) wrapped to 0 elements and was
  // accepted with no data (fuzz/crashes/trace). No shape can need more elements than the file has bytes.
  uint64_t elements = 1;
  for (int64_t d : array.shape)
    if (__builtin_mul_overflow(elements, uint64_t(d), &elements) || elements > bytes.size())
      fail(path.string(), ": shape ", shape_string(array.shape), " needs more data than the whole file (",
           bytes.size(), " bytes)");

  const size_t data_start = header_start + header_len;
  const size_t expected = static_cast<size_t>(array.numel()) * 4;
  const size_t found = bytes.size() - data_start;
  if (found != expected)
    fail(path.string(), ": shape ", shape_string(array.shape), " of ", descr, " needs ", expected,
         " data bytes, found ", found);
  // An empty array (a zero in its shape) copies nothing: memcpy from or to an empty vector's null
  // data() is undefined even for 0 bytes (UBSan, fuzz/crashes/trace/npy-zero-elements.txt).
  if (array.dtype == NpyDType::F32) {
    array.f32.resize(array.numel());
    if (expected > 0) std::memcpy(array.f32.data(), bytes.data() + data_start, expected);
  } else {
    array.i32.resize(array.numel());
    if (expected > 0) std::memcpy(array.i32.data(), bytes.data() + data_start, expected);
  }
  return array;
}

}  // namespace journey
