// The engine without the HTTP layer: how long one step takes with 1 and with S decoding streams,
// and the output rate that gives. Compare its figures with the server's
// (scripts/bench-serve.js, GET /metrics journey:engine_step_seconds) to tell engine cost from
// server cost. A benchmark, not a test: it prints timings and asserts nothing about them.
//
//   bench_engine_batch MODEL_DIR [--streams 16] [--prompt 32] [--out 64] [--threads 2]
//
// Run it with OMP_WAIT_POLICY=passive to match `journey serve` (which sets it for itself).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include <Eigen/Core>

#include "assets/model.h"
#include "core/error.h"
#include "engine/llm_engine.h"
#include "cpu/cpu_backend.h"

using namespace journey;
using Clock = std::chrono::steady_clock;

namespace {

struct PhaseResult {
  int64_t decode_steps = 0;
  double decode_seconds = 0;  // steps in which every running sequence decoded (no prefill)
  int64_t output_tokens = 0;
  double seconds = 0;         // the whole phase, prefill included
};

// Runs `streams` requests of `prompt_len` random tokens and `out_len` new tokens each, all at once.
PhaseResult run_phase(LLMEngine& engine, int64_t streams, int64_t prompt_len, int64_t out_len, int64_t vocab,
                      unsigned seed) {
  std::mt19937 rng(seed);
  for (int64_t s = 0; s < streams; ++s) {
    EngineRequest r;
    for (int64_t i = 0; i < prompt_len; ++i) r.prompt.push_back(static_cast<int32_t>(1 + rng() % (vocab - 1)));
    r.max_tokens = out_len;
    r.ignore_eos = true;
    engine.add_request(r);
  }
  PhaseResult result;
  auto start = Clock::now();
  while (engine.has_unfinished()) {
    auto t0 = Clock::now();
    int64_t before = engine.stats().batched_tokens_total;
    std::vector<RequestOutput> outputs = engine.step();
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    int64_t sampled = 0;
    for (const RequestOutput& o : outputs) sampled += static_cast<int64_t>(o.tokens.size());
    result.output_tokens += sampled;
    // A pure decode step computes exactly one token per sequence that samples one.
    if (sampled > 0 && engine.stats().batched_tokens_total - before == sampled && sampled == streams) {
      ++result.decode_steps;
      result.decode_seconds += dt;
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--streams 16] [--prompt 32] [--out 64] [--threads 2]\n", argv[0]);
    return 2;
  }
  int64_t streams = 16, prompt_len = 32, out_len = 64;
  int threads = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    long long v = std::atoll(argv[i + 1]);
    if (v <= 0) {
      std::fprintf(stderr, "%s needs a positive number, got '%s'\n", flag.c_str(), argv[i + 1]);
      return 2;
    }
    if (flag == "--streams") streams = v;
    else if (flag == "--prompt") prompt_len = v;
    else if (flag == "--out") out_len = v;
    else if (flag == "--threads") threads = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    LoadedModel model = load_model(argv[1]);
    std::unique_ptr<Backend> backend = make_cpu_backend(model, CpuOptions{.threads = threads});
    EngineConfig config;
    config.max_model_len = prompt_len + out_len + 16;
    config.scheduler.max_num_seqs = std::max<int64_t>(streams, 1);
    config.sampling_threads = threads;
    LLMEngine engine(*backend, config);
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    std::printf("threads %d, Eigen GEMM threads %d, OMP_WAIT_POLICY %s\n", threads, Eigen::nbThreads(),
                policy ? policy : "(default)");
    const int64_t vocab = backend->config().vocab_size;
    run_phase(engine, 1, prompt_len, 4, vocab, 99);  // warm-up: first-touch of weights and KV pages
    PhaseResult one = run_phase(engine, 1, prompt_len, out_len, vocab, 1);
    PhaseResult many = run_phase(engine, streams, prompt_len, out_len, vocab, 2);
    auto show = [](const char* name, int64_t s, const PhaseResult& r) {
      double step_ms = r.decode_steps ? 1000 * r.decode_seconds / r.decode_steps : 0;
      std::printf("%-8s streams %3lld: decode step %8.2f ms (%lld steps), decode %8.2f tok/s, overall %8.2f tok/s\n",
                  name, static_cast<long long>(s), step_ms, static_cast<long long>(r.decode_steps),
                  r.decode_seconds > 0 ? r.decode_steps * double(s) / r.decode_seconds : 0.0,
                  r.output_tokens / r.seconds);
    };
    show("single", 1, one);
    show("batched", streams, many);
    std::printf("batched / single overall output rate: %.2f\n",
                (many.output_tokens / many.seconds) / (one.output_tokens / one.seconds));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
