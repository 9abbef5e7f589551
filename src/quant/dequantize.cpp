// One readable dequantizer per GGML block type (see blocks.h for the layouts they read).
#include "quant/dequantize.h"

#include <cstring>

#include "core/error.h"

namespace journey::quant {
namespace {

float half(uint16_t bits) { return f16_to_f32(bits); }

int64_t block_count(int64_t n, int64_t block, const char* type) {
  if (n < 0 || n % block != 0) fail("dequantize ", type, ": ", n, " weights is not a multiple of the block size ", block);
  return n / block;
}

}  // namespace

void dequantize_row_q8_0(const block_q8_0* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q8_0"); ++b) {
    const block_q8_0& x = blocks[b];
    const float d = half(x.d);
    for (int i = 0; i < kQK; ++i) out[b * kQK + i] = d * float(x.qs[i]);
  }
}

void dequantize_row_q4_0(const block_q4_0* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q4_0"); ++b) {
    const block_q4_0& x = blocks[b];
    const float d = half(x.d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q_lo = (x.qs[j] & 0x0F) - 8;  // weight j
      const int q_hi = (x.qs[j] >> 4) - 8;    // weight j + 16
      out[b * kQK + j] = d * float(q_lo);
      out[b * kQK + j + kQK / 2] = d * float(q_hi);
    }
  }
}

void dequantize_row_q4_1(const block_q4_1* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q4_1"); ++b) {
    const block_q4_1& x = blocks[b];
    const float d = half(x.d), m = half(x.m);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q_lo = x.qs[j] & 0x0F;
      const int q_hi = x.qs[j] >> 4;
      out[b * kQK + j] = d * float(q_lo) + m;
      out[b * kQK + j + kQK / 2] = d * float(q_hi) + m;
    }
  }
}

void dequantize_row_q5_0(const block_q5_0* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q5_0"); ++b) {
    const block_q5_0& x = blocks[b];
    const float d = half(x.d);
    uint32_t qh;  // bit i = 5th bit of weight i
    std::memcpy(&qh, x.qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int high_lo = (qh >> j) & 1;
      const int high_hi = (qh >> (j + 16)) & 1;
      const int q_lo = ((x.qs[j] & 0x0F) | high_lo << 4) - 16;
      const int q_hi = ((x.qs[j] >> 4) | high_hi << 4) - 16;
      out[b * kQK + j] = d * float(q_lo);
      out[b * kQK + j + kQK / 2] = d * float(q_hi);
    }
  }
}

void dequantize_row_q5_1(const block_q5_1* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q5_1"); ++b) {
    const block_q5_1& x = blocks[b];
    const float d = half(x.d), m = half(x.m);
    uint32_t qh;
    std::memcpy(&qh, x.qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int high_lo = (qh >> j) & 1;
      const int high_hi = (qh >> (j + 16)) & 1;
      const int q_lo = (x.qs[j] & 0x0F) | high_lo << 4;
      const int q_hi = (x.qs[j] >> 4) | high_hi << 4;
      out[b * kQK + j] = d * float(q_lo) + m;
      out[b * kQK + j + kQK / 2] = d * float(q_hi) + m;
    }
  }
}

void dequantize_row_q2_k(const block_q2_k* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q2_K"); ++b) {
    const block_q2_k& x = blocks[b];
    const float d = half(x.d), dmin = half(x.dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int g = i / 16;                                   // group of 16 weights
      const int half_index = i / 128, within = i % 128;       // which 32-byte half of qs
      const int byte = half_index * 32 + within % 32, shift = 2 * (within / 32);
      const int q = (x.qs[byte] >> shift) & 3;
      const float scale = d * float(x.scales[g] & 0xF);
      const float min = dmin * float(x.scales[g] >> 4);
      out[b * kQK_K + i] = scale * float(q) - min;
    }
  }
}

void dequantize_row_q3_k(const block_q3_k* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q3_K"); ++b) {
    const block_q3_k& x = blocks[b];
    const float d = half(x.d);
    for (int i = 0; i < kQK_K; ++i) {
      const int g = i / 16;
      // the 6-bit scale: 4 low bits from bytes 0-7, 2 high bits from bytes 8-11
      const int low4 = g < 8 ? (x.scales[g] & 0xF) : (x.scales[g - 8] >> 4);
      const int high2 = (x.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
      const int scale = (low4 | high2 << 4) - 32;
      // the 3-bit weight: 2 low bits packed as in Q2_K, the high bit in hmask
      const int half_index = i / 128, within = i % 128;
      const int low2 = (x.qs[half_index * 32 + within % 32] >> (2 * (within / 32))) & 3;
      const int high_bit = (x.hmask[i % 32] >> (i / 32)) & 1;
      const int q = (low2 | high_bit << 2) - 4;
      out[b * kQK_K + i] = d * float(scale) * float(q);
    }
  }
}

void scale_min_k4(int g, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (g < 4) {
    *scale = scales[g] & 63;
    *min = scales[g + 4] & 63;
  } else {
    *scale = uint8_t((scales[g + 4] & 0xF) | ((scales[g - 4] >> 6) << 4));
    *min = uint8_t((scales[g + 4] >> 4) | ((scales[g] >> 6) << 4));
  }
}

void dequantize_row_q4_k(const block_q4_k* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q4_K"); ++b) {
    const block_q4_k& x = blocks[b];
    const float d = half(x.d), dmin = half(x.dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int g = i / 32;  // group of 32 weights
      uint8_t sc, m;
      scale_min_k4(g, x.scales, &sc, &m);
      const int chunk = i / 64, within = i % 64;  // chunk of 32 bytes = 64 weights
      const uint8_t byte = x.qs[chunk * 32 + within % 32];
      const int q = within < 32 ? (byte & 0xF) : (byte >> 4);
      out[b * kQK_K + i] = d * float(sc) * float(q) - dmin * float(m);
    }
  }
}

void dequantize_row_q5_k(const block_q5_k* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q5_K"); ++b) {
    const block_q5_k& x = blocks[b];
    const float d = half(x.d), dmin = half(x.dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int g = i / 32;
      uint8_t sc, m;
      scale_min_k4(g, x.scales, &sc, &m);
      const int chunk = i / 64, within = i % 64;
      const uint8_t byte = x.qs[chunk * 32 + within % 32];
      const int low4 = within < 32 ? (byte & 0xF) : (byte >> 4);
      const int high_bit = (x.qh[i % 32] >> (i / 32)) & 1;
      const int q = low4 | high_bit << 4;
      out[b * kQK_K + i] = d * float(sc) * float(q) - dmin * float(m);
    }
  }
}

void dequantize_row_q6_k(const block_q6_k* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q6_K"); ++b) {
    const block_q6_k& x = blocks[b];
    const float d = half(x.d);
    for (int i = 0; i < kQK_K; ++i) {
      const int g = i / 16;
      const int half_index = i / 128, within = i % 128;
      const int quarter = within / 32, l = within % 32;  // quarter 0..3 of the half
      const uint8_t* ql = x.ql + 64 * half_index;
      const uint8_t* qh = x.qh + 32 * half_index;
      const uint8_t low_byte = ql[l + 32 * (quarter % 2)];
      const int low4 = quarter < 2 ? (low_byte & 0xF) : (low_byte >> 4);
      const int high2 = (qh[l] >> (2 * quarter)) & 3;
      const int q = (low4 | high2 << 4) - 32;
      // llama.cpp multiplies in this order: (d * scale) * q, each product rounded to float
      out[b * kQK_K + i] = d * float(x.scales[g]) * float(q);
    }
  }
}

void dequantize(DType type, const void* src, float* out, int64_t n) {
  switch (type) {
    case DType::Q8_0: return dequantize_row_q8_0(static_cast<const block_q8_0*>(src), out, n);
    case DType::Q4_0: return dequantize_row_q4_0(static_cast<const block_q4_0*>(src), out, n);
    case DType::Q4_1: return dequantize_row_q4_1(static_cast<const block_q4_1*>(src), out, n);
    case DType::Q5_0: return dequantize_row_q5_0(static_cast<const block_q5_0*>(src), out, n);
    case DType::Q5_1: return dequantize_row_q5_1(static_cast<const block_q5_1*>(src), out, n);
    case DType::Q2_K: return dequantize_row_q2_k(static_cast<const block_q2_k*>(src), out, n);
    case DType::Q3_K: return dequantize_row_q3_k(static_cast<const block_q3_k*>(src), out, n);
    case DType::Q4_K: return dequantize_row_q4_k(static_cast<const block_q4_k*>(src), out, n);
    case DType::Q5_K: return dequantize_row_q5_k(static_cast<const block_q5_k*>(src), out, n);
    case DType::Q6_K: return dequantize_row_q6_k(static_cast<const block_q6_k*>(src), out, n);
    default: return convert_to_f32(type, src, n, out);
  }
}

}  // namespace journey::quant
