// journey bench — prefill and decode speed of a backend (the fast CPU one by default) on a model, next to the ceilings
// this machine allows (memory bandwidth for decode, FP32 GEMM rate for prefill), measured in the
// same run. Make a model of a real shape with tools/make_random_model.py (see docs/performance.md).
// --json-schema FILE adds structured output's cost: the token mask per generated token on the
// model's tokenizer, as a fraction of the decode step measured in the same run
// (docs/structured-output.md).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "assets/model.h"
#include "cli/backend_select.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/untrusted.h"
#include "grammar/bench.h"
#include "text/tokenizer.h"
#include "cpu/bench.h"
#include "cpu/kernels.h"
#include "cpu/cpu_backend.h"
#include "parallel/tensor_parallel.h"

namespace journey::cli {

namespace {

// --json-schema: the mask's cost per token on the model's own tokenizer (grammar/bench.h).
GrammarBenchResult bench_grammar_mask(const std::string& model_path, const std::string& schema, int64_t vocab_size,
                                      int64_t steps) {
  const auto tokenizer = load_tokenizer(model_path);
  const Grammar grammar =
      schema == "object" ? Grammar::json_object()
                         : Grammar::json_schema(parse_untrusted_json<nlohmann::ordered_json>(read_whole_file(schema), schema), schema);
  const auto start = std::chrono::steady_clock::now();
  auto trie = std::make_shared<const TokenTrie>(*tokenizer, vocab_size);
  const double trie_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::vector<int> eos = tokenizer->eos_ids();
  GrammarBenchResult r = run_grammar_bench(grammar, trie, std::vector<int32_t>(eos.begin(), eos.end()), steps, 1);
  r.trie_build_ms = trie_ms;
  return r;
}

nlohmann::json grammar_json(const GrammarBenchResult& g, const std::string& schema, double step_ms) {
  return {{"schema", schema}, {"steps", g.steps}, {"outputs", g.outputs}, {"trie_build_ms", g.trie_build_ms},
          {"mean_ms", g.mean_ms}, {"median_ms", g.median_ms}, {"p90_ms", g.p90_ms}, {"max_ms", g.max_ms},
          {"mean_allowed_ids", g.mean_allowed}, {"cached_fraction", g.cached_fraction}, {"decode_step_ms", step_ms},
          {"fraction_of_decode_step", step_ms > 0 ? g.mean_ms / step_ms : 0.0}};
}

// The bench's JSON with a "grammar_mask" object when the mask was measured.
nlohmann::json with_grammar(nlohmann::json out, const std::optional<GrammarBenchResult>& g, const std::string& schema,
                            double step_ms) {
  if (g) out["grammar_mask"] = grammar_json(*g, schema, step_ms);
  return out;
}

void print_grammar(const GrammarBenchResult& g, const std::string& schema, double step_ms) {
  std::printf("grammar mask (%s): %lld tokens, %lld outputs; per token mean %.3f ms, median %.3f, p90 %.3f, max %.3f;\n"
              "  %.0f ids allowed on average, %.0f %% of masks from the state cache, trie built in %.1f ms;\n"
              "  mean = %.3g %% of this run's decode step (%.2f ms)\n",
              schema.c_str(), static_cast<long long>(g.steps), static_cast<long long>(g.outputs), g.mean_ms, g.median_ms,
              g.p90_ms, g.max_ms, g.mean_allowed, 100.0 * g.cached_fraction, g.trie_build_ms,
              step_ms > 0 ? 100.0 * g.mean_ms / step_ms : 0.0, step_ms);
}

// --bandwidth-only: the probe of run_bench (ReadBandwidthProbe, its default passes), alone.
void print_bandwidth_only(const BenchOptions& options, bool json) {
  ReadBandwidthProbe probe(options.threads, options.probe_bytes);
  const double gb_s = probe.measure();
  if (json) {
    std::cout << nlohmann::json{{"read_bandwidth_gb_s", gb_s}, {"threads", probe.threads()},
                                {"probe_bytes", options.probe_bytes}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("read bandwidth %.1f GB/s (the best of %d reads of %.1f GiB on %d thread%s)\n", gb_s,
                ReadBandwidthProbe::kPasses, double(options.probe_bytes) / double(size_t(1) << 30), probe.threads(),
                probe.threads() == 1 ? "" : "s");
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode speed against this machine's ceilings");
  struct Args {
    std::string model;
    std::string device = "cpu";
    BenchOptions options;
    BackendFlags backend;
    bool json = false;
    std::string json_schema;  // non-empty: also measure the grammar mask
    int64_t grammar_steps = 200;
    bool bandwidth_only = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--model", args->model, "model directory or file (default: the shipped model)");
  cmd->add_option("--prompt-tokens", args->options.prompt_tokens, "tokens in the prefill")->default_val(128);
  cmd->add_option("--gen-tokens", args->options.gen_tokens, "greedy decode steps")->default_val(64);
  cmd->add_option("--threads", args->options.threads, "threads (0 = all cores)")->default_val(0);
  cmd->add_option("--runs", args->options.runs, "repetitions; the median and range are reported")->default_val(3);
  cmd->add_option("--device", args->device, device_flag_help())->capture_default_str();
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->add_option("--json-schema", args->json_schema,
                  "also measure the structured-output mask per token for this JSON-schema file ('object': any JSON object)");
  cmd->add_option("--grammar-steps", args->grammar_steps, "masked tokens measured with --json-schema")->capture_default_str();
  cmd->add_flag("--bandwidth-only", args->bandwidth_only,
                "only the read-bandwidth probe that bench runs after each run's decode, no model (scripts/bench-peers.sh "
                "runs it right after each llama.cpp run)")
      ->excludes(cmd->get_option("--model"))
      ->excludes(cmd->get_option("--json-schema"))
      ->excludes(cmd->get_option("--device"));
  add_backend_flags(cmd, args->backend);
  cmd->callback([args] {
    if (args->bandwidth_only) return print_bandwidth_only(args->options, args->json);
    const std::string path = args->model.empty() ? default_model_path() : args->model;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Backend> backend;
    LoadInfo load;
    BenchOptions options = args->options;
    // the ceilings are this machine's (memory bandwidth, CPU GEMM): a GPU's rates are not set against them
    if (args->device.rfind("cuda", 0) == 0) options.measure_ceilings = false;
    // nor are a tensor-parallel group's: its ranks share this machine's cores and memory bandwidth
    if (args->backend.tensor_parallel > 1) options.measure_ceilings = false;
    {
      LoadedModel model = load_model(path);  // released once the backend holds what it needs (the mapping)
      load.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      BackendFlags flags = args->backend;
      flags.threads = args->options.threads;
      backend = make_backend(model, args->device, flags, &load);
      options.weight_bytes_per_token = decode_bytes_per_token(model.config, model.weights);
      options.prefill_path = args->device == "cpu" ? prefill_path(model.weights) : "f32";
    }
    reset_tensor_parallel_stats(*backend);  // count the bench's own steps only
    BenchResult result = run_bench(*backend, options);
    std::optional<GrammarBenchResult> grammar;
    if (!args->json_schema.empty())
      grammar = bench_grammar_mask(path, args->json_schema, backend->config().vocab_size, args->grammar_steps);
    const double step_ms = result.decode_tok_s.median > 0 ? 1000.0 / result.decode_tok_s.median : 0;
    result.model = path;
    result.load_seconds = load.seconds;
    result.resident_after_load = load.resident_bytes;
    result.model_file_bytes = load.file_bytes;
    result.weight_types = backend->stored_weight_types();
    if (backend->name() == "cpu") {
      result.cpu_kernels = cpu::kernels::kernel_choice();
      if (load.grouped_bytes > 0) {  // (CpuOptions::row_groups)
        char grouped[64];
        std::snprintf(grouped, sizeof grouped, ", rows regrouped by 8 (%.2f GB)", double(load.grouped_bytes) / 1e9);
        result.cpu_kernels += grouped;
      }
      if (load.block_sums_bytes > 0) {  // (CpuOptions::q8_0_block_sums)
        char sums[64];
        std::snprintf(sums, sizeof sums, ", Q8_0 block sums (%.2f GB)", double(load.block_sums_bytes) / 1e9);
        result.cpu_kernels += sums;
      }
    }
    if (args->backend.tensor_parallel > 1)
      result.ceilings_skipped_why = "the ranks of a tensor-parallel group share this machine's cores and memory "
                                    "bandwidth, so one process's ceilings do not bound the group";
    // Tensor parallelism: what the group sent, counted by its communicator over the whole bench.
    nlohmann::json tp = nullptr;
    std::string tp_lines;
    if (const auto s = tensor_parallel_stats(*backend); s && s->forward_steps > 0 && s->tokens > 0) {
      const CommunicatorCounters& c = s->communication;
      const double steps = double(s->forward_steps), tokens = double(s->tokens);
      tp = {{"ranks", args->backend.tensor_parallel},
            {"transport", s->transport},
            {"forward_steps", s->forward_steps},
            {"tokens", s->tokens},
            {"all_reduces", c.all_reduces},
            {"all_reduces_per_step", double(c.all_reduces) / steps},
            {"all_reduce_bytes_per_token", double(c.all_reduce_bytes) / tokens},
            {"logit_gather_bytes_per_step", double(c.gather_bytes) / steps},
            {"call_broadcast_bytes_per_step", double(c.broadcast_bytes) / steps}};
      char line[1024];
      std::snprintf(line, sizeof line,
                    "tensor parallel %d over %s: %lld forward steps, %lld tokens; %.1f all-reduces per step (2 per layer), "
                    "%.0f bytes all-reduced per token (each rank's buffer), %.0f logit bytes gathered to rank 0 per "
                    "step, %.0f bytes of calls broadcast per step\n",
                    args->backend.tensor_parallel, s->transport.c_str(), static_cast<long long>(s->forward_steps),
                    static_cast<long long>(s->tokens), double(c.all_reduces) / steps,
                    double(c.all_reduce_bytes) / tokens, double(c.gather_bytes) / steps,
                    double(c.broadcast_bytes) / steps);
      tp_lines = line;
    }
    if (args->json) {
      nlohmann::json j = with_grammar(bench_json(result), grammar, args->json_schema, step_ms);
      if (!tp.is_null()) j["tensor_parallel"] = tp;
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << format_bench_table(result) << tp_lines;
    }
    if (grammar && !args->json) print_grammar(*grammar, args->json_schema, step_ms);
  });
}

}  // namespace journey::cli
