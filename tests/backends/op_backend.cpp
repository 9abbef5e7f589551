#include "backends/op_backend.h"

#include "core/error.h"
#include "reference/ops.h"

namespace journey::optest {

namespace {

const float* f32_of(const HostMatrix& m, const char* op) {
  if (m.type != DType::F32) fail(op, ": this backend takes f32 weights, found ", dtype_name(m.type));
  return static_cast<const float*>(m.bytes);
}

}  // namespace

// ---- the reference --------------------------------------------------------------------------

void ReferenceOps::embedding_gather(float* out, const HostMatrix& table, const int32_t* tokens, int64_t T, int64_t E) {
  reference::embedding_gather(out, f32_of(table, "embedding_gather"), tokens, T, E);
}
void ReferenceOps::rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) {
  reference::rms_norm(out, x, weight, R, N, eps);
}
void ReferenceOps::rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
                        RopeLayout layout) {
  reference::rope(x, positions, T, heads, D, theta, layout);
}
void ReferenceOps::linear(float* y, const float* x, const HostMatrix& weight, const float* bias, int64_t T, int64_t in,
                          int64_t out) {
  reference::linear(y, x, f32_of(weight, "linear"), bias, T, in, out);
}
void ReferenceOps::softmax(float* x, int64_t R, int64_t N) { reference::softmax(x, R, N); }
void ReferenceOps::swiglu(float* out, const float* gate, const float* up, int64_t n) {
  reference::swiglu(out, gate, up, n);
}
void ReferenceOps::residual_add(float* out, const float* a, const float* b, int64_t n) {
  reference::residual_add(out, a, b, n);
}
void ReferenceOps::attention(float* context, const float* q, const float* k, const float* v, int64_t T, int64_t start,
                             int64_t H, int64_t KVH, int64_t D, float* scores_out, float* weights_out) {
  reference::attention(context, q, k, v, T, start, H, KVH, D, scores_out, weights_out);
}
void ReferenceOps::kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v,
                                  const int32_t* block_table, int64_t T, int64_t start, int64_t block_size,
                                  int64_t KVH, int64_t D, int64_t) {
  reference::kv_cache_write(k_pool, v_pool, k, v, block_table, T, start, block_size, KVH, D);
}
void ReferenceOps::paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                                   const int32_t* block_table, int64_t T, int64_t start, int64_t block_size,
                                   int64_t H, int64_t KVH, int64_t D, float* scores_out, float* weights_out, int64_t) {
  reference::paged_attention(context, q, k_pool, v_pool, block_table, T, start, block_size, H, KVH, D, scores_out,
                             weights_out);
}

// ---- the fast CPU backend, through its ops table ----------------------------------------------

void CpuOpsUnderTest::embedding_gather(float* out, const HostMatrix& table, const int32_t* tokens, int64_t T,
                                       int64_t E) {
  ops_.embedding_gather(out, cpu::WeightView{table.bytes, table.type}, tokens, T, E);
}
void CpuOpsUnderTest::rms_norm(float* out, const float* x, const float* weight, int64_t R, int64_t N, float eps) {
  ops_.rms_norm(out, x, weight, R, N, eps);
}
void CpuOpsUnderTest::rope(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
                           RopeLayout layout) {
  ops_.rope(x, positions, T, heads, D, theta, layout);
}
void CpuOpsUnderTest::linear(float* y, const float* x, const HostMatrix& weight, const float* bias, int64_t T,
                             int64_t in, int64_t out) {
  ops_.linear(y, x, cpu::WeightView{weight.bytes, weight.type}, bias, T, in, out, threads_);
}
void CpuOpsUnderTest::linear_shared_input(const float* x, int64_t T, int64_t in, std::span<const HostTarget> targets) {
  std::vector<cpu::LinearTarget> fast;
  for (const HostTarget& t : targets)
    fast.push_back({t.y, cpu::WeightView{t.weight.bytes, t.weight.type}, t.bias, t.weight.rows});
  ops_.linear_shared_input(x, T, in, fast, threads_);
}
void CpuOpsUnderTest::softmax(float* x, int64_t R, int64_t N) { ops_.softmax(x, R, N); }
void CpuOpsUnderTest::swiglu(float* out, const float* gate, const float* up, int64_t n) { ops_.swiglu(out, gate, up, n); }
void CpuOpsUnderTest::residual_add(float* out, const float* a, const float* b, int64_t n) {
  ops_.residual_add(out, a, b, n);
}
void CpuOpsUnderTest::attention(float* context, const float* q, const float* k, const float* v, int64_t T,
                                int64_t start, int64_t H, int64_t KVH, int64_t D, float* scores_out,
                                float* weights_out) {
  ops_.attention(context, q, k, v, T, start, H, KVH, D, scores_out, weights_out, threads_);
}
void CpuOpsUnderTest::kv_cache_write(float* k_pool, float* v_pool, const float* k, const float* v,
                                     const int32_t* block_table, int64_t T, int64_t start, int64_t block_size,
                                     int64_t KVH, int64_t D, int64_t) {
  ops_.kv_cache_write(cpu::KvPool{k_pool, DType::F32}, cpu::KvPool{v_pool, DType::F32}, k, v, block_table, T, start,
                      block_size, KVH, D);
}
void CpuOpsUnderTest::paged_attention(float* context, const float* q, const float* k_pool, const float* v_pool,
                                      const int32_t* block_table, int64_t T, int64_t start, int64_t block_size,
                                      int64_t H, int64_t KVH, int64_t D, float* scores_out, float* weights_out, int64_t) {
  ops_.paged_attention(context, q, cpu::KvPool{const_cast<float*>(k_pool), DType::F32},
                       cpu::KvPool{const_cast<float*>(v_pool), DType::F32}, block_table, T, start, block_size, H, KVH, D,
                       scores_out, weights_out, threads_);
}

}  // namespace journey::optest
