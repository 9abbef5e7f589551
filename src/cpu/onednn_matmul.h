// oneDNN's matmul (Intel's oneAPI Deep Neural Network Library, Debian's libdnnl-dev) on journey's
// weight layout: an implementation of the prefill's products that journey did not write, for two
// uses (issue #11). As a reference, tests/cpu/test_onednn.cpp checks it against a double-precision
// loop, so it can stand beside the reference backend when journey's own GEMM kernels are tested. As
// a ceiling, measure() times the kernel oneDNN picks for this CPU (on a Xeon with AMX its brgemm
// AMX kernels) on the prefill's shapes, which tests/cpu/bench_prefill_gemm prints beside Eigen's
// f32 GEMM and journey's kernels.
//
// oneDNN is optional (CMake option JOURNEY_ONEDNN, on when the package is found); without it
// available() is false, matmul() fails with an error that says so, and measure() returns
// {0, "not built"}.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace journey::cpu::onednn {

// Whether journey was built with oneDNN (compile definition JOURNEY_HAVE_ONEDNN).
bool available();
// Whether oneDNN multiplies `type` (as matmul() takes it) on this CPU: built with oneDNN and a
// primitive can be made. oneDNN 2.6 has no bf16 matmul below AVX-512 (an AMD Zen 3 refuses it:
// "could not create a primitive descriptor iterator"); f32 and the int8 form run everywhere.
bool supports(DType type);

// y = x · weightᵀ, the product of a linear layer over M tokens:
//   y       [M, N] f32
//   x       [M, K] of `type`
//   weight  [N, K] of `type`, row-major as journey stores weights (one row per output)
// type F32 (x and weight float), BF16 (x and weight bf16 as uint16_t; products and sums in f32) or
// U8, oneDNN's int8 form (x uint8_t, the weight int8_t; exact int32 sums, written as f32): the
// instructions of journey's integer prefill (AVX2 vpmaddubsw, AVX512-VNNI vpdpbusd).
// `threads`: OpenMP threads for this call (0 = every core, core/threads.h). Fails with a
// journey::Error for any other type, a non-positive size, or when built without oneDNN.
void matmul(float* y, const void* x, const void* weight, int64_t M, int64_t K, int64_t N, DType type, int threads);

struct MatmulRate {
  double gflop_s = 0;          // best of the timed runs, 2·M·K·N operations per run, wall clock
  std::string implementation;  // oneDNN's name of the kernel it chose, e.g. "brg:avx512_core_amx"
};

// How measure() hands oneDNN the weight. AsStored: journey's [N, K] rows, as matmul() does; a
// kernel that wants another layout (AMX wants bf16 pairs of k interleaved) repacks the weight inside
// every call, and that is timed. Prepacked: in the layout oneDNN picks for this shape and kernel
// (format_tag::any), reordered once before the timing, as an engine would at load: the kernel's
// own rate, the ceiling for a kernel that is free to choose its weight layout.
enum class WeightLayout { AsStored, Prepacked };

// Times matmul()'s primitive on random data of this shape: the primitive and the buffers are made
// once (the weight is a full [N, K] matrix, so it is read from wherever that size lives in the
// cache hierarchy), then it runs for about `seconds` (at least 3 runs) and the best run counts.
// {0, "not built"} without oneDNN; fails like matmul() for a type or size it refuses.
MatmulRate measure(int threads, int64_t M, int64_t K, int64_t N, DType type, double seconds = 0.3,
                   WeightLayout layout = WeightLayout::AsStored);

}  // namespace journey::cpu::onednn
