// Which compiled variant of the kernels (cpu/kernels.h) runs, and the f32 small-batch product
// behind cpu::linear: y = x W^T (+ bias) for a block of output rows, W [out, in] row-major as
// stored, never repacked.
//
// Why not Eigen: for T = 2..16 tokens Eigen's GEMM copies ("packs") every weight block before
// using it once or a few times; on a 2-core machine that copy took 43% of a 16-token step. Here
// each weight row is read straight from memory into registers, multiplied with a small tile of
// tokens held alongside it, and never touched again (kernels_impl.inc, part 1, draws the tiling).
#pragma once

#include <cstdint>

#include "cpu/kernels.h"

namespace journey::cpu::gemm {

using kernels::Isa;
using kernels::best_isa;
using kernels::isa_name;
using kernels::supports;

// Columns [row_begin, row_end) of y = x W^T (+ bias): output rows row_begin.. of W, all T tokens.
// Single-threaded; cpu::linear gives each thread its own row range.
void linear_rows(Isa isa,
                 float* y,             // [T, out], only columns [row_begin, row_end) written
                 const float* x,       // [T, in]
                 const float* weight,  // [out, in]
                 const float* bias,    // [out] or nullptr
                 int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end);

}  // namespace journey::cpu::gemm
