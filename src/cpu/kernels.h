// The fast backend's inner loops on weights AS STORED (f32, f16, bf16 and the GGML block types),
// compiled once per instruction set and chosen at run time.
//
// kernels_impl.inc holds the code; kernels_generic.cpp, kernels_avx2.cpp and kernels_avx512.cpp
// (and kernels_avx512bf16.cpp for the bf16 dot-product kernel) include it, each compiled with its
// own -m flags (CMake), so a baseline x86-64 build (CI, JOURNEY_NATIVE=OFF) still runs AVX-512
// code on a CPU that has it. (Target attributes on functions, as gemm.cpp once used, do not
// reach intrinsics called from inlined templates; whole files per instruction set do.)
//
// How a block-quantized row meets an activation row (llama.cpp's scheme):
//   - the activations are quantized to int8 once per product: Q8_0 (one f32 scale per 32) for the
//     legacy types, Q8_K (one scale per 256, llama.cpp's quantize_row_q8_K) for the K types;
//   - a weight row is unpacked into raw unsigned quants q (u8, one per weight) and, per group of
//     16 weights, a scale s and an offset o, so that every type reads  w = s * (q - z) - o
//     with an integer zero point z fixed by the type (Q4_0: 8, Q8_0: 128, Q6_K: 32, ...);
//   - the dot product of a row with an activation row is then, per group g of 16,
//       s[g] * dx[g] * (sum_k q[k] * xq[k]  -  z * sum_k xq[k])  -  o[g] * dx[g] * sum_k xq[k]
//     where the integer sum is one AVX512-VNNI instruction per 64 weights (vpdpbusd: u8 x s8).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "cpu/decode_prefetch.h"

namespace journey::cpu::kernels {

enum class Isa {
  Generic,  // x86-64 baseline (SSE2) or any other CPU: 4-float vectors, plain C++ integer dots
  Avx2,     // AVX2 + FMA + F16C: 8-float vectors
  Avx512,   // AVX-512 F/BW/VL + VNNI + F16C: 16-float vectors, vpdpbusd integer dots
  NeonDot,  // aarch64 with Armv8.2 dotprod: Generic with sdot integer dots (kernels_neon.cpp)
};

// The best Isa this CPU supports, capped by the environment variable JOURNEY_CPU_ISA (generic, avx2,
// avx512-vnni, avx512-bf16): to compare the variants on one machine, or to run what a CPU without
// AVX-512 runs. A cap above what the CPU has changes nothing; an unknown name is an error.
Isa best_isa();
bool supports(Isa isa);
const char* isa_name(Isa isa);
// AVX512-BF16 (vdpbf16ps: 32 bf16 products per instruction, f32 sums): the prefill path of bf16
// and block-quantized weights. False where the CPU lacks it (or JOURNEY_CPU_ISA is below
// avx512-bf16); then prefill widens to f32.
bool has_bf16_dot();
// AMX-BF16 (tdpbf16ps on 16 x 32 tiles: 8192 bf16 multiply-adds per instruction): the prefill path
// of bf16 and block-quantized weights on Intel CPUs from Sapphire Rapids on, when the kernel grants
// this process the tile state (Linux arch_prctl ARCH_REQ_XCOMP_PERM) and JOURNEY_CPU_ISA does not cap
// it (below "amx"). Implies has_bf16_dot().
bool has_amx();
// The block types' prefill on the integer tiles of the token lanes (x quantized to 8 bits,
// vpdpbusd on the blocks: kernels::prefill_*) instead of the bf16 panels, on a CPU with
// AVX512-BF16 but no AMX (AMD Zen 4, Intel Cooper Lake). Q8_0 and Q4_0 first (docs/performance.md,
// "Q8_0 and Q4_0 prefill on the token lanes"); every block type since the prefill tiles and the
// vectorized Q8_K quantization (quantize_q8_k): on AMD Zen 4, 2 threads, 128 tokens,
// bench_prefill_gemm's q/o and down products Q4_K 552-596 against 375-402 GFLOP/s on the panels,
// Q6_K 467-522 against 349-385 (docs/performance.md, "The K types on the token lanes on AMD Zen 4").
// JOURNEY_INT8_PREFILL=off keeps every block type on the panels (to compare); another value than
// on/off is an error at kernel_choice().
bool int8_lanes_before_bf16(DType type);
// Whether prefill takes the AVX512-BF16 panels at all (PrefillPath::Bf16Dot): vdpbf16ps does 32
// multiply-adds per instruction against f32 FMA's 16, and runs at that rate on AMD Zen 4 (457
// against 258 GFLOP/s on 2 threads) — but not everywhere: on an Intel Xeon VM without AMX (family 6
// model 207) it measured 179 against FMA's 388, and oneDNN's own bf16 matmul 82 against its f32
// 148 GFLOP/s a thread, so the bf16 panels prefilled 1.1B BF16 at 77.8 tok/s where the f32 panels
// give 132.3, and Q4_K_M at 76.8 where the int8 token lanes give 147.5 (docs/performance.md, "An
// Intel Xeon without AMX"). So the two instructions' register-resident rates are measured once on
// the first call (~20 ms, bf16_against_fma) and the panels taken only where vdpbf16ps does at
// least FMA's operations per second; elsewhere bf16 weights prefill on the f32 panels (exact) and
// the block types on the int8 token lanes. False without AVX512-BF16; AMX is chosen before this
// (has_amx). JOURNEY_BF16_PREFILL=on|off overrides the measurement (another value is an error at
// kernel_choice()).
bool bf16_dot_pays();
struct Bf16AgainstFma {
  double bf16_gflop_s = 0, fma_gflop_s = 0;  // one thread; 0 without AVX512-BF16
};
const Bf16AgainstFma& bf16_against_fma();
// What runs, for logs and journey bench: "avx512-vnni + avx512-bf16 prefill", "avx2", ... with the
// cap named when JOURNEY_CPU_ISA set one. Throws journey::Error for a bad JOURNEY_CPU_ISA.
std::string kernel_choice();

// (How the decode products fetch their rows ahead, kDecodePrefetch: decode_prefetch.h.)

// The zero point z and whether the type has per-group offsets o (a minimum) after unpacking.
int unpacked_zero(DType type);
bool unpacked_has_offset(DType type);
// How many groups of 16 one scale and offset of the unpacked type cover: 2 (blocks and sub-blocks
// of 32), or 1 (Q2_K, Q3_K, Q6_K: a scale per 16).
int unpacked_scale_groups(DType type);
// v as it is: a product passed through here is rounded to f32 before whatever adds it, never fused
// with that addition into an FMA. The float part of dot() (the generic one and aarch64's) uses it
// for every product, so that its bits do not depend on where the compiler chose to contract: GCC
// rounded the products of dot()'s vector part and fused those of its scalar tail and of the offsets,
// and compiled the same loop otherwise where it was inlined with a constant count (aarch64's Q4_K
// fused dot), one bit apart (tests/cpu/test_kernels.cpp).
inline float unfused(float v) {
#if defined(__aarch64__)
  asm("" : "+w"(v));
#elif defined(__x86_64__) || defined(__i386__)
  asm("" : "+x"(v));
#else
  volatile float kept = v;
  v = kept;
#endif
  return v;
}

// Weights per unpacked group (scale, offset): 16 for every block type.
inline constexpr int64_t kGroup = 16;

// One token row of activations quantized for dot products with block-quantized rows.
struct QuantizedActivations {
  const int8_t* q;      // [in]
  const float* dx;      // [in / 16] the activation scale of each group of 16
  const int32_t* gsum;  // [in / 16] sum of q over each group
  const float* xs;      // [in / 16] dx * gsum
};

// Up to kLaneTokens token rows of QuantizedActivations re-laid out for KernelTable::dot_tokens: the
// tokens sit in the lanes of one register, so one broadcast weight quad multiplies all of them.
// Lane t of every array belongs to token t; tokens past the batch are zero (they add nothing).
inline constexpr int64_t kLaneTokens = 16;
inline constexpr int kTokenRows = 4;  // rows per dot_tokens call
struct TokenLaneActivations {
  const int8_t* q;      // [in / 16, 4, kLaneTokens, 4]: group g, quad k: token t's values 16g + 4k .. 16g + 4k + 3
  const float* dx;      // [in / 16, kLaneTokens] the activation scale of each group
  const int32_t* gsum;  // [in / 16, kLaneTokens] sum of q over each group
  const float* xs;      // [in / 16, kLaneTokens] dx * gsum
  int64_t tokens;       // lanes that hold a token (1 .. kLaneTokens): a kernel may skip the others
  const uint8_t* qu = nullptr;  // q + 128 (unsigned), the same layout, where made (prefill_q8_0_sums)
};

// Where a prefill kernel (KernelTable::prefill_q8_0_sums, prefill_q4_0, prefill_q4_k,
// prefill_unpacked) puts its results: token t
// of chunk c, row r at y[(16 c + t) * stride + r] = bias[r] + the product (0.0f + it without a
// bias), for the x[c].tokens tokens of each chunk and the call's rows; nothing else is written.
// Each token's rows of one call are one 64-byte line of y (kPrefillRows of them, a tile of rows
// transposed in registers), instead of a scalar store per row and token `stride` floats apart.
struct PrefillOutput {
  float* y;         // [tokens, stride], at the call's first token and row
  int64_t stride;   // floats from one token's row of y to the next (the product's `out`)
  const float* bias;  // [count] or nullptr
};

// From how many query heads per kv head a model's attention scores put the heads in a vector's
// lanes (8 of them): ops.cpp's attention_core then takes attention_scores_heads (else
// attention_scores, one head at a time, whose lanes hold a row's values). Below it the lanes would
// stand half empty and the one-head kernel is as fast.
inline constexpr int kHeadLanesFrom = 4;

struct KernelTable {
  // Unpack n weights (whole blocks) of one row of a block type: q [n] raw unsigned quants,
  // s and o [n / 16] (see above).
  void (*unpack_row)(DType type, const void* row, int64_t n, uint8_t* q, float* s, float* o);
  // The dot product of an unpacked row with a quantized activation row of n values.
  float (*dot)(const uint8_t* q, const float* s, const float* o, int zero, bool has_offset,
               const QuantizedActivations& x, int64_t n);
  // out[k] = s[g] * (q[k] - zero) - o[g]: an unpacked row back to f32 (prefill fallback).
  void (*dequantize_unpacked)(const uint8_t* q, const float* s, const float* o, int zero, int64_t n, float* out);
  // Columns [row_begin, row_end) of y = x W^T (+ bias) for W in F32, F16 or BF16 ([out, in]
  // row-major as stored), every weight widened to f32 in registers: the register-tiled kernel of
  // gemm.h.
  void (*float_rows)(DType type, float* y, const float* x, const void* weight, const float* bias, int64_t T,
                     int64_t in, int64_t out, int64_t row_begin, int64_t row_end);
  // The dot products of `count` consecutive stored rows (`row_bytes` apart from `first`) of a type
  // has_fused_dot() lists with one quantized activation row, out [count]; the blocks widened in
  // registers (decode: no unpacked copy to write and read back); NaN for other types. A row's
  // result does not depend on `count`. AVX2, AVX-512 and aarch64 dotprod; nullptr in the generic table.
  void (*dot_rows)(DType type, const void* first, size_t row_bytes, int64_t count, const QuantizedActivations& x,
                   int64_t n, float* out);
  // dot_rows for a matrix stored in row groups (block_q4_0x8, block_q8_0x8, block_q4_kx8 below; the
  // types has_row_group_dot lists, in group_layout(isa)): `group_count` consecutive groups from
  // `groups` against one quantized activation row, out [8 * group_count].
  // Each row's result equals dot_rows' on the same row as stored, bit for bit: the same integer
  // sums, the same scales, FMAs and order of sums — AVX512-VNNI: two rows per 512-bit register (one
  // per 256-bit half); AVX2: the 8 rows in the lanes of each register — with the activation block
  // loaded once for eight rows. NaN for other types.
  // AVX512-VNNI and AVX2; nullptr in the other tables (those CPUs keep the rows as stored).
  void (*dot_row_groups)(DType type, const void* groups, int64_t group_count, const QuantizedActivations& x,
                         int64_t n, float* out);
  // dot() of up to kTokenRows unpacked rows with every token of a batch at once (batched decode,
  // 2..16 tokens): q [rows, n], s and o [rows, n / 16] as unpack_row writes them, out [rows,
  // kLaneTokens]. The tokens sit in the lanes of one register: one broadcast weight quad multiplies
  // all of them, so a group's scale and zero point cost one vector operation for the whole batch.
  // AVX512-VNNI (vpdpbusd, 16 lanes), AVX2 (vpmaddubsw + vpmaddwd, two registers of 8 lanes;
  // a second register without tokens is skipped) and aarch64 dotprod (sdot by element, four
  // registers of 4 lanes, those without tokens skipped; dot()'s bits); nullptr in the generic table.
  // `type`: the type the rows were unpacked from (its zero point, offsets and largest quant).
  void (*dot_tokens)(DType type, const uint8_t* q, const float* s, const float* o, int rows,
                     const TokenLaneActivations& x, int64_t n, float* out);
  // dot_tokens straight from up to kStoredTokenRows stored rows of a type has_stored_token_dot()
  // lists for this Isa (consecutive, `row_bytes` apart from `rows`): no unpack_row, no scratch.
  // Each quad of 4 stored weights is broadcast to the token lanes (AVX512-VNNI: made unsigned in
  // one instruction; AVX2: Q8_0 as |q| x sign(x, q)), and the block's scale is applied once per
  // block of 32 in f32. out [rows, kLaneTokens]. nullptr in the generic table.
  void (*dot_tokens_stored)(DType type, const void* rows, size_t row_bytes, int count, const TokenLaneActivations& x,
                            int64_t n, float* out);
  // dot_tokens_stored on rows [first, first + count) (first + count <= 8, count <= kStoredTokenRows)
  // of one group of a Q4_0 or Q8_0 matrix regrouped by 8 (`row_bytes` of the rows as stored): the
  // stored rows' results, bit for bit. AVX512-VNNI only (nullptr elsewhere, with dot_row_groups).
  void (*dot_tokens_grouped)(DType type, const void* group, size_t row_bytes, int first, int count,
                             const TokenLaneActivations& x, int64_t n, float* out);
  // dot_tokens_stored for Q8_0 rows whose block sums are at hand (q8_0_block_sums: sums [count,
  // n / 32], `sums_stride` apart): the tokens' quants are made unsigned once per block for all rows
  // (x + 128) and each weight quad is the broadcast memory operand of vpdpbusd itself, signed as
  // stored, so a quad costs one instruction instead of two; the 128 x sum of the block's weights
  // starts its integer sum. The same exact integer sums and f32 work as dot_tokens_stored: its
  // results, bit for bit. AVX512-VNNI only (nullptr elsewhere).
  void (*dot_tokens_q8_0_sums)(const void* rows, size_t row_bytes, const int16_t* sums, size_t sums_stride,
                               int count, const TokenLaneActivations& x, int64_t n, float* out);
  // The same for prefill: `count` (1 .. kPrefillRows) rows against every chunk of token lanes
  // x[0 .. chunks) (their unsigned quads `qu` made), in tiles of 6 rows x two chunks (one chunk:
  // 8 rows x 1), written to `y` as PrefillOutput says; scratch: prefill_scratch_floats(n, chunks)
  // floats (the tiles' results). Bit for bit
  // dot_tokens_q8_0_sums per chunk (plus the bias), with fewer vector operations per vpdpbusd
  // (kernels_impl.inc). AVX512-VNNI only (nullptr elsewhere).
  void (*prefill_q8_0_sums)(const void* rows, size_t row_bytes, const int16_t* sums, size_t sums_stride, int count,
                            const TokenLaneActivations* x, int chunks, int64_t n, const PrefillOutput& y,
                            float* scratch);
  // The same for Q4_0 rows (x with its unsigned quads, as for Q8_0): each block made Q8_0's
  // (q - 8) once per call, then prefill_q8_0_sums's tiles; bit for bit dot_tokens_stored (Q4_0) per
  // chunk (plus the bias). Rows as stored or regrouped by 8 (block_q4_0x8), `rows` and
  // `group_first` as for prefill_q4_k. AVX512-VNNI only.
  void (*prefill_q4_0)(const void* rows, size_t row_bytes, int group_first, int count, const TokenLaneActivations* x,
                       int chunks, int64_t n, const PrefillOutput& y, float* scratch);
  // The same for Q4_K rows (x as Q8_K lanes, signed): dot_tokens_stored (Q4_K) per chunk (plus the
  // bias) within f32 rounding (the f32 work per super-block, kernels_impl.inc). The rows as stored
  // at `rows` (group_first < 0), or regrouped by 8 (block_q4_kx8): `rows` is the group that holds
  // the first row, its row group_first (0-7), and the call's rows go on into the next groups.
  // AVX512-VNNI only.
  void (*prefill_q4_k)(const void* rows, size_t row_bytes, int group_first, int count, const TokenLaneActivations* x,
                       int chunks, int64_t n, const PrefillOutput& y, float* scratch);
  // The same for `count` rows unpacked by unpack_row (q [count, n], s and o [count, n / 16]) of a
  // type without a stored-row kernel: dot_tokens per chunk (plus the bias) within f32 rounding, the
  // f32 work once per 32 for the types with a scale per 32 (unpacked_scale_groups) and per
  // super-block for the K types (kernels_impl.inc); scratch:
  // prefill_scratch_floats(n, chunks) floats. AVX512-VNNI only.
  void (*prefill_unpacked)(DType type, const uint8_t* q, const float* s, const float* o, int count,
                           const TokenLaneActivations* x, int chunks, int64_t n, const PrefillOutput& y, float* scratch);
  // One row of n values (a multiple of 32) as Q8_0 activation blocks: q [n], and per group of 16
  // dx (the block's scale), gsum (the sum of its quants) and xs = dx * gsum, [n / 16] each; bit for
  // bit QuantizedInput::quantize's plain loop (block 32). AVX2 and AVX-512; nullptr in the generic
  // table: that loop runs instead.
  void (*quantize_q8_0)(const float* x, int64_t n, int8_t* q, float* dx, int32_t* gsum, float* xs);
  // The same for Q8_K activation blocks (n a multiple of 256: d = 1 / (-127 / max), max the first
  // value of the largest magnitude; q rounded to even, at most 127), what the K types multiply; bit
  // for bit QuantizedInput::quantize_portable's block 256. AVX2 and AVX-512; nullptr in the generic
  // table.
  void (*quantize_q8_k)(const float* x, int64_t n, int8_t* q, float* dx, int32_t* gsum, float* xs);
  // Attention for one query over `count` positions whose K or V rows (D values each, of the KV
  // pool's type: f32, f16, bf16 or q8_0, read where they lie) are at rows[p]: scores[p] = scale *
  // (q . rows[p]), one head; attention_scores_heads the same for `heads` query heads sharing the
  // rows (a kv head's group, or a prefill's tile of queries times it), scores[g * scores_stride +
  // p] with q_g = q + g * q_stride, each head's scores the ones it gets alone by that function, bit
  // for bit — but not attention_scores' (each sums in its own
  // order: ops.cpp takes one or the other by the model's query heads per kv head, kHeadLanesFrom);
  // out[d] = sum_p weights[p] * rows[p][d] for `heads` query heads sharing the rows (their weights
  // and outs weights_stride / out_stride floats apart; each head's sums as alone; `accumulate`:
  // each lane's sum going on from out[d], so that rows split over calls add up exactly as in one).
  // Each value widened to f32 as quant::dequantize widens it (a signaling NaN aside: F16C quiets
  // it). Every table has them (plain vector code at each width).
  void (*attention_scores)(DType type, const float* q, const void* const* rows, int64_t count, int64_t D,
                           float scale, float* scores);
  // attention_scores_heads with fetch_too (the V rows the mix reads next, of the same type) asks
  // for both rows ahead of use, for rows in memory rather than cache (a decode step); with nullptr
  // for nothing.
  void (*attention_scores_heads)(DType type, const float* q, int64_t q_stride, int heads, const void* const* rows,
                                 int64_t count, int64_t D, float scale, float* scores, int64_t scores_stride,
                                 const void* const* fetch_too);
  void (*attention_mix)(DType type, const float* weights, int64_t weights_stride, const void* const* rows,
                        int64_t count, int64_t D, float* out, int64_t out_stride, int heads, bool accumulate);
  // x = softmax(x) over one row of n (-inf entries become exactly 0; not all of them -inf), and
  // out = silu(gate) * up = gate / (1 + e^-gate) * up: e^x computed at the CPU's vector width by
  // one polynomial (relative error ~1e-7), every element by the same code wherever it sits.
  void (*softmax_row)(float* x, int64_t n);
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  // Prefill of f32 / f16 / bf16 weights (more than 16 tokens) as a GEMM micro-kernel: x packed once
  // per product with the tokens in the vector lanes, a block of weight rows converted to f32 one
  // slice of `in` at a time, an outer product of kMicroRows rows x panel_tokens tokens per input in
  // registers. panel_tokens: the tokens of one packed block (two vectors: 16 on AVX2, 32 on
  // AVX-512, 8 generic). pack_token_columns: x [T, in] as [blocks, in, panel_tokens], blocks
  // [block_begin, block_end) (threads share them), zero past T. panel_rows: columns
  // [row_begin, row_end) of y = x W^T (+ bias), W of `type` (f32, f16 or bf16) [out, in] row-major,
  // `row_bytes` per row, with `scratch` of panel_rows_scratch_bytes(T) bytes per thread.
  int64_t panel_tokens;
  void (*pack_token_columns)(const float* x, int64_t T, int64_t in, float* packed, int64_t block_begin,
                             int64_t block_end);
  size_t (*panel_rows_scratch_bytes)(int64_t T);
  void (*panel_rows)(DType type, float* y, const float* x_packed, const void* weight, size_t row_bytes,
                     const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
                     void* scratch);
  // Decode of BF16 weights (one token) without widening each weight across lanes: split_pairs
  // writes x [in] in pair order — per block of pair_lanes inputs (two vectors) its even inputs,
  // then its odd ones —, and one_token_bf16_pairs computes columns [row_begin, row_end) of
  // y = x W^T (+ bias) from it, the stored words' halves taken as f32 by a shift and a mask.
  // `in` a multiple of pair_lanes (else float_rows). Exact products, f32 sums.
  int64_t pair_lanes;
  void (*split_pairs)(const float* x, int64_t in, float* x_pairs);
  void (*one_token_bf16_pairs)(float* y, const float* x_pairs, const void* weight, const float* bias, int64_t in,
                               int64_t row_begin, int64_t row_end);
};

const KernelTable& table(Isa isa);  // falls back to the best supported Isa

// The types KernelTable::dot_tokens_stored multiplies as stored: Q8_0 and Q4_0, whose blocks are
// one scale and 32 quants with a fixed zero point, and on AVX512-VNNI Q4_K, whose sub-blocks of 32
// take their scale and minimum once each (the others unpack first).
// AVX2 has Q8_0 only (Q4_0 measured slower that way there: part 3c of kernels_impl.inc).
inline bool has_stored_token_dot(DType type, Isa isa) {
  return type == DType::Q8_0 || ((type == DType::Q4_0 || type == DType::Q4_K) && isa == Isa::Avx512);
}
inline constexpr int kStoredTokenRows = 4;  // rows per dot_tokens_stored call
// The prefill kernels: rows per call (one 64-byte line of y per token), rows and chunks of 16
// tokens per register tile (Q8_0's tiles: 6 rows, kernels_impl.inc)
inline constexpr int kPrefillRows = 16, kPrefillTileRows = 4, kPrefillTileChunks = 2;
// Their scratch: two f32 values per block of 32 and row (Q4_K: scale and minimum of each
// sub-block; Q8_0's tiles read theirs beside the quads), then the results [kPrefillRows, chunks,
// 16]; Q4_0 then its rows made Q8_0 (34 bytes a block) and their block sums (2 bytes)
inline constexpr int64_t prefill_q8_0_scratch_floats(int64_t n, int64_t chunks) {
  return 2 * kPrefillRows * (n / 32) + kPrefillRows * chunks * kLaneTokens;
}
inline constexpr int64_t prefill_scratch_floats(int64_t n, int64_t chunks) {
  return prefill_q8_0_scratch_floats(n, chunks) + kPrefillRows * (n / 32) * (34 + 2) / 4;
}
// The chunks of 16 tokens a prefill kernel is given at once: as many as keep their n-byte
// token quads within 512 KiB (a quarter to a half of the L2 of the CPUs measured), at least two.
// Every tile of rows reads all of them again, so from L2 they stream at the kernels' rate, where
// 512 tokens of a 5632-wide product (2.9 MB) spilled to L3 and halved it (docs/performance.md).
inline constexpr int64_t prefill_chunks_per_call(int64_t n) {
  const int64_t chunks = (int64_t(512) << 10) / (kLaneTokens * n);
  return chunks < 2 ? 2 : chunks / 2 * 2;
}
// The types KernelTable::dot_tokens_grouped multiplies from their row groups: Q4_0 and Q8_0 (a
// grouped Q4_K matrix puts its rows back as stored for dot_tokens_stored).
inline bool has_grouped_token_dot(DType type, Isa isa) {
  return (type == DType::Q4_0 || type == DType::Q8_0) && has_stored_token_dot(type, isa);
}

// The types KernelTable::dot_rows of `isa` multiplies: on x86 every block type (the legacy ones
// and Q2_K .. Q6_K), on aarch64 dotprod the legacy ones and Q4_K, Q6_K.
inline bool has_fused_dot(DType type, Isa isa) {
  if (isa == Isa::NeonDot)
    return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q5_0 ||
           type == DType::Q5_1 || type == DType::Q2_K || type == DType::Q3_K || type == DType::Q4_K ||
           type == DType::Q5_K || type == DType::Q6_K;
  return dtype_is_quantized(type);
}

// ---- Q4_0, Q8_0 and Q4_K rows in groups of 8 (one-token decode) -------------------------------
//
// The fused decode dot of a stored Q4_0 row spends most of its instructions per block on things
// that do not depend on the row: loading the activation block, its zero-point start, its scale
// (tests/cpu/bench_block_dots: ~3 cycles per block of 18 bytes on AMD Zen 4, so 1.1B Q4_0 decode
// streamed its weights at 20 GB/s whatever the memory gave). Reading two or four stored rows side
// by side shares those, but costs more than it saves (each row is its own stream for the prefetcher:
// 1.1B Q8_0 decode 27.5 -> 23.1 tok/s). So the rows are regrouped once, when the weights are copied
// at load (llama.cpp's CPU "repack" buffers do the same, block_q4_0x8): a group of 8 rows is one
// stream, block b of its 8 rows side by side in one chunk (8 x 18 bytes for Q4_0, 8 x 34 for Q8_0,
// 8 x 144 for a Q4_K super-block), the bytes per row of the file, only moved:
//
//   block_q4_0x8  | d[8] f16 (0): block b's scale of rows 0..7
//                 | qs[128] (16): the 256 quants of the 8 blocks, two 64-byte halves h = 0, 1;
//                 |   byte i of half h: lo nibble = pair 2h's byte i, hi nibble = pair 2h+1's byte i,
//                 |   where pair p's byte i is quant i % 32 (0..15 the low nibbles, 16..31 the high
//                 |   ones, as in block_q4_0) of row 2p + i / 32
//   block_q8_0x8  | d[8] f16 (0): block b's scale of rows 0..7
//                 | qs[256] (16): row r's 32 quants at 32r (pair p: bytes 64p .. 64p + 63)
//   block_q4_kx8  | d[8], dmin[8] f16 (0, 16), scales[8][12] (32): the rows' as stored
//                 | qs[4][4][64] (128): chunk c (qs bytes 32c .. 32c + 31) of rows 2p, 2p + 1
//
// so one 512-bit load (and for Q4_0 two masks) gives rows 2p and 2p + 1 in the 256-bit halves of a
// register, each half what the stored row's kernel has in its one 256-bit register
// (GroupLayout::Pairs, AVX512-VNNI's). AVX2 has no instruction that sums a row's 32 products into
// one lane cheaply, so its Q4_0 chunk puts the 8 rows in the 8 lanes of a register instead
// (GroupLayout::Quads, the same 144 bytes):
//
//   block_q4_0x8  | d[8] f16 (0): as above
//   (Quads)       | qs[128] (16): byte 32j + 4r + i (j, i < 4) = row r's stored byte 4j + i (its
//                 |   quants 4j + i and 16 + 4j + i in the low and high nibbles)
//   block_q4_kx8  | d[8], dmin[8] f16 (0, 16): as above
//   (Quads)       | scales (32): byte 32k + 4r + i (k < 3, i < 4) = row r's packed scale byte 4k + i
//                 | qs (128): byte 256c + 32j + 4r + i (c, i < 4, j < 8) = row r's qs byte 32c + 4j + i
//
// Which types are grouped is CpuOptions::row_groups (by default Q4_0 and Q4_K: cpu_backend.h says why)
// where the CPU's kernels read them (has_row_group_dot).
// Only matrices copied at load are grouped (not `--mmap`, which uses the file's bytes in place), only
// linear weights (not the embedding table, which is read by rows), rows a multiple of 8, and only
// where the CPU has dot_row_groups; JOURNEY_ROW_GROUPS=off keeps every matrix as stored. Batched
// decode reads the rows from the groups (dot_tokens_grouped; Q4_K through prefill_q4_k), prefill's
// bf16 panels too (row_blocks_from_groups, slice by slice), AMX prefill, and the Q4_0 and Q4_K
// prefill tiles (prefill_q4_0, prefill_q4_k); the other paths (a grouped Q8_0 on the token lanes, a
// CPU without the bf16 paths) put the rows back as stored (rows_from_groups) a chunk at a time.
inline constexpr int64_t kGroupRows = 8;
struct block_q4_0x8 {
  uint16_t d[kGroupRows];
  uint8_t qs[kGroupRows * 16];
};
static_assert(sizeof(block_q4_0x8) == kGroupRows * 18, "a group chunk holds the 8 rows' blocks, nothing more");
struct block_q8_0x8 {
  uint16_t d[kGroupRows];
  int8_t qs[kGroupRows * 32];
};
static_assert(sizeof(block_q8_0x8) == kGroupRows * 34, "a group chunk holds the 8 rows' blocks, nothing more");
struct block_q4_kx8 {
  uint16_t d[kGroupRows];
  uint16_t dmin[kGroupRows];
  uint8_t scales[kGroupRows][12];
  uint8_t qs[4][kGroupRows / 2][64];  // [chunk c][pair p]: row 2p's qs[32c .. 32c + 31], then row 2p + 1's
};
static_assert(sizeof(block_q4_kx8) == kGroupRows * 144, "a group chunk holds the 8 rows' super-blocks, nothing more");
// The types whose rows can be grouped (on some CPU).
inline bool has_row_groups(DType type) { return type == DType::Q4_0 || type == DType::Q8_0 || type == DType::Q4_K; }
// How a chunk's quants are ordered (above): Pairs for AVX512-VNNI's kernels (every type with
// groups), Quads for AVX2's (Q4_0, Q4_K).
enum class GroupLayout { Pairs, Quads };
inline GroupLayout group_layout(Isa isa) { return isa == Isa::Avx2 ? GroupLayout::Quads : GroupLayout::Pairs; }
// The types whose groups KernelTable::dot_row_groups of `isa` multiplies (in group_layout(isa)):
// Q4_0, Q8_0 and Q4_K on AVX512-VNNI, Q4_0 and Q4_K on AVX2, none elsewhere. Only these are grouped
// at load.
inline bool has_row_group_dot(DType type, Isa isa) {
  return isa == Isa::Avx512 ? has_row_groups(type)
                            : isa == Isa::Avx2 && (type == DType::Q4_0 || type == DType::Q4_K);
}
// Rows [0, rows) of a matrix of such a type with `in` values per row (rows a multiple of 8) into
// groups of `layout` (Quads: Q4_0 and Q4_K; Q8_0 in Quads is a std::logic_error): `grouped` has the
// same size as `stored`.
void rows_to_groups(DType type, GroupLayout layout, const void* stored, int64_t rows, int64_t in, void* grouped);
// Rows [first, first + count) of a grouped matrix back as stored, into `stored` ([count] rows).
void rows_from_groups(DType type, GroupLayout layout, const void* grouped, int64_t in, int64_t first, int64_t count,
                      void* stored);
// The same for blocks [first_block, first_block + block_count) of each row only: `stored` gets
// [count, block_count] blocks (what prefill's bf16 panels take one slice at a time).
void row_blocks_from_groups(DType type, GroupLayout layout, const void* grouped, int64_t in, int64_t first,
                            int64_t count, int64_t first_block, int64_t block_count, void* stored);

// The sum of each Q8_0 block's 32 quants, for dot_tokens_q8_0_sums: rows [0, count) of a stored
// Q8_0 matrix of `in` values per row into sums [count, in / 32] (|sum| <= 32 x 128 fits int16).
// Made once per matrix at load where the CPU has that kernel (1/17 of the matrix's bytes).
void q8_0_block_sums(const void* rows, int64_t count, int64_t in, int16_t* sums);

// The instructions behind the products, for journey bench's ceilings.
enum class PeakKind { F32Fma, Int8Dot, Bf16Dot, AmxBf16, Int8BlockDot };
// Operations (2 per multiply-add) one thread does per second in a register-resident loop of the
// instruction (f32 FMA of the best Isa, the int8 dot of the best Isa — AVX512-VNNI vpdpbusd, AVX2
// vpmaddubsw + vpmaddwd, aarch64 dotprod sdot —, AVX512-BF16 vdpbf16ps, AMX-BF16 tdpbf16ps on
// tiles), measured for about `seconds`; 0 when the CPU lacks it. Int8BlockDot: that int8 dot with
// the least a block format adds to it — per 32 inputs and lane a convert, a multiply by the two
// block scales and an FMA (Q8_0's prefill tile, its operands in L1): the rate no exact product of
// block-quantized rows passes, where Int8Dot is the instruction's alone.
double peak_rate(PeakKind kind, double seconds = 0.2);

// ---- AVX512-BF16 (only when has_bf16_dot()) ---------------------------------------------------

// Tiles of 16 tokens pack_token_pairs writes for T tokens: whole pairs (the bf16 prefill kernels
// multiply 32 tokens per pass; the padding tokens are zero).
inline int64_t token_pair_tiles(int64_t T) { return (T + 31) / 32 * 2; }
// Elements (bf16) of pack_token_pairs's output for T tokens of `in` values.
inline int64_t token_pairs_size(int64_t T, int64_t in) { return token_pair_tiles(T) * 16 * in; }
// x [T, in] f32 (in a multiple of 32) rounded to bf16 (nearest even: f32_to_bf16's value) and laid
// out as the token tiles tdpbf16ps reads: [token_pair_tiles(T), in / 32, 16 pairs, 16 tokens, 2] —
// tile (b, c) holds tokens 16b .. 16b + 15, inputs 32c .. 32c + 31, each pair of inputs side by
// side ("VNNI" layout); so tile b is [in / 2 pairs, 16 tokens, 2], one 512-bit vector of 16 tokens per pair,
// which is what bf16_panel_rows's vdpbf16ps reads. Writes the tiles b in [tile_begin, tile_end)
// only (threads share the work).
void pack_token_pairs(const float* x, int64_t T, int64_t in, uint16_t* packed, int64_t tile_begin, int64_t tile_end);

// Scratch one thread of bf16_panel_rows needs (bytes), for T tokens.
size_t bf16_panel_rows_scratch_bytes(int64_t T);

// Columns [row_begin, row_end) of y = x W^T (+ bias) with x packed by pack_token_pairs and W of
// `type` (BF16 or a block type; `in` a multiple of 32) [out, in] row-major, `row_bytes` bytes per
// row: 48 rows at a time are copied (BF16) or dequantized to bf16 one slice of 256 inputs at a time
// into `scratch`, then multiplied with every token by vdpbf16ps (a 12-row x 32-token micro-tile
// per pair of inputs, sums in registers); products exact, f32 sums. For prefill. row_groups: W is
// a matrix regrouped by 8 rows (block_q4_0x8 ..; row_bytes still the rows' as stored), each slice
// taken from the groups (row_blocks_from_groups) as it is dequantized.
void bf16_panel_rows(DType type, float* y, const uint16_t* x_packed, const void* weight, size_t row_bytes,
                     const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
                     void* scratch, bool row_groups = false);

// ---- AMX-BF16 (only when has_amx()) -----------------------------------------------------------

// Scratch one thread of amx_rows needs (bytes), for rows of `in` weights.
size_t amx_rows_scratch_bytes(int64_t in);
// bf16_panel_rows on AMX tiles: columns [row_begin, row_end) of y = x W^T (+ bias), x packed by
// pack_token_pairs, W of `type` [out, in] row-major (`in` a multiple of 32): BF16 copied, block
// types dequantized to bf16 (the value bf16_panel_rows multiplies), F16 split into bf16 + the remainder
// (both multiplied: the weight exact), 32 rows at a time; f32 sums. row_groups: as bf16_panel_rows
// (each piece of a panel row taken from the groups as it is dequantized).
void amx_rows(DType type, float* y, const uint16_t* x_packed, const void* weight, size_t row_bytes,
              const float* bias, int64_t T, int64_t in, int64_t out, int64_t row_begin, int64_t row_end,
              void* scratch, bool row_groups = false);

}  // namespace journey::cpu::kernels
