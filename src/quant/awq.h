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
// At load, layers whose group is a multiple of 32 become Q4_1 blocks (awq_gemm_to_q4_1), the others f32.
//
// Writing (awq_model.h drives it): quantize_awq_linear is AutoAWQ's pseudo_quantize_tensor (4 bits,
// zero point) and pack_awq_gemm is WQLinear_GEMM.from_linear's packing; the activation-aware part —
// which per-input-channel scale multiplies the weight before it is quantized — is awq_search.h.
#pragma once
#include <cstdint>
#include <vector>

namespace journey::quant {

// The bit slot (in 4-bit units) of output 8c + k inside its int32: the inverse of AutoAWQ's order_map.
inline constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};
// The 4-bit value of output `o` in an int32 of qweight or qzeros (the word of o / 8).
inline int awq_nibble(int32_t word, int64_t o) { return int((uint32_t(word) >> (4 * kAwqSlot[o % 8])) & 0xF); }

// W [out, in] (nn.Linear's layout) from one AWQ GEMM layer with 4-bit weights.
void dequantize_awq_gemm(const int32_t* qweight /*[in, out/8]*/, const int32_t* qzeros /*[in/group, out/8]*/,
                         const float* scales /*[in/group, out]*/, int64_t in, int64_t out, int64_t group,
                         float* weight /*[out, in]*/);

// The same layer as GGUF Q4_1 blocks [out, in / 32] (w = d q + m), without re-quantizing: a block of
// 32 inputs lies inside one AWQ group when group % 32 == 0, so d = the group's scale (f16, as
// stored), q = AWQ's 4-bit integer, and m = -scale * zero rounded to f16 — the one rounding, at most
// 2^-11 of |scale * zero| <= 15 scale, under 1 % of a quantization step. The fast CPU backend then
// multiplies the layer as stored (5 bits a weight, not f32's 32). Requires group % 32 == 0 and
// in % group == 0; throws journey::Error otherwise.
void awq_gemm_to_q4_1(const int32_t* qweight /*[in, out/8]*/, const int32_t* qzeros /*[in/group, out/8]*/,
                      const uint16_t* scales /*[in/group, out] f16 bits*/, int64_t in, int64_t out, int64_t group,
                      void* blocks /*[out, in/32] block_q4_1*/);

// One linear layer quantized the AutoAWQ way: per output row and group of `group` inputs,
//   scale = max(max - min, 1e-5) / 15           (then rounded to f16: the checkpoint stores f16 scales)
//   zero  = clamp(-round(min / scale), 0, 15)
//   q     = clamp(round(w / scale) + zero, 0, 15)      round = to nearest, ties to even (torch.round)
// so that W ~ (q - zero) * scale. AutoAWQ computes this in f16; here the weights stay f32 and only the
// scale is rounded to f16 before it is used, so the integers are the ones the stored scale implies.
struct AwqLinear {
  int64_t out = 0, in = 0, group = 0;
  std::vector<uint8_t> q;       // [out, in] 0..15
  std::vector<uint8_t> zeros;   // [out, in / group] 0..15
  std::vector<uint16_t> scales; // [out, in / group] f16 bits
};
// Requires in % group == 0; throws journey::Error otherwise.
AwqLinear quantize_awq_linear(const float* weight /*[out, in]*/, int64_t out, int64_t in, int64_t group);

// (q - zero) * scale, [out, in]: what a loader computes from the packed tensors.
std::vector<float> dequantize_awq_linear(const AwqLinear& layer);

// AutoAWQ's GEMM packing of a quantized layer: the three tensors of the checkpoint (layouts above).
// Requires out % 8 == 0.
struct AwqGemmTensors {
  std::vector<int32_t> qweight;   // [in, out / 8]
  std::vector<int32_t> qzeros;    // [in / group, out / 8]
  std::vector<uint16_t> scales;   // [in / group, out] f16 bits
};
AwqGemmTensors pack_awq_gemm(const AwqLinear& layer);

}  // namespace journey::quant
