// AutoAWQ GEMM unpacking, one weight at a time (see awq.h for the layout).
#include "quant/awq.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/blocks.h"

namespace journey::quant {

void dequantize_awq_gemm(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t in, int64_t out,
                         int64_t group, float* weight) {
  const int64_t packed_out = out / 8;  // int32 columns
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / group;
    for (int64_t o = 0; o < out; ++o) {
      const int q = awq_nibble(qweight[i * packed_out + o / 8], o);
      const int z = awq_nibble(qzeros[g * packed_out + o / 8], o);
      weight[o * in + i] = float(q - z) * scales[g * out + o];
    }
  }
}

void awq_gemm_to_q4_1(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales, int64_t in, int64_t out,
                      int64_t group, void* blocks) {
  if (group <= 0 || group % kQK != 0 || in % group != 0)
    fail("AWQ to Q4_1: group size ", group, " and ", in, " inputs (the group must be a multiple of ", kQK,
         " and divide the inputs)");
  const int64_t packed_out = out / 8;  // int32 columns
  block_q4_1* q4 = static_cast<block_q4_1*>(blocks);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t b = 0; b < in / kQK; ++b) {
      const int64_t g = b * kQK / group;
      const float scale = f16_to_f32(scales[g * out + o]);
      const int zero = awq_nibble(qzeros[g * packed_out + o / 8], o);
      block_q4_1& block = q4[o * (in / kQK) + b];
      block.d = scales[g * out + o];
      block.m = f32_to_f16(-scale * float(zero));
      for (int64_t j = 0; j < kQK / 2; ++j) {  // qs[j]: input 32b + j (low nibble), 32b + j + 16 (high)
        const int64_t i = b * kQK + j;
        block.qs[j] = uint8_t(awq_nibble(qweight[i * packed_out + o / 8], o) |
                              (awq_nibble(qweight[(i + kQK / 2) * packed_out + o / 8], o) << 4));
      }
    }
}

AwqLinear quantize_awq_linear(const float* weight, int64_t out, int64_t in, int64_t group) {
  if (group <= 0 || in % group != 0)
    fail("AWQ: ", in, " input features are not a multiple of the group size ", group);
  AwqLinear layer{out, in, group, std::vector<uint8_t>(size_t(out * in)), std::vector<uint8_t>(size_t(out * (in / group))),
                  std::vector<uint16_t>(size_t(out * (in / group)))};
  constexpr float kMaxInt = 15.0f;  // 4 bits, unsigned with a zero point
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < in / group; ++g) {
      const float* w = weight + o * in + g * group;  // [group]
      const auto [lo, hi] = std::minmax_element(w, w + group);
      const uint16_t scale_bits = f32_to_f16(std::max(*hi - *lo, 1e-5f) / kMaxInt);
      const float scale = f16_to_f32(scale_bits);
      const float zero = std::clamp(-std::nearbyint(*lo / scale), 0.0f, kMaxInt);
      layer.scales[size_t(o * (in / group) + g)] = scale_bits;
      layer.zeros[size_t(o * (in / group) + g)] = uint8_t(zero);
      for (int64_t i = 0; i < group; ++i)
        layer.q[size_t(o * in + g * group + i)] = uint8_t(std::clamp(std::nearbyint(w[i] / scale) + zero, 0.0f, kMaxInt));
    }
  }
  return layer;
}

std::vector<float> dequantize_awq_linear(const AwqLinear& l) {
  std::vector<float> w(size_t(l.out * l.in));  // [out, in]
  const int64_t groups = l.in / l.group;
  for (int64_t o = 0; o < l.out; ++o)
    for (int64_t i = 0; i < l.in; ++i) {
      const size_t g = size_t(o * groups + i / l.group);
      w[size_t(o * l.in + i)] = float(int(l.q[size_t(o * l.in + i)]) - int(l.zeros[g])) * f16_to_f32(l.scales[g]);
    }
  return w;
}

AwqGemmTensors pack_awq_gemm(const AwqLinear& l) {
  if (l.out % 8 != 0) fail("AWQ: ", l.out, " output features are not a multiple of 8 (8 int4 values per int32)");
  const int64_t packed = l.out / 8, groups = l.in / l.group;
  AwqGemmTensors t{std::vector<int32_t>(size_t(l.in * packed)), std::vector<int32_t>(size_t(groups * packed)),
                   std::vector<uint16_t>(size_t(groups * l.out))};
  // output o of input i goes to bits 4 * kAwqSlot[o % 8] of qweight[i, o / 8] (AutoAWQ's order_map)
  for (int64_t o = 0; o < l.out; ++o) {
    const int shift = 4 * kAwqSlot[o % 8];
    for (int64_t i = 0; i < l.in; ++i)
      t.qweight[size_t(i * packed + o / 8)] |= int32_t(uint32_t(l.q[size_t(o * l.in + i)]) << shift);
    for (int64_t g = 0; g < groups; ++g) {
      t.qzeros[size_t(g * packed + o / 8)] |= int32_t(uint32_t(l.zeros[size_t(o * groups + g)]) << shift);
      t.scales[size_t(g * l.out + o)] = l.scales[size_t(o * groups + g)];
    }
  }
  return t;
}

}  // namespace journey::quant
