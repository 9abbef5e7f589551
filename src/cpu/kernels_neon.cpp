// aarch64 with the dot-product extension (Armv8.2 "dotprod", FEAT_DotProd: every Arm core since
// Cortex-A55/A75, Neoverse N1, Apple M1, Graviton 2): the generic table (kernels_impl.inc compiled
// for the Armv8-A baseline, where GCC's vector code is 4-float NEON) with `dot`, the integer dot
// product of an unpacked row with a Q8 activation row, on sdot (vdotq_s32: 16 s8 x s8 products
// summed in fours into 4 int32 lanes). Built with -march=armv8.2-a+dotprod (src/cpu/CMakeLists.txt)
// and chosen at run time only where Linux reports the instruction (HWCAP_ASIMDDP, gemm.cpp), so the
// rest of the binary stays Armv8-A.
//
// The unpacked quants are unsigned (0..255 for Q8_0, below 64 for the others) and the activations
// signed; sdot multiplies signed by signed (the mixed usdot is Armv8.6 i8mm), so each quant is
// taken as q - 128 (its top bit flipped, as int8) and the difference added back exactly:
//   sum q x - z gsum  =  sum (q - 128) x + (128 - z) gsum     (gsum = sum x over the group).
// The integer sums are the generic loop's, and the float part below is its code, in its order: the
// result equals the generic table's bit for bit (tests/cpu/test_kernels.cpp checks it).
#include <arm_neon.h>

#include <cstdint>

#include "cpu/kernels.h"

namespace journey::cpu::kernels {

namespace generic {
const KernelTable& kernel_table();
}  // namespace generic

namespace neon {

namespace {

// sums[g] = sum over group g0 + g of q x, minus zero * gsum, for `here` (at most 16) groups.
inline void group_sums(const uint8_t* q, const int8_t* x, const int32_t* gsum, int zero, int64_t here,
                       int32_t* sums) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  const int32x4_t none = vdupq_n_s32(0);
  auto signed_dot = [&](int64_t g) {  // 4 lanes summing to sum (q - 128) x over group g
    const int8x16_t qs = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(q + g * kGroup), flip));
    return vdotq_s32(none, qs, vld1q_s8(x + g * kGroup));
  };
  const int32x4_t correction = vdupq_n_s32(128 - zero);
  int64_t g = 0;
  for (; g + 4 <= here; g += 4) {  // four groups: pairwise adds fold their 16 lanes into 4 sums
    const int32x4_t pair01 = vpaddq_s32(signed_dot(g), signed_dot(g + 1));
    const int32x4_t pair23 = vpaddq_s32(signed_dot(g + 2), signed_dot(g + 3));
    vst1q_s32(sums + g, vmlaq_s32(vpaddq_s32(pair01, pair23), vld1q_s32(gsum + g), correction));
  }
  for (; g < here; ++g) sums[g] = vaddvq_s32(signed_dot(g)) + (128 - zero) * gsum[g];
}

float dot(const uint8_t* q, const float* s, const float* o, int zero, bool has_offset, const QuantizedActivations& x,
          int64_t n) {
  const int64_t groups = n / kGroup;
  float acc = 0, acc_offset = 0;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t here = groups - g0 < 16 ? groups - g0 : 16;
    int32_t sums[16];
    group_sums(q + g0 * kGroup, x.q + g0 * kGroup, x.gsum + g0, zero, here, sums);
    for (int64_t g = 0; g < here; ++g) acc += s[g0 + g] * x.dx[g0 + g] * float(sums[g]);
    if (has_offset)
      for (int64_t g = 0; g < here; ++g) acc_offset += o[g0 + g] * x.xs[g0 + g];
  }
  return acc - acc_offset;
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

}  // namespace

double peak_loop(int kind, int64_t iterations, float* sink) { return kind == 1 ? int8_peak(iterations, sink) : 0; }

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t = generic::kernel_table();
    t.dot = &dot;
    return t;
  }();
  return table;
}

}  // namespace neon

}  // namespace journey::cpu::kernels
