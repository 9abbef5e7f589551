// Each reference op against the scalar loops of scalar_ops.h (plain loops accumulating in double,
// written from the formulas, not from ops.cpp), with random inputs and odd sizes.
// Tolerance: NMSE 1e-10 for f32 ops against double-accumulated loops (f32 rounding alone gives
// ~1e-14; 1e-10 still catches any wrong index, which gives NMSE ~1).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "reference/ops.h"
#include "scalar_ops.h"

using namespace journey;
constexpr double kOpTolerance = 1e-10;
constexpr float kSentinel = 12345.0f;

TEST_CASE("linear matches the scalar loop for odd sizes, with and without bias") {
  for (int64_t T : {1, 2, 3, 17, 33}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{37, 53}, {64, 5}, {19, 211}, {1100, 37}}) {
      for (bool with_bias : {false, true}) {
        CAPTURE(T); CAPTURE(in); CAPTURE(out); CAPTURE(with_bias);
        auto x = scalar::random_vector(size_t(T * in), 1);
        auto w = scalar::random_vector(size_t(out * in), 2);
        auto b = scalar::random_vector(size_t(out), 3);
        std::vector<float> y(size_t(T * out) + 8, kSentinel);  // sentinels after the output catch stray writes
        reference::linear(y.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, T, in, out);
        auto expected = scalar::linear(x, w, with_bias ? b.data() : nullptr, T, in, out);
        CHECK(scalar::nmse(y.data(), expected.data(), expected.size()) < kOpTolerance);
        for (size_t i = expected.size(); i < y.size(); ++i) CHECK(y[i] == kSentinel);
      }
    }
  }
}

TEST_CASE("rms_norm matches the scalar loop, also in place") {
  const int64_t R = 5, N = 67;
  auto x = scalar::random_vector(size_t(R * N), 4, 3.0f);
  auto w = scalar::random_vector(size_t(N), 5, 0.1f, 1.0f);
  std::vector<float> y(size_t(R * N));
  reference::rms_norm(y.data(), x.data(), w.data(), R, N, 1e-5f);
  auto expected = scalar::rms_norm(x, w, R, N, 1e-5);
  CHECK(scalar::nmse(y, expected) < kOpTolerance);
  reference::rms_norm(x.data(), x.data(), w.data(), R, N, 1e-5f);
  CHECK(scalar::nmse(x, expected) < kOpTolerance);
}

TEST_CASE("rope matches the scalar formula in both layouts") {
  const int64_t T = 6, heads = 3, D = 22;
  std::vector<int64_t> positions = {0, 1, 2, 17, 100, 255};
  for (auto layout : {RopeLayout::HalfSplit, RopeLayout::Interleaved}) {
    for (double theta : {10000.0, 1000000.0}) {
      CAPTURE(int(layout)); CAPTURE(theta);
      auto x = scalar::random_vector(size_t(T * heads * D), 6);
      auto expected = scalar::rope(x, positions, heads, D, theta, layout);
      reference::rope(x.data(), positions.data(), T, heads, D, theta, layout);
      // f32 angles (as HF computes them) at position 255 differ from double ones by ~1e-5 rad
      CHECK(scalar::nmse(x, expected) < 1e-9);
    }
  }
}

TEST_CASE("rope position 0 is the identity and the layouts differ elsewhere") {
  const int64_t heads = 2, D = 8;
  auto x = scalar::random_vector(size_t(heads * D), 7);
  auto a = x, b = x;
  int64_t zero = 0, five = 5;
  reference::rope(a.data(), &zero, 1, heads, D, 10000.0, RopeLayout::HalfSplit);
  CHECK(scalar::nmse(a, x) == 0.0);
  reference::rope(a.data(), &five, 1, heads, D, 10000.0, RopeLayout::HalfSplit);
  reference::rope(b.data(), &five, 1, heads, D, 10000.0, RopeLayout::Interleaved);
  CHECK(scalar::nmse(a, b) > 1e-3);
}

TEST_CASE("rope: interleaved on x equals half-split on x permuted the way HF permutes q/k weights") {
  // HF conversion (convert_llama_weights_to_hf.py permute): within a head, half-split index
  // c * D/2 + i holds interleaved index 2i + c.
  const int64_t T = 4, heads = 3, D = 16;
  std::vector<int64_t> positions = {3, 9, 40, 77};
  auto meta = scalar::random_vector(size_t(T * heads * D), 8);
  std::vector<float> hf(meta.size());
  auto to_hf = [&](const std::vector<float>& m, std::vector<float>& h) {
    for (int64_t r = 0; r < T * heads; ++r)
      for (int64_t i = 0; i < D / 2; ++i)
        for (int64_t c = 0; c < 2; ++c) h[r * D + c * D / 2 + i] = m[r * D + 2 * i + c];
  };
  to_hf(meta, hf);
  reference::rope(meta.data(), positions.data(), T, heads, D, 10000.0, RopeLayout::Interleaved);
  reference::rope(hf.data(), positions.data(), T, heads, D, 10000.0, RopeLayout::HalfSplit);
  std::vector<float> meta_as_hf(meta.size());
  to_hf(meta, meta_as_hf);
  CHECK(scalar::nmse(hf, meta_as_hf) == 0.0);  // the same float operations, only reordered
}

TEST_CASE("softmax, swiglu, residual_add and embedding_gather match the scalar loops") {
  auto x = scalar::random_vector(3 * 29, 9, 4.0f);
  auto expected = x;
  for (int r = 0; r < 3; ++r) scalar::softmax(expected.data() + r * 29, 29);
  reference::softmax(x.data(), 3, 29);
  CHECK(scalar::nmse(x, expected) < kOpTolerance);
  for (int r = 0; r < 3; ++r) CHECK(std::accumulate(x.begin() + r * 29, x.begin() + (r + 1) * 29, 0.0) == doctest::Approx(1.0));

  auto g = scalar::random_vector(101, 10, 3.0f), u = scalar::random_vector(101, 11);
  std::vector<float> act(101), act_expected(101);
  reference::swiglu(act.data(), g.data(), u.data(), 101);
  for (int i = 0; i < 101; ++i) act_expected[i] = scalar::silu_times(g[i], u[i]);
  CHECK(scalar::nmse(act, act_expected) < kOpTolerance);

  std::vector<float> sum(101), sum_expected(101);
  reference::residual_add(sum.data(), g.data(), u.data(), 101);
  for (int i = 0; i < 101; ++i) sum_expected[i] = g[i] + u[i];
  CHECK(sum == sum_expected);

  const int64_t V = 13, E = 7;
  auto table = scalar::random_vector(size_t(V * E), 12);
  std::vector<int32_t> tokens = {12, 0, 5, 5};
  std::vector<float> emb(tokens.size() * E);
  reference::embedding_gather(emb.data(), table.data(), tokens.data(), int64_t(tokens.size()), E);
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t e = 0; e < E; ++e) CHECK(emb[t * E + e] == table[tokens[t] * E + e]);
}

TEST_CASE("attention matches the naive loop: causal mask, scores, weights, GQA, with a cached prefix") {
  const int64_t T = 5, start = 3, H = 6, KVH = 2, D = 10, P = start + T;
  auto q = scalar::random_vector(size_t(T * H * D), 13);
  auto k = scalar::random_vector(size_t(P * KVH * D), 14);
  auto v = scalar::random_vector(size_t(P * KVH * D), 15);
  auto expected = scalar::attention(q, k, v, T, start, H, KVH, D);
  {
    std::vector<float> context(size_t(T * H * D)), scores(size_t(H * T * P)), weights(size_t(H * T * P));
    reference::attention(context.data(), q.data(), k.data(), v.data(), T, start, H, KVH, D, scores.data(), weights.data());
    CHECK(scalar::nmse(context, expected.context) < kOpTolerance);
    CHECK(scalar::nmse(scores, expected.scores) < kOpTolerance);
    CHECK(scalar::nmse(weights, expected.weights) < kOpTolerance);
    // the mask: query t (position start + t) sees exactly positions 0..start+t
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t p = 0; p < P; ++p) {
          const bool masked = p > start + t;
          CHECK(std::isinf(scores[(h * T + t) * P + p]) == masked);
          CHECK((weights[(h * T + t) * P + p] == 0.0f) == masked);
        }
  }
}

TEST_CASE("GQA equals ordinary multi-head attention with each kv head repeated H/KVH times") {
  const int64_t T = 4, start = 2, H = 8, KVH = 2, D = 6, P = start + T, group = H / KVH;
  auto q = scalar::random_vector(size_t(T * H * D), 16);
  auto k = scalar::random_vector(size_t(P * KVH * D), 17);
  auto v = scalar::random_vector(size_t(P * KVH * D), 18);
  std::vector<float> k_full(size_t(P * H * D)), v_full(size_t(P * H * D));  // [P, H, D]
  for (int64_t p = 0; p < P; ++p)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        k_full[(p * H + h) * D + d] = k[(p * KVH + h / group) * D + d];
        v_full[(p * H + h) * D + d] = v[(p * KVH + h / group) * D + d];
      }
  std::vector<float> gqa(size_t(T * H * D)), mha(size_t(T * H * D));
  reference::attention(gqa.data(), q.data(), k.data(), v.data(), T, start, H, KVH, D, nullptr, nullptr);
  reference::attention(mha.data(), q.data(), k_full.data(), v_full.data(), T, start, H, H, D, nullptr, nullptr);
  CHECK(scalar::nmse(gqa, mha) == 0.0);
}

TEST_CASE("paged attention through a scattered block table equals contiguous attention") {
  const int64_t T = 7, start = 6, H = 4, KVH = 2, D = 8, P = start + T, block_size = 4, num_blocks = 9;
  auto q = scalar::random_vector(size_t(T * H * D), 19);
  auto k = scalar::random_vector(size_t(P * KVH * D), 20);
  auto v = scalar::random_vector(size_t(P * KVH * D), 21);
  std::vector<int32_t> table = {7, 2, 5, 0};  // 13 positions need 4 blocks of 4, none in order
  const int64_t slot_floats = KVH * D;
  std::vector<float> k_pool(size_t(num_blocks * block_size * slot_floats), kSentinel);
  std::vector<float> v_pool = k_pool;
  // the prefix [0, start) as an earlier step would have left it, then this step's rows
  reference::kv_cache_write(k_pool.data(), v_pool.data(), k.data(), v.data(), table.data(), start, 0, block_size, KVH, D);
  reference::kv_cache_write(k_pool.data(), v_pool.data(), k.data() + start * slot_floats, v.data() + start * slot_floats,
                      table.data(), T, start, block_size, KVH, D);
  // slots outside the table's blocks are untouched
  for (int32_t b : {1, 3, 4, 6, 8})
    for (int64_t i = 0; i < block_size * slot_floats; ++i) CHECK(k_pool[b * block_size * slot_floats + i] == kSentinel);

  std::vector<float> paged(size_t(T * H * D)), contiguous(size_t(T * H * D));
  std::vector<float> paged_w(size_t(H * T * P)), contiguous_w(size_t(H * T * P));
  reference::paged_attention(paged.data(), q.data(), k_pool.data(), v_pool.data(), table.data(), T, start, block_size, H, KVH,
                       D, nullptr, paged_w.data());
  reference::attention(contiguous.data(), q.data(), k.data(), v.data(), T, start, H, KVH, D, nullptr, contiguous_w.data());
  CHECK(scalar::nmse(paged, contiguous) == 0.0);
  CHECK(scalar::nmse(paged_w, contiguous_w) == 0.0);
}
