// The fast CPU ops: the reference ops (reference/ops.h) with the same names and the same arguments
// in the same order, made fast — threads (the last argument, where an op uses them), kernels per
// instruction set chosen at run time (cpu/kernels.h), huge-page scratch, vectorized exp in fixed
// blocks. Two differences from the reference, both in the arguments' types, not their order: a
// weight matrix is a WeightView (pointer + the type it is stored in: f32, f16, bf16 or a GGML
// block type, multiplied as stored), and the KV pools are KvPool views (f32, f16, bf16 or q8_0).
// Every other tensor is a row-major f32 array whose shape is written beside it. tests/backends
// runs each op against its reference twin on odd sizes, with every weight type.
//
// Shape letters: T = tokens in this step, P = positions attended (start + T), E = hidden size,
// H = query heads, KVH = key/value heads, D = head_dim, F = FFN size, V = vocab, R = rows.
#pragma once
#include <cstdint>
#include <span>

#include "core/config.h"
#include "core/dtype.h"

namespace journey::cpu {

// A weight matrix as stored: its bytes and their type. The shape comes with the op's other
// arguments ([out, in] for linear, [V, E] for embedding_gather); row r starts at byte
// r * dtype_bytes_for(type, in), so a block type's rows hold whole blocks — unless row_groups:
// a Q4_0, Q8_0 or Q4_K matrix (rows a multiple of 8) regrouped at load for the one-token decode
// dot (kernels.h, block_q4_0x8, block_q8_0x8, block_q4_kx8), the same bytes in another order; only
// linear reads it.
struct WeightView {
  const void* data = nullptr;
  DType type = DType::F32;
  bool row_groups = false;
  // A Q8_0 matrix as stored (not grouped): the sum of each block's quants, [out, in / 32], made at
  // load where the CPU has kernels::dot_tokens_q8_0_sums (batched decode then takes it); or null.
  const int16_t* block_sums = nullptr;
};

// out[t, :] = table[tokens[t], :], widened to f32 (block types dequantized by quant::dequantize,
// exactly the reference's values). Token ids must already be checked against V.
void embedding_gather(float* out,            // [T, E]
                      WeightView table,      // [V, E]
                      const int32_t* tokens, // [T]
                      int64_t T, int64_t E);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight. out may alias x.
void rms_norm(float* out,           // [R, N]
              const float* x,       // [R, N]
              const float* weight,  // [N]
              int64_t R, int64_t N, float eps);

// Rotary position embedding, in place, on x = [T, heads, D]; token t sits at positions[t].
// The angle of pair i is positions[t] * theta^(-2i/D), computed in f32 as Hugging Face does.
//   HalfSplit:   pairs (i, i + D/2)  — HF rotate_half
//   Interleaved: pairs (2i, 2i + 1)  — Meta / llama2.c
void rope(float* x,                  // [T, heads, D]
          const int64_t* positions,  // [T]
          int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout);

// y = x W^T (+ bias): the Linear layer of PyTorch with W stored [out, in] row-major.
// The output rows are split across `threads` threads, so the weights are read once per call
// whether T is 1 (decode: a matrix-vector product) or large (prefill: matrix-matrix).
// How each weight type is multiplied (typed_linear.h): f32 as before (Eigen, the tile kernel of
// gemm.h); f16/bf16 widened to f32 in registers; block types against x quantized to 8 bits
// (Q8_0 for the legacy types, Q8_K for the K types) up to 16 tokens, and for prefill (more than 16
// tokens) bf16 and block types by AVX512-BF16 dot products with x rounded to bf16.
void linear(float* y,           // [T, out]
            const float* x,     // [T, in]
            WeightView weight,  // [out, in]
            const float* bias,  // [out] or nullptr
            int64_t T, int64_t in, int64_t out, int threads);

// One product of linear_shared_input: y = x W^T (+ bias).
struct LinearTarget {
  float* y;           // [T, out]
  WeightView weight;  // [out, in]
  const float* bias;  // [out] or nullptr
  int64_t out;
};

// Several products of the same input in ONE parallel region (q, k and v of a layer; gate and
// up): each thread computes its block of rows of every product in turn, so the threads meet once
// per group instead of once per product. A decode step is ~150 products that each take about a
// millisecond; every meeting waits for the slower thread (and, with sleeping OpenMP waits, wakes
// the other one). The result is exactly that of one linear() per target.
void linear_shared_input(const float* x,  // [T, in]
                         int64_t T, int64_t in, std::span<const LinearTarget> targets, int threads);

// The one-token products (decode) timed apart, for journey bench: how fast the weights stream
// inside them and what share of a decode step they take. Off unless started (a clock read per
// product). Rows of a one-token product, and of a batched-decode product on block types (2 .. 16
// tokens), are handed out by work stealing (StealingShares in ops.cpp) unless
// JOURNEY_DECODE_STEAL=off; JOURNEY_DECODE_STEAL=alternate picks one of the two for each product
// at random, so that both are timed (one-token products) under the same drift of the machine's bandwidth.
struct DecodeProductTimes {
  double seconds = 0, weight_bytes = 0;  // summed over the products timed
  int64_t products = 0;
  DecodeProductTimes& operator+=(const DecodeProductTimes& more) {
    seconds += more.seconds, weight_bytes += more.weight_bytes, products += more.products;
    return *this;
  }
};
struct DecodeProductSplit {
  DecodeProductTimes static_split, stealing;  // each product counted under the way its rows were shared
};
void start_timing_decode_products();              // sums reset, timing on
DecodeProductSplit stop_timing_decode_products();  // timing off: the sums since the start

// The prefill products (more than kSmallBatchTokens tokens) timed apart, for journey bench: their
// share of a prefill, the rate they multiply at against the GEMM ceiling, and how much of their
// time both threads were busy (each thread's own time in its rows, summed, over the products' time
// x threads): what is left of prefill's distance from its ceiling is the other ops' and the
// threads' waiting for each other. Off unless started (a clock read per product and thread).
// Prefill products share their rows by work stealing too, in chunks of whole panels that give each
// row the value the static split gives it (StealingShares in ops.cpp), unless JOURNEY_PREFILL_STEAL=off.
struct PrefillProductTimes {
  double seconds = 0, flops = 0;  // summed over the products timed: wall time, 2 x T x in x out
  double thread_seconds = 0;      // the threads' own time in their rows, summed over threads
  double thread_capacity = 0;     // each product's time x the threads it ran on, summed
  int64_t products = 0;
  PrefillProductTimes& operator+=(const PrefillProductTimes& more) {
    seconds += more.seconds, flops += more.flops, thread_seconds += more.thread_seconds;
    thread_capacity += more.thread_capacity, products += more.products;
    return *this;
  }
};
void start_timing_prefill_products();               // sums reset, timing on
PrefillProductTimes stop_timing_prefill_products();  // timing off: the sums since the start

// In place over each row: x = softmax(x). Rows of all -inf are not allowed (the causal mask always
// leaves at least the token itself).
void softmax(float* x,  // [R, N]
             int64_t R, int64_t N);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu(float* out,         // [n]
            const float* gate,  // [n]
            const float* up,    // [n]
            int64_t n);

// out = a + b. out may alias a.
void residual_add(float* out, const float* a, const float* b, int64_t n);  // [n] each

// Causal grouped-query attention for one sequence whose K/V are contiguous:
// query t sits at position start + t and attends positions [0, start + t]; query head h reads
// kv head h / (H / KVH). Scores are q.k / sqrt(D).
// scores_out / weights_out are optional copies for tracing ([H, T, P], -inf where masked).
void attention(float* context,       // [T, H * D]
               const float* q,       // [T, H, D]
               const float* k,       // [P, KVH, D]
               const float* v,       // [P, KVH, D]
               int64_t T, int64_t start, int64_t H, int64_t KVH, int64_t D,
               float* scores_out,    // [H, T, P] or nullptr
               float* weights_out,   // [H, T, P] or nullptr
               int threads);

// The KV pool of one layer: num_blocks blocks of block_size slots, each slot [KVH, D].
// Position p of a sequence lives in slot block_table[p / block_size] * block_size + p % block_size.
// A pool is stored as f32, or to save memory as f16, bf16 (half) or q8_0 (blocks of 32 along D,
// 34 bytes per 32 values: a bit over a quarter); a slot takes dtype_bytes_for(type, KVH * D) bytes.
struct KvPool {
  void* data = nullptr;
  DType type = DType::F32;
};
// The pool types kv_cache_write accepts; q8_0 needs D to be a multiple of 32 (blocks never straddle
// heads). Throws journey::Error naming the type and D otherwise.
void check_kv_pool_type(DType type, int64_t D);

// Write the k/v rows of T tokens at positions [start, start + T) into their slots (rounded or
// quantized to the pool's type).
void kv_cache_write(KvPool k_pool,              // [num_blocks, block_size, KVH, D]
                    KvPool v_pool,              // [num_blocks, block_size, KVH, D]
                    const float* k,             // [T, KVH, D]
                    const float* v,             // [T, KVH, D]
                    const int32_t* block_table, // [ceil((start + T) / block_size)]
                    int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D);

// paged_attention timed apart, for journey bench: attention's share of a prefill or a decode step
// (which grows with the context while the products' does not), the rate of its arithmetic (4 H D
// FLOPs per attended (query, position): the scores and the mix) and the rate its K and V rows were
// read at (each position's rows of every kv head once per call). Off unless started (a clock read
// per call). Sums over calls: where a batch's sequences attend side by side, more than the wall time.
struct AttentionTimes {
  double seconds = 0, flops = 0, kv_bytes = 0;
  int64_t calls = 0;
  AttentionTimes& operator+=(const AttentionTimes& more) {
    seconds += more.seconds, flops += more.flops, kv_bytes += more.kv_bytes, calls += more.calls;
    return *this;
  }
};
void start_timing_attention();          // sums reset, timing on
AttentionTimes stop_timing_attention();  // timing off: the sums since the start

// attention() with K/V read from the pool through the block table (widened to f32 per row).
void paged_attention(float* context,              // [T, H * D]
                     const float* q,              // [T, H, D]
                     KvPool k_pool,               // [num_blocks, block_size, KVH, D]
                     KvPool v_pool,               // [num_blocks, block_size, KVH, D]
                     const int32_t* block_table,  // [ceil(P / block_size)]
                     int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                     float* scores_out,           // [H, T, P] or nullptr
                     float* weights_out,          // [H, T, P] or nullptr
                     int threads);

}  // namespace journey::cpu
