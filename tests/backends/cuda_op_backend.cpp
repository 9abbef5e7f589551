#include "backends/cuda_op_backend.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "cuda/kernels.h"

namespace journey::optest {

namespace {

constexpr int64_t kGuard = 64;                 // bytes of guard before and after every device output
constexpr unsigned char kGuardByte = 0xA5;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA error in ", what, ": ", cudaGetErrorString(status));
}

// One device allocation of `bytes` between two guard regions; freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&base_, bytes_ + 2 * kGuard), "cudaMalloc");
    check(cudaMemset(base_, kGuardByte, bytes_ + 2 * kGuard), "cudaMemset");
  }
  DeviceBuffer(const void* host, size_t bytes) : DeviceBuffer(bytes) { upload(host); }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* get() const { return reinterpret_cast<T*>(static_cast<unsigned char*>(base_) + kGuard); }
  void upload(const void* host) { check(cudaMemcpy(get(), host, bytes_, cudaMemcpyHostToDevice), "upload"); }
  // Copies the result back and checks that the guards around it are untouched.
  void download(void* host, const char* op) const {
    check(cudaDeviceSynchronize(), op);
    check(cudaGetLastError(), op);
    std::vector<unsigned char> all(bytes_ + 2 * kGuard);
    check(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost), "download");
    for (int64_t i = 0; i < kGuard; ++i)
      if (all[size_t(i)] != kGuardByte || all[size_t(kGuard) + bytes_ + size_t(i)] != kGuardByte)
        fail(op, " wrote outside its output on the device");
    std::memcpy(host, all.data() + kGuard, bytes_);
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
};

size_t matrix_bytes(const HostMatrix& m) { return size_t(m.rows * dtype_bytes_for(m.type, m.cols)); }
size_t floats(int64_t n) { return size_t(n) * sizeof(float); }

class CudaOpsUnderTest : public OpBackend {
 public:
  CudaOpsUnderTest() { check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~CudaOpsUnderTest() override {
    if (cublas_) cuda::cublas().destroy(cublas_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return "cuda"; }
  std::vector<DType> weight_types() const override { return {DType::F32, DType::BF16, DType::F16}; }
  bool has_linear_shared_input() const override { return true; }

  void embedding_gather(float* out, const HostMatrix& table, const int32_t* tokens, int64_t T, int64_t E) override {
    DeviceBuffer d_table(table.bytes, matrix_bytes(table)), d_tokens(tokens, size_t(T) * 4), d_out(floats(T * E));
    cuda::embedding_gather(d_out.get<float>(), {d_table.get(), table.type}, d_tokens.get<int32_t>(), T, E, stream_);
    d_out.download(out, "embedding_gather");
  }
  void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) override {
    DeviceBuffer d_x(x, floats(R * N)), d_w(weight, floats(N));
    if (out == x) {  // in place
      cuda::rms_norm(d_x.get<float>(), d_x.get<float>(), d_w.get<float>(), R, N, eps, stream_);
      return d_x.download(out, "rms_norm");
    }
    DeviceBuffer d_out(floats(R * N));
    cuda::rms_norm(d_out.get<float>(), d_x.get<float>(), d_w.get<float>(), R, N, eps, stream_);
    d_out.download(out, "rms_norm");
  }
  void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
            RopeLayout layout) override {
    DeviceBuffer d_x(x, floats(T * heads * D)), d_pos(positions, size_t(T) * 8);
    cuda::rope(d_x.get<float>(), d_pos.get<int64_t>(), T, heads, D, theta, layout, stream_);
    d_x.download(x, "rope");
  }
  void linear(float* y, const float* x, const HostMatrix& weight, const float* bias, int64_t T, int64_t in,
              int64_t out) override {
    DeviceBuffer d_x(x, floats(T * in)), d_w(weight.bytes, matrix_bytes(weight)), d_y(floats(T * out));
    std::unique_ptr<DeviceBuffer> d_bias;
    if (bias) d_bias = std::make_unique<DeviceBuffer>(bias, floats(out));
    DeviceBuffer scratch(size_t(T * in) * 2 + 16);
    cuda::linear(d_y.get<float>(), d_x.get<float>(), {d_w.get(), weight.type}, d_bias ? d_bias->get<float>() : nullptr,
                 T, in, out, context(scratch, T * in * 2));
    d_y.download(y, "linear");
  }
  void linear_shared_input(const float* x, int64_t T, int64_t in, std::span<const HostTarget> targets) override {
    DeviceBuffer d_x(x, floats(T * in));
    std::vector<std::unique_ptr<DeviceBuffer>> keep;  // weights, biases, outputs
    std::vector<cuda::LinearTarget> device_targets;
    std::vector<DeviceBuffer*> outputs;
    for (const HostTarget& t : targets) {
      // raw pointers: `keep` grows, the buffers themselves stay where they are
      DeviceBuffer* w = keep.emplace_back(std::make_unique<DeviceBuffer>(t.weight.bytes, matrix_bytes(t.weight))).get();
      float* bias = nullptr;
      if (t.bias) bias = keep.emplace_back(std::make_unique<DeviceBuffer>(t.bias, floats(t.weight.rows)))->get<float>();
      DeviceBuffer* y = keep.emplace_back(std::make_unique<DeviceBuffer>(floats(T * t.weight.rows))).get();
      outputs.push_back(y);
      device_targets.push_back({y->get<float>(), {w->get(), t.weight.type}, bias, t.weight.rows});
    }
    DeviceBuffer scratch(size_t(T * in) * 2 + 16);
    cuda::linear_shared_input(d_x.get<float>(), T, in, cuda::LinearTargets(device_targets.data(), device_targets.size()),
                              context(scratch, T * in * 2));
    for (size_t i = 0; i < targets.size(); ++i) outputs[i]->download(targets[i].y, "linear_shared_input");
  }
  void softmax(float* x, int64_t R, int64_t N) override {
    DeviceBuffer d_x(x, floats(R * N));
    cuda::softmax(d_x.get<float>(), R, N, stream_);
    d_x.download(x, "softmax");
  }
  void swiglu(float* out, const float* gate, const float* up, int64_t n) override {
    DeviceBuffer d_g(gate, floats(n)), d_u(up, floats(n)), d_out(floats(n));
    cuda::swiglu(d_out.get<float>(), d_g.get<float>(), d_u.get<float>(), n, stream_);
    d_out.download(out, "swiglu");
  }
  void residual_add(float* out, const float* a, const float* b, int64_t n) override {
    DeviceBuffer d_a(a, floats(n)), d_b(b, floats(n));
    if (out == a) {
      cuda::residual_add(d_a.get<float>(), d_a.get<float>(), d_b.get<float>(), n, stream_);
      return d_a.download(out, "residual_add");
    }
    DeviceBuffer d_out(floats(n));
    cuda::residual_add(d_out.get<float>(), d_a.get<float>(), d_b.get<float>(), n, stream_);
    d_out.download(out, "residual_add");
  }
  void attention(float* context_out, const float* q, const float* k, const float* v, int64_t T, int64_t start,
                 int64_t H, int64_t KVH, int64_t D, float* scores_out, float* weights_out) override {
    const int64_t P = start + T;
    DeviceBuffer d_q(q, floats(T * H * D)), d_k(k, floats(P * KVH * D)), d_v(v, floats(P * KVH * D));
    DeviceBuffer d_c(floats(T * H * D)), d_s(floats(H * T * P)), d_w(floats(H * T * P));
    cuda::attention(d_c.get<float>(), d_q.get<float>(), d_k.get<float>(), d_v.get<float>(), T, start, H, KVH, D,
                    scores_out ? d_s.get<float>() : nullptr, weights_out ? d_w.get<float>() : nullptr, stream_);
    d_c.download(context_out, "attention");
    if (scores_out) d_s.download(scores_out, "attention");
    if (weights_out) d_w.download(weights_out, "attention");
  }
  void kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v, const int32_t* block_table,
                      int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D, int64_t num_blocks) override {
    const int64_t blocks = (start + T + block_size - 1) / block_size;
    const int64_t pool = num_blocks * block_size * KVH * D;  // floats in each pool
    DeviceBuffer d_kp(k_pool, floats(pool)), d_vp(v_pool, floats(pool));
    DeviceBuffer d_k(k, floats(T * KVH * D)), d_v(v, floats(T * KVH * D)), d_table(block_table, size_t(blocks) * 4);
    cuda::kv_cache_write(d_kp.get<float>(), d_vp.get<float>(), d_k.get<float>(), d_v.get<float>(), d_table.get<int32_t>(),
                         T, start, block_size, KVH, D, stream_);
    d_kp.download(k_pool, "kv_cache_write");
    d_vp.download(v_pool, "kv_cache_write");
  }
  void paged_attention(float* context_out, const float* q, const float* k_pool, const float* v_pool,
                       const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t H,
                       int64_t KVH, int64_t D, float* scores_out, float* weights_out, int64_t num_blocks) override {
    const int64_t P = start + T, blocks = (P + block_size - 1) / block_size;
    const int64_t pool = num_blocks * block_size * KVH * D;  // floats in each pool
    DeviceBuffer d_q(q, floats(T * H * D)), d_kp(k_pool, floats(pool)), d_vp(v_pool, floats(pool));
    DeviceBuffer d_table(block_table, size_t(blocks) * 4);
    DeviceBuffer d_c(floats(T * H * D)), d_s(floats(H * T * P)), d_w(floats(H * T * P));
    cuda::paged_attention(d_c.get<float>(), d_q.get<float>(), d_kp.get<float>(), d_vp.get<float>(),
                          d_table.get<int32_t>(), T, start, block_size, H, KVH, D,
                          scores_out ? d_s.get<float>() : nullptr, weights_out ? d_w.get<float>() : nullptr, stream_);
    d_c.download(context_out, "paged_attention");
    if (scores_out) d_s.download(scores_out, "paged_attention");
    if (weights_out) d_w.download(weights_out, "paged_attention");
  }

 private:
  cuda::LinearContext context(DeviceBuffer& scratch, int64_t scratch_bytes) {
    if (!cublas_) {
      JOURNEY_CUBLAS_CHECK(cuda::cublas().create(&cublas_));
      JOURNEY_CUBLAS_CHECK(cuda::cublas().set_stream(cublas_, stream_));
    }
    cuda::LinearContext c;
    c.stream = stream_;
    c.cublas = cublas_;
    c.scratch = scratch.get();
    c.scratch_bytes = size_t(scratch_bytes);
    return c;
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace

std::unique_ptr<OpBackend> make_cuda_op_backend() { return std::make_unique<CudaOpsUnderTest>(); }

}  // namespace journey::optest
