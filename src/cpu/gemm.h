// The small-batch matrix product behind cpu::linear: y = x W^T (+ bias) for a block of output rows,
// with W [out, in] row-major as stored, never repacked.
//
// Why not Eigen: for T = 2..128 tokens Eigen's GEMM copies ("packs") every weight block before
// using it once or a few times; on a 2-core machine that copy took 43% of a 16-token step. Here
// each weight row is read straight from memory into registers, multiplied with a small tile of
// tokens held alongside it, and never touched again (see gemm.cpp for the tiling).
#pragma once

#include <cstdint>

namespace journey::cpu::gemm {

// The instruction sets the kernel is compiled for. All three are built into every binary (GCC
// target attributes), whatever -march the build uses; the CPU picks one at run time.
enum class Isa {
  Generic,  // x86-64 baseline (SSE2) or any other CPU: 4-float vectors
  Avx2,     // AVX2 + FMA: 8-float vectors
  Avx512,   // AVX-512F: 16-float vectors
};

// The best Isa this CPU runs.
Isa best_isa();
// Whether this CPU can run `isa` (tests run every supported one).
bool supports(Isa isa);
const char* isa_name(Isa isa);

// Columns [row_begin, row_end) of y = x W^T (+ bias): output rows row_begin.. of W, all T tokens.
// Single-threaded; cpu::linear gives each thread its own row range.
void linear_rows(Isa isa,
                 float* y,             // [T, out], only columns [row_begin, row_end) written
                 const float* x,       // [T, in]
                 const float* weight,  // [out, in]
                 const float* bias,    // [out] or nullptr
                 int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end);

}  // namespace journey::cpu::gemm
