// Tensor shapes as every module prints and counts them: one formatter ("[5, 8, 8]") and one
// element count, so an error message about a shape reads the same whichever reader raised it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace journey {

// Product of the dimensions; 1 for a scalar (no dimensions).
int64_t shape_numel(std::span<const int64_t> shape);

// "[5, 8, 8]"; "[]" for a scalar.
std::string shape_string(std::span<const int64_t> shape);
inline std::string shape_string(const std::vector<int64_t>& shape) { return shape_string(std::span<const int64_t>(shape)); }

}  // namespace journey
