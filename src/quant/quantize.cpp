// f32 -> GGML blocks. The algorithms are llama.cpp's reference quantizers (ggml-quants.c); names of
// the helpers (make_qx_quants, make_q3_quants, make_qkx2_quants, nearest_int) are kept so a reader can
// put the two side by side. Float expressions keep llama.cpp's evaluation order on purpose.
#include "quant/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/dequantize.h"

namespace journey::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // a group whose largest |x| is below this is all zeros

int64_t block_count(int64_t n, int64_t block, const char* type) {
  if (n < 0 || n % block != 0) fail("quantize ", type, ": ", n, " weights is not a multiple of the block size ", block);
  return n / block;
}

uint16_t to_half(float f) { return f32_to_f16(f); }
float from_half(uint16_t h) { return f16_to_f32(h); }

// Round to the nearest integer, ties to even, for |x| < 2^22: adding 1.5 * 2^23 puts the integer part
// in the low mantissa bits (llama.cpp's nearest_int, which every K quantizer uses).
int nearest_int(float x) {
  const float shifted = x + 12582912.f;
  const int32_t bits = std::bit_cast<int32_t>(shifted);
  return (bits & 0x007fffff) - 0x00400000;
}

// The absolute maximum of x[0..n) and the signed value that has it (the first one, as llama.cpp).
void signed_absmax(const float* x, int n, float* amax, float* max) {
  *amax = 0;
  *max = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > *amax) { *amax = ax; *max = x[i]; }
  }
}

// Symmetric levels L[i] in 0..2*nmax-1 (value L - nmax) and a scale, for a group of n weights,
// minimizing sum x^2 (x - scale*(L - nmax))^2 over 19 candidate scales near nmax/max.
// (llama.cpp's make_qx_quants with rmse_type 1 and no importance weights; used by Q6_K.)
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax, max;
  signed_absmax(x, n, &amax, &max);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric 3-bit levels for Q3_K: start from nmax/max, then up to 5 passes that move single weights
// to the level that most improves the x^2-weighted fit. L[i] in 0..2*nmax-1 on return.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float amax, max;
  signed_absmax(x, n, &amax, &max);
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric levels L[i] in 0..nmax with x ~ scale * L - the_min, for Q2_K / Q4_K / Q5_K: start from
// the range (min clamped to <= 0), then try nstep+1 scales (rmin + rdelta*is + nmax)/(max - min),
// each with the least-squares scale and minimum for its levels, and keep the smallest weighted
// error (absolute when use_mad, squared otherwise). Returns the scale; *the_min gets -min >= 0.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Pack 256 2-bit values (0..3) as Q2_K/Q3_K do: byte l of half h holds weights h*128 + l + {0,32,64,96}.
void pack_2bit(const uint8_t* L /*[256]*/, uint8_t* qs /*[64]*/) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* g = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(g[0] | g[32] << 2 | g[64] << 4 | g[96] << 6);
    }
}

// Q4_K / Q5_K: store 8 scales and 8 mins of 6 bits in 12 bytes (blocks.h; scale_min_k4 reads them back).
void pack_scales_k4(const uint8_t* ls /*[8]*/, const uint8_t* lm /*[8]*/, uint8_t* scales /*[12]*/) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      scales[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
}

// The first pass of Q4_K and Q5_K: per group of 32, a scale and a minimum from make_qkx2_quants with
// weights sqrt(mean x^2) + |x|; then both sets of 8 are quantized to 6 bits under d and dmin.
void choose_scales_k4(const float* x /*[256]*/, int nmax, float rmin, float rdelta, int nstep, uint8_t* L /*[256]*/,
                      uint8_t* scales_out /*[12]*/, uint16_t* d_out, uint16_t* dmin_out) {
  float scales[8], mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;  // scales are positive because the minimum is subtracted
  for (int j = 0; j < 8; ++j) {
    const float* group = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += group[l] * group[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(group[l]);
    scales[j] = make_qkx2_quants(32, nmax, group, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
  }
  std::memset(scales_out, 0, kKScaleBytes);
  pack_scales_k4(ls, lm, scales_out);
  *d_out = to_half(max_scale / 63.f);
  *dmin_out = to_half(max_min / 63.f);
}

// Re-quantize every weight with the group scale and minimum as stored (6-bit integers times f16).
void requantize_k4(const float* x /*[256]*/, const uint8_t* scales /*[12]*/, uint16_t d, uint16_t dmin, int nmax,
                   uint8_t* L /*[256]*/) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, scales, &sc, &m);
    const float group_d = from_half(d) * sc;
    if (!group_d) continue;
    const float group_m = from_half(dmin) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + group_m) / group_d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

}  // namespace

void quantize_row_q8_0(const float* x, block_q8_0* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q8_0"); ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    out[b].d = to_half(d);
    for (int j = 0; j < kQK; ++j) out[b].qs[j] = int8_t(std::round(x[j] * id));  // half away from zero, as roundf
  }
}

void quantize_row_q4_0(const float* x, block_q4_0* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q4_0"); ++b, x += kQK) {
    float amax, max;
    signed_absmax(x, kQK, &amax, &max);
    const float d = max / -8;  // the largest-magnitude weight maps to -8 exactly
    const float id = d ? 1.0f / d : 0.0f;
    out[b].d = to_half(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[kQK / 2 + j] * id;
      // + 8.5 then truncation = round to nearest after shifting -8..7 to 0..15
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t(x0 + 8.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t(x1 + 8.5f))));
      out[b].qs[j] = uint8_t(q0 | q1 << 4);
    }
  }
}

void quantize_row_q4_1(const float* x, block_q4_1* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q4_1"); ++b, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    out[b].d = to_half(d);
    out[b].m = to_half(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id, x1 = (x[kQK / 2 + j] - min) * id;
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t(x0 + 0.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t(x1 + 0.5f))));
      out[b].qs[j] = uint8_t(q0 | q1 << 4);
    }
  }
}

void quantize_row_q5_0(const float* x, block_q5_0* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q5_0"); ++b, x += kQK) {
    float amax, max;
    signed_absmax(x, kQK, &amax, &max);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    out[b].d = to_half(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[kQK / 2 + j] * id;
      const uint8_t q0 = uint8_t(std::min(31, int(int8_t(x0 + 16.5f))));
      const uint8_t q1 = uint8_t(std::min(31, int(int8_t(x1 + 16.5f))));
      out[b].qs[j] = uint8_t((q0 & 0x0F) | (q1 & 0x0F) << 4);
      qh |= uint32_t(q0 >> 4) << j;             // 5th bit of weight j
      qh |= uint32_t(q1 >> 4) << (j + kQK / 2); // 5th bit of weight j + 16
    }
    std::memcpy(out[b].qh, &qh, 4);
  }
}

void quantize_row_q5_1(const float* x, block_q5_1* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK, "q5_1"); ++b, x += kQK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < kQK; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    out[b].d = to_half(d);
    out[b].m = to_half(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (x[j] - min) * id, x1 = (x[kQK / 2 + j] - min) * id;
      const uint8_t q0 = uint8_t(x0 + 0.5f), q1 = uint8_t(x1 + 0.5f);  // no clamp in llama.cpp either: max - min maps to 31
      out[b].qs[j] = uint8_t((q0 & 0x0F) | (q1 & 0x0F) << 4);
      qh |= uint32_t((q0 & 0x10) >> 4) << j;
      qh |= uint32_t((q1 & 0x10) >> 4) << (j + kQK / 2);
    }
    std::memcpy(out[b].qh, &qh, 4);
  }
}

void quantize_row_q2_k(const float* x, block_q2_k* out, int64_t n) {
  const float q4scale = 15.f;  // group scales and mins are stored in 4 bits
  for (int64_t b = 0; b < block_count(n, kQK_K, "q2_K"); ++b, x += kQK_K) {
    block_q2_k& y = out[b];
    uint8_t L[kQK_K], Laux[16];
    float weights[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j) y.scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      y.d = to_half(max_scale / q4scale);
    } else {
      for (int j = 0; j < 16; ++j) y.scales[j] = 0;
      y.d = to_half(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j) y.scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      y.dmin = to_half(max_min / q4scale);
    } else {
      y.dmin = to_half(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = from_half(y.d) * (y.scales[j] & 0xF);
      if (!d) continue;
      const float dm = from_half(y.dmin) * (y.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
      }
    }
    pack_2bit(L, y.qs);
  }
}

void quantize_row_q3_k(const float* x, block_q3_k* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q3_K"); ++b, x += kQK_K) {
    block_q3_k& y = out[b];
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) { amax = scale; max_scale = scales[j]; }
    }
    std::memset(y.scales, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;  // group scales become 6-bit signed integers
      for (int j = 0; j < 16; ++j) {
        int8_t l = int8_t(nearest_int(iscale * scales[j]));
        l = int8_t(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) y.scales[j] = uint8_t(l & 0xF);
        else y.scales[j - 8] |= uint8_t((l & 0xF) << 4);
        l = int8_t(l >> 4);
        y.scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
      }
      y.d = to_half(1 / iscale);
    } else {
      y.d = to_half(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const int low4 = j < 8 ? (y.scales[j] & 0xF) : (y.scales[j - 8] >> 4);
      const int sc = (low4 | ((y.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
      const float d = from_half(y.d) * sc;
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = int8_t(std::max(-4, std::min(3, l)) + 4);
      }
    }
    // the high bit of weight j goes to bit j/32 of hmask[j%32]; the 2 low bits are packed as Q2_K
    std::memset(y.hmask, 0, sizeof(y.hmask));
    uint8_t low2[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      if (L[j] > 3) y.hmask[j % 32] |= uint8_t(1 << (j / 32));
      low2[j] = uint8_t(L[j] & 3);
    }
    pack_2bit(low2, y.qs);
  }
}

void quantize_row_q4_k(const float* x, block_q4_k* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q4_K"); ++b, x += kQK_K) {
    block_q4_k& y = out[b];
    uint8_t L[kQK_K];
    choose_scales_k4(x, 15, -1.f, 0.1f, 20, L, y.scales, &y.d, &y.dmin);
    requantize_k4(x, y.scales, y.d, y.dmin, 15, L);
    for (int c = 0; c < 4; ++c)  // chunk c of 64 weights: low nibbles 64c..64c+31, high nibbles the next 32
      for (int l = 0; l < 32; ++l) y.qs[32 * c + l] = uint8_t(L[64 * c + l] | L[64 * c + 32 + l] << 4);
  }
}

void quantize_row_q5_k(const float* x, block_q5_k* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q5_K"); ++b, x += kQK_K) {
    block_q5_k& y = out[b];
    uint8_t L[kQK_K];
    choose_scales_k4(x, 31, -0.5f, 0.1f, 15, L, y.scales, &y.d, &y.dmin);
    requantize_k4(x, y.scales, y.d, y.dmin, 31, L);
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int i = 0; i < kQK_K; ++i)
      if (L[i] > 15) y.qh[i % 32] |= uint8_t(1 << (i / 32));  // 5th bit of weight i
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y.qs[32 * c + l] = uint8_t((L[64 * c + l] & 0xF) | (L[64 * c + 32 + l] & 0xF) << 4);
  }
}

void quantize_row_q6_k(const float* x, block_q6_k* out, int64_t n) {
  for (int64_t b = 0; b < block_count(n, kQK_K, "q6_K"); ++b, x += kQK_K) {
    block_q6_k& y = out[b];
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int g = 0; g < 16; ++g) {
      scales[g] = make_qx_quants(16, 32, x + 16 * g, L + 16 * g);
      const float abs_scale = std::fabs(scales[g]);
      if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scales[g]; }
    }
    if (max_abs_scale < kGroupMaxEps) {  // an all-zero super-block
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -128.f / max_scale;  // group scales become int8
    y.d = to_half(1 / iscale);
    for (int g = 0; g < 16; ++g) y.scales[g] = int8_t(std::min(127, nearest_int(iscale * scales[g])));
    for (int g = 0; g < 16; ++g) {
      const float d = from_half(y.d) * y.scales[g];
      if (!d) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * g + ii] / d);
        L[16 * g + ii] = int8_t(std::max(-32, std::min(31, l)) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {  // halves of 128 weights (blocks.h draws the bit positions)
      const int8_t* q = L + 128 * h;
      uint8_t* ql = y.ql + 64 * h;
      uint8_t* qh = y.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = uint8_t((q[l] & 0xF) | (q[l + 64] & 0xF) << 4);
        ql[l + 32] = uint8_t((q[l + 32] & 0xF) | (q[l + 96] & 0xF) << 4);
        qh[l] = uint8_t((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
      }
    }
  }
}

void quantize(DType type, const float* x, void* out, int64_t n) {
  switch (type) {
    case DType::Q8_0: return quantize_row_q8_0(x, static_cast<block_q8_0*>(out), n);
    case DType::Q4_0: return quantize_row_q4_0(x, static_cast<block_q4_0*>(out), n);
    case DType::Q4_1: return quantize_row_q4_1(x, static_cast<block_q4_1*>(out), n);
    case DType::Q5_0: return quantize_row_q5_0(x, static_cast<block_q5_0*>(out), n);
    case DType::Q5_1: return quantize_row_q5_1(x, static_cast<block_q5_1*>(out), n);
    case DType::Q2_K: return quantize_row_q2_k(x, static_cast<block_q2_k*>(out), n);
    case DType::Q3_K: return quantize_row_q3_k(x, static_cast<block_q3_k*>(out), n);
    case DType::Q4_K: return quantize_row_q4_k(x, static_cast<block_q4_k*>(out), n);
    case DType::Q5_K: return quantize_row_q5_k(x, static_cast<block_q5_k*>(out), n);
    case DType::Q6_K: return quantize_row_q6_k(x, static_cast<block_q6_k*>(out), n);
    case DType::F32: std::memcpy(out, x, size_t(n) * 4); return;
    case DType::F16:
    case DType::BF16: {
      auto* halves = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) halves[i] = type == DType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      return;
    }
    default: fail("quantize: ", dtype_name(type), " is not a weight type");
  }
}

}  // namespace journey::quant
