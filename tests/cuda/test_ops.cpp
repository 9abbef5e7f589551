// Every CUDA kernel against the reference op of the same name (journey::reference, reference/ops.h),
// in the manner of llama.cpp's test-backend-ops: random inputs, odd sizes (so no kernel gets away
// with assuming a multiple of 32 or of the vector width), NMSE against the reference with a
// tolerance per weight type, and sentinels around every output. The reference ops are themselves
// tested against scalar loops in tests/reference, so they are an independent yardstick here.
//
// Tolerances (NMSE): f32 1e-9 for elementwise work, 1e-7 where sums are reordered (norms, matrix
// products, attention); matrices in bf16/f16 are compared with a reference that multiplies by the
// SAME rounded weights, so only the activations' rounding for cuBLAS (bf16: 8 bits of mantissa,
// relative 2^-9; f16: 2^-11) remains: bf16 GEMM 1e-4, f16 GEMM 1e-5, any GEMV (f32 activations) 1e-7.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"
#include "reference/ops.h"
#include "sampling/processors.h"

using namespace journey;
using cudatest::DeviceArray;
using cudatest::random_vector;

namespace {

constexpr double kExact = 1e-9;
constexpr double kReordered = 1e-7;

// One matrix on the device in `type`, and the f32 values the reference should use.
struct TestMatrix {
  std::vector<float> reference;  // [out, in] exactly what the device holds, widened
  std::unique_ptr<DeviceArray<float>> f32;
  std::unique_ptr<DeviceArray<uint16_t>> narrow;
  const void* device() const { return f32 ? static_cast<const void*>(f32->get()) : narrow->get(); }
  DType type = DType::F32;
  cuda::WeightView view() const { return {device(), type}; }
};

TestMatrix make_matrix(const std::vector<float>& values, DType type) {
  TestMatrix m;
  m.type = type;
  if (type == DType::F32) {
    m.reference = values;
    m.f32 = std::make_unique<DeviceArray<float>>(values);
  } else {
    cudatest::NarrowWeights w = cudatest::narrow(values, type);
    m.reference = w.widened;
    m.narrow = std::make_unique<DeviceArray<uint16_t>>(w.bits);
  }
  return m;
}

}  // namespace

TEST_CASE("embedding_gather widens rows of an f32, bf16 and f16 table exactly") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t V = 37, E = 19, T = 11;
  std::vector<int32_t> tokens = {0, 36, 5, 5, 17, 1, 30, 2, 36, 9, 0};
  for (DType type : {DType::F32, DType::BF16, DType::F16}) {
    CAPTURE(dtype_name(type));
    TestMatrix table = make_matrix(random_vector(size_t(V * E), 1), type);
    std::vector<float> expected(size_t(T * E));
    reference::embedding_gather(expected.data(), table.reference.data(), tokens.data(), T, E);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> out(size_t(T * E));
    cuda::embedding_gather(out.get(), table.view(), d_tokens.get(), T, E, nullptr);
    CHECK(out.download() == expected);
    CHECK(out.sentinels_intact());
  }
}

TEST_CASE("rms_norm matches the reference, also in place") {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (auto [R, N] : {std::pair<int64_t, int64_t>{7, 131}, {1, 2048}, {3, 5}}) {
    CAPTURE(R);
    CAPTURE(N);
    std::vector<float> x = random_vector(size_t(R * N), 2, 3.0f), w = random_vector(size_t(N), 3, 0.1f, 1.0f);
    std::vector<float> expected(x.size());
    reference::rms_norm(expected.data(), x.data(), w.data(), R, N, 1e-5f);
    DeviceArray<float> d_x(x), d_w(w), out(x.size());
    cuda::rms_norm(out.get(), d_x.get(), d_w.get(), R, N, 1e-5f, nullptr);
    CHECK(nmse(out.download(), expected) < kReordered);
    CHECK(out.sentinels_intact());
    cuda::rms_norm(d_x.get(), d_x.get(), d_w.get(), R, N, 1e-5f, nullptr);  // out aliases x
    CHECK(nmse(d_x.download(), expected) < kReordered);
    CHECK(d_x.sentinels_intact());
  }
}

TEST_CASE("rope matches the reference in both layouts at large positions") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t T = 5, heads = 3, D = 10;
  std::vector<int64_t> positions = {0, 1, 17, 999, 4000};
  for (RopeLayout layout : {RopeLayout::HalfSplit, RopeLayout::Interleaved}) {
    for (double theta : {10000.0, 1000000.0}) {
      CAPTURE(int(layout));
      CAPTURE(theta);
      std::vector<float> x = random_vector(size_t(T * heads * D), 4);
      std::vector<float> expected = x;
      reference::rope(expected.data(), positions.data(), T, heads, D, theta, layout);
      DeviceArray<float> d_x(x);
      DeviceArray<int64_t> d_pos(positions);
      cuda::rope(d_x.get(), d_pos.get(), T, heads, D, theta, layout, nullptr);
      // angles up to 4000 rad: one ulp of inv_freq moves the angle by ~1e-4, hence 1e-6
      CHECK(nmse(d_x.download(), expected) < 1e-6);
      CHECK(d_x.sentinels_intact());
    }
  }
}

TEST_CASE("linear: cuBLAS (T > 1) and every GEMV version (T = 1) in f32, bf16 and f16") {
  SKIP_WITHOUT_CUDA_DEVICE();
  cublasHandle_t handle;
  JOURNEY_CUBLAS_CHECK(cuda::cublas().create(&handle));
  // (67, 45): odd, scalar loads; (256, 130): 16-byte loads; (4100, 9): x fills most of v3's shared memory
  for (auto [in, out] : {std::pair<int64_t, int64_t>{67, 45}, {256, 130}, {4100, 9}}) {
    for (DType type : {DType::F32, DType::BF16, DType::F16}) {
      for (bool with_bias : {false, true}) {
        CAPTURE(in);
        CAPTURE(out);
        CAPTURE(dtype_name(type));
        CAPTURE(with_bias);
        TestMatrix w = make_matrix(random_vector(size_t(out * in), 5, 0.05f), type);
        std::vector<float> bias = random_vector(size_t(out), 6);
        DeviceArray<float> d_bias(bias);
        for (int64_t T : {1, 3, 17}) {
          CAPTURE(T);
          std::vector<float> x = random_vector(size_t(T * in), 7);
          std::vector<float> expected(size_t(T * out));
          reference::linear(expected.data(), x.data(), w.reference.data(), with_bias ? bias.data() : nullptr, T, in, out);
          DeviceArray<float> d_x(x), y(size_t(T * out));
          DeviceArray<uint16_t> scratch(size_t(T * in));
          cuda::LinearContext context;
          context.cublas = handle;
          context.scratch = scratch.get();
          context.scratch_bytes = size_t(T * in) * 2;
          const double tolerance = T == 1 ? kReordered : type == DType::BF16 ? 1e-4 : type == DType::F16 ? 1e-5 : kReordered;
          cuda::linear(y.get(), d_x.get(), w.view(), with_bias ? d_bias.get() : nullptr, T, in, out, context);
          CHECK(nmse(y.download(), expected) < tolerance);
          CHECK(y.sentinels_intact());
          CHECK(scratch.sentinels_intact());
          if (T == 1) {
            for (int version : {1, 2, 3, 4}) {
              CAPTURE(version);
              DeviceArray<float> y_v(static_cast<size_t>(out));
              cuda::gemv(cuda::GemvVersion(version), y_v.get(), d_x.get(), w.view(),
                         with_bias ? d_bias.get() : nullptr, in, out, nullptr);
              CHECK(nmse(y_v.download(), expected) < kReordered);
              CHECK(y_v.sentinels_intact());
            }
          }
        }
      }
    }
  }
  cuda::cublas().destroy(handle);
}

TEST_CASE("softmax, swiglu, residual_add and the fused residual_add_rms_norm") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t R = 5, N = 1001;
  std::vector<float> x = random_vector(size_t(R * N), 8, 4.0f);
  {
    std::vector<float> expected = x;
    reference::softmax(expected.data(), R, N);
    DeviceArray<float> d_x(x);
    cuda::softmax(d_x.get(), R, N, nullptr);
    CHECK(nmse(d_x.download(), expected) < kReordered);
    CHECK(d_x.sentinels_intact());
  }
  const int64_t n = R * N;
  std::vector<float> a = random_vector(size_t(n), 9), b = random_vector(size_t(n), 10);
  {
    std::vector<float> expected(static_cast<size_t>(n));
    reference::swiglu(expected.data(), a.data(), b.data(), n);
    DeviceArray<float> d_a(a), d_b(b), out(static_cast<size_t>(n));
    cuda::swiglu(out.get(), d_a.get(), d_b.get(), n, nullptr);
    CHECK(nmse(out.download(), expected) < kExact);
    CHECK(out.sentinels_intact());
  }
  {
    std::vector<float> expected(static_cast<size_t>(n));
    reference::residual_add(expected.data(), a.data(), b.data(), n);
    DeviceArray<float> d_a(a), d_b(b);
    cuda::residual_add(d_a.get(), d_a.get(), d_b.get(), n, nullptr);  // out aliases a, as in the forward pass
    CHECK(d_a.download() == expected);
    CHECK(d_a.sentinels_intact());
  }
  {
    std::vector<float> w = random_vector(size_t(N), 11, 0.1f, 1.0f);
    std::vector<float> sum(static_cast<size_t>(n)), expected(static_cast<size_t>(n));
    reference::residual_add(sum.data(), a.data(), b.data(), n);
    reference::rms_norm(expected.data(), sum.data(), w.data(), R, N, 1e-6f);
    DeviceArray<float> d_x(a), d_b(b), d_w(w), out(static_cast<size_t>(n));
    cuda::residual_add_rms_norm(d_x.get(), out.get(), d_b.get(), d_w.get(), R, N, 1e-6f, nullptr);
    CHECK(d_x.download() == sum);
    CHECK(nmse(out.download(), expected) < kReordered);
    CHECK(d_x.sentinels_intact());
    CHECK(out.sentinels_intact());
  }
}

TEST_CASE("attention: causal GQA with history, scores and weights for the trace") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t H = 6, KVH = 2, D = 10;
  for (auto [T, start] : {std::pair<int64_t, int64_t>{7, 0}, {3, 5}, {1, 12}}) {
    CAPTURE(T);
    CAPTURE(start);
    const int64_t P = start + T;
    std::vector<float> q = random_vector(size_t(T * H * D), 12), k = random_vector(size_t(P * KVH * D), 13),
                       v = random_vector(size_t(P * KVH * D), 14);
    std::vector<float> ctx(size_t(T * H * D)), scores(size_t(H * T * P)), weights(size_t(H * T * P));
    reference::attention(ctx.data(), q.data(), k.data(), v.data(), T, start, H, KVH, D, scores.data(), weights.data());
    DeviceArray<float> d_q(q), d_k(k), d_v(v), d_ctx(ctx.size()), d_scores(scores.size()), d_weights(weights.size());
    cuda::attention(d_ctx.get(), d_q.get(), d_k.get(), d_v.get(), T, start, H, KVH, D, d_scores.get(), d_weights.get(),
                    nullptr);
    CHECK(nmse(d_ctx.download(), ctx) < kReordered);
    CHECK(nmse(d_scores.download(), scores) < kReordered);  // -inf must match -inf exactly
    CHECK(nmse(d_weights.download(), weights) < kReordered);
    CHECK(d_ctx.sentinels_intact());
    CHECK(d_scores.sentinels_intact());
    CHECK(d_weights.sentinels_intact());
  }
}

TEST_CASE("kv_cache_write and paged_attention through a shuffled block table") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t H = 4, KVH = 2, D = 8, block_size = 4, num_blocks = 9;
  const int64_t pool_floats = num_blocks * block_size * KVH * D;
  std::vector<int32_t> table = {7, 2, 5, 0, 8};  // covers positions [0, 20)
  std::vector<float> k_pool = random_vector(size_t(pool_floats), 15), v_pool = random_vector(size_t(pool_floats), 16);
  DeviceArray<float> d_k_pool(k_pool), d_v_pool(v_pool);
  DeviceArray<int32_t> d_table(table);
  // a prefill chunk at positions [9, 15), then one decode token at 15
  for (auto [T, start] : {std::pair<int64_t, int64_t>{6, 9}, {1, 15}}) {
    CAPTURE(T);
    CAPTURE(start);
    const int64_t P = start + T;
    std::vector<float> k = random_vector(size_t(T * KVH * D), 17 + uint32_t(T)), v = random_vector(size_t(T * KVH * D), 19);
    std::vector<float> q = random_vector(size_t(T * H * D), 21);
    reference::kv_cache_write(k_pool.data(), v_pool.data(), k.data(), v.data(), table.data(), T, start, block_size, KVH, D);
    DeviceArray<float> d_k(k), d_v(v), d_q(q);
    cuda::kv_cache_write(d_k_pool.get(), d_v_pool.get(), d_k.get(), d_v.get(), d_table.get(), T, start, block_size, KVH,
                         D, nullptr);
    CHECK(d_k_pool.download() == k_pool);  // a copy: must be exact, and touch only its slots
    CHECK(d_v_pool.download() == v_pool);
    CHECK(d_k_pool.sentinels_intact());
    std::vector<float> ctx(size_t(T * H * D)), weights(size_t(H * T * P));
    reference::paged_attention(ctx.data(), q.data(), k_pool.data(), v_pool.data(), table.data(), T, start, block_size, H, KVH,
                         D, nullptr, weights.data());
    DeviceArray<float> d_ctx(ctx.size()), d_weights(weights.size());
    cuda::paged_attention(d_ctx.get(), d_q.get(), d_k_pool.get(), d_v_pool.get(), d_table.get(), T, start, block_size,
                          H, KVH, D, nullptr, d_weights.get(), nullptr);
    CHECK(nmse(d_ctx.download(), ctx) < kReordered);
    CHECK(nmse(d_weights.download(), weights) < kReordered);
    CHECK(d_ctx.sentinels_intact());
  }
}

TEST_CASE("argmax_rows takes the lowest id among equal maxima") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t R = 4, V = 32003;
  std::vector<float> logits = random_vector(size_t(R * V), 22);
  logits[0 * V + 31000] = 50.0f, logits[0 * V + 7] = 50.0f;        // tie: 7 wins
  logits[1 * V + V - 1] = 60.0f;                                     // the very last id
  logits[2 * V + 0] = 70.0f;                                         // the very first id
  std::vector<int32_t> expected;
  for (int64_t r = 0; r < R; ++r)
    expected.push_back(argmax(std::span<const float>(logits.data() + r * V, size_t(V))));
  CHECK(expected[0] == 7);
  DeviceArray<float> d_logits(logits);
  DeviceArray<int32_t> ids(static_cast<size_t>(R));
  cuda::argmax_rows(ids.get(), d_logits.get(), R, V, nullptr);
  CHECK(ids.download() == expected);
  CHECK(ids.sentinels_intact());
}

TEST_CASE("sample_rows draws what the host processors draw for the same u") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t V = 5003;
  struct Case {
    double temperature;
    int top_k;
    double top_p;
  };
  const std::vector<Case> cases = {{0.0, 0, 1.0},  {1.0, 0, 1.0},  {0.7, 40, 1.0}, {0.7, 0, 0.9},
                                   {1.3, 50, 0.5}, {0.8, 1, 1.0},  {2.0, 5000, 0.95}};
  const std::vector<float> us = {0.0f, 0.13f, 0.5f, 0.77f, 0.999f};
  std::vector<float> logits;            // [R, V]
  std::vector<DeviceSampling> params;
  std::vector<int32_t> expected;
  int64_t R = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (float u : us) {
      std::vector<float> row = random_vector(size_t(V), 23 + uint32_t(R), 3.0f);
      // planted ties: top-k and top-p must rank equal probabilities by the lower id
      for (int j = 0; j < 8; ++j) row[size_t(100 + 37 * j)] = 9.0f;
      const Case& k = cases[c];
      int32_t id;
      if (k.temperature == 0.0) {
        id = argmax(row);
      } else {
        std::vector<float> scaled = row;
        apply_temperature(scaled, k.temperature);
        std::vector<float> probs = softmax(scaled);
        keep_top_k(probs, k.top_k);
        keep_top_p(probs, k.top_p);
        id = sample_from(probs, u);
      }
      expected.push_back(id);
      params.push_back({k.temperature, k.top_k, k.top_p, u});
      logits.insert(logits.end(), row.begin(), row.end());
      ++R;
    }
  }
  DeviceArray<float> d_logits(logits), d_probs(size_t(R * V));
  DeviceArray<int32_t> ids(static_cast<size_t>(R));
  std::vector<uint8_t> raw(params.size() * sizeof(DeviceSampling));
  std::memcpy(raw.data(), params.data(), raw.size());
  DeviceArray<uint8_t> d_params(raw);
  cuda::sample_rows(ids.get(), d_logits.get(), reinterpret_cast<const DeviceSampling*>(d_params.get()),
                    d_probs.get(), R, V, nullptr);
  const std::vector<int32_t> got = ids.download();
  for (int64_t r = 0; r < R; ++r) {
    CAPTURE(r);
    CAPTURE(params[size_t(r)].temperature);
    CAPTURE(params[size_t(r)].top_k);
    CAPTURE(params[size_t(r)].top_p);
    CAPTURE(params[size_t(r)].u);
    CHECK(got[size_t(r)] == expected[size_t(r)]);
  }
  CHECK(ids.sentinels_intact());
  CHECK(d_probs.sentinels_intact());
}

TEST_CASE("launchers reject bad shapes with journey::Error") {
  SKIP_WITHOUT_CUDA_DEVICE();
  CHECK_THROWS_AS(cuda::rope(nullptr, nullptr, 1, 1, 7, 10000.0, RopeLayout::HalfSplit, nullptr), Error);
  CHECK_THROWS_AS(cuda::attention(nullptr, nullptr, nullptr, nullptr, 1, 0, 6, 4, 8, nullptr, nullptr, nullptr), Error);
  CHECK_THROWS_AS(cuda::gemv(cuda::GemvVersion(3), nullptr, nullptr, {nullptr, DType::Q8_0}, nullptr, 32, 4, nullptr),
                  Error);
  CHECK_THROWS_AS(cuda::linear(nullptr, nullptr, {nullptr, DType::BF16}, nullptr, 4, 8, 8, cuda::LinearContext{}),
                  Error);
}

// ---- the fast path: grouped products, fused GEMVs, batched decode kernels ---------------------------

TEST_CASE("linear_shared_input: one launch over q/k/v-like targets equals one linear per target") {
  SKIP_WITHOUT_CUDA_DEVICE();
  cublasHandle_t handle;
  JOURNEY_CUBLAS_CHECK(cuda::cublas().create(&handle));
  cudaStream_t stream;  // blocking: ordered with the legacy stream the arrays are filled on
  JOURNEY_CUDA_CHECK(cudaStreamCreate(&stream));
  const std::vector<int64_t> outs = {45, 9, 9};  // odd sizes: a warp's two rows straddle targets
  for (int64_t in : {67, 256}) {
    for (DType type : {DType::F32, DType::BF16, DType::F16}) {
      for (int64_t T : {1, 3}) {
        for (bool early : {false, true}) {
          CAPTURE(in);
          CAPTURE(dtype_name(type));
          CAPTURE(T);
          CAPTURE(early);
          std::vector<TestMatrix> w;
          std::vector<std::unique_ptr<DeviceArray<float>>> ys, biases;
          std::vector<cuda::LinearTarget> targets;
          std::vector<std::vector<float>> expected, bias_values;
          const std::vector<float> x = random_vector(size_t(T * in), 31);
          for (size_t t = 0; t < outs.size(); ++t) {
            w.push_back(make_matrix(random_vector(size_t(outs[t] * in), 32 + uint32_t(t), 0.05f), type));
            bias_values.push_back(random_vector(size_t(outs[t]), 40 + uint32_t(t)));
            const bool with_bias = t != 1;  // a target without bias among two with
            expected.emplace_back(size_t(T * outs[t]));
            reference::linear(expected.back().data(), x.data(), w.back().reference.data(),
                        with_bias ? bias_values.back().data() : nullptr, T, in, outs[t]);
            ys.push_back(std::make_unique<DeviceArray<float>>(size_t(T * outs[t])));
            biases.push_back(std::make_unique<DeviceArray<float>>(bias_values.back()));
          }
          for (size_t t = 0; t < outs.size(); ++t)
            targets.push_back({ys[t]->get(), w[t].view(), t != 1 ? biases[t]->get() : nullptr, outs[t]});
          DeviceArray<float> d_x(x);
          DeviceArray<uint16_t> scratch(size_t(T * in));
          cuda::LinearContext context;
          context.cublas = handle;
          context.scratch = scratch.get();
          context.scratch_bytes = size_t(T * in) * 2;
          context.early_launch = early;
          context.stream = early ? stream : nullptr;  // a stream of our own: no early launch on the legacy one
          cuda::linear_shared_input(d_x.get(), T, in, cuda::LinearTargets(targets.data(), targets.size()), context);
          const double tolerance = T == 1 ? kReordered : type == DType::BF16 ? 1e-4 : type == DType::F16 ? 1e-5 : kReordered;
          for (size_t t = 0; t < outs.size(); ++t) {
            CAPTURE(t);
            CHECK(nmse(ys[t]->download(), expected[t]) < tolerance);
            CHECK(ys[t]->sentinels_intact());
          }
        }
      }
    }
  }
  cudaStreamDestroy(stream);
  cuda::cublas().destroy(handle);
}

TEST_CASE("fused GEMVs equal the unfused kernels they replace, and the reference") {
  SKIP_WITHOUT_CUDA_DEVICE();
  // (E, F) = (67, 45): scalar loads; (256, 136): 16-byte loads, F not a multiple of the 16 rows of a block
  for (auto [E, F] : {std::pair<int64_t, int64_t>{67, 45}, {256, 136}}) {
    for (DType type : {DType::F32, DType::BF16}) {
      for (bool early : {false, true}) {
        CAPTURE(E);
        CAPTURE(F);
        CAPTURE(dtype_name(type));
        CAPTURE(early);
        const float eps = 1e-5f;
        cudaStream_t stream;  // blocking: ordered with the legacy stream of the unfused kernels
        JOURNEY_CUDA_CHECK(cudaStreamCreate(&stream));
        cuda::LinearContext context;
        context.early_launch = early;
        context.stream = stream;
        const std::vector<float> x = random_vector(static_cast<size_t>(E), 50, 2.0f), norm = random_vector(static_cast<size_t>(E), 51, 0.1f, 1.0f);
        DeviceArray<float> d_x(x), d_norm(norm);
        std::vector<float> xn(static_cast<size_t>(E));  // the reference's normalized input
        reference::rms_norm(xn.data(), x.data(), norm.data(), 1, E, eps);
        DeviceArray<float> d_xn(static_cast<size_t>(E));
        cuda::rms_norm(d_xn.get(), d_x.get(), d_norm.get(), 1, E, eps, nullptr);

        // rms_norm_linear_shared_input vs rms_norm + linear_shared_input
        TestMatrix wq = make_matrix(random_vector(size_t(F * E), 52, 0.05f), type);
        TestMatrix wk = make_matrix(random_vector(size_t(9 * E), 53, 0.05f), type);
        DeviceArray<float> q_fused(static_cast<size_t>(F)), k_fused(9), q_plain(static_cast<size_t>(F)), k_plain(9);
        const cuda::LinearTarget fused_targets[] = {{q_fused.get(), wq.view(), nullptr, F}, {k_fused.get(), wk.view(), nullptr, 9}};
        const cuda::LinearTarget plain_targets[] = {{q_plain.get(), wq.view(), nullptr, F}, {k_plain.get(), wk.view(), nullptr, 9}};
        cuda::rms_norm_linear_shared_input(d_x.get(), d_norm.get(), eps, E, fused_targets, context);
        cuda::linear_shared_input(d_xn.get(), 1, E, plain_targets, context);
        std::vector<float> q_ref(static_cast<size_t>(F));
        reference::linear(q_ref.data(), xn.data(), wq.reference.data(), nullptr, 1, E, F);
        const std::vector<float> q_f = q_fused.download(), q_p = q_plain.download();
        CHECK(nmse(q_f, q_p) < 1e-12);
        CHECK(nmse(k_fused.download(), k_plain.download()) < 1e-12);
        CHECK(nmse(q_f, q_ref) < kReordered);
        if (q_f != q_p) MESSAGE("rms_norm_linear_shared_input differs from the unfused pair in the last bits");
        CHECK(q_fused.sentinels_intact());
        CHECK(k_fused.sentinels_intact());

        // rms_norm_swiglu vs rms_norm + linear_shared_input(gate, up) + swiglu
        TestMatrix wg = make_matrix(random_vector(size_t(F * E), 54, 0.05f), type);
        TestMatrix wu = make_matrix(random_vector(size_t(F * E), 55, 0.05f), type);
        DeviceArray<float> act_fused(static_cast<size_t>(F)), gate(static_cast<size_t>(F)), up(static_cast<size_t>(F)), act_plain(static_cast<size_t>(F));
        cuda::rms_norm_swiglu(act_fused.get(), d_x.get(), d_norm.get(), eps, wg.view(), wu.view(), E, F, context);
        const cuda::LinearTarget gate_up[] = {{gate.get(), wg.view(), nullptr, F}, {up.get(), wu.view(), nullptr, F}};
        cuda::linear_shared_input(d_xn.get(), 1, E, gate_up, context);
        cuda::swiglu(act_plain.get(), gate.get(), up.get(), F, nullptr);
        std::vector<float> g_ref(static_cast<size_t>(F)), u_ref(static_cast<size_t>(F)), act_ref(static_cast<size_t>(F));
        reference::linear(g_ref.data(), xn.data(), wg.reference.data(), nullptr, 1, E, F);
        reference::linear(u_ref.data(), xn.data(), wu.reference.data(), nullptr, 1, E, F);
        reference::swiglu(act_ref.data(), g_ref.data(), u_ref.data(), F);
        CHECK(nmse(act_fused.download(), act_plain.download()) < 1e-12);
        CHECK(nmse(act_fused.download(), act_ref) < kReordered);
        CHECK(act_fused.sentinels_intact());

        // linear_residual_add vs linear + residual_add: x += input W^T with W [E, F]
        TestMatrix wd = make_matrix(random_vector(size_t(E * F), 56, 0.05f), type);
        const std::vector<float> input = random_vector(static_cast<size_t>(F), 57);
        DeviceArray<float> d_input(input), resid_fused(x), resid_plain(x), out(static_cast<size_t>(E));
        cuda::linear_residual_add(resid_fused.get(), d_input.get(), wd.view(), F, E, context);
        cuda::linear(out.get(), d_input.get(), wd.view(), nullptr, 1, F, E, context);
        cuda::residual_add(resid_plain.get(), resid_plain.get(), out.get(), E, nullptr);
        std::vector<float> proj(static_cast<size_t>(E)), resid_ref(static_cast<size_t>(E));
        reference::linear(proj.data(), input.data(), wd.reference.data(), nullptr, 1, F, E);
        reference::residual_add(resid_ref.data(), x.data(), proj.data(), E);
        CHECK(nmse(resid_fused.download(), resid_plain.download()) < 1e-12);
        CHECK(nmse(resid_fused.download(), resid_ref) < kReordered);
        CHECK(resid_fused.sentinels_intact());
        JOURNEY_CUDA_CHECK(cudaStreamDestroy(stream));
      }
    }
  }
}

namespace {

// A decode batch on the device: S sequences at the given positions, tables padded to `stride`.
struct TestDecodeBatch {
  std::vector<int64_t> positions;
  std::vector<std::vector<int32_t>> tables;
  int64_t stride = 0;
  std::unique_ptr<DeviceArray<int64_t>> d_positions;
  std::unique_ptr<DeviceArray<int32_t>> d_tables;
  cuda::DecodeBatch view() const {
    return {d_positions->get(), d_tables->get(), stride, int64_t(positions.size())};
  }
};

// Sequences of the given context lengths over a shuffled pool of num_blocks blocks (disjoint tables).
TestDecodeBatch make_decode_batch(const std::vector<int64_t>& lengths, int64_t block_size, int64_t num_blocks,
                                  uint32_t seed) {
  TestDecodeBatch b;
  std::vector<int32_t> free_blocks(static_cast<size_t>(num_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), std::mt19937(seed));
  size_t next = 0;
  for (int64_t length : lengths) {
    b.positions.push_back(length - 1);
    std::vector<int32_t> table;
    for (int64_t p = 0; p < length; p += block_size) table.push_back(free_blocks.at(next++));
    b.stride = std::max<int64_t>(b.stride, int64_t(table.size()) + 1);  // one padding entry at least
    b.tables.push_back(table);
  }
  std::vector<int32_t> padded;
  for (const auto& t : b.tables) {
    padded.insert(padded.end(), t.begin(), t.end());
    padded.insert(padded.end(), size_t(b.stride) - t.size(), 0);
  }
  b.d_positions = std::make_unique<DeviceArray<int64_t>>(b.positions);
  b.d_tables = std::make_unique<DeviceArray<int32_t>>(padded);
  return b;
}

}  // namespace

TEST_CASE("rope_kv_cache_write_decode equals q/k norm, rope and kv_cache_write per sequence") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t H = 4, KVH = 2, block_size = 4, num_blocks = 40;
  for (int64_t D : {6, 16, 64}) {
    for (RopeLayout layout : {RopeLayout::HalfSplit, RopeLayout::Interleaved}) {
      for (bool qk_norm : {false, true}) {
        CAPTURE(D);
        CAPTURE(int(layout));
        CAPTURE(qk_norm);
        TestDecodeBatch batch = make_decode_batch({1, 37, 9}, block_size, num_blocks, 60);
        const int64_t S = 3, pool = num_blocks * block_size * KVH * D;
        std::vector<float> q = random_vector(size_t(S * H * D), 61), k = random_vector(size_t(S * KVH * D), 62),
                           v = random_vector(size_t(S * KVH * D), 63);
        std::vector<float> k_pool = random_vector(static_cast<size_t>(pool), 64), v_pool = random_vector(static_cast<size_t>(pool), 65);
        const std::vector<float> q_norm = random_vector(static_cast<size_t>(D), 66, 0.1f, 1.0f), k_norm = random_vector(static_cast<size_t>(D), 67, 0.1f, 1.0f);
        DeviceArray<float> d_q(q), d_k(k), d_v(v), d_k_pool(k_pool), d_v_pool(v_pool), d_qn(q_norm), d_kn(k_norm);
        cuda::rope_kv_cache_write_decode(d_q.get(), d_k.get(), d_v.get(), d_k_pool.get(), d_v_pool.get(),
                                         qk_norm ? d_qn.get() : nullptr, qk_norm ? d_kn.get() : nullptr, 1e-6f,
                                         batch.view(), block_size, H, KVH, D, 1e6, layout, nullptr);
        for (int64_t s = 0; s < S; ++s) {
          float* qs = q.data() + s * H * D;
          float* ks = k.data() + s * KVH * D;
          if (qk_norm) {
            reference::rms_norm(qs, qs, q_norm.data(), H, D, 1e-6f);
            reference::rms_norm(ks, ks, k_norm.data(), KVH, D, 1e-6f);
          }
          const int64_t position = batch.positions[static_cast<size_t>(s)];
          reference::rope(qs, &position, 1, H, D, 1e6, layout);
          reference::rope(ks, &position, 1, KVH, D, 1e6, layout);
          reference::kv_cache_write(k_pool.data(), v_pool.data(), ks, v.data() + s * KVH * D, batch.tables[static_cast<size_t>(s)].data(), 1,
                              position, block_size, KVH, D);
        }
        CHECK(nmse(d_q.download(), q) < 1e-6);  // rope's bound (angles of hundreds of radians)
        CHECK(nmse(d_k_pool.download(), k_pool) < 1e-6);
        CHECK(d_v_pool.download() == v_pool);  // v is a copy: exact, and only into its slots
        CHECK(d_q.sentinels_intact());
        CHECK(d_k_pool.sentinels_intact());
        CHECK(d_v_pool.sentinels_intact());
      }
    }
  }
}

TEST_CASE("paged_attention_decode equals paged_attention at T = 1 for every sequence of a batch") {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t H = 6, KVH = 2, block_size = 16, num_blocks = 80;
  // contexts of 1, 2 tiles (+ a partial tile), and a block boundary; head dims 6 (scalar path), 8, 64, 128
  for (int64_t D : {6, 8, 64, 128}) {
    CAPTURE(D);
    TestDecodeBatch batch = make_decode_batch({1, 600, 32, 257}, block_size, num_blocks, 70);
    const int64_t S = 4, pool = num_blocks * block_size * KVH * D;
    const std::vector<float> q = random_vector(size_t(S * H * D), 71, 0.5f);
    const std::vector<float> k_pool = random_vector(static_cast<size_t>(pool), 72), v_pool = random_vector(static_cast<size_t>(pool), 73);
    std::vector<float> expected(size_t(S * H * D));
    for (int64_t s = 0; s < S; ++s) {
      const int64_t start = batch.positions[static_cast<size_t>(s)];
      reference::paged_attention(expected.data() + s * H * D, q.data() + s * H * D, k_pool.data(), v_pool.data(),
                           batch.tables[static_cast<size_t>(s)].data(), 1, start, block_size, H, KVH, D, nullptr, nullptr);
    }
    DeviceArray<float> d_q(q), d_k_pool(k_pool), d_v_pool(v_pool), d_ctx(expected.size());
    cuda::paged_attention_decode(d_ctx.get(), d_q.get(), d_k_pool.get(), d_v_pool.get(), batch.view(), block_size, H,
                                 KVH, D, nullptr);
    CHECK(nmse(d_ctx.download(), expected) < kReordered);
    CHECK(d_ctx.sentinels_intact());
  }
}

TEST_CASE("quantized weights: rows, GEMV in every fused form and GEMM against the reference dequantizers") {
  SKIP_WITHOUT_CUDA_DEVICE();
  cublasHandle_t handle;
  JOURNEY_CUBLAS_CHECK(cuda::cublas().create(&handle));
  const int64_t in = 512, out = 45, T = 3;  // rows of 2 K super-blocks or 16 legacy blocks; odd row count
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q6_K}) {
    CAPTURE(dtype_name(type));
    // blocks made by the reference quantizer; W = what the reference dequantizer reads from them
    auto quantized = [&](uint32_t seed, std::vector<float>* values) {
      const std::vector<float> source = random_vector(static_cast<size_t>(out * in), seed, 0.05f);
      std::vector<uint8_t> blocks(static_cast<size_t>(dtype_bytes_for(type, out * in)));
      quant::quantize(type, source.data(), blocks.data(), out * in);
      values->resize(source.size());
      quant::dequantize(type, blocks.data(), values->data(), out * in);
      return blocks;
    };
    std::vector<float> W, W2;
    DeviceArray<uint8_t> d_w(quantized(80, &W)), d_w2(quantized(81, &W2));
    const cuda::WeightView view{d_w.get(), type}, view2{d_w2.get(), type};

    // embedding rows: the same dequantization, bit for bit
    const std::vector<int32_t> tokens = {0, 44, 7, 7, 30};
    std::vector<float> rows(tokens.size() * static_cast<size_t>(in));
    reference::embedding_gather(rows.data(), W.data(), tokens.data(), int64_t(tokens.size()), in);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_rows(rows.size());
    cuda::embedding_gather(d_rows.get(), view, d_tokens.get(), int64_t(tokens.size()), in, nullptr);
    CHECK(d_rows.download() == rows);
    CHECK(d_rows.sentinels_intact());

    // linear: T = 1 dequantizes inside the GEMV, T = 3 into a bf16 scratch for cuBLAS
    const std::vector<float> x = random_vector(static_cast<size_t>(T * in), 82), bias = random_vector(static_cast<size_t>(out), 83);
    DeviceArray<float> d_x(x), d_bias(bias);
    DeviceArray<uint16_t> scratch(static_cast<size_t>(T * in)), weight_scratch(static_cast<size_t>(out * in));
    cuda::LinearContext context;
    context.cublas = handle;
    context.scratch = scratch.get(), context.scratch_bytes = static_cast<size_t>(T * in) * 2;
    context.weight_scratch = weight_scratch.get(), context.weight_scratch_bytes = static_cast<size_t>(out * in) * 2;
    for (int64_t t : {int64_t(1), T}) {
      CAPTURE(t);
      std::vector<float> expected(static_cast<size_t>(t * out));
      reference::linear(expected.data(), x.data(), W.data(), bias.data(), t, in, out);
      DeviceArray<float> y(expected.size());
      cuda::linear(y.get(), d_x.get(), view, d_bias.get(), t, in, out, context);
      // T = 3: weights and activations rounded to bf16 for the tensor cores
      CHECK(nmse(y.download(), expected) < (t == 1 ? kReordered : 1e-4));
      CHECK(y.sentinels_intact());
      CHECK(weight_scratch.sentinels_intact());
    }

    // the fused forms: norm + two products (one quantized, one bf16: two launches), gate/up + SwiGLU,
    // projection + residual add
    const std::vector<float> norm = random_vector(static_cast<size_t>(in), 84, 0.1f, 1.0f), x1(x.begin(), x.begin() + in);
    std::vector<float> xn(static_cast<size_t>(in));
    reference::rms_norm(xn.data(), x1.data(), norm.data(), 1, in, 1e-5f);
    DeviceArray<float> d_norm(norm);
    TestMatrix other = make_matrix(random_vector(static_cast<size_t>(9 * in), 85, 0.05f), DType::BF16);
    DeviceArray<float> q(static_cast<size_t>(out)), k(9);
    const cuda::LinearTarget mixed[] = {{q.get(), view, nullptr, out}, {k.get(), other.view(), nullptr, 9}};
    cuda::rms_norm_linear_shared_input(d_x.get(), d_norm.get(), 1e-5f, in, mixed, context);
    std::vector<float> q_ref(static_cast<size_t>(out)), k_ref(9);
    reference::linear(q_ref.data(), xn.data(), W.data(), nullptr, 1, in, out);
    reference::linear(k_ref.data(), xn.data(), other.reference.data(), nullptr, 1, in, 9);
    CHECK(nmse(q.download(), q_ref) < kReordered);
    CHECK(nmse(k.download(), k_ref) < kReordered);

    DeviceArray<float> act(static_cast<size_t>(out));
    cuda::rms_norm_swiglu(act.get(), d_x.get(), d_norm.get(), 1e-5f, view, view2, in, out, context);
    std::vector<float> gate(static_cast<size_t>(out)), up(static_cast<size_t>(out)), act_ref(static_cast<size_t>(out));
    reference::linear(gate.data(), xn.data(), W.data(), nullptr, 1, in, out);
    reference::linear(up.data(), xn.data(), W2.data(), nullptr, 1, in, out);
    reference::swiglu(act_ref.data(), gate.data(), up.data(), out);
    CHECK(nmse(act.download(), act_ref) < kReordered);
    CHECK(act.sentinels_intact());

    const std::vector<float> resid = random_vector(static_cast<size_t>(out), 86);
    DeviceArray<float> d_resid(resid);
    cuda::linear_residual_add(d_resid.get(), d_x.get(), view, in, out, context);
    std::vector<float> proj(static_cast<size_t>(out)), resid_ref(static_cast<size_t>(out));
    reference::linear(proj.data(), x1.data(), W.data(), nullptr, 1, in, out);
    reference::residual_add(resid_ref.data(), resid.data(), proj.data(), out);
    CHECK(nmse(d_resid.download(), resid_ref) < kReordered);
  }
  cuda::cublas().destroy(handle);
}
