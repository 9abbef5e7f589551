// cuda_bench --list-dtypes
// cuda_bench MODEL [--dtype bf16|f16|f32] [--prompt-tokens N] [--gen-tokens N] [--runs N]
//                  [--graphs 0|1] [--fuse 0|1] [--fast-decode 0|1] [--early-launch 0|1] [--gemv 1..4]
//                  [--streams N] [--stream-prompt N] [--stream-out N]
// `journey bench` (cpu/bench.h) on the CUDA backend, printed as JSON, plus:
//  - decode with on-device greedy sampling (only one id per step crosses PCIe);
//  - the weight bytes one decode step reads in the DEVICE's weight type, for the bandwidth ratio;
//  - the backend's road counters (plain steps, eager decode steps, graph captures and replays);
//  - with --streams N: the engine (engine/llm_engine.h) serving 1 and then N streams of random
//    prompts, output tokens per second each way (the 16-stream serving figure of docs/cuda.md).
// Used by scripts/gpu-check.sh; the CPU ceilings of run_bench are not measured (they are the host's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cpu/bench.h"
#include "cuda/kernels.h"
#include "engine/llm_engine.h"

using namespace journey;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// `streams` requests of `prompt_len` random tokens and `out_len` new tokens each, all at once;
// output tokens per second over the whole phase and over its pure decode steps.
nlohmann::json serve_phase(LLMEngine& engine, int64_t streams, int64_t prompt_len, int64_t out_len, int64_t vocab,
                           unsigned seed) {
  std::mt19937 rng(seed);
  for (int64_t s = 0; s < streams; ++s) {
    EngineRequest r;
    for (int64_t i = 0; i < prompt_len; ++i) r.prompt.push_back(int32_t(1 + rng() % uint32_t(vocab - 1)));
    r.max_tokens = out_len;
    r.ignore_eos = true;
    engine.add_request(r);
  }
  int64_t output_tokens = 0, decode_steps = 0;
  double decode_seconds = 0;
  const auto start = Clock::now();
  while (engine.has_unfinished()) {
    const auto t0 = Clock::now();
    const int64_t before = engine.stats().batched_tokens_total;
    const std::vector<RequestOutput> outputs = engine.step();
    const double dt = seconds_since(t0);
    int64_t sampled = 0;
    for (const RequestOutput& o : outputs) sampled += int64_t(o.tokens.size());
    output_tokens += sampled;
    if (sampled == streams && engine.stats().batched_tokens_total - before == sampled) ++decode_steps, decode_seconds += dt;
  }
  const double seconds = seconds_since(start);
  return {{"streams", streams},
          {"prompt_tokens", prompt_len},
          {"output_tokens", output_tokens},
          {"output_tok_s", output_tokens / seconds},
          {"decode_steps", decode_steps},
          {"decode_step_ms", decode_steps ? 1000 * decode_seconds / decode_steps : 0.0},
          {"decode_tok_s", decode_seconds > 0 ? decode_steps * double(streams) / decode_seconds : 0.0}};
}

bool flag_bool(const std::string& flag, const std::string& value) {
  if (value != "0" && value != "1") fail("cuda_bench: ", flag, " takes 0 or 1, found ", value);
  return value == "1";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && std::string(argv[1]) == "--list-dtypes") {  // the weight types the device keeps as stored
      for (DType type : cuda_weight_types()) std::printf("%s\n", std::string(dtype_name(type)).c_str());
      return 0;
    }
    if (argc < 2) fail("usage: cuda_bench MODEL [--dtype bf16|f16|f32] [--prompt-tokens N] [--gen-tokens N] [--runs N] "
                       "[--graphs 0|1] [--fuse 0|1] [--fast-decode 0|1] [--early-launch 0|1] [--gemv 1..4] "
                       "[--streams N] [--stream-prompt N] [--stream-out N]");
    std::string path = argv[1], dtype = "bf16";
    BenchOptions options;
    options.runs = 3;
    options.measure_ceilings = false;  // the host CPU's ceilings say nothing about the GPU
    CudaOptions cuda_options;
    int64_t streams = 0, stream_prompt = 32, stream_out = 64;
    for (int i = 2; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) fail("cuda_bench: ", flag, " needs a value");
      const std::string value = argv[i + 1];
      if (flag == "--dtype") dtype = value;
      else if (flag == "--prompt-tokens") options.prompt_tokens = std::stoi(value);
      else if (flag == "--gen-tokens") options.gen_tokens = std::stoi(value);
      else if (flag == "--runs") options.runs = std::stoi(value);
      else if (flag == "--graphs") cuda_options.graphs = flag_bool(flag, value);
      else if (flag == "--fuse") cuda_options.fuse = flag_bool(flag, value);
      else if (flag == "--fast-decode") cuda_options.fast_decode = flag_bool(flag, value);
      else if (flag == "--early-launch") cuda_options.early_launch = flag_bool(flag, value);
      else if (flag == "--gemv") cuda_options.gemv_version = std::stoi(value);
      else if (flag == "--streams") streams = std::stoll(value);
      else if (flag == "--stream-prompt") stream_prompt = std::stoll(value);
      else if (flag == "--stream-out") stream_out = std::stoll(value);
      else fail("cuda_bench: unknown flag ", flag);
    }
    // (quantized matrices of a type the device reads stay as stored whatever --dtype says)
    if (dtype == "bf16") cuda_options.dtype = DType::BF16;
    else if (dtype == "f16") cuda_options.dtype = DType::F16;
    else if (dtype == "f32") cuda_options.dtype = DType::F32;
    else fail("cuda_bench: --dtype must be bf16, f16 or f32, found ", dtype);

    auto t0 = Clock::now();
    std::unique_ptr<CudaBackend> backend;
    {
      LoadedModel model = load_model(path);
      backend = make_cuda_backend(model, cuda_options);
    }
    const double load_s = seconds_since(t0);
    // the bytes a decode step reads as the device holds them (bf16 or stored blocks), not every
    // weight in f32 (BenchOptions' default, which made decode_bytes_per_token twice the truth)
    options.weight_bytes_per_token = double(backend->weight_bytes_per_token());
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
    double device_sampling_tok_s = 0;
    for (int run = 0; run < 2; ++run) {  // the first run captures the graphs
      int32_t next = backend->forward_sample(batch, greedy)[0];
      t0 = Clock::now();
      for (int g = 0; g < options.gen_tokens; ++g) {
        batch.sequences[0] = {0, {next}, options.prompt_tokens + g, table, false};
        next = backend->forward_sample(batch, greedy)[0];
      }
      device_sampling_tok_s = options.gen_tokens / seconds_since(t0);
      batch.sequences[0] = {0, prompt, 0, table, false};
    }

    nlohmann::json j = bench_json(result);
    j["device"] = backend->device_name();
    j["weight_dtype"] = dtype;
    j["device_weight_bytes_per_token"] = backend->weight_bytes_per_token();
    nlohmann::json by_type = nlohmann::json::object();  // what the device holds, per type
    for (const auto& [type, bytes] : backend->weight_bytes_by_type()) by_type[std::string(dtype_name(type))] = bytes;
    j["device_weight_bytes_by_type"] = by_type;
    j["decode_device_sampling_tok_s"] = device_sampling_tok_s;
    j["options"] = {{"graphs", cuda_options.graphs}, {"fuse", cuda_options.fuse},
                    {"fast_decode", cuda_options.fast_decode}, {"early_launch", cuda_options.early_launch},
                    {"gemv", cuda_options.gemv_version}};

    if (streams > 0) {
      EngineConfig config;
      config.max_model_len = stream_prompt + stream_out + 16;
      config.scheduler.max_num_seqs = streams;
      // default sampling draws on the GPU (LLMEngine::step: only the ids come back); a request that
      // needs the host (penalties, logprobs, a trace) draws from the logits there: spread those rows
      // over the cores
      config.sampling_threads = int(std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1u, 8u));
      LLMEngine engine(*backend, config);
      const int64_t vocab = backend->config().vocab_size;
      serve_phase(engine, 1, stream_prompt, 4, vocab, 99);  // warm-up
      const nlohmann::json one = serve_phase(engine, 1, stream_prompt, stream_out, vocab, 1);
      const nlohmann::json many = serve_phase(engine, streams, stream_prompt, stream_out, vocab, 2);
      j["serving"] = {{"single", one}, {"batched", many},
                      {"batched_over_single", many["output_tok_s"].get<double>() / one["output_tok_s"].get<double>()}};
    }
    const CudaStats stats = backend->stats();
    j["roads"] = {{"plain_steps", stats.plain_steps}, {"decode_steps", stats.decode_steps},
                  {"graph_captures", stats.graph_captures}, {"graph_replays", stats.graph_replays},
                  {"graph_error", stats.graph_error}, {"early_launch_refused", cuda::early_launch_refused()}};
    std::cout << j.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
}
