// oneDNN's matmul on journey's weight layout (cpu/onednn_matmul.h) against a double-precision loop
// over the very values it was given (for bf16: the bf16-rounded ones; for the int8 form x 0..127
// and the weight -128..127), on shapes that are not multiples of any kernel's tile: M 1/17/128
// tokens, K 32/100/2048, N 13/256 outputs. (The int8 sums are exact in int32; written as f32 they
// round once, far inside the bound. x stays below 128 because without VNNI oneDNN's int8 GEMM
// multiplies by vpmaddubsw, whose pair sums saturate: with full-range u8 x it was off by up to 30 %
// on the AMD Zen 3 VM, as oneDNN documents; journey's own AVX2 kernels keep their unsigned quants
// at most 63 or multiply Q8_0 by sign, part 3c of kernels_impl.inc.)
//
// Tolerance, per element: 1e-5 x sum over k of |x[m,k] w[n,k]|. The products are exact in both
// (bf16 x bf16 fits f32's 24-bit significand; the loop multiplies in double), so only oneDNN's f32
// sums round: each addition by at most 2^-24 of the running sum's size, and blocked kernels add in
// chains short enough that the error stays near sqrt(K) x 2^-24 x sum|products| — 2.7e-6 at
// K = 2048, under 1e-5 with room. A misread element (a transposed weight, a wrong stride) moves a
// result by about sum|products| / sqrt(K), 0.02 of it at K = 2048: far outside the bound.
//
// Its own main(): built without oneDNN it prints why and exits 77 (ctest "Skipped"), unless the
// environment says CI=true, where install-deps.sh installs libdnnl-dev and a missing oneDNN fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/dtype.h"
#include "core/error.h"
#include "cpu/onednn_matmul.h"
#include "reference/scalar_ops.h"

using namespace journey;

namespace {

// Values of `type` (f32, bf16, or u8's int8 form) as they are stored, and as the f32 they stand for.
struct StoredValues {
  std::vector<float> f32;      // the values themselves (for bf16: already rounded to bf16)
  std::vector<uint16_t> bf16;  // their bf16 bits (bf16 only)
  std::vector<uint8_t> bytes;  // u8: x's unsigned bytes, or the weight's signed ones
  const void* data(DType type) const {
    return type == DType::BF16 ? static_cast<const void*>(bf16.data())
           : type == DType::U8 ? static_cast<const void*>(bytes.data())
                               : f32.data();
  }
};

// `weight`: for u8, the signed bytes of the weight (else x's unsigned ones).
StoredValues random_stored(DType type, size_t count, uint32_t seed, bool weight = false) {
  StoredValues v{scalar::random_vector(count, seed), {}, {}};
  if (type == DType::U8) {  // x 0..127, the weight -128..127, the extremes included
    v.bytes.resize(count);
    for (size_t i = 0; i < count; ++i) {
      v.bytes[i] = uint8_t((i * 2654435761u + seed) >> 7);
      if (!weight) v.bytes[i] &= 0x7F;
      v.f32[i] = weight ? float(int8_t(v.bytes[i])) : float(v.bytes[i]);
    }
  }
  if (type == DType::BF16) {
    v.bf16.resize(count);
    for (size_t i = 0; i < count; ++i) {
      v.bf16[i] = f32_to_bf16(v.f32[i]);
      v.f32[i] = bf16_to_f32(v.bf16[i]);
    }
  }
  return v;
}

// The worst element of y against the double-precision product, as a fraction of its bound
// (1e-5 x sum|products|, see the top); where it is, and the numbers there.
struct Worst {
  double ratio = 0;
  int64_t m = -1, n = -1;
  double got = 0, want = 0, bound = 0;
};

Worst compare_with_loop(const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& weight,
                        int64_t M, int64_t K, int64_t N) {
  Worst worst;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0, sum_abs = 0;  // y[m, n] = sum_k x[m, k] weight[n, k]
      for (int64_t k = 0; k < K; ++k) {
        const double product = double(x[size_t(m * K + k)]) * double(weight[size_t(n * K + k)]);
        sum += product;
        sum_abs += std::abs(product);
      }
      const double got = y[size_t(m * N + n)], bound = 1e-5 * sum_abs;
      const double ratio = std::isfinite(got) ? std::abs(got - sum) / std::max(bound, 1e-300) : 1e300;
      if (ratio > worst.ratio || worst.m < 0) worst = {ratio, m, n, got, sum, bound};
    }
  return worst;
}

// oneDNN's product of random x [M, K] and weight [N, K] on `threads` threads, checked by the loop.
void check_shape(DType type, int64_t M, int64_t K, int64_t N, int threads) {
  const StoredValues x = random_stored(type, size_t(M * K), uint32_t(7 * M + K));       // [M, K]
  const StoredValues weight = random_stored(type, size_t(N * K), uint32_t(11 * N + K), true);  // [N, K]
  std::vector<float> y(size_t(M * N), std::nanf(""));                                   // [M, N]
  cpu::onednn::matmul(y.data(), x.data(type), weight.data(type), M, K, N, type, threads);
  const Worst w = compare_with_loop(y, x.f32, weight.f32, M, K, N);
  INFO(dtype_name(type), " [", M, ", ", K, "] x [", N, ", ", K, "]^T on ", threads, " threads: worst y[", w.m, ", ",
       w.n, "] = ", w.got, ", the double loop says ", w.want, ", |difference| ", std::abs(w.got - w.want),
       " against a bound of ", w.bound, " (", w.ratio, " of it)");
  CHECK(w.ratio <= 1.0);
}

}  // namespace

// bf16 needs AVX-512 in oneDNN 2.6; where this CPU lacks it the cases say so and test the rest.
bool runs_here(DType type) {
  if (cpu::onednn::supports(type)) return true;
  const std::string why = std::string("oneDNN has no ") + std::string(dtype_name(type)) +
                          " matmul on this CPU (bf16 needs AVX-512 in oneDNN 2.6): not tested here";
  MESSAGE(why);
  return false;
}

TEST_CASE("oneDNN matmul: f32 and the int8 form run on every x86-64 CPU journey targets") {
  CHECK(cpu::onednn::supports(DType::F32));
  CHECK(cpu::onednn::supports(DType::U8));
  CHECK(!cpu::onednn::supports(DType::Q8_0));
}

TEST_CASE("oneDNN matmul: y = x weight^T matches a double-precision loop, f32, bf16 and u8 x s8, odd shapes") {
  for (DType type : {DType::F32, DType::BF16, DType::U8})
    if (runs_here(type))
    for (int64_t M : {1, 17, 128})
      for (int64_t K : {32, 100, 2048})
        for (int64_t N : {13, 256}) check_shape(type, M, K, N, 2);
}

TEST_CASE("oneDNN matmul: one thread gives a correct result too, and the caller's OpenMP thread count is kept") {
#ifdef _OPENMP
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
#endif
  if (runs_here(DType::BF16)) check_shape(DType::BF16, 17, 100, 13, 1);
  check_shape(DType::U8, 17, 100, 13, 1);
  check_shape(DType::F32, 128, 2048, 256, 1);
#ifdef _OPENMP
  CHECK(omp_get_max_threads() == 3);
  omp_set_num_threads(before);
#endif
}

TEST_CASE("oneDNN matmul: refuses other types and empty sizes with an error that names them") {
  std::vector<float> y(16), x(16), weight(16);
  auto message_of = [&](DType type, int64_t M, int64_t K, int64_t N) -> std::string {
    try {
      cpu::onednn::matmul(y.data(), x.data(), weight.data(), M, K, N, type, 1);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string f16 = message_of(DType::F16, 2, 4, 2);
  CHECK_MESSAGE(f16.find("f16 is not supported") != std::string::npos, f16);
  const std::string q8 = message_of(DType::Q8_0, 2, 32, 2);
  CHECK_MESSAGE(q8.find("q8_0 is not supported") != std::string::npos, q8);
  const std::string empty = message_of(DType::F32, 0, 4, 2);
  CHECK_MESSAGE(empty.find("[0, 4] x [2, 4]^T f32: every size must be at least 1") != std::string::npos, empty);
  CHECK_THROWS_AS(cpu::onednn::matmul(nullptr, x.data(), weight.data(), 2, 4, 2, DType::F32, 1), Error);
  CHECK_THROWS_AS(cpu::onednn::measure(1, 2, 4, 2, DType::I8, 0.01), Error);
}

TEST_CASE("oneDNN measure: a positive rate and the name of the kernel oneDNN picked") {
  using cpu::onednn::WeightLayout;
  for (DType type : {DType::BF16, DType::F32, DType::U8})
    for (WeightLayout layout : {WeightLayout::AsStored, WeightLayout::Prepacked}) {
      if (!runs_here(type)) continue;
      const cpu::onednn::MatmulRate rate = cpu::onednn::measure(2, 128, 2048, 256, type, 0.05, layout);
      MESSAGE("oneDNN ", dtype_name(type), " [128, 2048] x [256, 2048]^T, weight ",
              layout == WeightLayout::Prepacked ? "prepacked" : "as stored", ", 2 threads: ", rate.gflop_s,
              " GFLOP/s, kernel \"", rate.implementation, "\"");
      CHECK(rate.gflop_s > 0);
      CHECK(!rate.implementation.empty());
      CHECK(rate.implementation != "not built");
    }
}

int main(int argc, char** argv) {
  if (!cpu::onednn::available()) {
    const char* ci = std::getenv("CI");
    if (ci && std::strcmp(ci, "true") == 0) {
      std::printf("FAILED: journey was built without oneDNN, and CI=true: CI installs libdnnl-dev (scripts/install-deps.sh), "
                  "so the configure should have found it (see its \"journey: oneDNN\" line).\n");
      return 1;
    }
    std::printf("SKIPPED: journey was built without oneDNN (libdnnl-dev not found, or -DJOURNEY_ONEDNN=OFF); "
                "nothing to test.\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
