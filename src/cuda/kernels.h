// The CUDA kernels, one launcher per operation of the reference ops (src/reference) with the SAME
// NAME and the SAME ARGUMENTS IN THE SAME ORDER. The rule every fast backend follows:
//   - a weight matrix (or embedding table) is `const float*` in the reference and a WeightView here
//     (the device pointer and the type the device stores it in);
//   - the LAST argument is the execution context: a cudaStream_t, or for the matrix products a
//     LinearContext (the stream, the cuBLAS handle, a scratch buffer, the GEMV choice).
// So `reference::linear(y, x, weight, bias, T, in, out)` is
//    `cuda::linear(y, x, WeightView{w, DType::BF16}, bias, T, in, out, context)`.
// Every pointer is a DEVICE pointer and every float tensor row-major f32 with its shape beside it.
// Weights may be f32, bf16, f16 or GGUF blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K: dequantized inside
// the GEMV, or into a bf16 scratch before cuBLAS when T > 1); all arithmetic accumulates in f32.
//
// Below the mirrored ops come the CUDA-only ones, marked FAST PATH: fused kernels and the batched
// decode kernels behind CUDA graphs. Each is tested against the unfused ops it replaces.
//
// The launchers check their arguments and the launch itself, and throw journey::Error.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/device_sampling.h"
#include "cuda/cublas_loader.h"
#include "core/config.h"
#include "core/dtype.h"

namespace journey::cuda {

// Throws journey::Error naming the call, where it was made and CUDA's message. (cuBLAS's calls go
// through cublas(), which opens the library on first use: cublas_loader.h.)
void check_cuda(cudaError_t status, const char* what, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* what, const char* file, int line);
#define JOURNEY_CUDA_CHECK(call) ::journey::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define JOURNEY_CUBLAS_CHECK(call) ::journey::cuda::check_cublas((call), #call, __FILE__, __LINE__)

// Visible devices; 0 (never an exception) when there is no driver or no device.
int device_count();

// True once a launch with LinearContext::early_launch was refused by the driver (from then on
// every launch is plain); benchmarks report it.
bool early_launch_refused();

// A weight matrix as the device stores it: what is `const float* weight` in the reference.
struct WeightView {
  const void* data = nullptr;  // [rows, cols] row-major, in `type`
  DType type = DType::F32;     // F32, BF16, F16, or a GGUF block type kept as stored: Q8_0, Q4_0,
                               // Q4_1, Q4_K, Q6_K (each row a run of blocks, quant/blocks.h)
};

// How a matrix product runs. cuBLAS multiplies two matrices of one type, so for bf16/f16 weights
// and T > 1 the activations are first narrowed into `scratch` (bf16 x bf16, f32 accumulation).
enum class GemvVersion : int {
  v1_thread_per_row = 1,   // kernels.cu says what each version fixes in the previous one
  v2_warp_per_row = 2,
  v3_shared_x_two_rows = 3,
  v4_prefetch_unrolled = 4,
};
struct LinearContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // needed when T > 1
  void* scratch = nullptr;          // >= T * in * 2 bytes when weights are bf16/f16 and T > 1
  size_t scratch_bytes = 0;
  GemvVersion gemv = GemvVersion::v4_prefetch_unrolled;  // the kernel when T == 1
  // Programmatic dependent launch (Hopper): a v4 GEMV may start while the previous kernel runs,
  // reading its weights early and waiting for that kernel only before it reads x.
  bool early_launch = false;
  // A quantized matrix is dequantized into weight_scratch for cuBLAS when T > 1, in this type: bf16
  // (the fast default: out * in * 2 bytes) or f32 (out * in * 4 bytes: `--device cuda:f32`, where the
  // GPU must agree with the CPU to f32 rounding).
  void* weight_scratch = nullptr;
  size_t weight_scratch_bytes = 0;
  DType dequantize_to = DType::BF16;
};

// ---- the mirrored ops ----------------------------------------------------------------------------

// out[t, :] = table[tokens[t], :], widened to f32.
void embedding_gather(float* out,             // [T, E]
                      WeightView table,       // [V, E]
                      const int32_t* tokens,  // [T]
                      int64_t T, int64_t E, cudaStream_t stream);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight. out may alias x.
void rms_norm(float* out,           // [R, N]
              const float* x,       // [R, N]
              const float* weight,  // [N]
              int64_t R, int64_t N, float eps, cudaStream_t stream);

// Rotary embedding in place on x = [T, heads, D], both pair layouts (see the reference).
void rope(float* x,                  // [T, heads, D]
          const int64_t* positions,  // [T]
          int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout, cudaStream_t stream);

// y = x W^T (+ bias), W stored [out, in] row-major (PyTorch's Linear). T == 1 runs the hand-written
// GEMV (f32 x against W in its own type; quantized W always with v4); T > 1 runs cuBLAS GemmEx with
// f32 accumulation (quantized W dequantized into context.weight_scratch first).
void linear(float* y,             // [T, out]
            const float* x,       // [T, in]
            WeightView weight,    // [out, in]
            const float* bias,    // [out] or nullptr
            int64_t T, int64_t in, int64_t out, const LinearContext& context);

// One product of linear_shared_input: y = x W^T (+ bias).
struct LinearTarget {
  float* y;            // [T, out]
  WeightView weight;   // [out, in]
  const float* bias;   // [out] or nullptr
  int64_t out;
};
inline constexpr int kMaxLinearTargets = 4;

// The targets of one call, as a span: std::span is C++20 and nvcc compiles the kernels as C++17.
struct LinearTargets {
  const LinearTarget* data = nullptr;
  size_t count = 0;
  LinearTargets(const LinearTarget* first, size_t n) : data(first), count(n) {}
  template <size_t N>
  LinearTargets(const LinearTarget (&array)[N]) : data(array), count(N) {}  // NOLINT: implicit, like span
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  const LinearTarget& operator[](size_t i) const { return data[i]; }
  const LinearTarget* begin() const { return data; }
  const LinearTarget* end() const { return data + count; }
};

// Several products of the same input (q, k and v; gate and up). T == 1: ONE GEMV launch over the
// rows of every target (x staged once per block), one per weight type when the targets mix types;
// T > 1: x narrowed once, one GEMM per target. The result is that of one linear() per target.
// At most kMaxLinearTargets targets.
void linear_shared_input(const float* x,  // [T, in]
                         int64_t T, int64_t in, LinearTargets targets,
                         const LinearContext& context);

// In place over each row: x = softmax(x).
void softmax(float* x,  // [R, N]
             int64_t R, int64_t N, cudaStream_t stream);

// out = silu(gate) * up.
void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);  // [n] each

// out = a + b. out may alias a.
void residual_add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);  // [n] each

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

// attention() with K/V read from the pool through the block table.
void paged_attention(float* context,              // [T, H * D]
                     const float* q,              // [T, H, D]
                     const float* k_pool,         // [num_blocks, block_size, KVH, D]
                     const float* v_pool,         // [num_blocks, block_size, KVH, D]
                     const int32_t* block_table,  // [ceil(P / block_size)]
                     int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                     float* scores_out,           // [H, T, P] or nullptr
                     float* weights_out,          // [H, T, P] or nullptr
                     cudaStream_t stream);

// ---- CUDA-only helpers -----------------------------------------------------------------------------

// The hand-written matrix-vector products behind linear() at T == 1, one per version.
void gemv(GemvVersion version,
          float* y,             // [out]
          const float* x,       // [in]
          WeightView weight,    // [out, in]
          const float* bias,    // [out] or nullptr
          int64_t in, int64_t out, cudaStream_t stream);

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

// ---- FAST PATH: fused kernels (used when no trace wants the tensors they skip) -------------------

// x += b, then out = rms_norm(x, weight). One read of x instead of three.
void residual_add_rms_norm(float* x,             // [R, N] residual stream, updated in place
                           float* out,           // [R, N]
                           const float* b,       // [R, N]
                           const float* weight,  // [N]
                           int64_t R, int64_t N, float eps, cudaStream_t stream);

// T == 1: linear_shared_input over rms_norm(x, norm_weight) computed inside the GEMV (every block
// normalizes x while staging it), so the normalized vector never goes to memory.
void rms_norm_linear_shared_input(const float* x,            // [in] residual stream
                                  const float* norm_weight,  // [in]
                                  float eps, int64_t in, LinearTargets targets,
                                  const LinearContext& context);

// T == 1: act = silu(xn Wg^T) * (xn Wu^T) with xn = rms_norm(x, norm_weight): the FFN's norm, gate
// and up products and SwiGLU in one GEMV (a warp reads row o of both matrices).
void rms_norm_swiglu(float* act,                 // [F]
                     const float* x,             // [in]
                     const float* norm_weight,   // [in]
                     float eps,
                     WeightView gate,            // [F, in]
                     WeightView up,              // [F, in]
                     int64_t in, int64_t F, const LinearContext& context);

// T == 1: x += input W^T, the projection and the residual add in one GEMV.
void linear_residual_add(float* x,             // [out] residual stream, updated in place
                         const float* input,   // [in]
                         WeightView weight,    // [out, in]
                         int64_t in, int64_t out, const LinearContext& context);

// ---- FAST PATH: batched decode (S sequences, one token each) ---------------------------------------
// Positions and block tables are read from device memory, so one CUDA graph serves every step of
// a batch of S sequences whatever their lengths.
struct DecodeBatch {
  const int64_t* positions = nullptr;     // [S] position of each sequence's token (context = position + 1)
  const int32_t* block_tables = nullptr;  // [S, table_stride] each sequence's block table, padded
  int64_t table_stride = 0;
  int64_t S = 0;
};

// Per sequence s: (Qwen3) RMSNorm of every q and k head, RoPE of q in place and of k at
// positions[s], then k and v stored in the pool slot of positions[s]. q_norm/k_norm: nullptr to skip.
void rope_kv_cache_write_decode(float* q,              // [S, H, D] rotated in place
                                const float* k,        // [S, KVH, D]
                                const float* v,        // [S, KVH, D]
                                float* k_pool,         // [num_blocks, block_size, KVH, D]
                                float* v_pool,         // [num_blocks, block_size, KVH, D]
                                const float* q_norm,   // [D] or nullptr
                                const float* k_norm,   // [D] or nullptr
                                float eps, const DecodeBatch& batch, int64_t block_size, int64_t H, int64_t KVH,
                                int64_t D, double theta, RopeLayout layout, cudaStream_t stream);

// paged_attention for one query per sequence, every sequence of the batch in one launch: a block
// per (head, sequence) walks the positions in tiles with a running max and sum (online softmax),
// so its shared memory does not grow with the context.
void paged_attention_decode(float* context,         // [S, H * D]
                            const float* q,         // [S, H, D]
                            const float* k_pool,    // [num_blocks, block_size, KVH, D]
                            const float* v_pool,    // [num_blocks, block_size, KVH, D]
                            const DecodeBatch& batch, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                            cudaStream_t stream);

}  // namespace journey::cuda
