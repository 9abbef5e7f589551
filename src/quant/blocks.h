// The GGML block types, byte for byte as llama.cpp lays them out in GGUF files (ggml-common.h).
//
// A quantized row is a run of blocks. A block stores a few scales in f16 and the weights as small
// integers; dequantizing is "integer times scale (minus minimum)". Two families:
//   - legacy blocks of 32 weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1): one scale (and a minimum) per block;
//   - K super-blocks of 256 weights (Q2_K ... Q6_K): the 256 split into groups of 16 or 32, each with
//     its own small integer scale (and minimum), and those integer scales are themselves scaled by one
//     or two f16 super-scales d / dmin. That second level is what makes 2-6 bits per weight usable.
//
// Every struct below is exactly its on-disk size (checked by static_assert), has 2-byte alignment
// (f16 fields), and is drawn with byte offsets. "f16" fields hold IEEE half bits (core/dtype.h
// f16_to_f32 widens them). Within a byte, "lo" is bits 0-3 and "hi" bits 4-7.
#pragma once
#include <cstdint>

namespace journey::quant {

inline constexpr int kQK = 32;    // weights per legacy block (QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 in ggml)
inline constexpr int kQK_K = 256; // weights per K super-block (QK_K in ggml)
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of Q4_K / Q5_K (K_SCALE_SIZE)

// Q8_0 — 34 bytes, 8.5 bits/weight.            w[i] = d * qs[i]
//   0      2                                  34
//   +------+-----------------------------------+
//   | d f16| qs[0..31]  int8                   |
//   +------+-----------------------------------+
struct block_q8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// Q4_0 — 18 bytes, 4.5 bits/weight.            w[i] = d * (q[i] - 8),  q in 0..15
//   0      2                   18
//   +------+--------------------+
//   | d f16| qs[0..15]          |   qs[j] lo = q[j] (weights 0..15), qs[j] hi = q[j+16] (weights 16..31)
//   +------+--------------------+
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// Q4_1 — 20 bytes, 5 bits/weight.              w[i] = d * q[i] + m,  q in 0..15
//   0      2      4                   20
//   +------+------+--------------------+
//   | d f16| m f16| qs[0..15]          |   same nibble order as Q4_0
//   +------+------+--------------------+
struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

// Q5_0 — 22 bytes, 5.5 bits/weight.            w[i] = d * (q[i] - 16),  q in 0..31
//   0      2          6                   22
//   +------+----------+--------------------+
//   | d f16| qh[0..3] | qs[0..15]          |   q[i] = 4 low bits from qs (as Q4_0) | bit i of qh (u32, LE) << 4
//   +------+----------+--------------------+
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// Q5_1 — 24 bytes, 6 bits/weight.              w[i] = d * q[i] + m,  q in 0..31
//   0      2      4          8                   24
//   +------+------+----------+--------------------+
//   | d f16| m f16| qh[0..3] | qs[0..15]          |   bits as Q5_0
//   +------+------+----------+--------------------+
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// Q2_K — 84 bytes per 256 weights, 2.625 bits/weight. 16 groups of 16 weights.
//   w = d * (scales[g] & 0xF) * q  -  dmin * (scales[g] >> 4),   q in 0..3
//   0              16                                   80     82     84
//   +--------------+------------------------------------+------+------+
//   | scales[0..15]| qs[0..63]                          | d f16|dmin  |
//   +--------------+------------------------------------+------+------+
//   scales[g]: lo = 4-bit scale of group g, hi = 4-bit min.
//   qs: two halves of 32 bytes, each covering 128 weights; byte l of half h holds, in bits
//   (0-1, 2-3, 4-5, 6-7), the weights h*128 + l + (0, 32, 64, 96).
struct block_q2_k {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

// Q3_K — 110 bytes per 256 weights, 3.4375 bits/weight. 16 groups of 16 weights.
//   w = d * (s[g] - 32) * (q - 4),   q = 2 low bits | high bit << 2 in 0..7,  s[g] a 6-bit scale
//   0              32                                   96             108    110
//   +--------------+------------------------------------+--------------+------+
//   | hmask[0..31] | qs[0..63]                          | scales[0..11]| d f16|
//   +--------------+------------------------------------+--------------+------+
//   qs: 2 low bits, packed as in Q2_K. hmask: the high bit of weight j is bit (j / 32) of hmask[j % 32].
//   scales: 16 x 6 bits. Bytes 0-7 hold the low 4 bits (lo nibble: groups 0-7, hi nibble: groups 8-15);
//   bytes 8-11 hold the high 2 bits: group g's are bits 2*(g/4) .. +1 of byte 8 + g%4.
struct block_q3_k {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};

// Q4_K — 144 bytes per 256 weights, 4.5 bits/weight. 8 groups of 32 weights.
//   w = d * sc[g] * q  -  dmin * m[g],   q in 0..15,  sc/m 6-bit
//   0      2      4              16                                       144
//   +------+------+--------------+-----------------------------------------+
//   | d f16|dmin  | scales[0..11]| qs[0..127]                              |
//   +------+------+--------------+-----------------------------------------+
//   scales: 8 scales and 8 mins of 6 bits (see scale_min_k4 in dequantize.cpp):
//     g < 4:  sc = scales[g] & 63,                          m = scales[g+4] & 63
//     g >= 4: sc = scales[g+4] lo | (scales[g-4] >> 6) << 4, m = scales[g+4] hi | (scales[g] >> 6) << 4
//   qs: four chunks of 32 bytes, each covering 64 weights: byte l of chunk c holds weight 64c + l (lo)
//   and weight 64c + 32 + l (hi).
struct block_q4_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};

// Q5_K — 176 bytes per 256 weights, 5.5 bits/weight. 8 groups of 32 weights.
//   w = d * sc[g] * q  -  dmin * m[g],   q in 0..31 = 4 low bits | high bit << 4
//   0      2      4              16              48                        176
//   +------+------+--------------+---------------+--------------------------+
//   | d f16|dmin  | scales[0..11]| qh[0..31]     | qs[0..127]               |
//   +------+------+--------------+---------------+--------------------------+
//   scales and qs as in Q4_K; the high bit of weight 32k + l is bit k of qh[l] (k = 0..7).
struct block_q5_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// Q6_K — 210 bytes per 256 weights, 6.5625 bits/weight. 16 groups of 16 weights.
//   w = d * scales[g] * (q - 32),   q in 0..63 = 4 low bits (ql) | 2 high bits (qh) << 4
//   0                                  128                  192              208    210
//   +----------------------------------+--------------------+----------------+------+
//   | ql[0..127]                       | qh[0..63]          | scales[0..15]  | d f16|
//   +----------------------------------+--------------------+----------------+------+
//   Two halves of 128 weights; in half h (ql + 64h, qh + 32h), for l in 0..31:
//     weight 128h + l      : ql[l] lo,      qh[l] bits 0-1
//     weight 128h + l + 32 : ql[l + 32] lo, qh[l] bits 2-3
//     weight 128h + l + 64 : ql[l] hi,      qh[l] bits 4-5
//     weight 128h + l + 96 : ql[l + 32] hi, qh[l] bits 6-7
//   scales: int8, one per group of 16.
struct block_q6_k {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q2_k) == 84 && sizeof(block_q3_k) == 110 && sizeof(block_q4_k) == 144);
static_assert(sizeof(block_q5_k) == 176 && sizeof(block_q6_k) == 210);

}  // namespace journey::quant
