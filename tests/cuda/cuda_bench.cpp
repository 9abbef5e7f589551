// cuda_bench MODEL [--dtype bf16|f16|f32] [--prompt-tokens N] [--gen-tokens N] [--runs N]
// `journey bench` (reference/bench.h) on the CUDA backend, printed as JSON, plus a decode loop that
// samples ON THE DEVICE (greedy) so only one id per step crosses PCIe. Used by
// scripts/gpu-check.sh; the CPU ceilings in run_bench's output are this host's, not the GPU's.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cpu/bench.h"

int main(int argc, char** argv) {
  using namespace journey;
  try {
    if (argc < 2) fail("usage: cuda_bench MODEL [--dtype bf16|f16|f32] [--prompt-tokens N] [--gen-tokens N] [--runs N]");
    std::string path = argv[1], dtype = "bf16";
    BenchOptions options;
    options.runs = 3;
    for (int i = 2; i + 1 < argc; i += 2) {
      const std::string flag = argv[i], value = argv[i + 1];
      if (flag == "--dtype") dtype = value;
      else if (flag == "--prompt-tokens") options.prompt_tokens = std::stoi(value);
      else if (flag == "--gen-tokens") options.gen_tokens = std::stoi(value);
      else if (flag == "--runs") options.runs = std::stoi(value);
      else fail("cuda_bench: unknown flag ", flag);
    }
    CudaOptions cuda_options;
    if (dtype == "bf16") cuda_options.dtype = DType::BF16;
    else if (dtype == "f16") cuda_options.dtype = DType::F16;
    else if (dtype == "f32") cuda_options.dtype = DType::F32;
    else fail("cuda_bench: --dtype must be bf16, f16 or f32, found ", dtype);

    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<CudaBackend> backend;
    {
      LoadedModel model = load_model(path);
      backend = make_cuda_backend(model, cuda_options);
    }
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BenchResult result = run_bench(*backend, options);
    result.model = path;
    result.load_seconds = load_s;

    // decode with on-device greedy sampling: only the id comes back each step
    const int64_t total = options.prompt_tokens + options.gen_tokens, block = 16;
    std::vector<int32_t> table(size_t((total + block - 1) / block));
    std::iota(table.begin(), table.end(), 0);
    backend->allocate_kv_cache(int64_t(table.size()), block);
    std::vector<int32_t> prompt(size_t(options.prompt_tokens), 1);
    std::vector<DeviceSampling> greedy(1);
    ForwardBatch batch;
    batch.sequences.push_back({0, prompt, 0, table, false});
    int32_t next = backend->forward_sample(batch, greedy)[0];
    t0 = std::chrono::steady_clock::now();
    for (int g = 0; g < options.gen_tokens; ++g) {
      batch.sequences[0] = {0, {next}, options.prompt_tokens + g, table, false};
      next = backend->forward_sample(batch, greedy)[0];
    }
    const double device_sampling_tok_s =
        options.gen_tokens / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    nlohmann::json j = bench_json(result);
    j["device"] = backend->device_name();
    j["weight_dtype"] = dtype;
    j["decode_device_sampling_tok_s"] = device_sampling_tok_s;
    std::cout << j.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
}
