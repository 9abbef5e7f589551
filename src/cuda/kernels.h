// The CUDA kernels, one launcher per operation of reference/ops.h with the SAME NAME and the same
// arguments in the same order; only the last argument differs: the reference's `threads` becomes
// the CUDA stream (or, for the matrix products, a LinearContext that carries the stream, the
// cuBLAS handle and a scratch buffer). Every pointer is a DEVICE pointer, every float tensor is
// row-major f32 with the shape written beside it, as in ops.h. Weight matrices may be f32, bf16
// or f16 (`weight_type`); all arithmetic accumulates in f32.
//
// The launchers check their arguments and the launch itself, and throw journey::Error.
#pragma once
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/config.h"
#include "core/dtype.h"
#include "backend/device_sampling.h"

namespace journey::cuda {

// Throws journey::Error naming the call, where it was made and CUDA's message.
void check_cuda(cudaError_t status, const char* what, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* what, const char* file, int line);
#define JOURNEY_CUDA_CHECK(call) ::journey::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define JOURNEY_CUBLAS_CHECK(call) ::journey::cuda::check_cublas((call), #call, __FILE__, __LINE__)

// Visible devices; 0 (never an exception) when there is no driver or no device.
int device_count();

// out[t, :] = table[tokens[t], :], widened to f32. table_type: F32, BF16 or F16.
void embedding_gather(float* out,             // [T, E]
                      const void* table,      // [V, E] of table_type
                      DType table_type,
                      const int32_t* tokens,  // [T]
                      int64_t T, int64_t E, cudaStream_t stream);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight. out may alias x.
void rms_norm(float* out,           // [R, N]
              const float* x,       // [R, N]
              const float* weight,  // [N]
              int64_t R, int64_t N, float eps, cudaStream_t stream);

// Rotary embedding in place on x = [T, heads, D], both pair layouts (see ops.h).
void rope(float* x,                  // [T, heads, D]
          const int64_t* positions,  // [T]
          int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout, cudaStream_t stream);

// How a matrix product runs: the stream, the cuBLAS handle (bound to that stream), and a scratch
// buffer for the activations narrowed to the weight type (cuBLAS multiplies two matrices of one
// type: bf16 x bf16 with an f32 result and f32 accumulation).
enum class GemvVersion : int {
  v1_thread_per_row = 1,   // see kernels.cu for what each version fixes in the previous one
  v2_warp_per_row = 2,
  v3_shared_x_two_rows = 3,
};
struct LinearContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  void* scratch = nullptr;        // >= T * in * 2 bytes when weights are bf16/f16 and T > 1
  size_t scratch_bytes = 0;
  GemvVersion gemv = GemvVersion::v3_shared_x_two_rows;  // used when T == 1
};

// y = x W^T (+ bias), W stored [out, in] row-major (PyTorch's Linear). T == 1 runs the hand-written
// GEMV (f32 x against W in its own type); T > 1 runs cuBLAS GemmEx with f32 accumulation.
void linear(float* y,             // [T, out]
            const float* x,       // [T, in]
            const void* weight,   // [out, in] of weight_type
            DType weight_type,
            const float* bias,    // [out] or nullptr
            int64_t T, int64_t in, int64_t out, const LinearContext& context);

// The hand-written matrix-vector products behind linear() at T == 1, one per version.
void gemv(GemvVersion version,
          float* y,             // [out]
          const float* x,       // [in]
          const void* weight,   // [out, in] of weight_type
          DType weight_type,
          const float* bias,    // [out] or nullptr
          int64_t in, int64_t out, cudaStream_t stream);

// In place over each row: x = softmax(x).
void softmax(float* x,  // [R, N]
             int64_t R, int64_t N, cudaStream_t stream);

// out = silu(gate) * up.
void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);  // [n] each

// out = a + b. out may alias a.
void residual_add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);  // [n] each

// FUSED (fast path only): x += b, then out = rms_norm(x, weight). One read of x instead of three;
// the backend runs residual_add + rms_norm instead whenever a trace wants either result.
void residual_add_rms_norm(float* x,             // [R, N] residual stream, updated in place
                           float* out,           // [R, N]
                           const float* b,       // [R, N]
                           const float* weight,  // [N]
                           int64_t R, int64_t N, float eps, cudaStream_t stream);

// Causal GQA attention over contiguous K/V (prefill of a sequence with no history in a pool).
void attention(float* context,       // [T, H * D]
               const float* q,       // [T, H, D]
               const float* k,       // [P, KVH, D]
               const float* v,       // [P, KVH, D]
               int64_t T, int64_t start, int64_t H, int64_t KVH, int64_t D,
               float* scores_out,    // [H, T, P] or nullptr
               float* weights_out,   // [H, T, P] or nullptr
               cudaStream_t stream);

// Write the k/v rows of T tokens at positions [start, start + T) into their pool slots.
void kv_cache_write(float* k_pool,              // [num_blocks, block_size, KVH, D]
                    float* v_pool,              // [num_blocks, block_size, KVH, D]
                    const float* k,             // [T, KVH, D]
                    const float* v,             // [T, KVH, D]
                    const int32_t* block_table, // [ceil((start + T) / block_size)]
                    int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D, cudaStream_t stream);

// attention() with K/V read from the pool through the block table; at T == 1 this is the decode
// kernel of a paged KV cache.
void paged_attention(float* context,              // [T, H * D]
                     const float* q,              // [T, H, D]
                     const float* k_pool,         // [num_blocks, block_size, KVH, D]
                     const float* v_pool,         // [num_blocks, block_size, KVH, D]
                     const int32_t* block_table,  // [ceil(P / block_size)]
                     int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                     float* scores_out,           // [H, T, P] or nullptr
                     float* weights_out,          // [H, T, P] or nullptr
                     cudaStream_t stream);

// y[t, :] += bias for T rows.
void add_bias(float* y, const float* bias, int64_t T, int64_t out, cudaStream_t stream);  // [T, out], [out]

// dst = src narrowed to dst_type (F32 copies, BF16/F16 round to nearest even).
void convert_from_f32(void* dst, DType dst_type, const float* src, int64_t n, cudaStream_t stream);

// ids[r] = argmax(logits[r, :]), ties to the lowest id.
void argmax_rows(int32_t* ids,          // [R]
                 const float* logits,   // [R, V]
                 int64_t R, int64_t V, cudaStream_t stream);

// ids[r] = a token drawn from row r as sampling/processors.cpp does it: temperature, softmax,
// top-k, top-p (ties ranked by the lower id), then the inverse-CDF walk at params[r].u.
// Rows with temperature 0 take the argmax. probs is scratch ([R, V]).
void sample_rows(int32_t* ids,                   // [R]
                 const float* logits,            // [R, V]
                 const DeviceSampling* params,   // [R]
                 float* probs,                   // [R, V] scratch
                 int64_t R, int64_t V, cudaStream_t stream);

}  // namespace journey::cuda
