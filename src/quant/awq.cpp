// AutoAWQ GEMM unpacking, one weight at a time (see awq.h for the layout).
#include "quant/awq.h"

namespace journey::quant {

void dequantize_awq_gemm(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t in, int64_t out,
                         int64_t group, float* weight) {
  const int64_t packed_out = out / 8;  // int32 columns
  for (int64_t i = 0; i < in; ++i) {
    const int64_t g = i / group;
    for (int64_t o = 0; o < out; ++o) {
      const int shift = 4 * kAwqSlot[o % 8];
      const uint32_t word = uint32_t(qweight[i * packed_out + o / 8]);
      const uint32_t zero_word = uint32_t(qzeros[g * packed_out + o / 8]);
      const int q = int((word >> shift) & 0xF);
      const int z = int((zero_word >> shift) & 0xF);
      weight[o * in + i] = float(q - z) * scales[g * out + o];
    }
  }
}

}  // namespace journey::quant
