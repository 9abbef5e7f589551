// The fast CPU ops that have no reference twin, or whose speed machinery needs its own checks:
// linear() across thread counts (every row block computed once, also with a smaller OpenMP team),
// linear_shared_input() bit-equal to one linear() per target, one-token products on stored types
// bit-equal across thread counts (work stealing) and their timer, and the small-batch kernel of
// cpu/gemm.h on every instruction set this CPU runs. Every op against its reference twin is in
// tests/backends/test_ops.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "cpu/gemm.h"
#include "cpu/ops.h"
#include "quant/quantize.h"
#include "reference/scalar_ops.h"

using namespace journey;
constexpr double kOpTolerance = 1e-10;
constexpr float kSentinel = 12345.0f;

TEST_CASE("linear matches the scalar loop for odd sizes, with and without bias, for 1..3 threads") {
  // T up to 16 runs the kernel of gemm.cpp, more tokens Eigen (the kernel on its own is tested
  // for all T below).
  for (int64_t T : {1, 2, 3, 7, 16, 17, 33, 128}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{37, 53}, {64, 5}, {19, 211}, {1100, 37}}) {
      for (int threads : {1, 2, 3}) {
        for (bool with_bias : {false, true}) {
          CAPTURE(T); CAPTURE(in); CAPTURE(out); CAPTURE(threads); CAPTURE(with_bias);
          auto x = scalar::random_vector(size_t(T * in), 1);
          auto w = scalar::random_vector(size_t(out * in), 2);
          auto b = scalar::random_vector(size_t(out), 3);
          std::vector<float> y(size_t(T * out) + 8, kSentinel);  // sentinels after the output catch stray writes
          cpu::linear(y.data(), x.data(), cpu::WeightView{w.data()}, with_bias ? b.data() : nullptr, T, in, out, threads);
          auto expected = scalar::linear(x, w, with_bias ? b.data() : nullptr, T, in, out);
          CHECK(scalar::nmse(y.data(), expected.data(), expected.size()) < kOpTolerance);
          for (size_t i = expected.size(); i < y.size(); ++i) CHECK(y[i] == kSentinel);
        }
      }
    }
  }
}

TEST_CASE("linear_shared_input gives exactly what one linear() per target gives") {
  // Targets of different widths (one narrower than a 16-row block, so it is not split at all),
  // with and without bias; bit-for-bit equal because every block goes to the same thread index
  // and runs the same code as in linear().
  for (int64_t T : {1, 2, 16, 33}) {
    for (int threads : {1, 2, 3}) {
      CAPTURE(T); CAPTURE(threads);
      const int64_t in = 37;
      const std::vector<int64_t> outs = {53, 9, 211};
      auto x = scalar::random_vector(size_t(T * in), 11);
      std::vector<std::vector<float>> weights, biases, together, alone;
      std::vector<cpu::LinearTarget> targets;
      for (size_t i = 0; i < outs.size(); ++i) {
        weights.push_back(scalar::random_vector(size_t(outs[i] * in), 20 + int(i)));
        biases.push_back(scalar::random_vector(size_t(outs[i]), 30 + int(i)));
        together.emplace_back(size_t(T * outs[i]) + 8, kSentinel);
        alone.emplace_back(size_t(T * outs[i]) + 8, kSentinel);
      }
      for (size_t i = 0; i < outs.size(); ++i)
        targets.push_back({together[i].data(), cpu::WeightView{weights[i].data()}, i == 1 ? nullptr : biases[i].data(), outs[i]});
      cpu::linear_shared_input(x.data(), T, in, targets, threads);
      for (size_t i = 0; i < outs.size(); ++i) {
        CAPTURE(i);
        cpu::linear(alone[i].data(), x.data(), cpu::WeightView{weights[i].data()}, i == 1 ? nullptr : biases[i].data(), T,
                    in, outs[i], threads);
        CHECK(together[i] == alone[i]);  // includes the sentinels after the outputs
        CHECK(together[i][size_t(T * outs[i])] == kSentinel);
      }
    }
  }
}

TEST_CASE("decode and prefill products: every row once, bit-equal for 1..3 threads (work stealing)") {
  // Decode shares the rows of a product by work stealing (ops.cpp, StealingShares): chunks of 16
  // rows of each thread's block, a finished thread taking the others' last chunks. Every row must
  // be computed once and, as each row is one dot product, come out the same whoever computed it.
  // Targets of 9 (one thread only), 53, 211 and 700 rows, not multiples of a chunk. One
  // token on every stored type but f32; batched decode (3, 7, 16 tokens: the token-lane kernels
  // and, below their threshold, the fused dot per token) on the block types.
  const int64_t in = 256;
  const std::vector<int64_t> outs = {53, 9, 211, 700};
  // Prefill (17 and 40 tokens) shares its rows the same way in chunks of 96 (whole panels of every
  // prefill kernel) on every type, f32 included; each run is repeated, as which thread takes which
  // chunk changes from run to run.
  for (int64_t T : {1, 3, 7, 16, 17, 40})
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const bool prefill = T > 16;
    if (!prefill && T > 1 && !dtype_is_quantized(type)) continue;  // (f16, bf16 batches keep the static split)
    if (!prefill && type == DType::F32) continue;                    // (f32 decode: Eigen's GEMV, static)
    CAPTURE(T); CAPTURE(dtype_name(type));
    auto x = scalar::random_vector(size_t(T * in), 51);
    std::vector<std::vector<uint8_t>> stored;
    for (size_t i = 0; i < outs.size(); ++i) {
      auto w = scalar::random_vector(size_t(outs[i] * in), 60 + int(i));
      const size_t row_bytes = size_t(dtype_bytes_for(type, in));
      stored.emplace_back(size_t(outs[i]) * row_bytes);
      for (int64_t r = 0; r < outs[i]; ++r) quant::quantize(type, w.data() + r * in, stored[i].data() + r * row_bytes, in);
    }
    std::vector<std::vector<float>> by_one;  // threads = 1: no parallel region, the rows in order
    for (int threads : {1, 2, 3, 2, 3}) {
      CAPTURE(threads);
      std::vector<std::vector<float>> y;
      std::vector<cpu::LinearTarget> targets;
      for (size_t i = 0; i < outs.size(); ++i) y.emplace_back(size_t(T * outs[i]) + 8, kSentinel);  // [T, out] + 8
      for (size_t i = 0; i < outs.size(); ++i)
        targets.push_back({y[i].data(), cpu::WeightView{stored[i].data(), type}, nullptr, outs[i]});
      cpu::linear_shared_input(x.data(), T, in, targets, threads);
      for (size_t i = 0; i < outs.size(); ++i) {
        CAPTURE(i);
        for (int64_t r = 0; r < T * outs[i]; ++r) REQUIRE(std::isfinite(y[i][size_t(r)]));
        for (size_t k = size_t(T * outs[i]); k < y[i].size(); ++k) CHECK(y[i][k] == kSentinel);
        if (threads > 1) CHECK(y[i] == by_one[i]);
      }
      if (threads == 1) by_one = y;
    }
  }
}

TEST_CASE("the decode products' timer counts each one-token product's weights once") {
  // journey bench divides these bytes by these seconds for the rate inside the products
  const int64_t in = 64, out = 100;
  std::vector<uint8_t> w(size_t(out * dtype_bytes_for(DType::Q8_0, in)));
  auto values = scalar::random_vector(size_t(out * in), 71);
  quant::quantize(DType::Q8_0, values.data(), w.data(), out * in);
  auto x = scalar::random_vector(size_t(2 * in), 72);
  std::vector<float> y(size_t(2 * out));
  cpu::start_timing_decode_products();
  for (int step = 0; step < 3; ++step)
    cpu::linear(y.data(), x.data(), cpu::WeightView{w.data(), DType::Q8_0}, nullptr, 1, in, out, 2);
  cpu::linear(y.data(), x.data(), cpu::WeightView{w.data(), DType::Q8_0}, nullptr, 2, in, out, 2);  // two tokens: not decode
  const cpu::DecodeProductSplit times = cpu::stop_timing_decode_products();
  cpu::linear(y.data(), x.data(), cpu::WeightView{w.data(), DType::Q8_0}, nullptr, 1, in, out, 2);  // after the stop
  CHECK(times.static_split.products + times.stealing.products == 3);
  CHECK(times.static_split.weight_bytes + times.stealing.weight_bytes == 3.0 * double(w.size()));
  CHECK(times.static_split.seconds + times.stealing.seconds > 0);
}

TEST_CASE("linear computes every row block even inside a parallel region (a team of one)") {
  // Nested parallelism is off by default, so a linear() called from inside a parallel region gets
  // a team of one thread: that thread must then take all the blocks.
  const int64_t T = 2, in = 37, out = 211;
  auto x = scalar::random_vector(size_t(T * in), 41);
  auto w = scalar::random_vector(size_t(out * in), 42);
  auto expected = scalar::linear(x, w, nullptr, T, in, out);
  std::vector<float> y(size_t(T * out), kSentinel);
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    cpu::linear(y.data(), x.data(), cpu::WeightView{w.data()}, nullptr, T, in, out, 3);
  }
  CHECK(scalar::nmse(y, expected) < kOpTolerance);
}

TEST_CASE("the small-batch kernel matches the scalar loop on every instruction set this CPU runs") {
  for (auto isa : {cpu::gemm::Isa::Generic, cpu::gemm::Isa::Avx2, cpu::gemm::Isa::Avx512}) {
    if (!cpu::gemm::supports(isa)) {
      MESSAGE("this CPU lacks ", cpu::gemm::isa_name(isa), "; not tested");
      continue;
    }
    for (int64_t T : {1, 2, 3, 5, 7, 16, 17, 33, 128}) {
      // in: below one vector, odd, a multiple of 16, and several slices of `in` for T = 128
      for (auto [in, out] : {std::pair<int64_t, int64_t>{3, 9}, {37, 53}, {64, 5}, {19, 211}, {2100, 13}}) {
        for (bool with_bias : {false, true}) {
          CAPTURE(cpu::gemm::isa_name(isa)); CAPTURE(T); CAPTURE(in); CAPTURE(out); CAPTURE(with_bias);
          auto x = scalar::random_vector(size_t(T * in), 11);
          auto w = scalar::random_vector(size_t(out * in), 12);
          auto b = scalar::random_vector(size_t(out), 13);
          auto expected = scalar::linear(x, w, with_bias ? b.data() : nullptr, T, in, out);
          // all rows, then only rows [2, out - 1): the columns outside the range must stay untouched
          for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, out}, {2, out - 1}}) {
            CAPTURE(begin); CAPTURE(end);
            std::vector<float> y(size_t(T * out), kSentinel);  // [T, out]
            cpu::gemm::linear_rows(isa, y.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, T, in, out,
                                   begin, end);
            std::vector<float> got, want;  // the written columns
            bool outside_untouched = true;
            for (int64_t t = 0; t < T; ++t)
              for (int64_t o = 0; o < out; ++o) {
                if (o >= begin && o < end) {
                  got.push_back(y[t * out + o]);
                  want.push_back(expected[t * out + o]);
                } else if (y[t * out + o] != kSentinel) {
                  outside_untouched = false;
                }
              }
            CHECK(scalar::nmse(got.data(), want.data(), want.size()) < kOpTolerance);
            CHECK(outside_untouched);
          }
        }
      }
    }
  }
}

