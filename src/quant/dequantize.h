// Dequantization: GGML blocks -> f32, one plain function per block type.
//
// These are the reference every faster kernel is tested against, so they are written to be read:
// one loop per block, the formula of blocks.h spelled out, no SIMD, no tables. Each takes n, the
// number of weights (a multiple of the type's block size: 32, or 256 for the K types), and writes
// out[0..n). They were written from the layouts in ggml-common.h and are checked against values
// dequantized by llama.cpp's Python package gguf-py (tests/quant).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "quant/blocks.h"

namespace journey::quant {

void dequantize_row_q8_0(const block_q8_0* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q4_0(const block_q4_0* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q4_1(const block_q4_1* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q5_0(const block_q5_0* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q5_1(const block_q5_1* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q2_k(const block_q2_k* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q3_k(const block_q3_k* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q4_k(const block_q4_k* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q5_k(const block_q5_k* blocks, float* out /*[n]*/, int64_t n);
void dequantize_row_q6_k(const block_q6_k* blocks, float* out /*[n]*/, int64_t n);

// The 6-bit scale and minimum of group g (0..7) of a Q4_K / Q5_K super-block (blocks.h draws the packing).
void scale_min_k4(int g, const uint8_t* scales /*[12]*/, uint8_t* scale, uint8_t* min);

// Any weight type -> f32: the plain types through core's convert_to_f32, block types through the
// functions above. `src` holds dtype_bytes_for(type, n) bytes. Throws journey::Error when n is not a
// multiple of the block size or the type is not a number type.
void dequantize(DType type, const void* src, float* out /*[n]*/, int64_t n);

}  // namespace journey::quant
