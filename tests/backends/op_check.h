// The op test harness: runs every op of an OpBackend on random inputs of odd sizes (1, 3, 17, 63,
// 4097, ...), runs the reference op on the same inputs, and compares them by normalized squared
// error with a tolerance per op and per weight type. Every output lives between guard regions
// filled with a sentinel, and is poisoned with NaN before the call, so a stray write past an
// output or an element left unwritten is a failure too. It returns the failures instead of
// asserting, so a test can also check that a planted bug IS found, and named.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/op_backend.h"

namespace journey::optest {

struct OpFailure {
  std::string op;      // "rope", "linear", ...
  std::string where;   // the case: sizes, layout, weight type
  std::string what;    // "NMSE 3.1e-02 > 1e-10", "wrote past its output", ...
};

// The bound for a product with weights stored as `type` (the reference multiplies by the same values
// widened to f32 — dequantized by quant::dequantize — so only the backend's own rounding of the
// activations remains). For f32 it bounds the NMSE; for stored types the squared error relative to
// the power of the product's terms, sum_k (sum_t x[t,k]^2)(sum_o W[o,k]^2), which is what NMSE
// would be if no output were a near-cancelling sum (for rounding errors of x: the NMSE of x):
//   f32 1e-10: the summation order;
//   f16 1e-6, bf16 1e-4: activations rounded to the weight type for a GEMM (CUDA; the CPU widens
//     f16 exactly, and rounds x to bf16 only for prefill: relative 2^-9, NMSE ~1e-6); f16 prefill
//     (T > 16) 1e-4 too: on AMX tiles the CPU rounds x to bf16 for f16 weights as well (the
//     weights stay exact: bf16 + remainder);
//   legacy block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) 5e-4: x quantized to Q8_0, one scale per 32
//     values: the rounding step is max|x| / 127 over the block, a uniform error of variance
//     step^2 / 12; for N(0, 1) inputs max|x| ~ 2.2 over 32 values, so ~(2.2 / 127)^2 / 12 = 2.5e-5
//     on average. One output's squared error is chi-square distributed (one degree of freedom), so
//     the largest of the ~700 small cases reaches ~5-10x the average: measured 1.0e-4. The bound is
//     20x the average; a wrong nibble, scale or minimum gives ~1e-2 .. 1;
//   K types (Q2_K .. Q6_K) 1e-3: x quantized to Q8_K, one scale per 256 values: max|x| ~ 2.9,
//     ~4.3e-5 on average, measured at most 2.4e-4; the same 20x.
// Prefill (more than 16 tokens) of block types rounds x and the dequantized weights to bf16
// (relative 2^-9 each, ~3e-6), well inside these bounds.
double weight_tolerance(DType type, int64_t T = 1);  // T: tokens in the product

// worst_product_error (optional): per stored weight type, the largest relative error of a product
// seen (|y - want|^2 / sum_k (sum_t x[t,k]^2)(sum_o W[o,k]^2), see weight_tolerance), for the docs.
std::vector<OpFailure> check_ops(OpBackend& backend, std::map<DType, double>* worst_product_error = nullptr);

// One line per failure, for a test's message.
std::string describe(const std::vector<OpFailure>& failures);

}  // namespace journey::optest
