// `journey bench`: how fast the CPU reference runs a model, and how close that is to what this
// machine allows. Decode reads every weight once per token, so its ceiling is memory bandwidth /
// weight bytes per token; prefill is matrix-matrix work, so its ceiling is the FP32 GEMM rate.
// Both ceilings are measured in the same run as the model, so the ratios hold under the same load.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace journey {

struct BenchOptions {
  int prompt_tokens = 128;
  int gen_tokens = 64;
  int threads = 0;  // 0 = all cores
  int runs = 3;
  bool measure_ceilings = true;  // the bandwidth and GEMM measurements (seconds, 2 GiB)
  size_t probe_bytes = size_t(2) << 30;  // the bandwidth probe's buffer: far larger than any cache (tests: small)
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
  // The read bandwidth is probed right after each run's decode, so each run's decode rate has a
  // ceiling measured under the same conditions (a shared machine's bandwidth drifts between runs).
  Spread bandwidth_runs_gb_s;         // the per-run probes
  Spread decode_fraction;             // per run: decode tok/s / (that run's bandwidth / bytes per token)
  double bandwidth_gb_s = 0;          // median of the per-run probes: threaded streaming read
  double gemm_gflop_s = 0;            // measured Eigen FP32 GEMM of the prefill's shape
  double decode_ceiling_tok_s() const { return bandwidth_gb_s * 1e9 / decode_bytes_per_token; }
  double prefill_ceiling_tok_s() const { return gemm_gflop_s * 1e9 / (prefill_flops / prompt_tokens); }
  double load_average = -1;           // 1-minute load average when the run started
};

// Streaming read of a buffer (much larger than the caches: 2 GiB by default) on `threads`
// threads, each summing one contiguous slice. The buffer is allocated and mapped once, in huge
// pages like the weights (cpu/huge_pages.h), so that measure() can be called between runs.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(int threads, size_t bytes = size_t(2) << 30);
  double measure(int passes = 4);  // GB/s, the best of `passes` full reads (two read kernels, alternating)
 private:
  struct Buffer;
  int threads_;
  std::shared_ptr<Buffer> buffer_;
};
// Eigen's own multi-threaded FP32 GEMM of [M, K] x [K, N]; GFLOP/s (best of a few repetitions).
double measure_gemm_gflops(int threads, int64_t M, int64_t K, int64_t N);

// Runs prefill (prompt_tokens random tokens) then greedy decode (gen_tokens steps), `runs` times.
BenchResult run_bench(Backend& backend, const BenchOptions& options);

std::string format_bench_table(const BenchResult& result);
nlohmann::json bench_json(const BenchResult& result);

}  // namespace journey
