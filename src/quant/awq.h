// AWQ checkpoints (AutoAWQ's "GEMM" format, the one Hugging Face's `quant_method: "awq"` models ship):
// every linear layer's weight is replaced by three tensors.
//
//   qweight  int32 [in, out/8]          8 int4 weights per int32, for input feature i and outputs 8c..8c+7
//   qzeros   int32 [in/group, out/8]    the int4 zero points, packed the same way
//   scales   f16   [in/group, out]      one scale per group of `group` input features and output feature
//
//   W[o, i] = (q[i, o] - z[i / group, o]) * scales[i / group, o]
//
// Inside an int32, output 8c + k sits in bits 4s..4s+3 with s = kAwqSlot[k]: AutoAWQ packs in the
// order [0, 2, 4, 6, 1, 3, 5, 7] (awq/modules/linear/gemm.py) so its CUDA kernel can unpack pairs.
// The reference widens AWQ layers to f32 at load, as it does GGUF blocks.
#pragma once
#include <cstdint>

namespace journey::quant {

// The bit slot (in 4-bit units) of output 8c + k inside its int32: the inverse of AutoAWQ's order_map.
inline constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// W [out, in] (nn.Linear's layout) from one AWQ GEMM layer with 4-bit weights.
void dequantize_awq_gemm(const int32_t* qweight /*[in, out/8]*/, const int32_t* qzeros /*[in/group, out/8]*/,
                         const float* scales /*[in/group, out]*/, int64_t in, int64_t out, int64_t group,
                         float* weight /*[out, in]*/);

}  // namespace journey::quant
