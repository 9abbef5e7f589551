// journey bench — prefill and decode speed of a backend (the fast CPU one by default) on a model, next to the ceilings
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
    BackendFlags backend;
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
  add_backend_flags(cmd, args->backend);
  cmd->callback([args] {
    const std::string path = args->model.empty() ? default_model_path() : args->model;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Backend> backend;
    LoadInfo load;
    BenchOptions options = args->options;
    // the ceilings are this machine's (memory bandwidth, CPU GEMM): a GPU's rates are not set against them
    if (args->device.rfind("cuda", 0) == 0) options.measure_ceilings = false;
    {
      LoadedModel model = load_model(path);  // released once the backend holds what it needs (the mapping)
      load.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      BackendFlags flags = args->backend;
      flags.threads = args->options.threads;
      backend = make_backend(model, args->device, flags, &load);
      options.weight_bytes_per_token = decode_bytes_per_token(model.config, model.weights);
      options.prefill_path = args->device == "cpu" ? prefill_path(model.weights) : "f32";
    }
    BenchResult result = run_bench(*backend, options);
    result.model = path;
    result.load_seconds = load.seconds;
    result.resident_after_load = load.resident_bytes;
    result.model_file_bytes = load.file_bytes;
    result.weight_types = backend->stored_weight_types();
    if (args->json)
      std::cout << bench_json(result).dump(2) << "\n";
    else
      std::cout << format_bench_table(result);
  });
}

}  // namespace journey::cli
