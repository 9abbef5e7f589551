// `journey bench`: how fast the CPU reference runs a model, and how close that is to what this
// machine allows. Decode reads every weight once per token, so its ceiling is memory bandwidth /
// weight bytes per token; prefill is matrix-matrix work, so its ceiling is the FP32 GEMM rate.
// Both ceilings are measured in the same run as the model, so the ratios hold under the same load.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend.h"

namespace journey {

struct BenchOptions {
  int prompt_tokens = 128;
  int gen_tokens = 64;
  int threads = 0;  // 0 = all cores
  int runs = 3;
  bool measure_ceilings = true;  // the bandwidth and GEMM measurements (seconds, 2 GiB); tests skip them
};

struct Spread {
  double median = 0, min = 0, max = 0;
};

struct BenchResult {
  std::string model;
  int threads = 0;
  int prompt_tokens = 0, gen_tokens = 0, runs = 0;
  double load_seconds = 0;
  double decode_bytes_per_token = 0;  // weight bytes read per decoded token (f32 as computed)
  double prefill_flops = 0;           // floating-point operations of one prefill
  Spread prefill_tok_s, decode_tok_s;
  double bandwidth_gb_s = 0;          // measured threaded streaming read
  double gemm_gflop_s = 0;            // measured Eigen FP32 GEMM of the prefill's shape
  double decode_ceiling_tok_s() const { return bandwidth_gb_s * 1e9 / decode_bytes_per_token; }
  double prefill_ceiling_tok_s() const { return gemm_gflop_s * 1e9 / (prefill_flops / prompt_tokens); }
  double load_average = -1;           // 1-minute load average when the run started
};

// Streaming read of a buffer of `bytes` (much larger than the caches) on `threads` threads; GB/s.
double measure_read_bandwidth(int threads, size_t bytes = size_t(2) << 30);
// Eigen's own multi-threaded FP32 GEMM of [M, K] x [K, N]; GFLOP/s (best of a few repetitions).
double measure_gemm_gflops(int threads, int64_t M, int64_t K, int64_t N);

// Runs prefill (prompt_tokens random tokens) then greedy decode (gen_tokens steps), `runs` times.
BenchResult run_bench(Backend& backend, const BenchOptions& options);

std::string format_bench_table(const BenchResult& result);
nlohmann::json bench_json(const BenchResult& result);

}  // namespace journey
