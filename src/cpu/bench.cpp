// The measurements behind `journey bench` (see bench.h for what each ceiling means).
#include "cpu/bench.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/model_weights.h"
#include "core/threads.h"
#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "cpu/onednn_matmul.h"
#include "cpu/ops.h"
#include "cpu/process_memory.h"
#include "cpu/typed_linear.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace journey {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

Spread spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

// The sum of p[0 .. n) with `kAccumulators` independent 8-float vector accumulators. Which
// count reads fastest depends on the machine, not on arithmetic (the add is never the limit):
// on the 2-core Xeon VM of docs/performance.md one accumulator streamed at 32 GB/s and four at
// 27 (Eigen's sum(): 28), so the probe tries both and keeps the best, as a ceiling should.
template <int kAccumulators>
float streaming_sum(const float* p, int64_t n) {
  typedef float Vec8 __attribute__((vector_size(32), aligned(4), may_alias));
  constexpr int64_t kStep = 8 * kAccumulators;
  Vec8 acc[kAccumulators] = {};
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep)
    for (int a = 0; a < kAccumulators; ++a) acc[a] += *reinterpret_cast<const Vec8*>(p + i + 8 * a);
  Vec8 all = {};
  for (int a = 0; a < kAccumulators; ++a) all += acc[a];
  float total = 0;
  for (int lane = 0; lane < 8; ++lane) total += all[lane];
  for (; i < n; ++i) total += p[i];
  return total;
}

}  // namespace

struct ReadBandwidthProbe::Buffer {
  HugePageFloats floats;  // [n]
};

ReadBandwidthProbe::ReadBandwidthProbe(int threads, size_t bytes)
    : threads_(resolve_threads(threads)), buffer_(std::make_shared<Buffer>()) {
  const int64_t n = int64_t(bytes / sizeof(float));
  buffer_->floats.resize(size_t(n));
  float* data = buffer_->floats.data();
  // written once so that every page is really mapped before the first timed read
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) data[i] = float(i & 1023);
}

namespace {
// GB/s of one read of data[0 .. n) on `threads` threads, each summing one contiguous slice: one
// sequential stream per core, the access pattern hardware prefetchers serve fastest.
// accumulators: streaming_sum's 1 or 4.
double timed_read(const float* data, int64_t n, int threads, int accumulators) {
  auto t0 = Clock::now();
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    int id = 0, count = 1;
#ifdef _OPENMP
    id = omp_get_thread_num(), count = omp_get_num_threads();
#endif
    const int64_t begin = n * id / count, end = n * (id + 1) / count;
    total += accumulators == 1 ? streaming_sum<1>(data + begin, end - begin) : streaming_sum<4>(data + begin, end - begin);
  }
  const double seconds = seconds_since(t0);
  volatile float sink = total;
  (void)sink;
  return double(n) * sizeof(float) / seconds / 1e9;
}
}  // namespace

double ReadBandwidthProbe::measure(int passes) {
  double best = 0;
  for (int pass = 0; pass < passes; ++pass)
    best = std::max(best, timed_read(buffer_->floats.data(), int64_t(buffer_->floats.size()), threads_, pass % 2 == 0 ? 1 : 4));
  return best;
}

double ReadBandwidthProbe::measure_part(int64_t part, int64_t parts) {
  const int64_t n = int64_t(buffer_->floats.size()), count = std::max<int64_t>(1, parts);
  const int64_t begin = n * (part % count) / count, end = n * (part % count + 1) / count;
  return timed_read(buffer_->floats.data() + begin, end - begin, threads_, 1);
}

namespace {
// peak_rate on every thread at once (each its own register loop), summed.
double peak_on_threads(cpu::kernels::PeakKind kind, int threads) {
  double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += cpu::kernels::peak_rate(kind);
  return total;
}
}  // namespace

double measure_gemm_gflops(int threads, int64_t M, int64_t K, int64_t N, double* per_cpu_second) {
  threads = resolve_threads(threads);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(M, K), b = Eigen::MatrixXf::Random(K, N), c(M, N);
  const int previous = Eigen::nbThreads();
  Eigen::setNbThreads(threads);
  double best = 0, best_cpu = 0;
  const double flops = 2.0 * double(M) * double(K) * double(N);
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    const double cpu0 = process_cpu_seconds();
    c.noalias() = a * b;
    best = std::max(best, flops / seconds_since(t0) / 1e9);
    best_cpu = std::max(best_cpu, flops / (process_cpu_seconds() - cpu0) * threads / 1e9);
  }
  Eigen::setNbThreads(previous);
  if (per_cpu_second) *per_cpu_second = best_cpu;
  return best;
}

BenchResult run_bench(Backend& backend, const BenchOptions& options) {
  const ModelConfig& c = backend.config();
  if (options.prompt_tokens < 1 || options.gen_tokens < 1 || options.runs < 1)
    fail("bench: --prompt-tokens, --gen-tokens and --runs must be at least 1");
  const int64_t total = int64_t(options.prompt_tokens) + options.gen_tokens;
  if (c.max_position_embeddings > 0 && total > c.max_position_embeddings)
    fail("bench: ", options.prompt_tokens, " prompt + ", options.gen_tokens, " generated tokens exceed the model's context of ",
         c.max_position_embeddings);

  BenchResult r;
  r.threads = resolve_threads(options.threads);
  r.prompt_tokens = options.prompt_tokens, r.gen_tokens = options.gen_tokens, r.runs = options.runs;
  r.load_average = load_average();
  r.ceilings_measured = options.measure_ceilings;

  // What one token costs: every weight matrix is read once per decode step; prefill does
  // 2 FLOPs per weight per token, plus attention (q.k and weights.v over the causal triangle).
  const double E = double(c.hidden_size), F = double(c.intermediate_size), D = double(c.head_dim);
  const double H = double(c.num_heads), KVH = double(c.num_kv_heads), V = double(c.vocab_size), L = double(c.num_layers);
  const double layer_params = E * H * D + 2 * E * KVH * D + H * D * E + 3 * E * F;  // the matrices
  const double layer_vectors = 2 * E + (c.attention_bias ? H * D + 2 * KVH * D : 0) + (c.qk_norm ? 2 * D : 0);
  const double T = options.prompt_tokens;
  // f32 as computed; the embedding table is not read (one row per token) unless it is the LM head
  r.decode_bytes_per_token = options.weight_bytes_per_token > 0
                                 ? options.weight_bytes_per_token
                                 : 4.0 * (L * (layer_params + layer_vectors) + E + V * E);
  r.prefill_path = options.prefill_path;
  r.prefill_flops = 2.0 * L * layer_params * T + 2.0 * 2.0 * L * H * D * T * (T + 1) / 2 + 2.0 * V * E;

  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(options.prompt_tokens));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(c.vocab_size));

  const int64_t block_size = 16;
  const int64_t blocks = (total + block_size - 1) / block_size;
  backend.allocate_kv_cache(blocks, block_size);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);

  // warm-up: one prefill of the measured length and one decode step, untimed. A 1-token step
  // touches every weight page but not the prefill's panels, packed inputs and scratch, whose first
  // touch made the first timed prefill the slowest run (up to 25 % on the 1.1B shape).
  ForwardBatch warm;
  warm.sequences.push_back({0, prompt, 0, table, false});
  backend.forward(warm);
  ForwardBatch warm_step;
  warm_step.sequences.push_back({0, {prompt[0]}, options.prompt_tokens, table, false});
  backend.forward(warm_step);
  r.resident_engine_peak = process_memory().resident_peak;

  std::unique_ptr<ReadBandwidthProbe> probe;
  if (options.measure_ceilings) probe = std::make_unique<ReadBandwidthProbe>(r.threads, options.probe_bytes);

  std::vector<double> prefill_rates, decode_rates, bandwidths, fractions, prefill_cpu_rates, decode_cpu_rates;
  std::vector<double> step_fractions;  // per decode step: its bytes per second / the probe part read right after it
  int64_t probe_part = 0;
  double decode_seconds = 0;
  cpu::DecodeProductSplit products;
  cpu::PrefillProductTimes prefill_products;
  cpu::AttentionTimes prefill_attention, decode_attention;
  double prefill_seconds_total = 0;
  for (int run = 0; run < options.runs; ++run) {
    ForwardBatch batch;
    batch.sequences.push_back({0, prompt, 0, table, false});
    cpu::start_timing_prefill_products();
    cpu::start_timing_attention();
    auto t0 = Clock::now();
    double cpu0 = process_cpu_seconds();
    ForwardOutput out = backend.forward(batch);
    const double prefill_seconds = seconds_since(t0);
    prefill_products += cpu::stop_timing_prefill_products();
    prefill_attention += cpu::stop_timing_attention();
    prefill_seconds_total += prefill_seconds;
    prefill_rates.push_back(T / prefill_seconds);
    prefill_cpu_rates.push_back(T / (process_cpu_seconds() - cpu0) * r.threads);

    const float* last = out.last_row(0);
    int32_t next = int32_t(std::max_element(last, last + c.vocab_size) - last);
    double run_decode_seconds = 0, probe_cpu_seconds = 0;  // the steps' own time (the probe parts between them apart)
    cpu0 = process_cpu_seconds();
    cpu::start_timing_decode_products();
    cpu::start_timing_attention();
    for (int g = 0; g < options.gen_tokens; ++g) {
      t0 = Clock::now();
      ForwardBatch step;
      step.sequences.push_back({0, {next}, options.prompt_tokens + g, table, false});
      out = backend.forward(step);
      last = out.last_row(0);
      next = int32_t(std::max_element(last, last + c.vocab_size) - last);
      const double step_seconds = seconds_since(t0);
      run_decode_seconds += step_seconds;
      if (probe) {
        const double probe_cpu0 = process_cpu_seconds();
        const double gb_s = probe->measure_part(probe_part++);
        probe_cpu_seconds += process_cpu_seconds() - probe_cpu0;
        step_fractions.push_back(r.decode_bytes_per_token / step_seconds / (gb_s * 1e9));
      }
    }
    const cpu::DecodeProductSplit run_products = cpu::stop_timing_decode_products();
    decode_attention += cpu::stop_timing_attention();
    decode_seconds += run_decode_seconds;
    products.static_split += run_products.static_split;
    products.stealing += run_products.stealing;
    decode_rates.push_back(options.gen_tokens / run_decode_seconds);
    decode_cpu_rates.push_back(options.gen_tokens / (process_cpu_seconds() - cpu0 - probe_cpu_seconds) * r.threads);
    if (probe) {
      bandwidths.push_back(probe->measure());
      fractions.push_back(decode_rates.back() / (bandwidths.back() * 1e9 / r.decode_bytes_per_token));
    }
  }
  const double product_seconds = products.static_split.seconds + products.stealing.seconds;
  if (product_seconds > 0 && decode_seconds > 0) {
    r.decode_product_share = product_seconds / decode_seconds;
    r.decode_product_gb_s = (products.static_split.weight_bytes + products.stealing.weight_bytes) / product_seconds / 1e9;
    if (products.static_split.seconds > 0 && products.stealing.seconds > 0) {
      r.decode_static_split_gb_s = products.static_split.weight_bytes / products.static_split.seconds / 1e9;
      r.decode_stealing_gb_s = products.stealing.weight_bytes / products.stealing.seconds / 1e9;
    }
  }
  if (prefill_attention.seconds > 0 && prefill_seconds_total > 0) {
    r.prefill_attention_share = prefill_attention.seconds / prefill_seconds_total;
    r.prefill_attention_gflop_s = prefill_attention.flops / prefill_attention.seconds / 1e9;
  }
  if (decode_attention.seconds > 0 && decode_seconds > 0) {
    r.decode_attention_share = decode_attention.seconds / decode_seconds;
    r.decode_attention_gb_s = decode_attention.kv_bytes / decode_attention.seconds / 1e9;
  }
  if (prefill_products.seconds > 0 && prefill_seconds_total > 0) {
    r.prefill_product_share = prefill_products.seconds / prefill_seconds_total;
    r.prefill_product_gflop_s = prefill_products.flops / prefill_products.seconds / 1e9;
    r.prefill_threads_busy = prefill_products.thread_seconds / prefill_products.thread_capacity;
  }
  r.prefill_tok_s = spread(prefill_rates);
  r.decode_tok_s = spread(decode_rates);
  r.prefill_cpu_tok_s = spread(prefill_cpu_rates);
  r.decode_cpu_tok_s = spread(decode_cpu_rates);

  if (options.measure_ceilings) {
    r.bandwidth_runs_gb_s = spread(bandwidths);
    r.decode_fraction = spread(fractions);
    r.decode_step_fraction = spread(step_fractions);
    std::sort(step_fractions.begin(), step_fractions.end());
    const size_t steps = step_fractions.size();
    r.decode_step_fraction_q1 = step_fractions[steps / 4];
    r.decode_step_fraction_q3 = step_fractions[std::min(steps - 1, 3 * steps / 4)];
    r.bandwidth_gb_s = r.bandwidth_runs_gb_s.median;
    r.gemm_gflop_s = measure_gemm_gflops(r.threads, options.prompt_tokens, c.hidden_size, c.intermediate_size,
                                         &r.gemm_cpu_gflop_s);
    r.f32_fma_gflop_s = peak_on_threads(cpu::kernels::PeakKind::F32Fma, r.threads) / 1e9;
    r.bf16_dot_gflop_s = peak_on_threads(cpu::kernels::PeakKind::Bf16Dot, r.threads) / 1e9;
    r.int8_dot_gop_s = peak_on_threads(cpu::kernels::PeakKind::Int8Dot, r.threads) / 1e9;
    r.int8_block_dot_gop_s = peak_on_threads(cpu::kernels::PeakKind::Int8BlockDot, r.threads) / 1e9;
    r.amx_bf16_gflop_s = peak_on_threads(cpu::kernels::PeakKind::AmxBf16, r.threads) / 1e9;
    // oneDNN's GEMM on the prefill path's instructions, where it has them on this CPU (bf16 needs
    // AVX-512 in oneDNN 2.6; without it the basis says so and the estimate stands in)
    const DType onednn_type = r.prefill_path == "int8-lanes" ? DType::U8
                              : r.prefill_path == "f32"      ? DType::F32
                                                             : DType::BF16;
    r.onednn_type = std::string(dtype_name(onednn_type));
    if (cpu::onednn::supports(onednn_type)) {
      const cpu::onednn::MatmulRate rate =
          cpu::onednn::measure(r.threads, options.prompt_tokens, c.hidden_size, c.intermediate_size, onednn_type, 0.3,
                               cpu::onednn::WeightLayout::Prepacked);
      r.onednn_gflop_s = rate.gflop_s;
      r.onednn_kernel = rate.implementation;
    }
  }
  r.resident_peak = process_memory().resident_peak;
  return r;
}

double decode_bytes_per_token(const ModelConfig& config, const WeightStore& weights) {
  const std::string embedding = weight_spec(config, WeightRole::token_embedding).name;
  const bool tied = config.tie_word_embeddings && !weights.has(weight_spec(config, WeightRole::lm_head).name);
  double bytes = 0;
  for (const WeightSpec& spec : model_weights(config)) {
    if (!weights.has(spec.name) || (spec.name == embedding && !tied)) continue;
    const TensorRef& t = weights.get(spec.name);
    bytes += spec.is_matrix() ? double(t.nbytes) : 4.0 * double(t.numel());  // vectors are kept in f32
  }
  return bytes;
}

std::string prefill_path(const WeightStore& weights) {
  double bytes[4] = {};  // matrix bytes per cpu::PrefillPath: the path most of them take sets the ceiling
  for (const auto& [name, t] : weights.all())
    if (t.shape.size() == 2) bytes[int(cpu::prefill_path_of(t.dtype, t.shape[1]))] += double(t.nbytes);
  const int most = int(std::max_element(bytes, bytes + 4) - bytes);
  switch (cpu::PrefillPath(most)) {
    case cpu::PrefillPath::AmxTiles: return "amx-bf16";
    case cpu::PrefillPath::Bf16Dot: return "bf16";
    case cpu::PrefillPath::Int8Lanes: return "int8-lanes";
    default: return "f32";
  }
}

std::string BenchResult::prefill_gemm_basis() const {
  const std::string type = onednn_type == "u8" ? "int8" : onednn_type;
  if (onednn_gflop_s > 0) return "oneDNN " + type + " matmul " + onednn_kernel + ", weight prepacked";
  const std::string why = cpu::onednn::available() ? "no oneDNN " + type + " matmul on this CPU" : "no oneDNN";
  if (prefill_path == "f32") return "Eigen's f32 GEMM (" + why + ")";
  const char* peak = prefill_path == "int8-lanes" ? "int8" : prefill_path == "amx-bf16" ? "AMX" : "bf16";
  return why + ": " + peak + " peak x Eigen GEMM / f32 FMA peak";
}

std::string format_bench_table(const BenchResult& r) {
  char line[512];
  std::ostringstream out;
  auto row = [&](const char* name, const Spread& s, double ceiling, const char* ceiling_name) {
    std::snprintf(line, sizeof line, "%-8s %9.2f tok/s  (%.2f .. %.2f)   %5.1f%% of %-9s ceiling %.2f tok/s\n", name,
                  s.median, s.min, s.max, 100.0 * s.median / ceiling, ceiling_name, ceiling);
    out << line;
  };
  const double gb = 1e9;
  out << "model    " << r.model << "\n";
  if (!r.weight_types.empty()) out << "weights  " << r.weight_types << "\n";
  if (!r.cpu_kernels.empty()) out << "kernels  " << r.cpu_kernels << "\n";
  std::snprintf(line, sizeof line,
                "setup    %d threads, %d prompt tokens, %d generated tokens, %d runs, load average %.2f at start\n",
                r.threads, r.prompt_tokens, r.gen_tokens, r.runs, r.load_average);
  out << line;
  if (!r.ceilings_measured) {  // a device whose ceilings are not this machine's (a GPU): the rates alone
    std::snprintf(line, sizeof line, "model    %.3g GB of weights read per decoded token, %.3g GFLOP per prefill\n",
                  r.decode_bytes_per_token / gb, r.prefill_flops / gb);
    out << line;
    for (const auto& [name, s] : {std::pair{"prefill", r.prefill_tok_s}, std::pair{"decode", r.decode_tok_s}}) {
      std::snprintf(line, sizeof line, "%-8s %9.2f tok/s  (%.2f .. %.2f)\n", name, s.median, s.min, s.max);
      out << line;
    }
    if (!r.ceilings_skipped_why.empty())
      out << "ceilings not measured: " << r.ceilings_skipped_why << "\n";
    else
      out << "ceilings not measured: this machine's memory bandwidth and GEMM rate say nothing about this device "
             "(a GPU's: tests/cuda/cuda_bench, scripts/gpu-check.sh)\n";
    std::snprintf(line, sizeof line, "memory   load %.1f s (host)\n", r.load_seconds);
    out << line;
    return out.str();
  }
  std::snprintf(line, sizeof line,
                "machine  read bandwidth %.1f GB/s (%.1f .. %.1f, probed after each run), FP32 GEMM %.1f GFLOP/s "
                "(measured now)\n",
                r.bandwidth_gb_s, r.bandwidth_runs_gb_s.min, r.bandwidth_runs_gb_s.max, r.gemm_gflop_s);
  out << line;
  std::snprintf(line, sizeof line,
                "         dot-product peaks: f32 FMA %.0f GFLOP/s, bf16 (vdpbf16ps) %.0f GFLOP/s, int8 (vpdpbusd, AVX2: vpmaddubsw, Arm: sdot) %.0f "
                "GOP/s, bf16 AMX tiles (tdpbf16ps) %.0f GFLOP/s (0 = not on this CPU, or capped by JOURNEY_CPU_ISA)\n",
                r.f32_fma_gflop_s, r.bf16_dot_gflop_s, r.int8_dot_gop_s, r.amx_bf16_gflop_s);
  out << line;
  std::snprintf(line, sizeof line,
                "         int8 in blocks of 32 (the int8 dot, then per block a convert, a multiply by the two scales "
                "and an FMA: the least a block type adds) %.0f GOP/s\n",
                r.int8_block_dot_gop_s);
  out << line;
  std::snprintf(line, sizeof line, "model    %.3g GB of weights read per decoded token, %.3g GFLOP per prefill\n",
                r.decode_bytes_per_token / gb, r.prefill_flops / gb);
  out << line;
  const std::string gemm_basis = r.prefill_gemm_basis();
  std::snprintf(line, sizeof line,
                "prefill  compute path %s: GEMM %.1f GFLOP/s (%s); a prefill needs %.3f s of GEMM and %.3f s to "
                "read the weights once: %s-bound\n",
                r.prefill_path.c_str(), r.prefill_gemm_gflop_s(), gemm_basis.c_str(), r.prefill_compute_seconds(),
                r.prefill_memory_seconds(), r.prefill_compute_seconds() >= r.prefill_memory_seconds() ? "compute" : "memory");
  out << line;
  row("prefill", r.prefill_tok_s, r.prefill_ceiling_tok_s(), "GEMM");
  if (r.prefill_instruction_peak_gflop_s() > 0) {
    std::snprintf(line, sizeof line, "prefill  at %.1f GFLOP/s: %.1f%% of the %s path's instruction peak (%.0f GFLOP/s)\n",
                  r.prefill_gflop_s(), 100.0 * r.prefill_gflop_s() / r.prefill_instruction_peak_gflop_s(),
                  r.prefill_path.c_str(), r.prefill_instruction_peak_gflop_s());
    out << line;
  }
  if (r.prefill_block_arithmetic_peak_gflop_s() > 0) {
    std::snprintf(line, sizeof line,
                  "prefill  at %.1f GFLOP/s: %.1f%% of the block arithmetic's peak (%.0f GOP/s: int8 in blocks of 32, "
                  "which no exact block product passes; oneDNN's int8 GEMM has one scale per tensor)\n",
                  r.prefill_gflop_s(), 100.0 * r.prefill_gflop_s() / r.prefill_block_arithmetic_peak_gflop_s(),
                  r.prefill_block_arithmetic_peak_gflop_s());
    out << line;
  }
  row("decode", r.decode_tok_s, r.decode_ceiling_tok_s(), "bandwidth");
  std::snprintf(line, sizeof line,
                "per CPU-second x %d threads (the threads' own work, whatever else runs): prefill %.2f tok/s "
                "(%.1f%% of the GEMM ceiling per CPU-second, %.1f tok/s), decode %.2f tok/s (%.1f%% of bandwidth)\n",
                r.threads, r.prefill_cpu_tok_s.median, 100.0 * r.prefill_cpu_tok_s.median / r.prefill_cpu_ceiling_tok_s(),
                r.prefill_cpu_ceiling_tok_s(), r.decode_cpu_tok_s.median,
                100.0 * r.decode_cpu_tok_s.median / r.decode_ceiling_tok_s());
  out << line;
  std::snprintf(line, sizeof line,
                "decode / bandwidth ceiling, each run against its own probe: %.1f%% (%.1f .. %.1f%%)\n",
                100.0 * r.decode_fraction.median, 100.0 * r.decode_fraction.min, 100.0 * r.decode_fraction.max);
  out << line;
  std::snprintf(line, sizeof line,
                "decode / bandwidth, each step against a probe part read right after it: %.1f%% (quartiles %.1f .. "
                "%.1f%%, %zu steps)\n",
                100.0 * r.decode_step_fraction.median, 100.0 * r.decode_step_fraction_q1,
                100.0 * r.decode_step_fraction_q3, size_t(r.runs) * size_t(r.gen_tokens));
  out << line;
  if (r.prefill_product_share > 0) {
    std::snprintf(line, sizeof line,
                  "prefill  products %.1f%% of prefill time, at %.1f GFLOP/s inside them (%.1f%% of the GEMM "
                  "ceiling); the threads busy %.1f%% of the products' time\n",
                  100.0 * r.prefill_product_share, r.prefill_product_gflop_s,
                  100.0 * r.prefill_product_gflop_s / r.prefill_gemm_gflop_s(), 100.0 * r.prefill_threads_busy);
    out << line;
  }
  if (r.decode_product_share > 0) {
    std::snprintf(line, sizeof line,
                  "decode   products %.1f%% of decode time; the weights streamed at %.1f GB/s inside them (%.1f%% of "
                  "the probe's median)\n",
                  100.0 * r.decode_product_share, r.decode_product_gb_s, 100.0 * r.decode_product_gb_s / r.bandwidth_gb_s);
    out << line;
  }
  // a rate and, where its ceiling was measured, its share of that ceiling, then the line's end
  auto against = [&](double rate, double ceiling, const char* ceiling_name) {
    if (ceiling > 0) {
      std::snprintf(line, sizeof line, " (%.1f%% of %s)", 100.0 * rate / ceiling, ceiling_name);
      out << line;
    }
    out << "\n";
  };
  if (r.prefill_attention_share > 0) {
    std::snprintf(line, sizeof line, "prefill  attention %.1f%% of prefill time, at %.1f GFLOP/s",
                  100.0 * r.prefill_attention_share, r.prefill_attention_gflop_s);
    out << line;
    against(r.prefill_attention_gflop_s, r.f32_fma_gflop_s, "the f32 FMA peak");
  }
  if (r.decode_attention_share > 0) {
    std::snprintf(line, sizeof line,
                  "decode   attention %.1f%% of decode time (%lld to %lld positions); K and V read at %.1f GB/s inside it",
                  100.0 * r.decode_attention_share, (long long)r.prompt_tokens + 1,
                  (long long)r.prompt_tokens + r.gen_tokens, r.decode_attention_gb_s);
    out << line;
    against(r.decode_attention_gb_s, r.bandwidth_gb_s, "the probe's median");
  }
  if (r.decode_stealing_gb_s > 0) {
    std::snprintf(line, sizeof line,
                  "decode   rows shared statically %.1f GB/s, by work stealing %.1f GB/s (JOURNEY_DECODE_STEAL=alternate: "
                  "one or the other per product, at random)\n",
                  r.decode_static_split_gb_s, r.decode_stealing_gb_s);
    out << line;
  }
  std::snprintf(line, sizeof line,
                "memory   load %.1f s; resident after load %.2f GB (model file %.2f GB), peak %.2f GB with the KV "
                "cache and buffers (%.2f GB once the bandwidth probe and GEMM ceilings had run)\n",
                r.load_seconds, double(r.resident_after_load) / gb, double(r.model_file_bytes) / gb,
                double(r.resident_engine_peak) / gb, double(r.resident_peak) / gb);
  out << line;
  return out.str();
}

nlohmann::json bench_json(const BenchResult& r) {
  auto spread_json = [](const Spread& s) { return nlohmann::json{{"median", s.median}, {"min", s.min}, {"max", s.max}}; };
  nlohmann::json j = {{"model", r.model},
          {"threads", r.threads},
          {"prompt_tokens", r.prompt_tokens},
          {"gen_tokens", r.gen_tokens},
          {"runs", r.runs},
          {"load_average_at_start", r.load_average},
          {"load_seconds", r.load_seconds},
          {"read_bandwidth_gb_s", r.bandwidth_gb_s},
          {"gemm_gflop_s", r.gemm_gflop_s},
          {"decode_bytes_per_token", r.decode_bytes_per_token},
          {"prefill_flops", r.prefill_flops},
          {"prefill_tok_s", spread_json(r.prefill_tok_s)},
          {"decode_tok_s", spread_json(r.decode_tok_s)},
          {"prefill_tok_s_per_cpu_second_x_threads", spread_json(r.prefill_cpu_tok_s)},
          {"decode_tok_s_per_cpu_second_x_threads", spread_json(r.decode_cpu_tok_s)},
          {"prefill_ceiling_tok_s", r.prefill_ceiling_tok_s()},
          {"decode_ceiling_tok_s", r.decode_ceiling_tok_s()},
          {"prefill_fraction_of_ceiling", r.prefill_tok_s.median / r.prefill_ceiling_tok_s()},
          {"decode_fraction_of_ceiling", r.decode_tok_s.median / r.decode_ceiling_tok_s()},
          {"read_bandwidth_runs_gb_s", spread_json(r.bandwidth_runs_gb_s)},
          {"decode_fraction_of_ceiling_per_run", spread_json(r.decode_fraction)},
          {"decode_fraction_of_ceiling_per_step",
           {{"median", r.decode_step_fraction.median}, {"min", r.decode_step_fraction.min},
            {"max", r.decode_step_fraction.max}, {"q1", r.decode_step_fraction_q1}, {"q3", r.decode_step_fraction_q3}}},
          {"f32_fma_gflop_s", r.f32_fma_gflop_s},
          {"bf16_dot_gflop_s", r.bf16_dot_gflop_s},
          {"int8_dot_gop_s", r.int8_dot_gop_s},
          {"int8_block_dot_gop_s", r.int8_block_dot_gop_s},
          {"amx_bf16_gflop_s", r.amx_bf16_gflop_s},
          {"onednn_gflop_s", r.onednn_gflop_s},
          {"onednn_kernel", r.onednn_kernel},
          {"onednn_type", r.onednn_type},
          {"prefill_gemm_basis", r.prefill_gemm_basis()},
          {"prefill_compute_seconds", r.prefill_compute_seconds()},
          {"prefill_memory_seconds", r.prefill_memory_seconds()},
          {"prefill_path", r.prefill_path},
          {"prefill_gemm_ceiling_gflop_s", r.prefill_gemm_gflop_s()},
          {"prefill_gflop_s", r.prefill_gflop_s()},
          {"prefill_instruction_peak_gflop_s", r.prefill_instruction_peak_gflop_s()},
          {"prefill_block_arithmetic_peak_gflop_s", r.prefill_block_arithmetic_peak_gflop_s()},
          {"gemm_gflop_s_per_cpu_second_x_threads", r.gemm_cpu_gflop_s},
          {"prefill_ceiling_tok_s_per_cpu_second_x_threads", r.prefill_cpu_ceiling_tok_s()},
          {"weight_types", r.weight_types},
          {"cpu_kernels", r.cpu_kernels},
          {"model_file_bytes", r.model_file_bytes},
          {"resident_after_load_bytes", r.resident_after_load},
          {"resident_engine_peak_bytes", r.resident_engine_peak},
          {"resident_peak_bytes", r.resident_peak},
          {"prefill_product_share", r.prefill_product_share},
          {"prefill_product_gflop_s", r.prefill_product_gflop_s},
          {"prefill_threads_busy", r.prefill_threads_busy},
          {"decode_product_share", r.decode_product_share},
          {"decode_product_gb_s", r.decode_product_gb_s},
          {"prefill_attention_share", r.prefill_attention_share},
          {"prefill_attention_gflop_s", r.prefill_attention_gflop_s},
          {"decode_attention_share", r.decode_attention_share},
          {"decode_attention_gb_s", r.decode_attention_gb_s},
          {"decode_static_split_gb_s", r.decode_static_split_gb_s},
          {"decode_stealing_gb_s", r.decode_stealing_gb_s},
          {"ceilings_measured", r.ceilings_measured}};
  if (!r.ceilings_measured)  // no ceiling, no fraction of one (null, not a division by zero)
    for (const char* key : {"read_bandwidth_gb_s", "gemm_gflop_s", "prefill_ceiling_tok_s", "decode_ceiling_tok_s",
                            "prefill_fraction_of_ceiling", "decode_fraction_of_ceiling", "read_bandwidth_runs_gb_s",
                            "decode_fraction_of_ceiling_per_run", "decode_fraction_of_ceiling_per_step",
                            "prefill_gemm_ceiling_gflop_s", "prefill_instruction_peak_gflop_s",
                            "prefill_block_arithmetic_peak_gflop_s",
                            "prefill_compute_seconds", "prefill_memory_seconds",
                            "gemm_gflop_s_per_cpu_second_x_threads", "prefill_ceiling_tok_s_per_cpu_second_x_threads"})
      j[key] = nullptr;
  return j;
}

}  // namespace journey
