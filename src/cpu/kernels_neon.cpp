// aarch64 with the dot-product extension (Armv8.2 "dotprod", FEAT_DotProd: every Arm core since
// Cortex-A55/A75, Neoverse N1, Apple M1, Graviton 2): the generic table (kernels_impl.inc compiled
// for the Armv8-A baseline, where GCC's vector code is 4-float NEON) with `dot`, the integer dot
// product of an unpacked row with a Q8 activation row, on sdot (vdotq_s32: 16 s8 x s8 products
// summed in fours into 4 int32 lanes). Built with -march=armv8.2-a+dotprod (src/cpu/CMakeLists.txt)
// and chosen at run time only where Linux reports the instruction (HWCAP_ASIMDDP, gemm.cpp), so the
// rest of the binary stays Armv8-A.
//
// It also has the fused decode dots of every block type, the legacy ones (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1) and the K types (Q2_K .. Q6_K; dot_rows, below): one token against the stored rows with
// sdot, no unpacked copy; and dot_tokens, up to 16 tokens in the lanes of four registers against
// unpacked rows with sdot by element (batched decode and the integer prefill). (Built and tested
// under qemu only, where nothing can be timed: docs/arm.md.)
//
// The unpacked quants are unsigned (0..255 for Q8_0, below 64 for the others) and the activations
// signed; sdot multiplies signed by signed (the mixed usdot is Armv8.6 i8mm), so each quant is
// taken as q - 128 (its top bit flipped, as int8) and the difference added back exactly:
//   sum q x - z gsum  =  sum (q - 128) x + (128 - z) gsum     (gsum = sum x over the group).
// The integer sums are the generic loop's, and the float part below is its code, in its order: the
// result equals the generic table's bit for bit (tests/cpu/test_kernels.cpp checks it).
#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/dequantize.h"

namespace journey::cpu::kernels {

namespace generic {
const KernelTable& kernel_table();
}  // namespace generic

namespace neon {

namespace {

// The integer sums of 4 groups of 16: q[j] (signed quants) against the activations at x + 16 j,
// each group's 4 sdot lanes folded pairwise into lane j.
inline int32x4_t four_group_sums(const int8x16_t (&q)[4], const int8_t* x) {
  const int32x4_t none = vdupq_n_s32(0);
  const int32x4_t pair01 = vpaddq_s32(vdotq_s32(none, q[0], vld1q_s8(x)), vdotq_s32(none, q[1], vld1q_s8(x + 16)));
  const int32x4_t pair23 = vpaddq_s32(vdotq_s32(none, q[2], vld1q_s8(x + 32)), vdotq_s32(none, q[3], vld1q_s8(x + 48)));
  return vpaddq_s32(pair01, pair23);
}

// sums[g] = sum over group g0 + g of q x, minus zero * gsum, for `here` (at most 16) groups.
inline void group_sums(const uint8_t* q, const int8_t* x, const int32_t* gsum, int zero, int64_t here,
                       int32_t* sums) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  auto signed_quants = [&](int64_t g) {  // group g's quants minus 128
    return vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + g * kGroup), flip));
  };
  const int32x4_t correction = vdupq_n_s32(128 - zero);
  int64_t g = 0;
  for (; g + 4 <= here; g += 4) {
    const int8x16_t four[4] = {signed_quants(g), signed_quants(g + 1), signed_quants(g + 2), signed_quants(g + 3)};
    vst1q_s32(sums + g, vmlaq_s32(four_group_sums(four, x + g * kGroup), vld1q_s32(gsum + g), correction));
  }
  for (; g < here; ++g)
    sums[g] = vaddvq_s32(vdotq_s32(vdupq_n_s32(0), signed_quants(g), vld1q_s8(x + g * kGroup))) + (128 - zero) * gsum[g];
}

// The float part of the generic dot for `here` (at most 16) groups from g0, in its code and order,
// which is what makes the results here equal the generic table's bit for bit: s and o are the
// chunk's scales and offsets as unpack_row writes them, sums its integer sums.
inline void add_groups(float& acc, float& acc_offset, const float* s, const float* o, bool has_offset,
                       const int32_t* sums, const QuantizedActivations& x, int64_t g0, int64_t here) {
  for (int64_t g = 0; g < here; ++g) acc += unfused(s[g] * x.dx[g0 + g] * float(sums[g]));
  if (has_offset)
    for (int64_t g = 0; g < here; ++g) acc_offset += unfused(o[g] * x.xs[g0 + g]);
}

float dot(const uint8_t* q, const float* s, const float* o, int zero, bool has_offset, const QuantizedActivations& x,
          int64_t n) {
  const int64_t groups = n / kGroup;
  float acc = 0, acc_offset = 0;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t here = groups - g0 < 16 ? groups - g0 : 16;
    int32_t sums[16];
    group_sums(q + g0 * kGroup, x.q + g0 * kGroup, x.gsum + g0, zero, here, sums);
    add_groups(acc, acc_offset, s + g0, o + g0, has_offset, sums, x, g0, here);
  }
  return acc - acc_offset;
}

// ------------------------------------------------------------------------------------------------
// The fused decode dots of the legacy types (KernelTable::dot_rows): one token against stored
// rows, each block of 32 widened to 32 signed bytes in two registers and multiplied by sdot against
// the Q8 activations, without unpack_row's copy to memory and back. The quants are taken minus
// their zero point in the bytes (Q8_0 as stored, which is q + 128 - 128; Q4_0 q - 8, Q5_0 q - 16;
// Q4_1/Q5_1 as they are), so each group of 16 gets exactly the integer sum the generic dot() gets
// from the unpacked row (sum q x - z gsum), and the float part is dot()'s code in dot()'s order with
// the scales and offsets unpack_row would have written: the result equals the generic table's, and
// the unfused path's, bit for bit (tests/cpu/test_kernels.cpp; scripts/check-aarch64.sh compares
// greedy text between neon-dotprod and generic).
// ------------------------------------------------------------------------------------------------

using quant::block_q4_0;
using quant::block_q4_1;
using quant::block_q5_0;
using quant::block_q5_1;
using quant::block_q8_0;

inline float half_to_f32(uint16_t bits) {
  __fp16 h;
  std::memcpy(&h, &bits, 2);
  return float(h);
}

// The 32 fifth bits of a Q5 block as 0x10 in each byte whose bit is set: bytes 0-15 (low) and 16-31 (high).
inline void fifth_bits(const uint8_t* qh, uint8x16_t& low, uint8x16_t& high) {
  const uint8x16_t bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t sixteen = vdupq_n_u8(0x10);
  low = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bit), sixteen);
  high = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bit), sixteen);
}

// A block's 32 quants minus the zero point, as signed bytes: weights 0-15 (its first group of 16)
// and 16-31 (its second).
template <typename Block, DType W>
inline void block_quants(const Block& b, int8x16_t& low, int8x16_t& high) {
  if constexpr (W == DType::Q8_0) {
    low = vld1q_s8(b.qs), high = vld1q_s8(b.qs + 16);
  } else {
    const uint8x16_t packed = vld1q_u8(b.qs);
    uint8x16_t lo = vandq_u8(packed, vdupq_n_u8(0x0F)), hi = vshrq_n_u8(packed, 4);
    if constexpr (W == DType::Q5_0 || W == DType::Q5_1) {
      uint8x16_t lo5, hi5;
      fifth_bits(b.qh, lo5, hi5);
      lo = vorrq_u8(lo, lo5), hi = vorrq_u8(hi, hi5);
    }
    constexpr int zero = W == DType::Q4_0 ? 8 : W == DType::Q5_0 ? 16 : 0;
    low = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8(zero));
    high = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8(zero));
  }
}

template <typename Block, DType W>
float dot_legacy(const void* row, const QuantizedActivations& x, int64_t n) {
  constexpr bool has_offset = W == DType::Q4_1 || W == DType::Q5_1;
  const Block* blocks = static_cast<const Block*>(row);
  const int64_t groups = n / kGroup;  // two per block
  const int32x4_t none = vdupq_n_s32(0);
  float acc = 0, acc_offset = 0;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {  // dot()'s chunks of 16 groups: 8 blocks
    const int64_t here = groups - g0 < 16 ? groups - g0 : 16;
    int32_t sums[16];
    float s[16], o[16];  // as unpack_row writes them: d for both groups of a block, -m (Q4_1/Q5_1) or 0
    for (int64_t j = 0; j < here / 2; ++j) {
      const Block& b = blocks[g0 / 2 + j];
      int8x16_t low, high;
      block_quants<Block, W>(b, low, high);
      const int8_t* xq = x.q + (g0 + 2 * j) * kGroup;
      // the two groups' 4-lane sdot sums, folded pairwise into lanes 0-1 of one register
      const int32x4_t pair = vpaddq_s32(vdotq_s32(none, low, vld1q_s8(xq)), vdotq_s32(none, high, vld1q_s8(xq + 16)));
      const int32x2_t folded = vpadd_s32(vget_low_s32(pair), vget_high_s32(pair));
      vst1_s32(sums + 2 * j, folded);
      s[2 * j] = s[2 * j + 1] = half_to_f32(b.d);
      if constexpr (has_offset) o[2 * j] = o[2 * j + 1] = -half_to_f32(b.m);
    }
    add_groups(acc, acc_offset, s, o, has_offset, sums, x, g0, here);
  }
  return acc - acc_offset;
}

// The fused decode dots of the K types the same way: per super-block of 256 (one chunk of 16
// groups of dot()), each group's exact integer sum by sdot on its 16 quants as unpack_row would
// write them less its zero point (super_block_sums: Q2_K's 2-bit, Q4_K's 4-bit and Q5_K's 5-bit
// quants as they are, their minimums in the offsets; Q3_K's 3-bit quants minus 4, Q6_K's 6-bit
// quants minus 32), the scales and offsets unpack_row would write (super_block_scales: d * sc,
// dmin * m; d * scale), then dot()'s float part in its order (dot_k): the generic table's result,
// bit for bit.
using quant::block_q2_k;
using quant::block_q3_k;
using quant::block_q4_k;
using quant::block_q5_k;
using quant::block_q6_k;

// `value` in each byte of `bytes` whose bit `bit` is set, 0 in the others.
inline uint8x16_t bit_as(uint8x16_t bytes, int bit, uint8_t value) {
  return vandq_u8(vtstq_u8(bytes, vdupq_n_u8(uint8_t(1u << bit))), vdupq_n_u8(value));
}

// Bits 2j and 2j + 1 of each byte, as 0..3.
inline uint8x16_t bit_pair(uint8x16_t bytes, int j) {
  return vandq_u8(vshlq_u8(bytes, vdupq_n_s8(int8_t(-2 * j))), vdupq_n_u8(3));
}

// Q4_K and Q5_K: chunk c of 32 bytes of qs holds weights 64c + l (low nibbles: groups 4c, 4c + 1)
// and 64c + 32 + l (high nibbles: groups 4c + 2, 4c + 3); Q5_K's fifth bit of weight 32i + l is bit
// i of qh[l].
template <typename Block>
  requires(std::is_same_v<Block, block_q4_k> || std::is_same_v<Block, block_q5_k>)
void super_block_sums(const Block& k, const int8_t* xq, int32_t* sums) {
  const uint8x16_t low = vdupq_n_u8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const uint8x16_t v0 = vld1q_u8(k.qs + 32 * c), v1 = vld1q_u8(k.qs + 32 * c + 16);
    uint8x16_t q[4] = {vandq_u8(v0, low), vandq_u8(v1, low), vshrq_n_u8(v0, 4), vshrq_n_u8(v1, 4)};
    if constexpr (std::is_same_v<Block, block_q5_k>) {
      const uint8x16_t h0 = vld1q_u8(k.qh), h1 = vld1q_u8(k.qh + 16);
      q[0] = vorrq_u8(q[0], bit_as(h0, 2 * c, 16)), q[1] = vorrq_u8(q[1], bit_as(h1, 2 * c, 16));
      q[2] = vorrq_u8(q[2], bit_as(h0, 2 * c + 1, 16)), q[3] = vorrq_u8(q[3], bit_as(h1, 2 * c + 1, 16));
    }
    const int8x16_t signed_q[4] = {vreinterpretq_s8_u8(q[0]), vreinterpretq_s8_u8(q[1]), vreinterpretq_s8_u8(q[2]),
                                   vreinterpretq_s8_u8(q[3])};  // (0..31: the same value as int8)
    vst1q_s32(sums + 4 * c, four_group_sums(signed_q, xq + 64 * c));
  }
}

// Per group of 32, for both its groups of 16.
template <typename Block>
  requires(std::is_same_v<Block, block_q4_k> || std::is_same_v<Block, block_q5_k>)
void super_block_scales(const Block& k, float* s, float* o) {
  const float d = half_to_f32(k.d), dmin = half_to_f32(k.dmin);
  for (int g = 0; g < 8; ++g) {
    uint8_t sc, m;
    quant::scale_min_k4(g, k.scales, &sc, &m);
    s[2 * g] = s[2 * g + 1] = d * float(sc);
    o[2 * g] = o[2 * g + 1] = dmin * float(m);
  }
}

// The sums of a super-block in the order of Q6_K's halves (and Q2_K's, Q3_K's): weight
// 128h + 32j + 16p + i, group 8h + 2j + p, is field j of byte 16p + i of half h's bytes.
// quants(h, j, p) gives that group's 16 quants less the zero point as signed bytes.
template <typename GroupQuants>
inline void sums_by_halves(const GroupQuants& quants, const int8_t* xq, int32_t* sums) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; j += 2) {  // groups 8h + 2j .. 8h + 2j + 3
      const int8x16_t q[4] = {quants(h, j, 0), quants(h, j, 1), quants(h, j + 1, 0), quants(h, j + 1, 1)};
      vst1q_s32(sums + 8 * h + 2 * j, four_group_sums(q, xq + 128 * h + 32 * j));
    }
}

// Q6_K: 4 low bits from ql (j = 0, 1: the low nibbles of ql[64h + 32j + l]; j = 2, 3: the high
// nibbles of ql[64h + 32(j - 2) + l]), 2 high bits from qh[32h + l] (bits 2j, 2j + 1), minus 32.
void super_block_sums(const block_q6_k& k, const int8_t* xq, int32_t* sums) {
  sums_by_halves(
      [&](int h, int j, int p) {
        const uint8x16_t ql = vld1q_u8(k.ql + 64 * h + 32 * (j % 2) + 16 * p);
        const uint8x16_t four = j < 2 ? vandq_u8(ql, vdupq_n_u8(0x0F)) : vshrq_n_u8(ql, 4);
        const uint8x16_t q = vorrq_u8(four, vshlq_n_u8(bit_pair(vld1q_u8(k.qh + 32 * h + 16 * p), j), 4));
        return vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(32));
      },
      xq, sums);
}

void super_block_scales(const block_q6_k& k, float* s, float*) {  // (no offsets)
  const float d = half_to_f32(k.d);
  for (int g = 0; g < 16; ++g) s[g] = d * float(k.scales[g]);
}

// Q2_K: 2 bits from qs[32h + l] (bits 2j, 2j + 1), zero point 0, the minimums in the offsets.
void super_block_sums(const block_q2_k& k, const int8_t* xq, int32_t* sums) {
  sums_by_halves(
      [&](int h, int j, int p) { return vreinterpretq_s8_u8(bit_pair(vld1q_u8(k.qs + 32 * h + 16 * p), j)); }, xq,
      sums);
}

// A 4-bit scale (low nibble) and minimum (high nibble) per group.
void super_block_scales(const block_q2_k& k, float* s, float* o) {
  const float d = half_to_f32(k.d), dmin = half_to_f32(k.dmin);
  for (int g = 0; g < 16; ++g) {
    s[g] = d * float(k.scales[g] & 0xF);
    o[g] = dmin * float(k.scales[g] >> 4);
  }
}

// Q3_K: 2 low bits from qs[32h + l] (bits 2j, 2j + 1), the third from hmask (weight 32k + l's is
// bit k of hmask[l], k = 4h + j), minus 4.
void super_block_sums(const block_q3_k& k, const int8_t* xq, int32_t* sums) {
  sums_by_halves(
      [&](int h, int j, int p) {
        const uint8x16_t q = vorrq_u8(bit_pair(vld1q_u8(k.qs + 32 * h + 16 * p), j),
                                      bit_as(vld1q_u8(k.hmask + 16 * p), 4 * h + j, 4));
        return vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(4));
      },
      xq, sums);
}

// The 6-bit scales as unpack_q3_k decodes them (blocks.h draws the packing), minus 32; no offsets.
void super_block_scales(const block_q3_k& k, float* s, float*) {
  const float d = half_to_f32(k.d);
  for (int g = 0; g < 16; ++g) {
    const int low4 = g < 8 ? (k.scales[g] & 0xF) : (k.scales[g - 8] >> 4);
    const int high2 = (k.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    s[g] = d * float((low4 | high2 << 4) - 32);
  }
}

template <typename Block>
float dot_k(const void* row, const QuantizedActivations& x, int64_t n) {
  // offsets where unpack_row writes minimums (unpacked_has_offset)
  constexpr bool has_offset = !std::is_same_v<Block, block_q3_k> && !std::is_same_v<Block, block_q6_k>;
  const Block* blocks = static_cast<const Block*>(row);
  float acc = 0, acc_offset = 0;
  for (int64_t b = 0; b < n / quant::kQK_K; ++b) {
    int32_t sums[16];
    float s[16], o[16];
    super_block_sums(blocks[b], x.q + b * quant::kQK_K, sums);
    super_block_scales(blocks[b], s, o);
    add_groups(acc, acc_offset, s, o, has_offset, sums, x, b * 16, 16);
  }
  return acc - acc_offset;
}

template <float (*kDot)(const void*, const QuantizedActivations&, int64_t)>
void each_row(const char* first, size_t row_bytes, int64_t count, const QuantizedActivations& x, int64_t n, float* out) {
  for (int64_t r = 0; r < count; ++r) out[r] = kDot(first + r * row_bytes, x, n);
}

// KernelTable::dot_rows for the types has_fused_dot(type, Isa::NeonDot) lists; NaN for the others.
void dot_rows(DType type, const void* first, size_t row_bytes, int64_t count, const QuantizedActivations& x,
              int64_t n, float* out) {
  const char* rows = static_cast<const char*>(first);
  switch (type) {
    case DType::Q8_0: return each_row<dot_legacy<block_q8_0, DType::Q8_0>>(rows, row_bytes, count, x, n, out);
    case DType::Q4_0: return each_row<dot_legacy<block_q4_0, DType::Q4_0>>(rows, row_bytes, count, x, n, out);
    case DType::Q4_1: return each_row<dot_legacy<block_q4_1, DType::Q4_1>>(rows, row_bytes, count, x, n, out);
    case DType::Q5_0: return each_row<dot_legacy<block_q5_0, DType::Q5_0>>(rows, row_bytes, count, x, n, out);
    case DType::Q5_1: return each_row<dot_legacy<block_q5_1, DType::Q5_1>>(rows, row_bytes, count, x, n, out);
    case DType::Q2_K: return each_row<dot_k<block_q2_k>>(rows, row_bytes, count, x, n, out);
    case DType::Q3_K: return each_row<dot_k<block_q3_k>>(rows, row_bytes, count, x, n, out);
    case DType::Q4_K: return each_row<dot_k<block_q4_k>>(rows, row_bytes, count, x, n, out);
    case DType::Q5_K: return each_row<dot_k<block_q5_k>>(rows, row_bytes, count, x, n, out);
    case DType::Q6_K: return each_row<dot_k<block_q6_k>>(rows, row_bytes, count, x, n, out);
    default:
      for (int64_t r = 0; r < count; ++r) out[r] = __builtin_nanf("");
  }
}

// ------------------------------------------------------------------------------------------------
// Every token of a batch against up to 4 unpacked rows (KernelTable::dot_tokens: batched decode of
// 6..16 tokens, and the integer prefill, 16 tokens a chunk), the tokens in the lanes: int32 lane j
// of token register tr is token 4 tr + j. Per group of 16 weights, the tokens' quads (x.q: [group,
// quad k, 16 tokens, 4] — four registers of four tokens per quad) are loaded once for the R rows;
// each row's 16 quants, made signed (q - 128, as dot() above), are one register whose quad k
// multiplies the four tokens of a register at once: sdot by element, vdotq_laneq_s32(sums, tokens,
// quants, k) adds tokens' quad j . quants' quad k into lane j. The start (128 - z) gsum is each
// token's own and shared by the rows. The float part is dot()'s in each lane, in dot()'s order (s x
// dx, times the sum, that product rounded before it is added: never fused; the offsets alike), so out[r][t]
// equals dot() of row r and token t bit for bit (test_kernels), as the fused decode dots do: a
// greedy text does not depend on whether a step had 5 tokens or 6. Token registers past x.tokens
// are skipped (their lanes are written 0, what their zero activations give).
// ------------------------------------------------------------------------------------------------

// p as it is: the lanes' products rounded to f32 before the sum that takes them (kernels::unfused
// for a vector: this file is built with -ffp-contract=fast).
inline float32x4_t unfused_lanes(float32x4_t p) {
  asm("" : "+w"(p));
  return p;
}

template <int R>
void dot_tokens_rows(const uint8_t* q, const float* s, const float* o, int zero, bool has_offset,
                     const TokenLaneActivations& x, int64_t n, float* out) {
  const int64_t groups = n / kGroup;
  const uint8x16_t flip = vdupq_n_u8(0x80);
  constexpr int kTokenRegisters = int(kLaneTokens / 4);
  const int filled = int((x.tokens + 3) / 4);  // token registers that hold a token
  for (int tr = 0; tr < kTokenRegisters; ++tr) {
    float32x4_t acc[R], acc_offset[R];
    for (int r = 0; r < R; ++r) acc[r] = vdupq_n_f32(0), acc_offset[r] = vdupq_n_f32(0);
    for (int64_t g = 0; tr < filled && g < groups; ++g) {
      const int8_t* xg = x.q + g * 4 * kLaneTokens * 4 + 4 * 4 * tr;  // quad k of these 4 tokens: + 64 k
      const int8x16_t x0 = vld1q_s8(xg), x1 = vld1q_s8(xg + 64), x2 = vld1q_s8(xg + 128), x3 = vld1q_s8(xg + 192);
      const int64_t lanes = g * kLaneTokens + 4 * tr;  // this register's tokens in dx, gsum, xs
      const int32x4_t start = vmulq_n_s32(vld1q_s32(x.gsum + lanes), 128 - zero);
      const float32x4_t dx = vld1q_f32(x.dx + lanes);
      for (int r = 0; r < R; ++r) {
        const int8x16_t quants = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + r * n + g * kGroup), flip));
        int32x4_t sums = vdotq_laneq_s32(start, x0, quants, 0);
        sums = vdotq_laneq_s32(sums, x1, quants, 1);
        sums = vdotq_laneq_s32(sums, x2, quants, 2);
        sums = vdotq_laneq_s32(sums, x3, quants, 3);
        const float32x4_t scale = vmulq_n_f32(dx, s[r * groups + g]);  // s x dx: dot()'s first product
        acc[r] = vaddq_f32(acc[r], unfused_lanes(vmulq_f32(scale, vcvtq_f32_s32(sums))));
        if (has_offset)
          acc_offset[r] =
              vaddq_f32(acc_offset[r], unfused_lanes(vmulq_n_f32(vld1q_f32(x.xs + lanes), o[r * groups + g])));
      }
    }
    for (int r = 0; r < R; ++r) vst1q_f32(out + r * kLaneTokens + 4 * tr, vsubq_f32(acc[r], acc_offset[r]));
  }
}

void dot_tokens(DType type, const uint8_t* q, const float* s, const float* o, int rows, const TokenLaneActivations& x,
                int64_t n, float* out) {
  const int zero = unpacked_zero(type);
  const bool has_offset = unpacked_has_offset(type);
  switch (rows) {
    case 1: return dot_tokens_rows<1>(q, s, o, zero, has_offset, x, n, out);
    case 2: return dot_tokens_rows<2>(q, s, o, zero, has_offset, x, n, out);
    case 3: return dot_tokens_rows<3>(q, s, o, zero, has_offset, x, n, out);
    default: return dot_tokens_rows<4>(q, s, o, zero, has_offset, x, n, out);
  }
}

// journey bench's int8 ceiling here (PeakKind::Int8Dot, kind 1): 12 independent sdot accumulators
// in registers, `iterations` rounds; the operations done (2 per multiply-add). 0 for other kinds.
double int8_peak(int64_t iterations, float* sink) {
  int32x4_t acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = vdupq_n_s32(i);
  const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
  for (int64_t n = 0; n < iterations; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = vdotq_s32(acc[i], a, b);
  int32x4_t all = acc[0];
  for (int i = 1; i < 12; ++i) all = vaddq_s32(all, acc[i]);
  *sink = float(vaddvq_s32(all));
  return 2.0 * 12 * 16 * double(iterations);
}

// PeakKind::Int8BlockDot (kind 4): the same with what a block format adds per 32 inputs, as x86's
// peak_int8_block_dot (kernels_impl.inc) — 8 sdot per row and lane group from the block's start,
// then a convert, a multiply by the two block scales and an FMA — on 4 rows x 2 groups of 4 token
// lanes, the operands read from a few blocks in L1 so that the scales vary.
double int8_block_peak(int64_t iterations, float* sink) {
  constexpr int kBlocks = 8, kRows = 4, kChunks = 2;
  struct Operands {
    int8_t tokens[kBlocks][kChunks][8][16];  // per block, lane group and quad: 4 tokens' quads
    int32_t weights[kRows][kBlocks][8], starts[kRows][kBlocks];
    float row_scales[kRows][kBlocks], token_scales[kBlocks][kChunks][4];
  };
  static const Operands p = [] {
    Operands o{};
    for (int b = 0; b < kBlocks; ++b)
      for (int c = 0; c < kChunks; ++c) {
        for (int k = 0; k < 8; ++k)
          for (int i = 0; i < 16; ++i) o.tokens[b][c][k][i] = int8_t((b + c + k + i) % 7 - 3);
        for (int i = 0; i < 4; ++i) o.token_scales[b][c][i] = 1e-6f * float(1 + (b + c + i) % 5);
      }
    for (int r = 0; r < kRows; ++r)
      for (int b = 0; b < kBlocks; ++b) {
        for (int k = 0; k < 8; ++k) o.weights[r][b][k] = int32_t(0x01FF02FEu + uint32_t(r * 8 + b + k));
        o.starts[r][b] = r + b;
        o.row_scales[r][b] = 0.01f * float(1 + (r + b) % 3);
      }
    return o;
  }();
  float32x4_t acc[kRows][kChunks];
  for (auto& row : acc)
    for (float32x4_t& a : row) a = vdupq_n_f32(0);
  for (int64_t n = 0; n < iterations; ++n) {
    const int b = int(n % kBlocks);
    int32x4_t sums[kRows][kChunks];
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kChunks; ++c) sums[r][c] = vdupq_n_s32(p.starts[r][b]);
    for (int k = 0; k < 8; ++k) {
      int8x16_t xq[kChunks];
      for (int c = 0; c < kChunks; ++c) xq[c] = vld1q_s8(p.tokens[b][c][k]);
      for (int r = 0; r < kRows; ++r) {
        const int8x16_t weights = vreinterpretq_s8_s32(vdupq_n_s32(p.weights[r][b][k]));
        for (int c = 0; c < kChunks; ++c) sums[r][c] = vdotq_s32(sums[r][c], xq[c], weights);
      }
    }
    for (int c = 0; c < kChunks; ++c) {
      const float32x4_t dx = vld1q_f32(p.token_scales[b][c]);
      for (int r = 0; r < kRows; ++r)
        acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(sums[r][c]), vmulq_n_f32(dx, p.row_scales[r][b]));
    }
  }
  float32x4_t all = acc[0][0];
  for (int i = 1; i < kRows * kChunks; ++i) all = vaddq_f32(all, acc[i / kChunks][i % kChunks]);
  *sink = vaddvq_f32(all);
  return 2.0 * kRows * kChunks * 4 * 32 * double(iterations);
}

}  // namespace

double peak_loop(int kind, int64_t iterations, float* sink) {
  return kind == 1 ? int8_peak(iterations, sink) : kind == 4 ? int8_block_peak(iterations, sink) : 0;
}

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t = generic::kernel_table();
    t.dot = &dot;
    t.dot_rows = &dot_rows;
    t.dot_tokens = &dot_tokens;
    return t;
  }();
  return table;
}

}  // namespace neon

}  // namespace journey::cpu::kernels
