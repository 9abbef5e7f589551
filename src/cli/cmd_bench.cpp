// journey bench — prefill and decode speed of the CPU reference on a model, next to the ceilings
// this machine allows (memory bandwidth for decode, FP32 GEMM rate for prefill), measured in the
// same run. Make a model of a real shape with tools/make_random_model.py (see docs/performance.md).
#include <chrono>
#include <iostream>

#include "assets/model.h"
#include "cli/backend_select.h"
#include "cli/commands.h"
#include "core/error.h"
#include "cpu/bench.h"
#include "cpu/cpu_backend.h"

namespace journey::cli {

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode speed against this machine's ceilings");
  struct Args {
    std::string model;
    std::string device = "cpu";
    BenchOptions options;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--model", args->model, "model directory or file (default: the shipped model)");
  cmd->add_option("--prompt-tokens", args->options.prompt_tokens, "tokens in the prefill")->default_val(128);
  cmd->add_option("--gen-tokens", args->options.gen_tokens, "greedy decode steps")->default_val(64);
  cmd->add_option("--threads", args->options.threads, "threads (0 = all cores)")->default_val(0);
  cmd->add_option("--runs", args->options.runs, "repetitions; the median and range are reported")->default_val(3);
  cmd->add_option("--device", args->device, device_flag_help())->capture_default_str();
  cmd->add_flag("--json", args->json, "print JSON instead of a table");
  cmd->callback([args] {
    const std::string path = args->model.empty() ? default_model_path() : args->model;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Backend> backend;
    {
      LoadedModel model = load_model(path);  // released once the backend holds its f32 copy
      backend = make_backend(model, args->device, args->options.threads);
    }
    const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BenchResult result = run_bench(*backend, args->options);
    result.model = path;
    result.load_seconds = load_seconds;
    if (args->json)
      std::cout << bench_json(result).dump(2) << "\n";
    else
      std::cout << format_bench_table(result);
  });
}

}  // namespace journey::cli
