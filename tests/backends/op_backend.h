// The op test's view of a backend (llama.cpp's test-backend-ops, journey's way): every op of
// reference/ops.h under the same name, taking HOST buffers, so one harness (op_check.h) can run any
// backend's ops on the same random inputs and compare them with the reference's. A backend whose
// ops work on device memory (CUDA) copies in and out inside its adapter — whole guarded buffers,
// so a stray write past an output still lands in a guard the harness checks.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"
#include "cpu/cpu_backend.h"

namespace journey::optest {

// A weight matrix as it is stored: `bytes` in `type` ([rows, cols] elements, row-major; for block
// types, whole blocks per row). The harness also keeps the f32 values the reference multiplies by.
struct HostMatrix {
  DType type = DType::F32;
  const void* bytes = nullptr;
  int64_t rows = 0, cols = 0;
};

// One product of linear_shared_input: y = x W^T (+ bias).
struct HostTarget {
  float* y;            // [T, out]
  HostMatrix weight;   // [out, in]
  const float* bias;   // [out] or nullptr
};

class OpBackend {
 public:
  virtual ~OpBackend() = default;
  virtual std::string name() const = 0;
  // The stored weight types linear() and embedding_gather() accept.
  virtual std::vector<DType> weight_types() const { return {DType::F32}; }
  // Whether the backend has a linear_shared_input (the reference does not: it is a fast-path op).
  virtual bool has_linear_shared_input() const { return false; }

  virtual void embedding_gather(float* out, const HostMatrix& table, const int32_t* tokens, int64_t T, int64_t E) = 0;
  virtual void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) = 0;
  virtual void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
                    RopeLayout layout) = 0;
  virtual void linear(float* y, const float* x, const HostMatrix& weight, const float* bias, int64_t T, int64_t in,
                      int64_t out) = 0;
  virtual void linear_shared_input(const float* x, int64_t T, int64_t in, std::span<const HostTarget> targets) {
    (void)x, (void)T, (void)in, (void)targets;
  }
  virtual void softmax(float* x, int64_t R, int64_t N) = 0;
  virtual void swiglu(float* out, const float* gate, const float* up, int64_t n) = 0;
  virtual void residual_add(float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start,
                         int64_t H, int64_t KVH, int64_t D, float* scores_out, float* weights_out) = 0;
  // The pool ops take the pool's size in blocks too (not an argument of the ops themselves): a
  // device backend needs it to copy the pools.
  virtual void kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v,
                              const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t KVH,
                              int64_t D, int64_t num_blocks) = 0;
  virtual void paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                               const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t H,
                               int64_t KVH, int64_t D, float* scores_out, float* weights_out, int64_t num_blocks) = 0;
};

// The reference ops (reference/ops.h): the yardstick, also run through the harness to check it.
class ReferenceOps : public OpBackend {
 public:
  std::string name() const override { return "reference"; }
  void embedding_gather(float* out, const HostMatrix& table, const int32_t* tokens, int64_t T, int64_t E) override;
  void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) override;
  void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
            RopeLayout layout) override;
  void linear(float* y, const float* x, const HostMatrix& weight, const float* bias, int64_t T, int64_t in,
              int64_t out) override;
  void softmax(float* x, int64_t R, int64_t N) override;
  void swiglu(float* out, const float* gate, const float* up, int64_t n) override;
  void residual_add(float* out, const float* a, const float* b, int64_t n) override;
  void attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start, int64_t H,
                 int64_t KVH, int64_t D, float* scores_out, float* weights_out) override;
  void kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v, const int32_t* block_table,
                      int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D, int64_t num_blocks) override;
  void paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                       const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t H,
                       int64_t KVH, int64_t D, float* scores_out, float* weights_out, int64_t num_blocks) override;
};

// The fast CPU backend's ops, through the same table its forward pass calls (cpu/cpu_backend.h's
// CpuOps), so a test can plant a bug in one entry and see the harness name it.
class CpuOpsUnderTest : public OpBackend {
 public:
  CpuOpsUnderTest(CpuOps ops, int threads) : ops_(ops), threads_(threads) {}
  std::string name() const override { return "cpu"; }
  // Every type the fast backend multiplies as stored.
  std::vector<DType> weight_types() const override {
    return {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
            DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  }
  bool has_linear_shared_input() const override { return true; }
  void embedding_gather(float* out, const HostMatrix& table, const int32_t* tokens, int64_t T, int64_t E) override;
  void rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) override;
  void rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
            RopeLayout layout) override;
  void linear(float* y, const float* x, const HostMatrix& weight, const float* bias, int64_t T, int64_t in,
              int64_t out) override;
  void linear_shared_input(const float* x, int64_t T, int64_t in, std::span<const HostTarget> targets) override;
  void softmax(float* x, int64_t R, int64_t N) override;
  void swiglu(float* out, const float* gate, const float* up, int64_t n) override;
  void residual_add(float* out, const float* a, const float* b, int64_t n) override;
  void attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start, int64_t H,
                 int64_t KVH, int64_t D, float* scores_out, float* weights_out) override;
  void kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v, const int32_t* block_table,
                      int64_t T, int64_t start, int64_t block_size, int64_t KVH, int64_t D, int64_t num_blocks) override;
  void paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                       const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t H,
                       int64_t KVH, int64_t D, float* scores_out, float* weights_out, int64_t num_blocks) override;

 private:
  CpuOps ops_;
  int threads_;
};

}  // namespace journey::optest
