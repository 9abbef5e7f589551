// Every op of every backend compiled in, against the reference op of the same name (op_check.h):
// random inputs of odd sizes, guards around every output, NMSE with a tolerance per op and per
// weight type. And the test of the test: a bug planted in one op of the fast backend is found,
// and named.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "backends/planted.h"

#include "backends/op_check.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"

using namespace journey;
using namespace journey::optest;

TEST_CASE("op test: the reference through the harness agrees with itself exactly") {
  ReferenceOps reference;
  const std::vector<OpFailure> failures = check_ops(reference);
  CHECK_MESSAGE(failures.empty(), describe(failures));
}

TEST_CASE("op test: every op of the fast CPU backend matches the reference (1, 2 and 3 threads)") {
  MESSAGE("small-batch kernel: " << std::string(cpu::gemm::isa_name(cpu::gemm::best_isa())));
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    CpuOpsUnderTest cpu(CpuOps{}, threads);
    std::map<DType, double> worst;
    const std::vector<OpFailure> failures = check_ops(cpu, &worst);
    CHECK_MESSAGE(failures.empty(), describe(failures));
    std::ostringstream figures;  // the measured errors behind the tolerances (docs/quantization.md)
    for (const auto& [type, error] : worst)
      figures << " " << dtype_name(type) << " " << error << " (< " << weight_tolerance(type) << ")";
    MESSAGE("largest product error per type:" << figures.str());
  }
}

#if JOURNEY_TEST_CUDA_OPS
#include "backends/cuda_op_backend.h"
#include "cuda/cuda_backend.h"

TEST_CASE("op test: every op of the CUDA backend matches the reference (f32, bf16 and f16 weights)") {
  if (cuda_device_count() == 0) {
    MESSAGE("no CUDA device visible: the CUDA ops are not run here (scripts/gpu-check.sh runs them on a GPU)");
    return;
  }
  auto cuda = make_cuda_op_backend();
  const std::vector<OpFailure> failures = check_ops(*cuda);
  CHECK_MESSAGE(failures.empty(), describe(failures));
}
#endif

namespace {

// Planted bugs, each a plausible mistake in one fast op.
void rope_with_swapped_layout(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
                              RopeLayout layout) {
  cpu::rope(x, positions, T, heads, D, theta, layout == RopeLayout::HalfSplit ? RopeLayout::Interleaved : RopeLayout::HalfSplit);
}
void linear_missing_last_row(float* y, const float* x, cpu::WeightView weight, const float* bias, int64_t T,
                             int64_t in, int64_t out, int threads) {
  if (out == 1) return cpu::linear(y, x, weight, bias, T, in, out, threads);
  std::vector<float> partial(size_t(T * (out - 1)));  // [T, out - 1]: forgets the last output row
  cpu::linear(partial.data(), x, weight, bias, T, in, out - 1, threads);
  for (int64_t t = 0; t < T; ++t) std::copy_n(&partial[size_t(t * (out - 1))], out - 1, y + t * out);
}
void kv_write_one_block_off(cpu::KvPool k_pool, cpu::KvPool v_pool, const float* k, const float* v,
                            const int32_t* block_table, int64_t T, int64_t start, int64_t block_size, int64_t KVH,
                            int64_t D) {
  std::vector<int32_t> shifted(block_table, block_table + (start + T + block_size - 1) / block_size);
  for (int32_t& b : shifted) b = b > 0 ? b - 1 : b;  // an off-by-one in the slot mapping
  cpu::kv_cache_write(k_pool, v_pool, k, v, shifted.data(), T, start, block_size, KVH, D);
}

std::vector<std::string> ops_named(const std::vector<OpFailure>& failures) {
  std::vector<std::string> ops;
  for (const OpFailure& f : failures)
    if (std::find(ops.begin(), ops.end(), f.op) == ops.end()) ops.push_back(f.op);
  return ops;
}

}  // namespace

TEST_CASE("op test: a bug planted in one fast op fails the test and names that op, and only it") {
  {
    CpuOps planted;
    planted.rope = rope_with_swapped_layout;
    CpuOpsUnderTest cpu(planted, 2);
    const std::vector<OpFailure> failures = check_ops(cpu);
    CHECK(ops_named(failures) == std::vector<std::string>{"rope"});
  }
  {
    CpuOps planted;
    planted.linear = linear_missing_last_row;
    CpuOpsUnderTest cpu(planted, 2);
    const std::vector<OpFailure> failures = check_ops(cpu);
    CHECK(ops_named(failures) == std::vector<std::string>{"linear"});
    // the unwritten row is NaN-poisoned, so the failure says NMSE nan, not a small error
    REQUIRE_FALSE(failures.empty());
    CHECK(failures.front().what.find("nan") != std::string::npos);
  }
  {
    CpuOps planted;
    planted.linear = planted::linear_q4_k_without_minimums;
    CpuOpsUnderTest cpu(planted, 2);
    const std::vector<OpFailure> failures = check_ops(cpu);
    CHECK(ops_named(failures) == std::vector<std::string>{"linear"});
    // found on Q4_K weights, and only there
    for (const OpFailure& f : failures) CHECK(f.where.find("q4_K") != std::string::npos);
  }
  {
    CpuOps planted;
    planted.kv_cache_write = kv_write_one_block_off;
    CpuOpsUnderTest cpu(planted, 2);
    const std::vector<OpFailure> failures = check_ops(cpu);
    CHECK(ops_named(failures) == std::vector<std::string>{"kv_cache_write"});
  }
}
