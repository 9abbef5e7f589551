// The reference ops: the operations of a decoder-only transformer, one short function each, in
// f32, as a learner would check them by hand. Eigen does the vector arithmetic (a dot product, a
// matrix product) so the code reads like the formula; there are no threads, no kernels of our own,
// no buffers of our own. Every other backend has an op of the same name with the same arguments in
// the same order (cpu/ops.h, cuda/kernels.h; theirs end with an execution context: threads or a
// CUDA stream) and is tested against these on random inputs (tests/backends).
//
// Every tensor is a row-major f32 array whose shape is written beside it. Shape letters:
// T = tokens in this step, P = positions attended (start + T), E = hidden size, H = query heads,
// KVH = key/value heads, D = head_dim, F = FFN size, V = vocabulary, R = rows, N = row length.
#pragma once
#include <cstdint>

#include "core/config.h"

namespace journey::reference {

// out[t, :] = table[tokens[t], :]: one row of the table per token. Also gathers the rows of a
// hidden state that get logits (table = the final norm's output, tokens = row numbers).
void embedding_gather(float* out,             // [T, E]
                      const float* table,     // [V, E]
                      const int32_t* tokens,  // [T] ids in [0, V)
                      int64_t T, int64_t E);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight. out may alias x.
void rms_norm(float* out,           // [R, N]
              const float* x,       // [R, N]
              const float* weight,  // [N]
              int64_t R, int64_t N, float eps);

// Rotary position embedding, in place, on x = [T, heads, D]; token t sits at positions[t].
// Pair i of a head turns by the angle positions[t] * theta^(-2i/D) (in f32, as Hugging Face does):
//   HalfSplit:   pairs (i, i + D/2)  — HF's rotate_half
//   Interleaved: pairs (2i, 2i + 1)  — Meta / llama2.c / GGUF
void rope(float* x,                  // [T, heads, D]
          const int64_t* positions,  // [T]
          int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout);

// y = x W^T (+ bias): PyTorch's Linear, with W stored [out, in] row-major.
void linear(float* y,             // [T, out]
            const float* x,       // [T, in]
            const float* weight,  // [out, in]
            const float* bias,    // [out] or nullptr
            int64_t T, int64_t in, int64_t out);

// In place over each row: x = exp(x - max) / sum(exp(x - max)). -inf entries become exactly 0;
// a row must hold at least one finite value (the causal mask always leaves the token itself).
void softmax(float* x,  // [R, N]
             int64_t R, int64_t N);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu(float* out,         // [n]
            const float* gate,  // [n]
            const float* up,    // [n]
            int64_t n);

// out = a + b. out may alias a.
void residual_add(float* out,      // [n]
                  const float* a,  // [n]
                  const float* b,  // [n]
                  int64_t n);

// Causal grouped-query attention for one sequence whose K/V are contiguous: query t sits at
// position start + t and attends positions [0, start + t]; query head h reads KV head h / (H / KVH).
// scores = q.k / sqrt(D); weights = softmax(scores); context = sum of weights * v.
// scores_out / weights_out are optional copies for tracing (-inf / 0 where masked).
void attention(float* context,     // [T, H * D]
               const float* q,     // [T, H, D]
               const float* k,     // [P, KVH, D]
               const float* v,     // [P, KVH, D]
               int64_t T, int64_t start, int64_t H, int64_t KVH, int64_t D,
               float* scores_out,  // [H, T, P] or nullptr
               float* weights_out  // [H, T, P] or nullptr
);

// The KV pool of one layer: num_blocks blocks of block_size slots, each slot [KVH, D]. Position p
// of a sequence lives in slot block_table[p / block_size] * block_size + p % block_size.

// Write the k/v rows of T tokens at positions [start, start + T) into their slots.
void kv_cache_write(float* k_pool,               // [num_blocks, block_size, KVH, D]
                    float* v_pool,               // [num_blocks, block_size, KVH, D]
                    const float* k,              // [T, KVH, D]
                    const float* v,              // [T, KVH, D]
                    const int32_t* block_table,  // [ceil((start + T) / block_size)]
                    int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D);

// attention() with K/V read from the pool through the block table.
void paged_attention(float* context,              // [T, H * D]
                     const float* q,              // [T, H, D]
                     const float* k_pool,         // [num_blocks, block_size, KVH, D]
                     const float* v_pool,         // [num_blocks, block_size, KVH, D]
                     const int32_t* block_table,  // [ceil(P / block_size)]
                     int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                     float* scores_out,           // [H, T, P] or nullptr
                     float* weights_out           // [H, T, P] or nullptr
);

}  // namespace journey::reference
