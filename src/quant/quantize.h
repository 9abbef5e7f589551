// Quantization: f32 -> GGML blocks, following llama.cpp's reference quantizers (ggml-quants.c,
// the `quantize_row_*_ref` functions that llama-quantize uses when no importance matrix is given).
//
// The legacy types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are one formula per block and produce the same
// bytes as llama.cpp. The K types search for good scales: per group, a few candidate scales
// (make_qx_quants, make_q3_quants) or scale-and-minimum pairs (make_qkx2_quants) are tried and the
// one with the smallest weighted squared (or absolute) error wins; then the group scales are
// themselves quantized to 4, 6 or 8 bits under one f16 super-scale, and the weights re-quantized
// with the scales as stored. tests/quant compares every type with llama.cpp's own files.
//
// Floating-point order matters for bit-identical output: every sum and product below is written in
// llama.cpp's order, and this module is compiled with -ffp-contract=off so that no build fuses
// a*b+c into one rounding where llama.cpp's reference build does not (see docs/quantization.md).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace journey::quant {

void quantize_row_q8_0(const float* x /*[n]*/, block_q8_0* out, int64_t n);
void quantize_row_q4_0(const float* x /*[n]*/, block_q4_0* out, int64_t n);
void quantize_row_q4_1(const float* x /*[n]*/, block_q4_1* out, int64_t n);
void quantize_row_q5_0(const float* x /*[n]*/, block_q5_0* out, int64_t n);
void quantize_row_q5_1(const float* x /*[n]*/, block_q5_1* out, int64_t n);
void quantize_row_q2_k(const float* x /*[n]*/, block_q2_k* out, int64_t n);
void quantize_row_q3_k(const float* x /*[n]*/, block_q3_k* out, int64_t n);
void quantize_row_q4_k(const float* x /*[n]*/, block_q4_k* out, int64_t n);
void quantize_row_q5_k(const float* x /*[n]*/, block_q5_k* out, int64_t n);
void quantize_row_q6_k(const float* x /*[n]*/, block_q6_k* out, int64_t n);

// f32 -> any block type (or F32/F16/BF16). `out` must hold dtype_bytes_for(type, n) bytes.
// Throws journey::Error when n is not a multiple of the block size or the type cannot be a weight.
void quantize(DType type, const float* x /*[n]*/, void* out, int64_t n);

}  // namespace journey::quant
