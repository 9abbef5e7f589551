// journey bench's accounting (no timing is asserted): the bytes a decode step reads must be
// exactly the model's weights minus the embedding table (read one row per token) unless the
// embeddings are tied and double as the LM head.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "reference/random_model.h"
#include "cpu/bench.h"
#include "cpu/cpu_backend.h"
#include "cpu/kernels.h"

using namespace journey;

TEST_CASE("bench: bytes per decoded token = every weight except the (untied) embedding table, in f32") {
  for (std::string arch : {"llama", "qwen2", "qwen3"}) {
    CAPTURE(arch);
    auto model = testmodel::random_model(arch);
    double all = 0;
    for (const auto& [name, t] : model.weights.all()) all += double(t.numel());
    const double embed = double(model.weights.get("model.embed_tokens.weight").numel());
    const double expected = 4.0 * (model.config.tie_word_embeddings ? all : all - embed);
    auto backend = make_cpu_backend(model, {.threads = 1});
    BenchResult r = run_bench(*backend, {.prompt_tokens = 5, .gen_tokens = 3, .threads = 1, .runs = 1, .measure_ceilings = false});
    CHECK(r.decode_bytes_per_token == doctest::Approx(expected).epsilon(1e-12));
    CHECK(r.prefill_tok_s.min > 0);
    CHECK(r.decode_tok_s.min <= r.decode_tok_s.median);
    auto json = bench_json(r);
    CHECK(json["prompt_tokens"] == 5);
    CHECK(json.contains("decode_fraction_of_ceiling"));
    // without ceilings no rate is set against one: null in the JSON, no percentage in the table
    CHECK(json["decode_fraction_of_ceiling"].is_null());
    CHECK(json["prefill_instruction_peak_gflop_s"].is_null());
    CHECK(json["prefill_block_arithmetic_peak_gflop_s"].is_null());
    CHECK(json["ceilings_measured"] == false);
    const std::string table = format_bench_table(r);
    CHECK(table.find("ceilings not measured") != std::string::npos);
    CHECK(table.find('%') == std::string::npos);
  }
}

TEST_CASE("bench: with the ceilings measured, every run's decode has its own bandwidth probe") {
  // A small probe buffer (the real one is 2 GiB): only the bookkeeping is checked, not the speed.
  auto backend = make_cpu_backend(testmodel::random_model("llama"), {.threads = 2});
  // 24 prompt tokens: more than kSmallBatchTokens (16), so the prefill's products take the prefill path
  BenchResult r = run_bench(*backend, {.prompt_tokens = 24, .gen_tokens = 3, .threads = 2, .runs = 3,
                                       .measure_ceilings = true, .probe_bytes = size_t(8) << 20});
  CHECK(r.bandwidth_runs_gb_s.min > 0);
  CHECK(r.bandwidth_runs_gb_s.min <= r.bandwidth_runs_gb_s.median);
  CHECK(r.bandwidth_runs_gb_s.median <= r.bandwidth_runs_gb_s.max);
  CHECK(r.bandwidth_gb_s == r.bandwidth_runs_gb_s.median);
  CHECK(r.gemm_gflop_s > 0);
  // each fraction is that run's decode rate over that run's ceiling, so the median fraction lies
  // between the extremes of decode / ceiling over all pairings
  const double lowest = r.decode_tok_s.min * r.decode_bytes_per_token / (r.bandwidth_runs_gb_s.max * 1e9);
  const double highest = r.decode_tok_s.max * r.decode_bytes_per_token / (r.bandwidth_runs_gb_s.min * 1e9);
  CHECK(r.decode_fraction.median >= lowest * (1 - 1e-9));
  CHECK(r.decode_fraction.median <= highest * (1 + 1e-9));
  auto json = bench_json(r);
  CHECK(json["decode_fraction_of_ceiling_per_run"]["median"].get<double>() == doctest::Approx(r.decode_fraction.median));
  CHECK(json["read_bandwidth_runs_gb_s"]["max"].get<double>() == doctest::Approx(r.bandwidth_runs_gb_s.max));
  CHECK(json["ceilings_measured"] == true);
  const std::string table = format_bench_table(r);
  CHECK(table.find("each run against its own probe") != std::string::npos);
  // the decode products timed apart: a share of the decode time, a rate, and the line that says so
  CHECK(r.decode_product_share > 0);
  CHECK(r.decode_product_share <= 1);
  CHECK(r.decode_product_gb_s > 0);
  CHECK(json["decode_product_gb_s"].get<double>() == doctest::Approx(r.decode_product_gb_s));
  CHECK(table.find("inside them") != std::string::npos);
  // attention timed apart: a share of each phase's time that leaves room for the products', the
  // rate of its arithmetic and of its K and V reads, and the lines that say so
  CHECK(r.prefill_attention_share > 0);
  CHECK(r.prefill_attention_share + r.prefill_product_share <= 1);
  CHECK(r.prefill_attention_gflop_s > 0);
  CHECK(r.decode_attention_share > 0);
  CHECK(r.decode_attention_share + r.decode_product_share <= 1);
  CHECK(r.decode_attention_gb_s > 0);
  CHECK(json["decode_attention_gb_s"].get<double>() == doctest::Approx(r.decode_attention_gb_s));
  CHECK(json["prefill_attention_share"].get<double>() == doctest::Approx(r.prefill_attention_share));
  CHECK(table.find("prefill  attention") != std::string::npos);
  CHECK(table.find("K and V read at") != std::string::npos);
  // the prefill products timed apart: a share of the prefill time, a rate, the threads' busy share
  CHECK(r.prefill_product_share > 0);
  CHECK(r.prefill_product_share <= 1);
  CHECK(r.prefill_product_gflop_s > 0);
  CHECK(r.prefill_threads_busy > 0);
  CHECK(r.prefill_threads_busy <= 1 + 1e-9);
  CHECK(json["prefill_threads_busy"].get<double>() == doctest::Approx(r.prefill_threads_busy));
  CHECK(table.find("the threads busy") != std::string::npos);
  // the prefill's rate against its path's instruction peak (f32 FMA here: a random f32 model)
  CHECK(r.prefill_path == "f32");
  CHECK(r.prefill_instruction_peak_gflop_s() == r.f32_fma_gflop_s);
  CHECK(r.prefill_gflop_s() == doctest::Approx(r.prefill_tok_s.median * r.prefill_flops / 24 / 1e9));
  CHECK(json["prefill_instruction_peak_gflop_s"].get<double>() == doctest::Approx(r.f32_fma_gflop_s));
  CHECK(table.find("of the f32 path's instruction peak") != std::string::npos);
  // the block arithmetic's peak is measured wherever the int8 dot's is, and set against the
  // prefill on the int8-lanes path only (an f32 model here: no such line, 0 in the JSON)
  CHECK((r.int8_block_dot_gop_s > 0) == (r.int8_dot_gop_s > 0));
  CHECK(json["int8_block_dot_gop_s"].get<double>() == doctest::Approx(r.int8_block_dot_gop_s));
  CHECK(json["prefill_block_arithmetic_peak_gflop_s"].get<double>() == 0);
  CHECK(table.find("of the block arithmetic's peak") == std::string::npos);
  // and every decode step its own probe part right after it: 3 runs x 3 steps of pairs, ordered
  const Spread& steps = r.decode_step_fraction;
  CHECK(steps.min > 0);
  CHECK(steps.min <= r.decode_step_fraction_q1);
  CHECK(r.decode_step_fraction_q1 <= steps.median);
  CHECK(steps.median <= r.decode_step_fraction_q3);
  CHECK(r.decode_step_fraction_q3 <= steps.max);
  CHECK(json["decode_fraction_of_ceiling_per_step"]["q3"].get<double>() == doctest::Approx(r.decode_step_fraction_q3));
  CHECK(table.find("each step against a probe part read right after it") != std::string::npos);
  CHECK(table.find("9 steps") != std::string::npos);
}

TEST_CASE("bench: a probe part reads its share of the buffer, whatever part number it is given") {
  ReadBandwidthProbe probe(2, size_t(8) << 20);
  for (int64_t part : {0, 7, 8, 13}) {
    CAPTURE(part);
    const double gb_s = probe.measure_part(part, 8);
    CHECK(std::isfinite(gb_s));
    CHECK(gb_s > 0);
  }
}

TEST_CASE("bench: the engine's peak memory is taken before the bandwidth probe's buffer, the final peak after") {
  // The peer table (tools/python/bench_peers.py) sets the engine's peak beside llama.cpp's: the 2 GiB
  // probe must not be in it. Linux resets this process's VmHWM when "5" is written to clear_refs,
  // so the probe's pages (written once, all resident) must show in the final peak only.
  auto backend = make_cpu_backend(testmodel::random_model("llama"), {.threads = 1});
  const size_t probe_bytes = size_t(128) << 20;
  const bool reset = bool(std::ofstream("/proc/self/clear_refs") << "5");
  BenchResult r = run_bench(*backend, {.prompt_tokens = 4, .gen_tokens = 2, .threads = 1, .runs = 1,
                                       .measure_ceilings = true, .probe_bytes = probe_bytes});
  REQUIRE(r.resident_engine_peak > 0);
  CHECK(r.resident_after_load <= r.resident_engine_peak);
  CHECK(r.resident_engine_peak <= r.resident_peak);
  if (reset) CHECK(r.resident_peak - r.resident_engine_peak >= int64_t(probe_bytes) * 9 / 10);
  else MESSAGE("/proc/self/clear_refs not writable here: the peak could not be reset, the probe's share is not checked");
  CHECK(bench_json(r)["resident_engine_peak_bytes"] == r.resident_engine_peak);
  CHECK(format_bench_table(r).find("peak ") != std::string::npos);
}

TEST_CASE("bench: a ReadBandwidthProbe can be measured again and again") {
  ReadBandwidthProbe probe(2, size_t(4) << 20);
  for (int i = 0; i < 3; ++i) CHECK(probe.measure(2) > 0);
}

TEST_CASE("bench: a run longer than the model's context is refused with the numbers") {
  auto backend = make_cpu_backend(testmodel::random_model("llama"), {.threads = 1});
  CHECK_THROWS_WITH_AS(run_bench(*backend, {.prompt_tokens = 60, .gen_tokens = 10}),
                       doctest::Contains("60 prompt + 10 generated tokens exceed the model's context of 64"), Error);
}

TEST_CASE("bench: bytes per decoded token as stored: f16 matrices count 2 bytes a weight, norms 4") {
  const ModelConfig config = testmodel::tiny_config("llama");  // untied: the embedding is not read
  const auto values = testmodel::random_values(config, 3);
  const LoadedModel f16 = testmodel::make_model(config, values, DType::F16);
  double expected = 0;
  for (const auto& [shape, v] : values)
    if (shape.name != "model.embed_tokens.weight") expected += (shape.is_norm ? 4.0 : 2.0) * double(v.size());
  CHECK(decode_bytes_per_token(config, f16.weights) == doctest::Approx(expected).epsilon(1e-12));
  CHECK(weight_type_summary(f16.weights).find("f16 x ") != std::string::npos);
  CHECK(prefill_path(testmodel::make_model(config, values).weights) == "f32");  // f32 weights: Eigen's GEMM
}

TEST_CASE("bench: the prefill ceiling is a roofline — the longer of its GEMM time and one read of the weights") {
  BenchResult r;
  r.prompt_tokens = 128;
  r.prefill_flops = 256e9;            // 2 GFLOP per token
  r.decode_bytes_per_token = 2e9;     // the weights, read once per prefill too
  r.bandwidth_gb_s = 20;              // 0.1 s to read them
  r.gemm_gflop_s = 100;               // Eigen's f32 GEMM
  r.f32_fma_gflop_s = 200;            // Eigen reaches half the f32 FMA peak
  r.prefill_path = "f32";             // 2.56 s of GEMM: compute-bound
  CHECK(r.prefill_ceiling_tok_s() == doctest::Approx(128 / 2.56));
  CHECK(r.prefill_gemm_basis().find("Eigen's f32 GEMM") == 0);
  r.prefill_path = "amx-bf16";
  r.amx_bf16_gflop_s = 8000;          // half of it: 4000 GFLOP/s, 0.064 s of GEMM < 0.1 s of reading
  CHECK(r.prefill_gemm_gflop_s() == doctest::Approx(4000));
  CHECK(r.prefill_ceiling_tok_s() == doctest::Approx(128 / 0.1));
  r.onednn_gflop_s = 1000;            // oneDNN's bf16 GEMM, measured: it is the rate (0.256 s > 0.1 s)
  r.onednn_type = "bf16";
  CHECK(r.prefill_gemm_gflop_s() == doctest::Approx(1000));
  CHECK(r.prefill_ceiling_tok_s() == doctest::Approx(128 / 0.256));
  r.onednn_gflop_s = 0;
  r.amx_bf16_gflop_s = 0;             // no AMX measured: Eigen's rate, not a made-up one
  CHECK(r.prefill_gemm_gflop_s() == doctest::Approx(100));
  r.prefill_path = "int8-lanes";      // the integer token lanes: the int8 peak x Eigen / FMA without oneDNN
  r.int8_dot_gop_s = 1200;
  CHECK(r.prefill_gemm_gflop_s() == doctest::Approx(600));
  r.onednn_gflop_s = 400;             // oneDNN's int8 GEMM, measured
  r.onednn_type = "u8";
  CHECK(r.prefill_gemm_gflop_s() == doctest::Approx(400));
  CHECK(r.prefill_gemm_basis().find("oneDNN int8 matmul") == 0);
  // beside the GEMM: the block arithmetic's own peak, on this path only
  r.int8_block_dot_gop_s = 900;
  CHECK(r.prefill_block_arithmetic_peak_gflop_s() == 900);
  r.prefill_path = "bf16";
  CHECK(r.prefill_block_arithmetic_peak_gflop_s() == 0);
}

TEST_CASE("bench: the int8 peaks, with and without the blocks' work, are there or not together") {
  using cpu::kernels::PeakKind;
  const double int8 = cpu::kernels::peak_rate(PeakKind::Int8Dot, 0.02);
  const double blocks = cpu::kernels::peak_rate(PeakKind::Int8BlockDot, 0.02);
  CAPTURE(int8);
  CAPTURE(blocks);
  CHECK(std::isfinite(blocks));
  CHECK((blocks > 0) == (int8 > 0));
}
