// `journey bench`: how fast a backend (the fast CPU one by default) runs a model, and how close that is to what this
// machine allows. Decode reads every weight once per token, so its ceiling is memory bandwidth /
// weight bytes per token; prefill is matrix-matrix work, so its ceiling is the FP32 GEMM rate.
// Both ceilings are measured in the same run as the model, so the ratios hold under the same load.
#pragma once
#include <algorithm>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "assets/weights.h"
#include "backend/backend.h"

namespace journey {

struct BenchOptions {
  int prompt_tokens = 128;
  int gen_tokens = 64;
  int threads = 0;  // 0 = all cores
  int runs = 3;
  bool measure_ceilings = true;  // the bandwidth and GEMM measurements (seconds, 2 GiB)
  size_t probe_bytes = size_t(2) << 30;  // the bandwidth probe's buffer: far larger than any cache (tests: small)
  // The bytes a decode step reads, as the weights are stored (decode_bytes_per_token(model));
  // 0: every weight in f32, from the config alone.
  double weight_bytes_per_token = 0;
  // The compute path of the prefill's products, which sets its ceiling: "f32" (Eigen's GEMM),
  // "bf16" (AVX512-BF16 dot products), "amx-bf16" (AMX tiles) or "int8-lanes" (the integer
  // token-lane kernel, AVX2 / AVX512-VNNI); see prefill_path(model).
  std::string prefill_path = "f32";
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
  // The same rates per CPU-second of this process x threads: what the run would reach if its
  // threads had their cores to themselves (on a machine shared with other jobs the wall-clock rate
  // also counts the time the threads waited for a core; with OMP_WAIT_POLICY=passive a waiting
  // thread uses no CPU, so this counts the work alone).
  Spread prefill_cpu_tok_s, decode_cpu_tok_s;
  // The read bandwidth is probed right after each run's decode, so each run's decode rate has a
  // ceiling measured under the same conditions (a shared machine's bandwidth drifts between runs).
  Spread bandwidth_runs_gb_s;         // the per-run probes
  Spread decode_fraction;             // per run: decode tok/s / (that run's bandwidth / bytes per token)
  // Per decode step: the step's weight bytes per second over a part of the probe read right after
  // the step (ReadBandwidthProbe::measure_part). On a machine whose bandwidth drifts within
  // seconds (the 2-core VMs of docs/performance.md swing between ~30 and ~60 GB/s), the per-run
  // probe (best of 4 full reads, after 64 steps) is neither at the same moment nor the same kind of
  // figure as the steps' average; the pair is. Its median compares decode with the bandwidth of
  // the same moment (the table's line "each step against a probe part"); the quartiles say how
  // much the pairs scatter.
  Spread decode_step_fraction;
  double decode_step_fraction_q1 = 0, decode_step_fraction_q3 = 0;
  double bandwidth_gb_s = 0;          // median of the per-run probes: threaded streaming read
  double gemm_gflop_s = 0;            // measured Eigen FP32 GEMM of the prefill's shape
  double gemm_cpu_gflop_s = 0;        // the same per CPU-second x threads (see prefill_cpu_tok_s)
  // The dot-product instructions' own rates on `threads` threads (register-resident loops, no
  // memory): f32 FMA, AVX512-BF16 vdpbf16ps and the int8 dot (AVX512-VNNI vpdpbusd, AVX2
  // vpmaddubsw + vpmaddwd) (0 where the CPU lacks them); 2 operations per multiply-add.
  double f32_fma_gflop_s = 0, bf16_dot_gflop_s = 0, int8_dot_gop_s = 0;
  // The int8 dot with what a block format adds per 32 inputs at the least (a convert, a multiply
  // by the two block scales and an FMA: kernels::PeakKind::Int8BlockDot) on `threads` threads: the
  // rate no exact product of block-quantized rows passes (0 where the CPU has no int8 dot).
  double int8_block_dot_gop_s = 0;
  double amx_bf16_gflop_s = 0;        // AMX tdpbf16ps on tiles (0: no AMX, or capped)
  // oneDNN's matmul of the prefill's shape on the prefill path's instructions (cpu/onednn_matmul.h,
  // the weight prepacked in the layout it chooses: its kernel's own rate): f32 for the f32 path, bf16
  // for bf16 and amx-bf16, the int8 form (u8 x s8) for int8-lanes; the kernel it chose. 0 when
  // built without oneDNN or where oneDNN lacks the type on this CPU (bf16 below AVX-512).
  double onednn_gflop_s = 0;
  std::string onednn_kernel, onednn_type;
  std::string prefill_path = "f32";   // BenchOptions::prefill_path
  // The prefill's GEMM rate: oneDNN's matmul above (a library's GEMM on the same instructions,
  // measured now). Without it, for the f32 path Eigen's f32 GEMM, for the others the instruction's
  // peak scaled by how close Eigen's GEMM comes to the f32 FMA peak (what a GEMM achieves of its
  // instruction's peak on this machine, applied to the faster instruction).
  double prefill_gemm_gflop_s() const {
    if (onednn_gflop_s > 0) return onednn_gflop_s;
    if (prefill_path == "f32") return gemm_gflop_s;
    const double peak = prefill_path == "int8-lanes" ? int8_dot_gop_s
                        : prefill_path == "amx-bf16" ? amx_bf16_gflop_s
                                                     : bf16_dot_gflop_s;
    if (peak <= 0 || f32_fma_gflop_s <= 0) return gemm_gflop_s;
    return peak * gemm_gflop_s / f32_fma_gflop_s;
  }
  std::string prefill_gemm_basis() const;
  // The prefill path's instruction peak (the dot-product peaks above): a bound no GEMM passes,
  // beside the GEMM ceiling, which a library measured now sets (on the AMD Zen 3 VM oneDNN's f32
  // GEMM ran 68-118 GFLOP/s where journey's f32 panels reach 130-150: there "% of GEMM" exceeds 100).
  double prefill_instruction_peak_gflop_s() const {
    return prefill_path == "int8-lanes" ? int8_dot_gop_s
           : prefill_path == "amx-bf16" ? amx_bf16_gflop_s
           : prefill_path == "bf16"     ? bf16_dot_gflop_s
                                        : f32_fma_gflop_s;
  }
  // The int8-lanes path's own arithmetic peak (int8_block_dot_gop_s; 0 on the other paths): the
  // bound its block kernels meet before any GEMM's, since a GEMM of one scale per tensor (oneDNN's
  // int8 matmul) skips the per-block multiply and FMA that Q8_0 .. Q6_K cannot.
  double prefill_block_arithmetic_peak_gflop_s() const { return prefill_path == "int8-lanes" ? int8_block_dot_gop_s : 0; }
  double prefill_gflop_s() const {  // the median prefill's rate
    return prompt_tokens > 0 ? prefill_tok_s.median * prefill_flops / prompt_tokens / 1e9 : 0;
  }
  double decode_ceiling_tok_s() const { return bandwidth_gb_s * 1e9 / decode_bytes_per_token; }
  // A roofline: a prefill does its FLOPs at the GEMM rate AND reads every weight once (as decode
  // does per token) at the read bandwidth, so it takes at least the longer of the two. The f32 and
  // bf16 paths are far on the compute side; AMX tiles can move the prefill of a few hundred tokens
  // onto the memory side.
  double prefill_compute_seconds() const { return prefill_flops / (prefill_gemm_gflop_s() * 1e9); }
  double prefill_memory_seconds() const { return decode_bytes_per_token / (bandwidth_gb_s * 1e9); }
  double prefill_ceiling_tok_s() const {
    return prompt_tokens / std::max(prefill_compute_seconds(), prefill_memory_seconds());
  }
  // The prefill ceiling per CPU-second x threads (Eigen's GEMM timed by CPU time, same scaling).
  double prefill_cpu_ceiling_tok_s() const {
    return prefill_ceiling_tok_s() * (gemm_gflop_s > 0 ? gemm_cpu_gflop_s / gemm_gflop_s : 0.0);
  }
  // --device cpu: the one-token products of the decode runs timed apart (cpu::DecodeProductTimes):
  // their share of the decode time and the rate the weights streamed at inside them, which split
  // decode's distance from the bandwidth ceiling into the products' own and everything else's. The
  // rates per way of sharing rows are set when both were timed (JOURNEY_DECODE_STEAL=alternate).
  double decode_product_share = 0, decode_product_gb_s = 0;
  // --device cpu: the prefill products timed apart (cpu::PrefillProductTimes), over every run: their
  // share of the prefill time, the rate they multiply at (2 T in out FLOPs each; the activations'
  // rounding or quantization included) and the share of their time x threads that the threads
  // were busy in their own rows (the rest: one waiting for the other at the end of a product).
  double prefill_product_share = 0, prefill_product_gflop_s = 0, prefill_threads_busy = 0;
  // --device cpu: attention timed apart (cpu::AttentionTimes), over every run: its share of the
  // prefill time and the rate of its arithmetic (4 H D FLOPs per attended (query, position)); its
  // share of the decode time and the rate the step's K and V rows were read at inside it — what
  // grows with the context where the products' share shrinks.
  double prefill_attention_share = 0, prefill_attention_gflop_s = 0;
  double decode_attention_share = 0, decode_attention_gb_s = 0;
  double decode_static_split_gb_s = 0, decode_stealing_gb_s = 0;
  double load_average = -1;           // 1-minute load average when the run started
  // Whether this machine's ceilings were measured (BenchOptions::measure_ceilings): not for a GPU,
  // whose rates the host's memory and GEMM say nothing about; then no rate is set against them.
  bool ceilings_measured = false;
  std::string ceilings_skipped_why;   // said instead when not measured; empty: a GPU's rates
  // This process's resident memory (bytes, /proc/self/status): after loading (before the KV cache);
  // the engine's peak (VmHWM after the warm-up, whose prefill and decode step have the measured
  // lengths, so the KV cache and every buffer are in, and before the bandwidth probe and the GEMM
  // ceilings take their own memory): what a user of the engine needs, the figure set beside other
  // engines; and the peak at the end, all of that included. -1 where unknown.
  int64_t resident_after_load = -1, resident_engine_peak = -1, resident_peak = -1, model_file_bytes = 0;
  std::string weight_types;           // e.g. "q4_K x 133, q6_K x 23, f32 x 45"
  std::string cpu_kernels;            // --device cpu: kernels::kernel_choice(), e.g. "avx512-vnni + avx512-bf16 prefill"
};

// The weight bytes one decode step reads as stored: every tensor except the embedding table (one
// row per token) unless it doubles as the LM head; norms and biases in f32 as the backend keeps them.
double decode_bytes_per_token(const ModelConfig& config, const WeightStore& weights);
// The prefill's compute path on the fast CPU backend for these weights: the cpu::prefill_path_of
// (cpu/typed_linear.h) most matrix bytes take — "amx-bf16", "bf16", "int8-lanes" or "f32".
std::string prefill_path(const WeightStore& weights);

// Streaming read of a buffer (much larger than the caches: 2 GiB by default) on `threads`
// threads, each summing one contiguous slice. The buffer is allocated and mapped once, in huge
// pages like the weights (cpu/huge_pages.h), so that measure() can be called between runs.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(int threads, size_t bytes = size_t(2) << 30);
  static constexpr int kPasses = 4;  // full reads per measure() unless told
  double measure(int passes = kPasses);  // GB/s, the best of `passes` full reads (two read kernels, alternating)
  // GB/s of one read of part `part % parts` of the buffer (parts of 256 MB for the default 2 GiB:
  // a few milliseconds, each part far larger than the caches and not read since the part before
  // it), for a ceiling taken right beside a short measurement (journey bench: each decode step).
  double measure_part(int64_t part, int64_t parts = 8);
  int threads() const { return threads_; }
 private:
  struct Buffer;
  int threads_;
  std::shared_ptr<Buffer> buffer_;
};
// Eigen's own multi-threaded FP32 GEMM of [M, K] x [K, N]; GFLOP/s (best of a few repetitions);
// per_cpu_second (optional): the same per CPU-second of this process x threads.
double measure_gemm_gflops(int threads, int64_t M, int64_t K, int64_t N, double* per_cpu_second = nullptr);

// Runs prefill (prompt_tokens random tokens) then greedy decode (gen_tokens steps), `runs` times.
BenchResult run_bench(Backend& backend, const BenchOptions& options);

std::string format_bench_table(const BenchResult& result);
nlohmann::json bench_json(const BenchResult& result);

}  // namespace journey
