// Benchmark, not a test (no ctest entry): the prefill's matrix products at TinyLlama-1.1B's shapes,
// y [M, N] = x [M, K] · weightᵀ with M prompt tokens, in GFLOP/s (2·M·K·N per product, the best
// run, wall clock), on 1 and 2 threads:
//
//   onednn bf16         oneDNN's matmul, x and weight bf16, sums in f32 (cpu/onednn_matmul.h), the
//                       weight as journey stores it ([N, K] rows): a kernel that wants another
//                       layout repacks it inside every call, and that is timed
//   onednn bf16 packed  the same with the weight in the layout oneDNN chose, packed once before the
//                       timing (as an engine would at load): the kernel's own rate
//   onednn f32 (packed) the same two in f32
//   eigen f32           Eigen's GEMM of the same shape, what `journey bench` takes as the f32 prefill
//                       ceiling (measure_gemm_gflops, cpu/bench.h)
//   onednn int8 packed  u8 x s8 with int32 sums, the weight packed once: the ceiling `journey bench`
//                       holds the int8 token lanes against (AVX2 and AVX512-VNNI without the bf16
//                       paths)
//   journey bf16 .. q6_k journey's own prefill product, cpu::linear as the engine calls it (x rounded
//                       to bf16 and packed, the weight as stored: bf16, or blocks dequantized to bf16
//                       panels on the way), on AMX tiles where the CPU has them (kernels line of
//                       `journey bench`), else AVX512-BF16 where it pays (kernels::bf16_dot_pays);
//                       without either bf16 on f32 panels and the block types on the int8 token
//                       lanes (x quantized to 8 bits; Q8_0 with the block sums the engine makes)
//   kernels             the kernel oneDNN picked, e.g. "brg:avx512_core_amx_bf16" (its brgemm on
//                       AMX tiles); "packed:" where the packed weight made it pick another
//
// A oneDNN type this CPU has no matmul for (bf16 below AVX-512 in oneDNN 2.6) reads "-".
// The weight is a whole [N, K] matrix, allocated once, as in the model. The 1-minute load average
// (/proc/loadavg, what `uptime` prints) is printed before and after: on a shared machine the rates
// are only as good as the cores were free.
//
// usage: bench_prefill_gemm [--tokens 128] [--seconds 0.3]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cpu/bench.h"
#include "cpu/kernels.h"
#include "cpu/onednn_matmul.h"
#include "cpu/ops.h"
#include "quant/quantize.h"

using namespace journey;

namespace {

std::string load_average_line() {
  std::ifstream in("/proc/loadavg");
  double one = -1, five = -1, fifteen = -1;
  in >> one >> five >> fifteen;
  char line[96];
  std::snprintf(line, sizeof line, "load average: %.2f, %.2f, %.2f", one, five, fifteen);
  return line;
}

// TinyLlama-1.1B's products per layer: [K, N] of each weight, as in its config (hidden 2048,
// 32 heads of 64, 4 KV heads, intermediate 5632).
struct Shape {
  const char* name;
  int64_t K, N;
};
constexpr Shape kShapes[] = {
    {"q_proj/o_proj", 2048, 2048},
    {"k_proj/v_proj", 2048, 256},
    {"gate/up_proj", 2048, 5632},
    {"down_proj", 5632, 2048},
};

// cpu::linear of a random [N, K] weight of `type` (as stored) on [M, K] random tokens: GFLOP/s of the
// best run, repeated for about `seconds` (at least 3 runs).
double journey_linear_gflops(int threads, int64_t M, int64_t K, int64_t N, DType type, double seconds) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> values(size_t(N * K)), x(size_t(M * K)), y(size_t(M * N));  // [N, K], [M, K], [M, N]
  for (float& v : values) v = normal(rng);
  for (float& v : x) v = normal(rng);
  std::vector<unsigned char> stored(size_t(dtype_bytes_for(type, K)) * size_t(N));
  if (type == DType::BF16) {
    auto* bf16 = reinterpret_cast<uint16_t*>(stored.data());
    for (size_t i = 0; i < values.size(); ++i) bf16[i] = f32_to_bf16(values[i]);
  } else {
    quant::quantize(type, values.data(), stored.data(), int64_t(values.size()));
  }
  // Q8_0 with the block sums the engine makes at load where the CPU has their kernels (cpu_backend.cpp)
  std::vector<int16_t> sums;
  if (type == DType::Q8_0 && cpu::kernels::table(cpu::kernels::best_isa()).dot_tokens_q8_0_sums) {
    sums.resize(size_t(N * K / 32));
    cpu::kernels::q8_0_block_sums(stored.data(), N, K, sums.data());
  }
  const cpu::WeightView weight{stored.data(), type, false, sums.empty() ? nullptr : sums.data()};
  double best = 0, spent = 0;
  for (int run = 0; run < 3 || spent < seconds; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu::linear(y.data(), x.data(), weight, nullptr, M, K, N, threads);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spent += t;
    best = std::max(best, 2.0 * double(M) * double(K) * double(N) / t / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 128;
  double seconds = 0.3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else return std::fprintf(stderr, "usage: %s [--tokens 128] [--seconds 0.3]\n", argv[0]), 2;
  }
  if (tokens < 1 || !(seconds > 0)) return std::fprintf(stderr, "--tokens must be at least 1, --seconds positive\n"), 2;
  std::printf("prefill GEMM, M = %lld tokens, GFLOP/s (best run, wall clock); %s\n", (long long)tokens,
              load_average_line().c_str());
  if (!cpu::onednn::available()) std::printf("(journey was built without oneDNN: its columns read 0, \"not built\")\n");
  std::printf("journey's kernels: %s\n", cpu::kernels::kernel_choice().c_str());
  std::printf("%-14s %-12s %7s %11s %11s %11s %11s %11s %10s %9s %9s %9s %9s %9s  %s\n", "weight", "[K, N]",
              "threads", "onednn bf16", "bf16 packed", "onednn f32", "f32 packed", "int8 packed", "eigen f32", "j bf16",
              "j q8_0", "j q4_0", "j q4_k", "j q6_k", "kernels");
  using cpu::onednn::WeightLayout;
  for (int threads : {1, 2}) {
    for (const Shape& shape : kShapes) {
      auto onednn = [&](DType type, WeightLayout layout) {
        if (!cpu::onednn::supports(type)) return cpu::onednn::MatmulRate{0, "-"};
        return cpu::onednn::measure(threads, tokens, shape.K, shape.N, type, seconds, layout);
      };
      const cpu::onednn::MatmulRate bf16 = onednn(DType::BF16, WeightLayout::AsStored);
      const cpu::onednn::MatmulRate bf16_packed = onednn(DType::BF16, WeightLayout::Prepacked);
      const cpu::onednn::MatmulRate f32 = onednn(DType::F32, WeightLayout::AsStored);
      const cpu::onednn::MatmulRate f32_packed = onednn(DType::F32, WeightLayout::Prepacked);
      const cpu::onednn::MatmulRate int8_packed = onednn(DType::U8, WeightLayout::Prepacked);
      const double eigen = measure_gemm_gflops(threads, tokens, shape.K, shape.N);
      // Q6_K: the output layer and half of ffn_down / attn_v in a Q4_K_M file
      const DType journey_types[] = {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};
      double journey[std::size(journey_types)];
      for (size_t i = 0; i < std::size(journey_types); ++i) {
        // the K types need rows of whole super-blocks
        const bool fits = shape.K % dtype_block_size(journey_types[i]) == 0;
        journey[i] = fits ? journey_linear_gflops(threads, tokens, shape.K, shape.N, journey_types[i], seconds) : 0;
      }
      auto kernels = [](const cpu::onednn::MatmulRate& stored, const cpu::onednn::MatmulRate& packed) {
        return stored.implementation == packed.implementation ? stored.implementation
                                                              : stored.implementation + ", packed: " + packed.implementation;
      };
      auto rate = [](const cpu::onednn::MatmulRate& r) {
        char text[16];
        if (r.implementation == "-") return std::string("-");
        std::snprintf(text, sizeof text, "%.1f", r.gflop_s);
        return std::string(text);
      };
      char dims[32];
      std::snprintf(dims, sizeof dims, "[%lld, %lld]", (long long)shape.K, (long long)shape.N);
      std::printf("%-14s %-12s %7d %11s %11s %11s %11s %11s %10.1f %9.1f %9.1f %9.1f %9.1f %9.1f  bf16 %s; f32 %s; int8 %s\n",
                  shape.name, dims, threads, rate(bf16).c_str(), rate(bf16_packed).c_str(), rate(f32).c_str(),
                  rate(f32_packed).c_str(), rate(int8_packed).c_str(), eigen, journey[0], journey[1], journey[2],
                  journey[3], journey[4], kernels(bf16, bf16_packed).c_str(), kernels(f32, f32_packed).c_str(),
                  int8_packed.implementation.c_str());
      std::fflush(stdout);
    }
  }
  std::printf("at the end: %s\n", load_average_line().c_str());
  return 0;
}
