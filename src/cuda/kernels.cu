// Every CUDA kernel of journey, in one file on purpose: nvcc is slow, compiling for two
// architectures doubles it, and one translation unit keeps the CI build short.
//
// The kernels are written to be read next to reference/ops.cpp: same formula, same order of
// operations where it matters (scale after the dot product, softmax as exp(x - max) / sum).
// Reductions run in a different order than the CPU, so results agree to rounding, not bit for bit.
//
// Conventions: one block per row for row-wise work (norms, softmax, sampling), 256 threads unless
// said otherwise; block sizes are multiples of 32 so the warp-shuffle reductions below are exact.
#include "cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace journey::cuda {

void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA error in ", what, " (", file, ":", line, "): ", cudaGetErrorName(status), ": ",
         cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS error in ", what, " (", file, ":", line, "): ", cublasGetStatusName(status), ": ",
         cublasGetStatusString(status));
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error so later calls are not confused
    return 0;
  }
  return count;
}

namespace {

constexpr int kBlock = 256;       // threads per block for row-wise kernels
constexpr int kSampleBlock = 1024;  // the sampler walks the whole vocabulary with one block per row
constexpr unsigned kFullMask = 0xffffffffu;

#define JOURNEY_LAUNCH_CHECK(name) check_cuda(cudaGetLastError(), name, __FILE__, __LINE__)

// ---- element types ---------------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename W> __device__ __forceinline__ W from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// Calls f.template operator()<W>() with W the CUDA type of a weight DType.
template <typename F>
void dispatch_weight_type(DType type, const char* op, F&& f) {
  switch (type) {
    case DType::F32: f(float{}); break;
    case DType::BF16: f(__nv_bfloat16{}); break;
    case DType::F16: f(__half{}); break;
    default: fail("cuda::", op, ": weights must be f32, bf16 or f16, found ", dtype_name(type));
  }
}

unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

void check_rows(const char* op, int64_t R, int64_t N) {
  if (R < 0 || N <= 0) fail("cuda::", op, ": expected R >= 0 and N > 0, found R = ", R, ", N = ", N);
  if (R > 2147483647) fail("cuda::", op, ": ", R, " rows exceed the grid limit");
}

// ---- reductions ------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block, returned to every thread. smem holds 32 values; safe to call repeatedly.
template <typename T>
__device__ T block_sum(T v, T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : T(0);
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) smem[0] = v;
  __syncthreads();
  return smem[0];
}

__device__ float block_max(float v, float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < warps ? smem[lane] : -INFINITY;
  if (warp == 0) v = warp_max(v);
  if (threadIdx.x == 0) smem[0] = v;
  __syncthreads();
  return smem[0];
}

// Inclusive prefix sum over the block in thread order; *total gets the block's sum.
template <typename T>
__device__ T block_inclusive_scan(T v, T* smem, T* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int offset = 1; offset < 32; offset <<= 1) {
    T up = __shfl_up_sync(kFullMask, v, offset);
    if (lane >= offset) v += up;
  }
  __syncthreads();
  if (lane == 31) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? smem[lane] : T(0);
    for (int offset = 1; offset < 32; offset <<= 1) {
      T up = __shfl_up_sync(kFullMask, w, offset);
      if (lane >= offset) w += up;
    }
    smem[lane] = w;  // inclusive scan of the warp totals
  }
  __syncthreads();
  *total = smem[warps - 1];
  return v + (warp > 0 ? smem[warp - 1] : T(0));
}

// ---- embedding, norms, rope, elementwise -----------------------------------------------------

template <typename W>
__global__ void embedding_gather_kernel(float* out, const W* table, const int32_t* tokens, int64_t E) {
  const int64_t t = blockIdx.x;
  const W* row = table + int64_t(tokens[t]) * E;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) out[t * E + e] = to_f32(row[e]);
}

__global__ void rms_norm_kernel(float* out, const float* x, const float* weight, int64_t N, float eps) {
  __shared__ float smem[32];
  const float* in = x + int64_t(blockIdx.x) * N;
  float* o = out + int64_t(blockIdx.x) * N;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) sum_sq += in[i] * in[i];
  sum_sq = block_sum(sum_sq, smem);
  const float inv_rms = 1.0f / sqrtf(sum_sq / float(N) + eps);  // same expression as ops.cpp
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) o[i] = in[i] * inv_rms * weight[i];
}

__global__ void residual_add_rms_norm_kernel(float* x, float* out, const float* b, const float* weight, int64_t N,
                                             float eps) {
  __shared__ float smem[32];
  float* row = x + int64_t(blockIdx.x) * N;
  const float* add = b + int64_t(blockIdx.x) * N;
  float* o = out + int64_t(blockIdx.x) * N;
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const float s = row[i] + add[i];
    row[i] = s;
    sum_sq += s * s;
  }
  sum_sq = block_sum(sum_sq, smem);
  const float inv_rms = 1.0f / sqrtf(sum_sq / float(N) + eps);
  // each thread re-reads only the elements it wrote itself, so no barrier is needed
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) o[i] = row[i] * inv_rms * weight[i];
}

// One block per token; thread j handles pair (head j / half, index j % half).
__global__ void rope_kernel(float* x, const int64_t* positions, int64_t heads, int64_t D, float theta,
                            bool half_split) {
  const int64_t t = blockIdx.x, half = D / 2;
  const float position = float(positions[t]);
  for (int64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int64_t h = j / half, i = j % half;
    const float inv_freq = 1.0f / powf(theta, float(2 * i) / float(D));  // f32, as HF and ops.cpp
    const float angle = position * inv_freq;
    const float c = cosf(angle), s = sinf(angle);
    float* head = x + (t * heads + h) * D;
    const int64_t a = half_split ? i : 2 * i;
    const int64_t b = half_split ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

__global__ void softmax_kernel(float* x, int64_t N) {
  __shared__ float smem[32];
  float* row = x + int64_t(blockIdx.x) * N;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) m = fmaxf(m, row[i]);
  m = block_max(m, smem);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const float e = expf(row[i] - m);
    row[i] = e;
    sum += e;
  }
  sum = block_sum(sum, smem);
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) row[i] /= sum;
}

__global__ void swiglu_kernel(float* out, const float* gate, const float* up, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void residual_add_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t n, int64_t out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += bias[i % out];
}

template <typename W>
__global__ void convert_kernel(W* dst, const float* src, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = from_f32<W>(src[i]);
}

// ---- matrix-vector products (decode) ---------------------------------------------------------
//
// Decode multiplies every weight matrix by ONE vector, so it is bound by reading the weights:
// the only goal is to stream W at full memory bandwidth. Each version fixes what held the
// previous one back.

// v1: one thread per output row, each thread walking its row left to right.
// WHY v2: neighbouring threads read addresses `in` elements apart, so every load of a warp touches
// 32 different cache lines and most of each line is thrown away before it is used again: the
// loads are not coalesced and bandwidth collapses to a small fraction of the peak.
template <typename W>
__global__ void gemv_v1_kernel(float* y, const float* __restrict__ x, const W* __restrict__ weight,
                               const float* __restrict__ bias, int64_t in, int64_t out) {
  const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= out) return;
  const W* row = weight + o * in;
  float acc = 0.0f;
  for (int64_t i = 0; i < in; ++i) acc += to_f32(row[i]) * x[i];
  y[o] = acc + (bias ? bias[o] : 0.0f);
}

// v2: one WARP per row; the 32 lanes read consecutive 16-byte chunks of the row (8 bf16 or 4 f32
// values per load), so one warp-wide load is 512 contiguous bytes; partial sums meet through
// shuffles. Rows whose length or address does not allow 16-byte loads fall back to scalar loads.
// WHY v3: every warp re-reads x from L1/L2 for its row, and a warp has only one 16-byte load of W
// in flight per lane per iteration; with ~100 ns of DRAM latency that is not enough bytes in
// flight to fill HBM's bandwidth. Staging x in shared memory once per block and giving each warp
// two rows (two independent loads per iteration) raises the memory-level parallelism.
template <typename W>
__device__ __forceinline__ float dot_chunk(const uint4& raw, const float* x) {
  constexpr int kVec = 16 / sizeof(W);
  const W* w = reinterpret_cast<const W*>(&raw);
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc += to_f32(w[j]) * x[j];
  return acc;
}

template <typename W>
__global__ void gemv_v2_kernel(float* y, const float* __restrict__ x, const W* __restrict__ weight,
                               const float* __restrict__ bias, int64_t in, int64_t out, bool vector_loads) {
  constexpr int kVec = 16 / sizeof(W);
  const int lane = threadIdx.x & 31;
  const int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (o >= out) return;  // whole warps leave together
  const W* row = weight + o * in;
  float acc = 0.0f;
  if (vector_loads) {
    const uint4* row16 = reinterpret_cast<const uint4*>(row);
    for (int64_t c = lane; c < in / kVec; c += 32) acc += dot_chunk<W>(__ldg(row16 + c), x + c * kVec);
  } else {
    for (int64_t i = lane; i < in; i += 32) acc += to_f32(row[i]) * x[i];
  }
  acc = warp_sum(acc);
  if (lane == 0) y[o] = acc + (bias ? bias[o] : 0.0f);
}

// v3: x staged in shared memory by the whole block; each warp computes two rows at once with
// streaming loads (__ldcs: W is read exactly once, do not let it evict x or the KV cache).
// NEXT (not done): split long rows across several warps (split-K) when `out` is too small to
// fill all SMs (e.g. the 4096 x 11008 down projection of a 7B model has only 4096 rows), and
// fuse gate/up into one pass over a concatenated matrix.
constexpr int kV3Warps = 8;
constexpr int kV3Rows = 2;  // rows per warp

template <typename W>
__global__ void gemv_v3_kernel(float* y, const float* __restrict__ x, const W* __restrict__ weight,
                               const float* __restrict__ bias, int64_t in, int64_t out, bool vector_loads) {
  constexpr int kVec = 16 / sizeof(W);
  extern __shared__ float x_shared[];  // [in]
  for (int64_t i = threadIdx.x; i < in; i += blockDim.x) x_shared[i] = x[i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t o0 = (int64_t(blockIdx.x) * kV3Warps + warp) * kV3Rows;
  if (o0 >= out) return;
  const bool has_second = o0 + 1 < out;
  const W* row0 = weight + o0 * in;
  const W* row1 = has_second ? row0 + in : row0;  // a lone last row reads itself twice, harmless
  float acc0 = 0.0f, acc1 = 0.0f;
  if (vector_loads) {
    const uint4* r0 = reinterpret_cast<const uint4*>(row0);
    const uint4* r1 = reinterpret_cast<const uint4*>(row1);
    const int64_t chunks = in / kVec;
    for (int64_t c = lane; c < chunks; c += 32) {
      const uint4 a = __ldcs(r0 + c), b = __ldcs(r1 + c);  // both loads issued before either is used
      acc0 += dot_chunk<W>(a, x_shared + c * kVec);
      acc1 += dot_chunk<W>(b, x_shared + c * kVec);
    }
  } else {
    for (int64_t i = lane; i < in; i += 32) {
      acc0 += to_f32(row0[i]) * x_shared[i];
      acc1 += to_f32(row1[i]) * x_shared[i];
    }
  }
  acc0 = warp_sum(acc0);
  acc1 = warp_sum(acc1);
  if (lane == 0) {
    y[o0] = acc0 + (bias ? bias[o0] : 0.0f);
    if (has_second) y[o0 + 1] = acc1 + (bias ? bias[o0 + 1] : 0.0f);
  }
}

constexpr int64_t kV3MaxSharedBytes = 48 * 1024;  // default dynamic shared memory without opt-in

// ---- attention ---------------------------------------------------------------------------------
//
// One block per (query token, query head). The block holds the query and one row of scores over
// all P positions in shared memory: warps take positions in turn and compute q.k with their 32
// lanes across D (coalesced reads of the key row), then the block takes the softmax, then threads
// take output dimensions and sum weights[p] * v[p][d] over p (coalesced across d).
// Shared memory is (D + P) floats; long contexts opt in to more (up to the device's limit).
// NEXT (not done): a flash-attention style kernel that tiles P and keeps a running max/sum, so
// that shared memory no longer grows with P and prefill reuses each K/V tile for many queries.

struct ContiguousKV {
  const float* k;  // [P, KVH, D]
  const float* v;  // [P, KVH, D]
  int64_t KVH, D;
  __device__ const float* key(int64_t p, int64_t h) const { return k + (p * KVH + h) * D; }
  __device__ const float* value(int64_t p, int64_t h) const { return v + (p * KVH + h) * D; }
};

struct PagedKV {
  const float* k_pool;          // [num_blocks, block_size, KVH, D]
  const float* v_pool;          // [num_blocks, block_size, KVH, D]
  const int32_t* block_table;   // [ceil(P / block_size)]
  int64_t block_size, KVH, D;
  __device__ int64_t slot(int64_t p) const { return int64_t(block_table[p / block_size]) * block_size + p % block_size; }
  __device__ const float* key(int64_t p, int64_t h) const { return k_pool + (slot(p) * KVH + h) * D; }
  __device__ const float* value(int64_t p, int64_t h) const { return v_pool + (slot(p) * KVH + h) * D; }
};

template <typename KV>
__global__ void attention_kernel(float* context, const float* q, KV kv, int64_t T, int64_t start, int64_t H,
                                 int64_t KVH, int64_t D, float* scores_out, float* weights_out) {
  extern __shared__ float shared[];
  float* query = shared;       // [D]
  float* row = shared + D;     // [P] scores, then weights
  __shared__ float smem[32];
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t P = start + T, last = start + t, kv_head = h / (H / KVH);
  const float scale = 1.0f / sqrtf(float(D));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;

  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) query[d] = q[(t * H + h) * D + d];
  __syncthreads();
  // scores = q.k / sqrt(D) for p <= last; -inf after (the causal mask)
  for (int64_t p = warp; p < P; p += warps) {
    float s = -INFINITY;
    if (p <= last) {
      const float* key = kv.key(p, kv_head);
      float dot = 0.0f;
      for (int64_t d = lane; d < D; d += 32) dot += query[d] * key[d];
      s = warp_sum(dot) * scale;
    }
    if (lane == 0) row[p] = s;
  }
  __syncthreads();
  float* trace_row = nullptr;
  if (scores_out) {
    trace_row = scores_out + (h * T + t) * P;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) trace_row[p] = row[p];
  }
  // softmax over the row; masked positions become exactly 0
  float m = -INFINITY;
  for (int64_t p = threadIdx.x; p <= last; p += blockDim.x) m = fmaxf(m, row[p]);
  m = block_max(m, smem);
  float sum = 0.0f;
  for (int64_t p = threadIdx.x; p < P; p += blockDim.x) {
    const float e = p <= last ? expf(row[p] - m) : 0.0f;
    row[p] = e;
    sum += e;
  }
  sum = block_sum(sum, smem);  // its barriers also publish row[] to the whole block
  for (int64_t p = threadIdx.x; p < P; p += blockDim.x) row[p] /= sum;
  __syncthreads();
  if (weights_out) {
    trace_row = weights_out + (h * T + t) * P;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) trace_row[p] = row[p];
  }
  // context[d] = sum_p weights[p] * v[p][d]
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t p = 0; p <= last; ++p) acc += row[p] * kv.value(p, kv_head)[d];
    context[t * H * D + h * D + d] = acc;
  }
}

template <typename KV>
void launch_attention(const char* op, float* context, const float* q, const KV& kv, int64_t T, int64_t start,
                      int64_t H, int64_t KVH, int64_t D, float* scores_out, float* weights_out, cudaStream_t stream) {
  if (T <= 0 || start < 0 || H <= 0 || KVH <= 0 || D <= 0 || H % KVH != 0)
    fail("cuda::", op, ": bad shape T = ", T, ", start = ", start, ", H = ", H, ", KVH = ", KVH, ", D = ", D,
         " (H must be a multiple of KVH)");
  if (T > 2147483647 || H > 65535) fail("cuda::", op, ": T = ", T, ", H = ", H, " exceed the grid limits");
  const int64_t P = start + T;
  const size_t shared_bytes = size_t(D + P) * sizeof(float);
  auto kernel = attention_kernel<KV>;
  if (shared_bytes > 48 * 1024) {
    int device = 0, optin = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cudaDeviceGetAttribute", __FILE__, __LINE__);
    if (shared_bytes > size_t(optin))
      fail("cuda::", op, ": ", P, " positions need ", shared_bytes, " bytes of shared memory per block, the device allows ",
           optin, " (this kernel keeps a whole score row in shared memory)");
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)),
               "cudaFuncSetAttribute", __FILE__, __LINE__);
  }
  kernel<<<dim3(unsigned(T), unsigned(H)), 128, shared_bytes, stream>>>(context, q, kv, T, start, H, KVH, D,
                                                                         scores_out, weights_out);
  JOURNEY_LAUNCH_CHECK(op);
}

__global__ void kv_cache_write_kernel(float* k_pool, float* v_pool, const float* k, const float* v,
                                      const int32_t* block_table, int64_t start, int64_t block_size, int64_t row) {
  const int64_t t = blockIdx.x, position = start + t;
  const int64_t slot = int64_t(block_table[position / block_size]) * block_size + position % block_size;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    k_pool[slot * row + i] = k[t * row + i];
    v_pool[slot * row + i] = v[t * row + i];
  }
}

// ---- sampling ------------------------------------------------------------------------------------
//
// One block of 1024 threads per row walks the whole vocabulary. The filters need a ranking of the
// tokens; instead of sorting, each finds a THRESHOLD by radix selection on the bits of the
// probabilities (non-negative floats order like their bit patterns as unsigned integers): the
// largest key K such that the tokens with key >= K reach the limit (k tokens, or top_p of the
// mass). Every token above K is kept; tokens equal to K are the ties, admitted in id order (a
// block-wide prefix scan) exactly as the host's "ties to the lower id" sort would rank them.

__device__ __forceinline__ uint32_t key_of(float p) { return __float_as_uint(p); }

template <bool kByMass>
__device__ uint32_t select_threshold(const float* probs, int64_t V, double limit, double* smem) {
  uint32_t K = 0;
  for (int bit = 30; bit >= 0; --bit) {  // bit 31 is the sign, 0 for every probability
    const uint32_t candidate = K | (1u << bit);
    double measure = 0.0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      if (key_of(probs[i]) >= candidate) measure += kByMass ? double(probs[i]) : 1.0;
    measure = block_sum(measure, smem);
    if (measure >= limit) K = candidate;
  }
  return K;
}

// Zero every token not ranked within the limit (see above); ties at K are admitted in id order
// while the measure ranked before them is below the limit (host: "mass_before < top_p", "rank < k").
template <bool kByMass>
__device__ void keep_ranked(float* probs, int64_t V, uint32_t K, double limit, double* smem) {
  double above = 0.0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    if (key_of(probs[i]) > K) above += kByMass ? double(probs[i]) : 1.0;
  double before = block_sum(above, smem);
  for (int64_t chunk = 0; chunk < V; chunk += blockDim.x) {
    const int64_t i = chunk + threadIdx.x;
    const float p = i < V ? probs[i] : 0.0f;
    const bool tie = i < V && key_of(p) == K;
    const double own = tie ? (kByMass ? double(p) : 1.0) : 0.0;
    double chunk_total = 0.0;
    const double inclusive = block_inclusive_scan(own, smem, &chunk_total);
    if (i < V && (key_of(p) < K || (tie && !(before + inclusive - own < limit)))) probs[i] = 0.0f;
    before += chunk_total;
  }
  __syncthreads();
}

__device__ void renormalize(float* probs, int64_t V, double* smem) {
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) total += probs[i];
  total = block_sum(total, smem);
  if (total > 0.0)
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) probs[i] = float(probs[i] / total);
  __syncthreads();
}

// Index of the largest value, ties to the lowest index; every thread gets the result.
__device__ int64_t block_argmax(const float* values, int64_t V) {
  __shared__ float best_value[32];
  __shared__ int64_t best_index[32];
  float value = -INFINITY;
  int64_t index = V;  // "none yet"
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    if (values[i] > value) value = values[i], index = i;  // ascending i: keeps the first maximum
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(kFullMask, value, offset);
    const int64_t other_index = __shfl_xor_sync(kFullMask, index, offset);
    if (other_value > value || (other_value == value && other_index < index)) value = other_value, index = other_index;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) best_value[warp] = value, best_index[warp] = index;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < warps; ++w)
      if (best_value[w] > value || (best_value[w] == value && best_index[w] < index))
        value = best_value[w], index = best_index[w];
    best_index[0] = index < V ? index : 0;  // a row of NaN/-inf only: token 0, like max_element
  }
  __syncthreads();
  return best_index[0];
}

__global__ void __launch_bounds__(kSampleBlock) argmax_kernel(int32_t* ids, const float* logits, int64_t V) {
  const int64_t id = block_argmax(logits + int64_t(blockIdx.x) * V, V);
  if (threadIdx.x == 0) ids[blockIdx.x] = int32_t(id);
}

__global__ void __launch_bounds__(kSampleBlock) sample_kernel(int32_t* ids, const float* logits, const DeviceSampling* params, float* probs_all,
                              int64_t V) {
  __shared__ double smem[32];
  __shared__ int64_t found;
  __shared__ int64_t last_nonzero;
  const int64_t r = blockIdx.x;
  const float* row = logits + r * V;
  float* probs = probs_all + r * V;
  const DeviceSampling sp = params[r];
  if (sp.temperature == 0.0) {
    const int64_t id = block_argmax(row, V);
    if (threadIdx.x == 0) ids[r] = int32_t(id);
    return;
  }
  // temperature, then softmax (exp in f32, sum in f64, as processors.cpp)
  __shared__ float smem_f[32];
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float scaled = float(double(row[i]) / sp.temperature);
    probs[i] = scaled;
    m = fmaxf(m, scaled);
  }
  m = block_max(m, smem_f);
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const float e = expf(probs[i] - m);
    probs[i] = e;
    total += e;
  }
  total = block_sum(total, smem);
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) probs[i] = float(probs[i] / total);
  __syncthreads();
  if (sp.top_k > 0 && sp.top_k < V) {
    const uint32_t K = select_threshold<false>(probs, V, double(sp.top_k), smem);
    keep_ranked<false>(probs, V, K, double(sp.top_k), smem);
    renormalize(probs, V, smem);
  }
  if (sp.top_p < 1.0) {
    const uint32_t K = select_threshold<true>(probs, V, sp.top_p, smem);
    keep_ranked<true>(probs, V, K, sp.top_p, smem);
    renormalize(probs, V, smem);
  }
  // inverse CDF: the first id whose cumulative probability exceeds u * total
  total = 0.0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) total += probs[i];
  total = block_sum(total, smem);
  const double target = double(sp.u) * total;
  if (threadIdx.x == 0) found = V, last_nonzero = 0;
  __syncthreads();
  double running = 0.0;
  for (int64_t chunk = 0; chunk < V; chunk += blockDim.x) {
    const int64_t i = chunk + threadIdx.x;
    const float p = i < V ? probs[i] : 0.0f;
    double chunk_total = 0.0;
    const double cumulative = running + block_inclusive_scan(double(p > 0.0f ? p : 0.0f), smem, &chunk_total);
    if (p > 0.0f) {
      atomicMax(reinterpret_cast<unsigned long long*>(&last_nonzero), (unsigned long long)i);
      if (cumulative > target) atomicMin(reinterpret_cast<unsigned long long*>(&found), (unsigned long long)i);
    }
    __syncthreads();
    if (found < V) break;  // uniform: every thread reads the same shared value after the barrier
    running += chunk_total;
  }
  if (threadIdx.x == 0) ids[r] = int32_t(found < V ? found : last_nonzero);
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------------

void embedding_gather(float* out, const void* table, DType table_type, const int32_t* tokens, int64_t T, int64_t E,
                      cudaStream_t stream) {
  check_rows("embedding_gather", T, E);
  if (T == 0) return;
  dispatch_weight_type(table_type, "embedding_gather", [&](auto w) {
    using W = decltype(w);
    embedding_gather_kernel<W><<<unsigned(T), kBlock, 0, stream>>>(out, static_cast<const W*>(table), tokens, E);
  });
  JOURNEY_LAUNCH_CHECK("embedding_gather");
}

void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps, cudaStream_t stream) {
  check_rows("rms_norm", R, N);
  if (R == 0) return;
  rms_norm_kernel<<<unsigned(R), kBlock, 0, stream>>>(out, x, weight, N, eps);
  JOURNEY_LAUNCH_CHECK("rms_norm");
}

void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta, RopeLayout layout,
          cudaStream_t stream) {
  check_rows("rope", T, heads * D);
  if (D % 2 != 0) fail("cuda::rope: head_dim ", D, " is odd; rotary embeddings rotate pairs");
  if (T == 0) return;
  rope_kernel<<<unsigned(T), kBlock, 0, stream>>>(x, positions, heads, D, float(theta),
                                                  layout == RopeLayout::HalfSplit);
  JOURNEY_LAUNCH_CHECK("rope");
}

void gemv(GemvVersion version, float* y, const float* x, const void* weight, DType weight_type, const float* bias,
          int64_t in, int64_t out, cudaStream_t stream) {
  check_rows("gemv", out, in);
  if (out == 0) return;
  dispatch_weight_type(weight_type, "gemv", [&](auto w) {
    using W = decltype(w);
    const W* matrix = static_cast<const W*>(weight);
    constexpr int kVec = 16 / sizeof(W);
    // 16-byte loads need every row to start on a 16-byte boundary
    const bool vector_loads = in % kVec == 0 && reinterpret_cast<uintptr_t>(weight) % 16 == 0;
    GemvVersion v = version;
    if (v == GemvVersion::v3_shared_x_two_rows && in * int64_t(sizeof(float)) > kV3MaxSharedBytes)
      v = GemvVersion::v2_warp_per_row;  // x does not fit in default shared memory
    switch (v) {
      case GemvVersion::v1_thread_per_row:
        gemv_v1_kernel<W><<<blocks_for(out, kBlock), kBlock, 0, stream>>>(y, x, matrix, bias, in, out);
        break;
      case GemvVersion::v2_warp_per_row:
        gemv_v2_kernel<W><<<blocks_for(out * 32, kBlock), kBlock, 0, stream>>>(y, x, matrix, bias, in, out,
                                                                               vector_loads);
        break;
      case GemvVersion::v3_shared_x_two_rows:
        gemv_v3_kernel<W><<<blocks_for(out, kV3Warps * kV3Rows), kV3Warps * 32, size_t(in) * sizeof(float), stream>>>(
            y, x, matrix, bias, in, out, vector_loads);
        break;
      default: fail("cuda::gemv: unknown version ", int(version));
    }
  });
  JOURNEY_LAUNCH_CHECK("gemv");
}

void linear(float* y, const float* x, const void* weight, DType weight_type, const float* bias, int64_t T, int64_t in,
            int64_t out, const LinearContext& context) {
  check_rows("linear", T, in);
  if (out <= 0) fail("cuda::linear: out = ", out, " must be positive");
  if (T == 0) return;
  if (T == 1) {
    gemv(context.gemv, y, x, weight, weight_type, bias, in, out, context.stream);
    return;
  }
  if (context.cublas == nullptr) fail("cuda::linear: T = ", T, " needs a cuBLAS handle in the LinearContext");
  // cuBLAS is column-major: our row-major W [out, in] is its [in, out] matrix A (lda = in), our X
  // [T, in] its [in, T] matrix B, our Y [T, out] its [out, T] matrix C. Y^T = W X^T is C = A^T B.
  const void* b_matrix = x;
  cudaDataType_t type = CUDA_R_32F;
  if (weight_type == DType::BF16 || weight_type == DType::F16) {
    const size_t need = size_t(T * in) * 2;
    if (context.scratch == nullptr || context.scratch_bytes < need)
      fail("cuda::linear: scratch of ", context.scratch_bytes, " bytes is smaller than the ", need,
           " needed to narrow a [", T, ", ", in, "] activation");
    convert_from_f32(context.scratch, weight_type, x, T * in, context.stream);
    b_matrix = context.scratch;
    type = weight_type == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  } else if (weight_type != DType::F32) {
    fail("cuda::linear: weights must be f32, bf16 or f16, found ", dtype_name(weight_type));
  }
  const float alpha = 1.0f, beta = 0.0f;
  JOURNEY_CUBLAS_CHECK(cublasSetStream(context.cublas, context.stream));
  JOURNEY_CUBLAS_CHECK(cublasGemmEx(context.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(T), int(in), &alpha,
                                    weight, type, int(in), b_matrix, type, int(in), &beta, y, CUDA_R_32F, int(out),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) add_bias(y, bias, T, out, context.stream);
}

void softmax(float* x, int64_t R, int64_t N, cudaStream_t stream) {
  check_rows("softmax", R, N);
  if (R == 0) return;
  softmax_kernel<<<unsigned(R), kBlock, 0, stream>>>(x, N);
  JOURNEY_LAUNCH_CHECK("softmax");
}

void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  swiglu_kernel<<<blocks_for(n, kBlock), kBlock, 0, stream>>>(out, gate, up, n);
  JOURNEY_LAUNCH_CHECK("swiglu");
}

void residual_add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  residual_add_kernel<<<blocks_for(n, kBlock), kBlock, 0, stream>>>(out, a, b, n);
  JOURNEY_LAUNCH_CHECK("residual_add");
}

void residual_add_rms_norm(float* x, float* out, const float* b, const float* weight, int64_t R, int64_t N, float eps,
                           cudaStream_t stream) {
  check_rows("residual_add_rms_norm", R, N);
  if (R == 0) return;
  residual_add_rms_norm_kernel<<<unsigned(R), kBlock, 0, stream>>>(x, out, b, weight, N, eps);
  JOURNEY_LAUNCH_CHECK("residual_add_rms_norm");
}

void attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start, int64_t H,
               int64_t KVH, int64_t D, float* scores_out, float* weights_out, cudaStream_t stream) {
  launch_attention("attention", context, q, ContiguousKV{k, v, KVH, D}, T, start, H, KVH, D, scores_out, weights_out,
                   stream);
}

void kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v, const int32_t* block_table,
                    int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D, cudaStream_t stream) {
  check_rows("kv_cache_write", T, KVH * D);
  if (block_size <= 0) fail("cuda::kv_cache_write: block_size ", block_size, " must be positive");
  if (T == 0) return;
  kv_cache_write_kernel<<<unsigned(T), kBlock, 0, stream>>>(k_pool, v_pool, k, v, block_table, start, block_size,
                                                            KVH * D);
  JOURNEY_LAUNCH_CHECK("kv_cache_write");
}

void paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                     const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t H, int64_t KVH,
                     int64_t D, float* scores_out, float* weights_out, cudaStream_t stream) {
  if (block_size <= 0) fail("cuda::paged_attention: block_size ", block_size, " must be positive");
  launch_attention("paged_attention", context, q, PagedKV{k_pool, v_pool, block_table, block_size, KVH, D}, T, start,
                   H, KVH, D, scores_out, weights_out, stream);
}

void add_bias(float* y, const float* bias, int64_t T, int64_t out, cudaStream_t stream) {
  if (T * out <= 0) return;
  add_bias_kernel<<<blocks_for(T * out, kBlock), kBlock, 0, stream>>>(y, bias, T * out, out);
  JOURNEY_LAUNCH_CHECK("add_bias");
}

void convert_from_f32(void* dst, DType dst_type, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_weight_type(dst_type, "convert_from_f32", [&](auto w) {
    using W = decltype(w);
    convert_kernel<W><<<blocks_for(n, kBlock), kBlock, 0, stream>>>(static_cast<W*>(dst), src, n);
  });
  JOURNEY_LAUNCH_CHECK("convert_from_f32");
}

void argmax_rows(int32_t* ids, const float* logits, int64_t R, int64_t V, cudaStream_t stream) {
  check_rows("argmax_rows", R, V);
  if (R == 0) return;
  argmax_kernel<<<unsigned(R), kSampleBlock, 0, stream>>>(ids, logits, V);
  JOURNEY_LAUNCH_CHECK("argmax_rows");
}

void sample_rows(int32_t* ids, const float* logits, const DeviceSampling* params, float* probs, int64_t R, int64_t V,
                 cudaStream_t stream) {
  check_rows("sample_rows", R, V);
  if (R == 0) return;
  sample_kernel<<<unsigned(R), kSampleBlock, 0, stream>>>(ids, logits, params, probs, V);
  JOURNEY_LAUNCH_CHECK("sample_rows");
}

}  // namespace journey::cuda
