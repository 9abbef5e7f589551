// Planted bugs shared by the op test and the whole-model comparison: plausible mistakes in one
// fast op, to check that the tests find them and name them.
#pragma once
#include <cstring>
#include <vector>

#include "cpu/ops.h"
#include "quant/blocks.h"

namespace journey::planted {

// A Q4_K kernel that forgets the group minimums (w = d sc q - dmin m, the "- dmin m" lost): the
// blocks are copied with dmin = 0 and multiplied as stored. Other types are multiplied correctly.
inline void linear_q4_k_without_minimums(float* y, const float* x, cpu::WeightView weight, const float* bias,
                                         int64_t T, int64_t in, int64_t out, int threads) {
  if (weight.type != DType::Q4_K) return cpu::linear(y, x, weight, bias, T, in, out, threads);
  const size_t bytes = size_t(dtype_bytes_for(DType::Q4_K, in * out));
  std::vector<quant::block_q4_k> blocks(bytes / sizeof(quant::block_q4_k));
  std::memcpy(blocks.data(), weight.data, bytes);
  for (quant::block_q4_k& b : blocks) b.dmin = 0;
  cpu::linear(y, x, cpu::WeightView{blocks.data(), DType::Q4_K}, bias, T, in, out, threads);
}

}  // namespace journey::planted
