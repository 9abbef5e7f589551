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
#include <utility>

#include "core/error.h"
#include "quant/blocks.h"

namespace journey::cuda {

void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    fail("CUDA error in ", what, " (", file, ":", line, "): ", cudaGetErrorName(status), ": ",
         cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS error in ", what, " (", file, ":", line, "): ", cublas().status_name(status), ": ",
         cublas().status_string(status));
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

// ---- quantized weights (GGUF blocks, quant/blocks.h) ---------------------------------------------
//
// A quantized matrix stays in its blocks on the device; a kernel dequantizes each weight where it
// uses it, with the formulas of quant/dequantize.cpp (the reference the tests compare with), and,
// like that file (compiled with -ffp-contract=off), without fusing a multiply and an add: the
// __fmul_rn/__fadd_rn intrinsics are never contracted, so a dequantized weight is bit-identical to
// the reference's. QuantFormat<Block>: weights per block and weight(block, i).

__device__ __forceinline__ float half_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

template <typename Block> struct QuantFormat;

template <> struct QuantFormat<quant::block_q8_0> {
  static constexpr int kWeights = quant::kQK;
  // w = d * qs[i]
  __device__ static float weight(const quant::block_q8_0& b, int i) {
    return __fmul_rn(half_bits_to_float(b.d), float(b.qs[i]));
  }
};

template <> struct QuantFormat<quant::block_q4_0> {
  static constexpr int kWeights = quant::kQK;
  // w = d * (q - 8); weight j is the low nibble of qs[j], weight j + 16 its high nibble
  __device__ static float weight(const quant::block_q4_0& b, int i) {
    const int q = i < 16 ? (b.qs[i] & 0x0F) : (b.qs[i - 16] >> 4);
    return __fmul_rn(half_bits_to_float(b.d), float(q - 8));
  }
};

template <> struct QuantFormat<quant::block_q4_1> {
  static constexpr int kWeights = quant::kQK;
  // w = d * q + m
  __device__ static float weight(const quant::block_q4_1& b, int i) {
    const int q = i < 16 ? (b.qs[i] & 0x0F) : (b.qs[i - 16] >> 4);
    return __fadd_rn(__fmul_rn(half_bits_to_float(b.d), float(q)), half_bits_to_float(b.m));
  }
};

template <> struct QuantFormat<quant::block_q4_k> {
  static constexpr int kWeights = quant::kQK_K;
  // w = d * sc[g] * q - dmin * m[g], g = i / 32, the 6-bit sc/m unpacked as quant::scale_min_k4
  __device__ static float weight(const quant::block_q4_k& b, int i) {
    const int g = i / 32;
    int sc, m;
    if (g < 4) {
      sc = b.scales[g] & 63, m = b.scales[g + 4] & 63;
    } else {
      sc = (b.scales[g + 4] & 0xF) | ((b.scales[g - 4] >> 6) << 4);
      m = (b.scales[g + 4] >> 4) | ((b.scales[g] >> 6) << 4);
    }
    const int chunk = i / 64, within = i % 64;
    const uint8_t byte = b.qs[chunk * 32 + within % 32];
    const int q = within < 32 ? (byte & 0xF) : (byte >> 4);
    const float scaled = __fmul_rn(__fmul_rn(half_bits_to_float(b.d), float(sc)), float(q));
    return __fsub_rn(scaled, __fmul_rn(half_bits_to_float(b.dmin), float(m)));
  }
};

template <> struct QuantFormat<quant::block_q6_k> {
  static constexpr int kWeights = quant::kQK_K;
  // w = d * scales[i / 16] * (q - 32), q = 4 low bits from ql | 2 high bits from qh
  __device__ static float weight(const quant::block_q6_k& b, int i) {
    const int half_index = i / 128, within = i % 128, quarter = within / 32, l = within % 32;
    const uint8_t low_byte = b.ql[64 * half_index + l + 32 * (quarter % 2)];
    const int low4 = quarter < 2 ? (low_byte & 0xF) : (low_byte >> 4);
    const int high2 = (b.qh[32 * half_index + l] >> (2 * quarter)) & 3;
    const int q = (low4 | high2 << 4) - 32;
    return __fmul_rn(__fmul_rn(half_bits_to_float(b.d), float(b.scales[i / 16])), float(q));
  }
};

template <typename W> constexpr bool kIsBlock = false;
template <> constexpr bool kIsBlock<quant::block_q8_0> = true;
template <> constexpr bool kIsBlock<quant::block_q4_0> = true;
template <> constexpr bool kIsBlock<quant::block_q4_1> = true;
template <> constexpr bool kIsBlock<quant::block_q4_k> = true;
template <> constexpr bool kIsBlock<quant::block_q6_k> = true;

// The elements of one row (plain types) or blocks of one row (block types) for a row of `in` weights.
template <typename W>
__host__ __device__ constexpr int64_t row_units(int64_t in) {
  if constexpr (kIsBlock<W>) return in / QuantFormat<W>::kWeights;
  else return in;
}

// dispatch_weight_type plus the block types the device keeps as stored.
template <typename F>
void dispatch_any_weight(DType type, const char* op, F&& f) {
  switch (type) {
    case DType::Q8_0: f(quant::block_q8_0{}); break;
    case DType::Q4_0: f(quant::block_q4_0{}); break;
    case DType::Q4_1: f(quant::block_q4_1{}); break;
    case DType::Q4_K: f(quant::block_q4_k{}); break;
    case DType::Q6_K: f(quant::block_q6_k{}); break;
    case DType::F32: case DType::BF16: case DType::F16: dispatch_weight_type(type, op, f); break;
    default:
      fail("cuda::", op, ": weights must be f32, bf16, f16, q8_0, q4_0, q4_1, q4_K or q6_K, found ", dtype_name(type));
  }
}

// Blocks must tile every row: `in` a multiple of the block's weights.
void check_block_row(const char* op, DType type, int64_t in) {
  const int64_t block = dtype_block_size(type);
  if (block > 1 && in % block != 0)
    fail("cuda::", op, ": rows of ", in, " weights cannot be stored as ", dtype_name(type), " blocks of ", block);
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
  const W* row = table + int64_t(tokens[t]) * row_units<W>(E);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    if constexpr (kIsBlock<W>) {
      constexpr int kWeights = QuantFormat<W>::kWeights;
      out[t * E + e] = QuantFormat<W>::weight(row[e / kWeights], int(e % kWeights));
    } else {
      out[t * E + e] = to_f32(row[e]);
    }
  }
}

// T > 1 with quantized weights: the matrix dequantized into a bf16 scratch for cuBLAS; one warp
// per block, lanes across its weights.
template <typename Block, typename Out>
__global__ void dequantize_kernel(Out* out, const Block* blocks, int64_t count) {
  constexpr int kWeights = QuantFormat<Block>::kWeights;
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (b >= count) return;
#pragma unroll
  for (int i = lane; i < kWeights; i += 32) out[b * kWeights + i] = from_f32<Out>(QuantFormat<Block>::weight(blocks[b], i));
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

// dot_chunk with x read from shared memory as float4 (x + c * kVec is 16-byte aligned in v4);
// the same products added in the same order.
template <typename W>
__device__ __forceinline__ float dot_chunk_aligned(const uint4& raw, const float* x) {
  constexpr int kVec = 16 / sizeof(W);
  const W* w = reinterpret_cast<const W*>(&raw);
  float xs[kVec];
#pragma unroll
  for (int j = 0; j < kVec; j += 4) {
    const float4 x4 = *reinterpret_cast<const float4*>(x + j);
    xs[j] = x4.x, xs[j + 1] = x4.y, xs[j + 2] = x4.z, xs[j + 3] = x4.w;
  }
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc += to_f32(w[j]) * xs[j];
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

// v3 WHY v4: measured on the H200 (docs/cuda.md), the whole decode step of the 1.1B shape ran at
// 11% of the bandwidth ceiling. Each warp of v3 keeps 2 loads of 16 bytes per lane in flight and
// starts loading only after x is staged; a 2048 x 2048 matrix is 8 MB, which HBM delivers in
// ~1.7 us, while one round trip to memory takes ~0.7 us, so the kernel is latency-bound: it needs
// several MB in flight at once (Little's law: 4.8 TB/s x 0.7 us = 3.4 MB), not 128 KB.

// v4: every lane issues ALL the 16-byte loads of its next kUnroll chunks of TWO rows (16 loads,
// 256 bytes per lane, 8 KB per warp) before using any, and the first batch is issued before x is
// staged, so staging x (and normalizing it, for the fused variants) overlaps the weights' flight.
// Launched with programmatic dependent launch (LinearContext::early_launch), that first batch is
// even issued while the PREVIOUS kernel still runs: griddepcontrol.wait comes only before x.
// One kernel also serves several products of one input (linear_shared_input: q/k/v, gate/up): a
// warp's two rows are consecutive rows over all targets. The template picks the prologue
// (x or rms_norm(x) into shared memory) and the epilogue (store, add into y, or SwiGLU of a gate
// row and an up row).
constexpr int kGemvThreads = kBlock;  // 256: the normalizing prologue then sums x exactly as rms_norm_kernel
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvUnroll = 8;

enum class Epilogue : int {
  Store,       // y = acc + bias
  Accumulate,  // y += acc + bias (the residual add after a projection)
  SwiGLU,      // act = silu(gate row) * (up row): targets[0] = gate (y = act), targets[1] = up
};

struct GemvTarget {
  const void* weight;  // [rows, in]
  const float* bias;   // [rows] or nullptr
  float* y;            // [rows]
  int64_t rows;
};

struct GemvArgs {
  const float* x;            // [in]
  const float* norm_weight;  // [in]: stage rms_norm(x) * norm_weight (kNorm)
  float eps;
  int64_t in;
  int64_t total_rows;        // Store/Accumulate: rows of all targets; SwiGLU: rows of one
  int num_targets;
  GemvTarget targets[kMaxLinearTargets];
};

// Programmatic dependent launch (sm_90): no-ops when the kernel was launched without it.
__device__ __forceinline__ void let_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename W, bool kNorm, Epilogue kEpilogue>
__global__ void __launch_bounds__(kGemvThreads) gemv_v4_kernel(const GemvArgs args, const bool vector_loads) {
  constexpr int kVec = kIsBlock<W> ? 1 : 16 / sizeof(W);  // (block types never take the 16-byte path)
  extern __shared__ float x_shared[];  // [in]
  __shared__ float reduce_smem[32];
  let_next_kernel_launch();
  const int lane = threadIdx.x & 31;
  const int64_t warp_index = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  const int64_t in = args.in;

  // The two rows of this warp (nullptr: past the end) and where each one's result goes.
  const W* row[2] = {nullptr, nullptr};
  int target[2] = {0, 0};
  int64_t local[2] = {0, 0};
  if constexpr (kEpilogue == Epilogue::SwiGLU) {
    if (warp_index < args.total_rows) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        target[r] = r;
        local[r] = warp_index;
        row[r] = static_cast<const W*>(args.targets[r].weight) + warp_index * row_units<W>(in);
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int64_t g = warp_index * 2 + r;
      if (g >= args.total_rows) continue;
      int t = 0;
      while (g >= args.targets[t].rows) g -= args.targets[t].rows, ++t;  // total_rows keeps t in range
      target[r] = t;
      local[r] = g;
      row[r] = static_cast<const W*>(args.targets[t].weight) + g * row_units<W>(in);
    }
  }

  // The first batch of weights goes out before anything else: it depends on no earlier kernel.
  const int64_t chunks = vector_loads ? in / kVec : 0;
  uint4 w[2][kGemvUnroll];
  auto load_batch = [&](int64_t base) {
    if constexpr (!kIsBlock<W>) {
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = base + 32 * u;
#pragma unroll
        for (int r = 0; r < 2; ++r)
          w[r][u] = row[r] != nullptr && c < chunks ? __ldcs(reinterpret_cast<const uint4*>(row[r]) + c)
                                                    : make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  load_batch(lane);

  // x (or rms_norm(x) * norm_weight, the same arithmetic as rms_norm_kernel) into shared memory
  wait_for_previous_kernel();
  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < in; i += kGemvThreads) {
    const float v = args.x[i];
    x_shared[i] = v;
    if constexpr (kNorm) sum_sq += v * v;
  }
  if constexpr (kNorm) {
    sum_sq = block_sum(sum_sq, reduce_smem);
    const float inv_rms = 1.0f / sqrtf(sum_sq / float(in) + args.eps);
    for (int64_t i = threadIdx.x; i < in; i += kGemvThreads) x_shared[i] = x_shared[i] * inv_rms * args.norm_weight[i];
  }
  __syncthreads();

  float acc[2] = {0.0f, 0.0f};
  if constexpr (kIsBlock<W>) {
    // quantized rows: block by block, lane j dequantizing weights j, j + 32, ... of each block
    using Format = QuantFormat<W>;
    // (no prefetch before the wait here; unrolled so that several blocks' loads are in flight)
    const int64_t blocks = in / Format::kWeights;
#pragma unroll 4
    for (int64_t b = 0; b < blocks; ++b) {
#pragma unroll
      for (int i = lane; i < Format::kWeights; i += 32) {
        const float xi = x_shared[b * Format::kWeights + i];
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (row[r] != nullptr) acc[r] += Format::weight(row[r][b], i) * xi;
      }
    }
  } else if (vector_loads) {
    for (int64_t base = lane; base < chunks; base += 32 * kGemvUnroll) {
      if (base != lane) load_batch(base);
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int64_t c = base + 32 * u;
        if (c < chunks) {
#pragma unroll
          for (int r = 0; r < 2; ++r) acc[r] += dot_chunk_aligned<W>(w[r][u], x_shared + c * kVec);
        }
      }
    }
  } else {
    for (int64_t i = lane; i < in; i += 32) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row[r] != nullptr) acc[r] += to_f32(row[r][i]) * x_shared[i];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) acc[r] = warp_sum(acc[r]);
  if (lane != 0) return;
  if constexpr (kEpilogue == Epilogue::SwiGLU) {
    if (row[0] != nullptr) {
      const float gate = acc[0] + 0.0f, up = acc[1] + 0.0f;  // "+ 0.0f": what Store writes, so fused == unfused
      args.targets[0].y[local[0]] = gate / (1.0f + expf(-gate)) * up;  // swiglu_kernel's expression
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] == nullptr) continue;
      const GemvTarget& t = args.targets[target[r]];
      const float value = acc[r] + (t.bias ? t.bias[local[r]] : 0.0f);
      if constexpr (kEpilogue == Epilogue::Accumulate) t.y[local[r]] = t.y[local[r]] + value;
      else t.y[local[r]] = value;
    }
  }
}

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

// ---- batched decode: S sequences, one token each ------------------------------------------------
//
// What the per-sequence kernels above take as scalar arguments (start, the block table) these read
// from device memory, so a CUDA graph captured once replays every later step of the batch.

// One block per sequence; a warp per head (q heads, then k heads): the optional per-head RMSNorm
// (warp-wide sum of squares), RoPE with rope_kernel's arithmetic, q rotated in place, k written
// rotated into its pool slot; then v copied into the slot.
__global__ void rope_kv_cache_write_decode_kernel(float* q, const float* k, const float* v, float* k_pool,
                                                  float* v_pool, const float* q_norm, const float* k_norm, float eps,
                                                  const int64_t* positions, const int32_t* block_tables,
                                                  int64_t table_stride, int64_t block_size, int64_t H, int64_t KVH,
                                                  int64_t D, float theta, bool half_split) {
  let_next_kernel_launch();
  const int64_t s = blockIdx.x;
  const int64_t position = positions[s];
  const int32_t* table = block_tables + s * table_stride;
  const int64_t slot = int64_t(table[position / block_size]) * block_size + position % block_size;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t half = D / 2;
  const float fposition = float(position);
  for (int64_t head = warp; head < H + KVH; head += warps) {
    const bool is_q = head < H;
    const float* src = is_q ? q + (s * H + head) * D : k + (s * KVH + head - H) * D;
    float* dst = is_q ? q + (s * H + head) * D : k_pool + (slot * KVH + head - H) * D;
    const float* norm = is_q ? q_norm : k_norm;
    float inv_rms = 1.0f;
    if (norm != nullptr) {
      float sum_sq = 0.0f;
      for (int64_t d = lane; d < D; d += 32) sum_sq += src[d] * src[d];
      sum_sq = warp_sum(sum_sq);  // every lane has read its values before any lane writes below
      inv_rms = 1.0f / sqrtf(sum_sq / float(D) + eps);
    }
    for (int64_t i = lane; i < half; i += 32) {
      const int64_t a = half_split ? i : 2 * i;
      const int64_t b = half_split ? i + half : 2 * i + 1;
      float x0 = src[a], x1 = src[b];
      if (norm != nullptr) x0 = x0 * inv_rms * norm[a], x1 = x1 * inv_rms * norm[b];
      const float inv_freq = 1.0f / powf(theta, float(2 * i) / float(D));
      const float angle = fposition * inv_freq;
      const float c = cosf(angle), sn = sinf(angle);
      dst[a] = x0 * c - x1 * sn;
      dst[b] = x0 * sn + x1 * c;
    }
  }
  const int64_t row = KVH * D;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) v_pool[slot * row + i] = v[s * row + i];
}

// One block of kDecodeTile threads per (query head, sequence). The positions are walked in tiles of
// kDecodeTile, one position per thread: its key row is read with 16-byte loads (all of a thread's
// loads are independent, so a tile costs about one memory round trip), then the tile's max and
// sum update the running max and sum (online softmax, as flash-decoding), and the threads, now in
// groups that each own D/kVec lanes of the head, add weight * value over the tile's positions.
// Shared memory is a few KB whatever the context length. context = (sum_p e_p v_p) / (sum_p e_p):
// the same quantity as the reference's sum_p (e_p / sum) v_p, rounded differently.
constexpr int kDecodeTile = 256;

template <int kVec>  // 4: float4 loads over D (D % 4 == 0); 1: scalar (D <= kDecodeTile)
__global__ void __launch_bounds__(kDecodeTile)
    paged_attention_decode_kernel(float* context, const float* q, const float* k_pool, const float* v_pool,
                                  const int64_t* positions, const int32_t* block_tables, int64_t table_stride,
                                  int64_t block_size, int64_t H, int64_t KVH, int64_t D, float scale) {
  extern __shared__ float shared[];
  float* query = shared;                                                  // [D]
  float* weight = query + D;                                              // [kDecodeTile] e_p of the tile
  int64_t* slot_of = reinterpret_cast<int64_t*>(weight + kDecodeTile);    // [kDecodeTile] (D is even: 8-byte aligned)
  float* partial = reinterpret_cast<float*>(slot_of + kDecodeTile);       // [groups, D]
  __shared__ float smem[32];
  let_next_kernel_launch();
  const int64_t h = blockIdx.x, s = blockIdx.y, kv_head = h / (H / KVH);
  const int64_t P = positions[s] + 1;
  const int32_t* table = block_tables + s * table_stride;
  const int tid = threadIdx.x;
  for (int64_t d = tid; d < D; d += kDecodeTile) query[d] = q[(s * H + h) * D + d];
  __syncthreads();

  const int64_t dim_threads = D / kVec;               // threads that cover one value row
  const int64_t groups = kDecodeTile / dim_threads;   // value rows summed side by side
  const int64_t group = tid / dim_threads;
  const int64_t d0 = (tid % dim_threads) * kVec;
  const bool sums_values = group < groups;
  float acc[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc[j] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;
  const float* key_base = k_pool + kv_head * D;
  for (int64_t tile = 0; tile < P; tile += kDecodeTile) {
    const int64_t p = tile + tid;
    float score = -INFINITY;
    if (p < P) {
      const int64_t slot = int64_t(table[p / block_size]) * block_size + p % block_size;
      slot_of[tid] = slot;
      const float* key = key_base + slot * KVH * D;
      float dot = 0.0f;
      if constexpr (kVec == 4) {
#pragma unroll 8
        for (int64_t d = 0; d < D; d += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(key + d);
          dot += query[d] * k4.x + query[d + 1] * k4.y + query[d + 2] * k4.z + query[d + 3] * k4.w;
        }
      } else {
        for (int64_t d = 0; d < D; ++d) dot += query[d] * key[d];
      }
      score = dot * scale;
    }
    const float tile_max = block_max(score, smem);
    const float new_max = fmaxf(running_max, tile_max);
    const float e = p < P ? expf(score - new_max) : 0.0f;
    weight[tid] = e;
    const float tile_sum = block_sum(e, smem);  // its barriers also publish weight[] and slot_of[]
    const float correction = running_max == -INFINITY ? 0.0f : expf(running_max - new_max);
    running_sum = running_sum * correction + tile_sum;
    running_max = new_max;
    const int64_t n = P - tile < kDecodeTile ? P - tile : kDecodeTile;
    if (sums_values) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] *= correction;
#pragma unroll 4
      for (int64_t i = group; i < n; i += groups) {
        const float wi = weight[i];
        const float* value = v_pool + (slot_of[i] * KVH + kv_head) * D + d0;
        if constexpr (kVec == 4) {
          const float4 v4 = *reinterpret_cast<const float4*>(value);
          acc[0] += wi * v4.x, acc[1] += wi * v4.y, acc[2] += wi * v4.z, acc[3] += wi * v4.w;
        } else {
          acc[0] += wi * value[0];
        }
      }
    }
    __syncthreads();  // the next tile rewrites weight[] and slot_of[]
  }
  if (sums_values) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) partial[group * D + d0 + j] = acc[j];
  }
  __syncthreads();
  for (int64_t d = tid; d < D; d += kDecodeTile) {
    float total = 0.0f;
    for (int64_t g = 0; g < groups; ++g) total += partial[g * D + d];
    context[(s * H + h) * D + d] = total / running_sum;
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

// ---- launchers -----------------------------------------------------------------------------------

bool g_early_launch_refused = false;  // set once if the driver refuses programmatic dependent launch

// Launches `kernel` on `stream`; with `early`, as a programmatic dependent launch (Hopper): the
// kernel may start before the previous one on the stream ends and must wait for it itself
// (wait_for_previous_kernel) before reading what that kernel wrote.
template <typename... Params, typename... Args>
void launch_kernel(const char* op, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, bool early, const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = early && stream != nullptr && !g_early_launch_refused ? 1 : 0;  // (not on the legacy stream)
  cudaError_t status = cudaLaunchKernelEx(&config, kernel, args...);
  if (status != cudaSuccess && config.numAttrs == 1) {
    // a driver that refuses the attribute: launch plainly, and never ask again (early_launch_refused())
    (void)cudaGetLastError();
    g_early_launch_refused = true;
    config.numAttrs = 0;
    status = cudaLaunchKernelEx(&config, kernel, args...);
  }
  check_cuda(status, op, __FILE__, __LINE__);
}

// Dynamic shared memory beyond the default 48 KB needs the kernel's opt-in, up to the device limit.
template <typename Kernel>
void allow_shared_memory(const char* op, Kernel kernel, size_t bytes, const char* why) {
  if (bytes <= 48 * 1024) return;
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice", __FILE__, __LINE__);
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute",
             __FILE__, __LINE__);
  if (bytes > size_t(optin))
    fail("cuda::", op, ": needs ", bytes, " bytes of shared memory per block (", why, "), the device allows ", optin);
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
             "cudaFuncSetAttribute", __FILE__, __LINE__);
}

// The one launcher of gemv_v4_kernel: checks the targets, picks the instantiation, sizes the grid.
void launch_gemv_v4(const char* op, const GemvArgs& args, DType type, bool norm, Epilogue epilogue,
                    cudaStream_t stream, bool early) {
  if (args.in <= 0) fail("cuda::", op, ": in = ", args.in, " must be positive");
  if (args.total_rows <= 0) return;
  const size_t shared_bytes = size_t(args.in) * sizeof(float);
  check_block_row(op, type, args.in);
  dispatch_any_weight(type, op, [&](auto w) {
    using W = decltype(w);
    bool vector_loads = false;  // 16-byte loads: plain types whose every row starts 16-byte aligned
    if constexpr (!kIsBlock<W>) {
      constexpr int kVec = 16 / sizeof(W);
      vector_loads = args.in % kVec == 0;
      for (int t = 0; t < args.num_targets; ++t)
        vector_loads = vector_loads && reinterpret_cast<uintptr_t>(args.targets[t].weight) % 16 == 0;
    }
    const int64_t warps = epilogue == Epilogue::SwiGLU ? args.total_rows : (args.total_rows + 1) / 2;
    const dim3 grid(blocks_for(warps, kGemvWarps));
    auto run = [&](auto kernel) {
      allow_shared_memory(op, kernel, shared_bytes, "x staged in shared memory");
      launch_kernel(op, kernel, grid, dim3(kGemvThreads), shared_bytes, stream, early, args, vector_loads);
    };
    if (!norm && epilogue == Epilogue::Store) run(gemv_v4_kernel<W, false, Epilogue::Store>);
    else if (norm && epilogue == Epilogue::Store) run(gemv_v4_kernel<W, true, Epilogue::Store>);
    else if (norm && epilogue == Epilogue::SwiGLU) run(gemv_v4_kernel<W, true, Epilogue::SwiGLU>);
    else if (!norm && epilogue == Epilogue::Accumulate) run(gemv_v4_kernel<W, false, Epilogue::Accumulate>);
    else fail("cuda::", op, ": no GEMV variant for this prologue/epilogue pair");
  });
}

// The GemvArgs of linear_shared_input's targets (all of one weight type).
GemvArgs gemv_args(const char* op, const float* x, int64_t in, LinearTargets targets) {
  if (targets.empty() || targets.size() > size_t(kMaxLinearTargets))
    fail("cuda::", op, ": ", targets.size(), " targets, expected 1 to ", kMaxLinearTargets);
  GemvArgs args{};
  args.x = x;
  args.in = in;
  args.num_targets = int(targets.size());
  for (size_t t = 0; t < targets.size(); ++t) {
    const LinearTarget& target = targets[t];
    if (target.out <= 0) fail("cuda::", op, ": target ", t, " has out = ", target.out, ", expected > 0");
    args.targets[t] = GemvTarget{target.weight.data, target.bias, target.y, target.out};
    args.total_rows += target.out;
  }
  return args;
}

}  // namespace

bool early_launch_refused() { return g_early_launch_refused; }

void embedding_gather(float* out, WeightView table, const int32_t* tokens, int64_t T, int64_t E, cudaStream_t stream) {
  check_rows("embedding_gather", T, E);
  if (T == 0) return;
  check_block_row("embedding_gather", table.type, E);
  dispatch_any_weight(table.type, "embedding_gather", [&](auto w) {
    using W = decltype(w);
    embedding_gather_kernel<W><<<unsigned(T), kBlock, 0, stream>>>(out, static_cast<const W*>(table.data), tokens, E);
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

void gemv(GemvVersion version, float* y, const float* x, WeightView weight, const float* bias, int64_t in, int64_t out,
          cudaStream_t stream) {
  check_rows("gemv", out, in);
  if (out == 0) return;
  if (version == GemvVersion::v4_prefetch_unrolled) {
    const LinearTarget target{y, weight, bias, out};
    launch_gemv_v4("gemv", gemv_args("gemv", x, in, LinearTargets(&target, 1)), weight.type, false, Epilogue::Store, stream, false);
    return;
  }
  dispatch_weight_type(weight.type, "gemv", [&](auto w) {
    using W = decltype(w);
    const W* matrix = static_cast<const W*>(weight.data);
    constexpr int kVec = 16 / sizeof(W);
    // 16-byte loads need every row to start on a 16-byte boundary
    const bool vector_loads = in % kVec == 0 && reinterpret_cast<uintptr_t>(weight.data) % 16 == 0;
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

namespace {

// cuBLAS GemmEx for y = x W^T with x already in the weight's type (x_typed), then the bias.
void gemm(float* y, const void* x_typed, WeightView weight, const float* bias, int64_t T, int64_t in, int64_t out,
          const LinearContext& context) {
  // cuBLAS is column-major: our row-major W [out, in] is its [in, out] matrix A (lda = in), our X
  // [T, in] its [in, T] matrix B, our Y [T, out] its [out, T] matrix C. Y^T = W X^T is C = A^T B.
  const cudaDataType_t type = weight.type == DType::BF16 ? CUDA_R_16BF : weight.type == DType::F16 ? CUDA_R_16F
                                                                                                    : CUDA_R_32F;
  const float alpha = 1.0f, beta = 0.0f;
  // (cublasSetStream also drops a user workspace, so it is called only when the stream changes)
  cudaStream_t current = nullptr;
  JOURNEY_CUBLAS_CHECK(cublas().get_stream(context.cublas, &current));
  if (current != context.stream) JOURNEY_CUBLAS_CHECK(cublas().set_stream(context.cublas, context.stream));
  JOURNEY_CUBLAS_CHECK(cublas().gemm_ex(context.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(T), int(in), &alpha,
                                         weight.data, type, int(in), x_typed, type, int(in), &beta, y, CUDA_R_32F,
                                         int(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) add_bias(y, bias, T, out, context.stream);
}

// A quantized [rows, in] matrix dequantized into bf16 or f32 (cuBLAS has no GGML block types).
void dequantize_matrix(void* out, DType out_type, WeightView weight, int64_t rows, int64_t in, cudaStream_t stream) {
  check_block_row("dequantize_matrix", weight.type, in);
  if (out_type != DType::BF16 && out_type != DType::F32)
    fail("cuda::dequantize_matrix: dequantizes to bf16 or f32, not ", dtype_name(out_type));
  dispatch_any_weight(weight.type, "dequantize_matrix", [&](auto w) {
    using W = decltype(w);
    if constexpr (kIsBlock<W>) {
      const int64_t count = rows * (in / QuantFormat<W>::kWeights);  // blocks
      const unsigned grid = blocks_for(count * 32, kBlock);
      if (out_type == DType::F32)
        dequantize_kernel<W, float><<<grid, kBlock, 0, stream>>>(static_cast<float*>(out), static_cast<const W*>(weight.data), count);
      else
        dequantize_kernel<W, __nv_bfloat16><<<grid, kBlock, 0, stream>>>(static_cast<__nv_bfloat16*>(out),
                                                                         static_cast<const W*>(weight.data), count);
    } else {
      fail("cuda::dequantize_matrix: ", dtype_name(weight.type), " is not a block type");
    }
  });
  JOURNEY_LAUNCH_CHECK("dequantize_matrix");
}

// x in the weight's type for cuBLAS: x itself for f32 weights, else narrowed into the scratch.
const void* typed_input(const char* op, const float* x, DType type, int64_t T, int64_t in,
                        const LinearContext& context) {
  if (context.cublas == nullptr) fail("cuda::", op, ": T = ", T, " needs a cuBLAS handle in the LinearContext");
  if (type == DType::F32) return x;
  if (type != DType::BF16 && type != DType::F16)
    fail("cuda::", op, ": weights must be f32, bf16 or f16, found ", dtype_name(type));
  const size_t need = size_t(T * in) * 2;
  if (context.scratch == nullptr || context.scratch_bytes < need)
    fail("cuda::", op, ": scratch of ", context.scratch_bytes, " bytes is smaller than the ", need,
         " needed to narrow a [", T, ", ", in, "] activation");
  convert_from_f32(context.scratch, type, x, T * in, context.stream);
  return context.scratch;
}

}  // namespace

namespace {

// Calls launch(group) once per weight type among the targets, in order of first appearance (the
// q/k/v of a Q4_K_M file are q4_K, q4_K and q6_K: two launches).
template <typename F>
void for_each_type_group(LinearTargets targets, F&& launch) {
  bool done[kMaxLinearTargets] = {};
  for (size_t first = 0; first < targets.size(); ++first) {
    if (done[first]) continue;
    LinearTarget group[kMaxLinearTargets];
    size_t n = 0;
    for (size_t t = first; t < targets.size(); ++t)
      if (!done[t] && targets[t].weight.type == targets[first].weight.type) group[n++] = targets[t], done[t] = true;
    launch(LinearTargets(group, n));
  }
}

// T > 1: every target through cuBLAS. x is narrowed once per weight type; a quantized matrix is
// first dequantized into the bf16 weight scratch (and meets bf16 activations).
void gemm_targets(const char* op, const float* x, int64_t T, int64_t in, LinearTargets targets,
                  const LinearContext& context) {
  for_each_type_group(targets, [&](LinearTargets group) {
    const DType type = group[0].weight.type;
    const bool quantized = dtype_block_size(type) > 1;
    const DType gemm_type = quantized ? context.dequantize_to : type;
    const void* x_typed = typed_input(op, x, gemm_type, T, in, context);
    for (const LinearTarget& t : group) {
      WeightView w = t.weight;
      if (quantized) {
        const size_t need = size_t(t.out * in) * (gemm_type == DType::F32 ? 4 : 2);
        if (context.weight_scratch == nullptr || context.weight_scratch_bytes < need)
          fail("cuda::", op, ": a weight scratch of ", context.weight_scratch_bytes, " bytes is smaller than the ", need,
               " needed to dequantize a [", t.out, ", ", in, "] ", dtype_name(type), " matrix to ", dtype_name(gemm_type));
        dequantize_matrix(context.weight_scratch, gemm_type, t.weight, t.out, in, context.stream);
        w = {context.weight_scratch, gemm_type};
      }
      gemm(t.y, x_typed, w, t.bias, T, in, t.out, context);
    }
  });
}

}  // namespace

void linear(float* y, const float* x, WeightView weight, const float* bias, int64_t T, int64_t in, int64_t out,
            const LinearContext& context) {
  check_rows("linear", T, in);
  if (out <= 0) fail("cuda::linear: out = ", out, " must be positive");
  const LinearTarget target{y, weight, bias, out};
  linear_shared_input(x, T, in, LinearTargets(&target, 1), context);
}

void linear_shared_input(const float* x, int64_t T, int64_t in, LinearTargets targets,
                         const LinearContext& context) {
  check_rows("linear_shared_input", T, in);
  gemv_args("linear_shared_input", x, in, targets);  // checks the targets
  if (T == 0) return;
  if (T > 1) {
    gemm_targets("linear_shared_input", x, T, in, targets, context);
    return;
  }
  for_each_type_group(targets, [&](LinearTargets group) {
    // quantized weights have only the v4 kernel; the older versions take one plain matrix per launch
    if (context.gemv == GemvVersion::v4_prefetch_unrolled || dtype_block_size(group[0].weight.type) > 1) {
      launch_gemv_v4("linear_shared_input", gemv_args("linear_shared_input", x, in, group), group[0].weight.type, false,
                     Epilogue::Store, context.stream, context.early_launch);
    } else {
      for (const LinearTarget& t : group) gemv(context.gemv, t.y, x, t.weight, t.bias, in, t.out, context.stream);
    }
  });
}

void rms_norm_linear_shared_input(const float* x, const float* norm_weight, float eps, int64_t in,
                                  LinearTargets targets, const LinearContext& context) {
  gemv_args("rms_norm_linear_shared_input", x, in, targets);  // checks the targets
  for_each_type_group(targets, [&](LinearTargets group) {  // each launch normalizes x itself
    GemvArgs args = gemv_args("rms_norm_linear_shared_input", x, in, group);
    args.norm_weight = norm_weight;
    args.eps = eps;
    launch_gemv_v4("rms_norm_linear_shared_input", args, group[0].weight.type, true, Epilogue::Store, context.stream,
                   context.early_launch);
  });
}

void rms_norm_swiglu(float* act, const float* x, const float* norm_weight, float eps, WeightView gate, WeightView up,
                     int64_t in, int64_t F, const LinearContext& context) {
  if (gate.type != up.type)
    fail("cuda::rms_norm_swiglu: gate is ", dtype_name(gate.type), ", up is ", dtype_name(up.type),
         " (one launch reads both: they must share a type)");
  const LinearTarget targets[] = {{act, gate, nullptr, F}, {nullptr, up, nullptr, F}};
  GemvArgs args = gemv_args("rms_norm_swiglu", x, in, targets);
  args.norm_weight = norm_weight;
  args.eps = eps;
  args.total_rows = F;  // a warp per output: row o of gate and row o of up
  launch_gemv_v4("rms_norm_swiglu", args, gate.type, true, Epilogue::SwiGLU, context.stream, context.early_launch);
}

void linear_residual_add(float* x, const float* input, WeightView weight, int64_t in, int64_t out,
                         const LinearContext& context) {
  const LinearTarget target{x, weight, nullptr, out};
  launch_gemv_v4("linear_residual_add", gemv_args("linear_residual_add", input, in, LinearTargets(&target, 1)), weight.type, false,
                 Epilogue::Accumulate, context.stream, context.early_launch);
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

namespace {

void check_decode_batch(const char* op, const DecodeBatch& batch, int64_t block_size, int64_t H, int64_t KVH,
                        int64_t D) {
  if (batch.S <= 0 || batch.S > 65535 || batch.table_stride <= 0 || block_size <= 0 || H <= 0 || KVH <= 0 || D <= 0 ||
      H % KVH != 0 || D % 2 != 0)
    fail("cuda::", op, ": bad shape S = ", batch.S, ", table_stride = ", batch.table_stride, ", block_size = ",
         block_size, ", H = ", H, ", KVH = ", KVH, ", D = ", D,
         " (need S in [1, 65535], H a multiple of KVH, an even D)");
  if (batch.positions == nullptr || batch.block_tables == nullptr)
    fail("cuda::", op, ": the batch needs device arrays of positions and block tables");
}

}  // namespace

void rope_kv_cache_write_decode(float* q, const float* k, const float* v, float* k_pool, float* v_pool,
                                const float* q_norm, const float* k_norm, float eps, const DecodeBatch& batch,
                                int64_t block_size, int64_t H, int64_t KVH, int64_t D, double theta,
                                RopeLayout layout, cudaStream_t stream) {
  check_decode_batch("rope_kv_cache_write_decode", batch, block_size, H, KVH, D);
  rope_kv_cache_write_decode_kernel<<<unsigned(batch.S), kBlock, 0, stream>>>(
      q, k, v, k_pool, v_pool, q_norm, k_norm, eps, batch.positions, batch.block_tables, batch.table_stride,
      block_size, H, KVH, D, float(theta), layout == RopeLayout::HalfSplit);
  JOURNEY_LAUNCH_CHECK("rope_kv_cache_write_decode");
}

void paged_attention_decode(float* context, const float* q, const float* k_pool, const float* v_pool,
                            const DecodeBatch& batch, int64_t block_size, int64_t H, int64_t KVH, int64_t D,
                            cudaStream_t stream) {
  check_decode_batch("paged_attention_decode", batch, block_size, H, KVH, D);
  if (H > 2147483647) fail("cuda::paged_attention_decode: H = ", H, " exceeds the grid limit");
  const int vec = D % 4 == 0 ? 4 : 1;
  if (D / vec > kDecodeTile)
    fail("cuda::paged_attention_decode: head_dim ", D, " is too large (at most ", kDecodeTile * 4,
         " when divisible by 4, else ", kDecodeTile, ")");
  const int64_t groups = kDecodeTile / (D / vec);
  const size_t shared_bytes = size_t(D + kDecodeTile) * sizeof(float) + kDecodeTile * sizeof(int64_t) +
                              size_t(groups * D) * sizeof(float);
  const float scale = 1.0f / sqrtf(float(D));  // as attention_kernel
  const dim3 grid(unsigned(H), unsigned(batch.S));
  if (vec == 4)
    paged_attention_decode_kernel<4><<<grid, kDecodeTile, shared_bytes, stream>>>(
        context, q, k_pool, v_pool, batch.positions, batch.block_tables, batch.table_stride, block_size, H, KVH, D,
        scale);
  else
    paged_attention_decode_kernel<1><<<grid, kDecodeTile, shared_bytes, stream>>>(
        context, q, k_pool, v_pool, batch.positions, batch.block_tables, batch.table_stride, block_size, H, KVH, D,
        scale);
  JOURNEY_LAUNCH_CHECK("paged_attention_decode");
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
