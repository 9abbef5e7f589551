// The op test harness: runs every op of an OpBackend on random inputs of odd sizes (1, 3, 17, 63,
// 4097, ...), runs the reference op on the same inputs, and compares them by normalized squared
// error with a tolerance per op and per weight type. Every output lives between guard regions
// filled with a sentinel, and is poisoned with NaN before the call, so a stray write past an
// output or an element left unwritten is a failure too. It returns the failures instead of
// asserting, so a test can also check that a planted bug IS found, and named.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/op_backend.h"

namespace journey::optest {

struct OpFailure {
  std::string op;      // "rope", "linear", ...
  std::string where;   // the case: sizes, layout, weight type
  std::string what;    // "NMSE 3.1e-02 > 1e-10", "wrote past its output", ...
};

// The NMSE bound for a product with weights stored as `type` (the reference multiplies by the same
// values widened to f32, so only the backend's own rounding remains): f32 1e-10 (summation order),
// f16 1e-6 and bf16 1e-4 (activations rounded to the weight type for a GEMM: 2^-11 / 2^-8 relative).
double weight_tolerance(DType type);

std::vector<OpFailure> check_ops(OpBackend& backend);

// One line per failure, for a test's message.
std::string describe(const std::vector<OpFailure>& failures);

}  // namespace journey::optest
