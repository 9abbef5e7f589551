// How cpu::linear multiplies each weight type as stored (ops.h). linear_shared_input prepares the
// input once per call in the forms its targets' types need (PreparedInput), then every thread
// runs its block of rows of every target (run_block):
//
//   weight type   1 token (decode) .. 16 tokens            more than 16 tokens (prefill)
//   f32           one row stream (1) / tile kernel (2..16) panels: x packed with the tokens in the
//                                                          lanes, rows converted to f32 per slice,
//                                                          an outer-product micro-kernel (panel_rows)
//   f16           one row stream (1) / tile kernel (2..16), AMX tiles on bf16 + remainder panels (the
//                 f16 widened in registers (F16C)          weight exact, x rounded to bf16); without
//                                                          AMX, f32 panels as for f32 (exact)
//   bf16          as f16, bf16 widened in registers        AMX tiles (tdpbf16ps) where the CPU has
//                                                          them, else bf16 panels (vdpbf16ps,
//                                                          AVX512-BF16, where it measures faster
//                                                          than f32 FMA: kernels::bf16_dot_pays),
//                                                          x rounded to bf16; else f32 panels (exact)
//   block types   x -> Q8_0 / Q8_K, integer dots           AMX tiles on rows dequantized to bf16;
//                 (vpdpbusd on AVX512-VNNI, vpmaddubsw on   without AMX the token lanes of
//                 AVX2; from a few tokens: all in register  batched decode, 16 tokens at a time
//                 lanes, on AVX512-VNNI Q8_0, Q4_0 and      (AVX512-VNNI: 16 rows x 32 tokens at a
//                 Q4_K read as stored — Q8_0 with the       time, kernels::prefill_*, Q4_0 made
//                 weights' block sums made at load —,     Q8_0 and the others unpacked once per
//                                                          call; without AVX2: panels in f32)
//                 the others unpacked)
//
// Q4_0 and, on AMD, Q4_K (and, when named, Q8_0) matrices copied at load are regrouped by 8 rows on
// AVX512-VNNI CPUs (kernels.h, block_q4_0x8, block_q4_kx8, block_q8_0x8): 1-5 tokens take the
// grouped fused dot (kernels::dot_row_groups), 6-16 the token lanes on the groups
// (dot_tokens_grouped; Q4_K's prefill_q4_k tiles), prefill fills its bf16 panels (AVX512-BF16 and
// AMX tiles) from the groups and its Q4_0 / Q4_K tiles read them; every path gives the bits it gives
// on the rows as stored.
//
// f16 and bf16 up to 16 tokens (and f16 without AMX) are exact products of the stored weights
// (f32 sums); the other paths round the activations (to 8 bits per block, or to bf16): the op test's tolerance per type
// says by how much (tests/backends/op_check.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"

namespace journey::cpu {

// The most tokens that take the small-batch paths (decode and batched decode of up to 16
// sequences); more is prefill.
inline constexpr int64_t kSmallBatchTokens = 16;

// How prefill multiplies weights of `type` with rows of `in` values on this CPU (the table's last
// column): on AMX tiles (bf16, f16 and the block types, rows a multiple of 32), with AVX512-BF16 dot
// products where they pay (kernels::bf16_dot_pays; bf16 and the block types, rows a multiple of 32:
// bf16_panel_rows), block types without
// either through the integer token-lane kernel of batched decode, 16 tokens at a time (AVX2 and
// AVX512-VNNI: x quantized to 8 bits as for decode; on AVX512-VNNI every block type takes it
// before the AVX512-BF16 panels too, kernels::int8_lanes_before_bf16), or in f32 (f32 weights, f16/bf16 without the bf16 instructions, and block types on a
// CPU without AVX2). The two bf16 paths round x to bf16.
enum class PrefillPath { F32, Bf16Dot, AmxTiles, Int8Lanes };
PrefillPath prefill_path_of(DType type, int64_t in);

// x quantized to 8 bits per block, row by row: llama.cpp's Q8_0 (scale per 32: d = max|x| / 127)
// or Q8_K (scale per 256: d = -max / 127 where max is the value of largest magnitude), with the
// sums of each group of 16 quants that the offsets and zero points of the weights need.
struct QuantizedInput {
  int64_t in = 0;
  std::vector<int8_t> q;        // [T, in]
  std::vector<float> dx, xs;    // [T, in / 16] scale of each group; scale * sum of the group's quants
  std::vector<int32_t> gsum;    // [T, in / 16] sum of the group's quants
  // block: 32 (Q8_0) or 256 (Q8_K); `threads` share the rows of a prefill-sized x
  void quantize(const float* x, int64_t T, int64_t in, int64_t block, int threads = 1);
  // The same in plain loops (what quantize runs where the CPU has no kernels::quantize_q8_0 /
  // quantize_q8_k): the kernels are tested bit for bit against it.
  void quantize_portable(const float* x, int64_t T, int64_t in, int64_t block, int threads = 1);
  void size_for(int64_t T, int64_t in);  // in, and q, dx, xs, gsum sized for T rows of `in`

  // The same T rows with the tokens side by side (kernels::TokenLaneActivations), in chunks of
  // kLaneTokens tokens, for the token-lane kernel dot_tokens (batched decode: one chunk; prefill
  // without AMX or AVX512-BF16: T / 16 of them); the lanes past token T are zero.
  std::vector<int8_t> lane_q;                 // [chunks, in / 16, 4, kLaneTokens, 4]
  std::vector<float> lane_dx, lane_xs;        // [chunks, in / 16, kLaneTokens]
  std::vector<int32_t> lane_gsum;             // [chunks, in / 16, kLaneTokens]
  std::vector<uint8_t> lane_u;                // [chunks, in / 16, 4, kLaneTokens, 4] lane_q + 128, when asked for
  int64_t lane_tokens = 0;                    // T of the last lay_out_token_lanes
  // after quantize; `unsigned_quads`: lane_u too (kernels::prefill_q8_0_sums, prefill_q4_0)
  void lay_out_token_lanes(int64_t T, int threads = 1, bool unsigned_quads = false);
  int64_t lane_chunks() const { return (lane_tokens + kernels::kLaneTokens - 1) / kernels::kLaneTokens; }
  kernels::TokenLaneActivations token_lanes(int64_t chunk = 0) const {
    const int64_t groups = in / kernels::kGroup, lanes = groups * kernels::kLaneTokens;
    return {lane_q.data() + chunk * lanes * 16, lane_dx.data() + chunk * lanes, lane_gsum.data() + chunk * lanes,
            lane_xs.data() + chunk * lanes,
            std::min<int64_t>(kernels::kLaneTokens, lane_tokens - chunk * kernels::kLaneTokens),
            lane_u.empty() ? nullptr : lane_u.data() + chunk * lanes * 16};
  }
};

// The forms of x a product's weight types need, filled when a target needs them.
struct PreparedBuffers {
  QuantizedInput q8_0, q8_k;
  std::vector<float> x_pairs;            // [in] one token in pair order, BF16 decode (KernelTable::split_pairs)
  HugePageVector<uint16_t> token_pairs;  // [token_pairs_size(T, in)] x as bf16 token tiles (AMX, AVX512-BF16)
  HugePageVector<float> token_columns;  // [T / panel_tokens rounded up, in, panel_tokens] f32 prefill (KernelTable::panel_rows)
  bool in_use = false;                  // a PreparedInput of this thread holds them
};

class PreparedInput {
 public:
  // Quantizes / rounds x as the targets' weight types need (single-threaded: small next to the
  // products it feeds), into buffers the calling thread keeps from one product to the next: a
  // prefill's 88 products of 1.1B would otherwise each allocate, fault in and zero ~1 MB while
  // the other threads wait (measured: 4 % of the prefill).
  // `threads` share the AMX token packing.
  PreparedInput(const float* x, int64_t T, int64_t in, std::span<const LinearTarget> targets, int threads = 1);
  ~PreparedInput();
  PreparedInput(const PreparedInput&) = delete;
  PreparedInput& operator=(const PreparedInput&) = delete;
  // Columns [begin, end) of target's y = x W^T (+ bias).
  void run_block(const LinearTarget& target, int64_t begin, int64_t end) const;

 private:
  const float* x_;
  int64_t T_, in_;
  std::unique_ptr<PreparedBuffers> own_;  // only when this thread's buffers are taken (nested use)
  PreparedBuffers* b_;                    // this thread's buffers, or own_
  bool token_lanes_ = false;  // b_->q8_0 / q8_k also laid out for dot_tokens: run_block takes that path
  bool token_pairs_ = false;  // a target's prefill path is PrefillPath::AmxTiles or Bf16Dot: x packed by pack_token_pairs
  bool lane_prefill_ = false; // a target's prefill path is PrefillPath::Int8Lanes
  bool unsigned_lanes_ = false;  // a target is Q8_0 with block sums (prefill or batched decode) or a Q4_0 prefill: b_->q8_0.lane_u
  bool x_pairs_ = false;      // one token, a BF16 target: x split into pairs for one_token_bf16_pairs
  bool panels_ = false;       // a target's prefill path is PrefillPath::F32 on f32/f16/bf16 weights: x packed for panel_rows
};

}  // namespace journey::cpu
