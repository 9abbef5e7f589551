// The whole CUDA forward pass against the CPU backend on real model files: stories260K (a trained
// llama2.c model, so its greedy continuation is meaningful) and the tiny random Llama / Qwen2 /
// Qwen3 models of the golden tests (biases, tied embeddings, q/k norms, head_dim != E/H).
//
// f32 weights: the logits agree to rounding (NMSE < 1e-8) and greedy decoding picks IDENTICAL
// tokens. bf16 weights: the model itself is different (rounded weights), so tokens may diverge at
// some step; the test reports the first divergence and bounds the first step's logits error.
// Every fast road of a decode step (batched decode kernels, fused GEMVs, CUDA graphs, early
// launch) is checked against the plain path, which is checked against the CPU; also every traced
// stage against the CPU's, a batch of sequences with paged blocks, and on-device sampling.
#include <doctest/doctest.h>

#include <numeric>
#include <string>

#include "assets/model.h"
#include "cuda_test_util.h"
#include "cpu/cpu_backend.h"
#include "reference/reference_backend.h"
#include "sampling/processors.h"
#include "trace/memory_sink.h"

using namespace journey;

namespace {

const std::vector<std::string> kModels = {"data/stories260K", "tests/golden/models/tiny-llama",
                                          "tests/golden/models/tiny-qwen2", "tests/golden/models/tiny-qwen3"};

// A fixed prompt of in-vocabulary ids (the tests compare backends, not text).
std::vector<int32_t> prompt_for(const ModelConfig& c) {
  std::vector<int32_t> ids = {1};
  for (int i = 1; i < 9; ++i) ids.push_back(int32_t((i * 37 + 11) % c.vocab_size));
  return ids;
}

std::vector<int32_t> iota_table(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// Prefill the prompt, then `steps` greedy steps; returns the generated ids. Every step's last-row
// logits are appended to *logits when given.
std::vector<int32_t> greedy(Backend& backend, const std::vector<int32_t>& prompt, int steps,
                            std::vector<std::vector<float>>* logits = nullptr) {
  const int64_t block_size = 16, total = int64_t(prompt.size()) + steps;
  backend.allocate_kv_cache((total + block_size - 1) / block_size + 1, block_size);
  const std::vector<int32_t> table = iota_table((total + block_size - 1) / block_size);
  std::vector<int32_t> out;
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, false});
  for (int step = 0; step < steps; ++step) {
    ForwardOutput o = backend.forward(batch);
    std::span<const float> last(o.last_row(0), size_t(o.vocab_size));
    if (logits) logits->emplace_back(last.begin(), last.end());
    out.push_back(argmax(last));
    batch.sequences[0] = {0, {out.back()}, int64_t(prompt.size()) + step, table, false};
  }
  return out;
}

// The roads a decode step can take, from the plain per-sequence path to everything on.
struct Road {
  const char* name;
  CudaOptions options;
};
std::vector<Road> decode_roads(DType type) {
  return {
      {"plain (no decode kernels, no fusion)", {.dtype = type, .fuse = false, .fast_decode = false, .graphs = false}},
      {"decode kernels", {.dtype = type, .fuse = false, .fast_decode = true, .graphs = false, .early_launch = false}},
      {"decode kernels + fused GEMVs", {.dtype = type, .fuse = true, .fast_decode = true, .graphs = false, .early_launch = false}},
      {"+ early launch", {.dtype = type, .fuse = true, .fast_decode = true, .graphs = false, .early_launch = true}},
      {"+ CUDA graphs (the default)", {.dtype = type}},
  };
}

// Wants only the logits: the fused fast path runs everywhere else.
class LogitsOnly : public TraceSink {
 public:
  bool wants(Stage stage, int) const override { return stage == Stage::logits; }
  void record(Stage, int, const TraceTensor& t) override { logits.assign(t.data.begin(), t.data.end()); }
  std::vector<float> logits;
};

}  // namespace

TEST_CASE("f32 weights: CUDA logits match the CPU and greedy tokens are identical, on every road") {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string& path : kModels) {
    CAPTURE(path);
    LoadedModel model = load_model(path);
    auto cpu = make_cpu_backend(model, {.threads = 2});
    const std::vector<int32_t> prompt = prompt_for(model.config);
    std::vector<std::vector<float>> cpu_logits;
    const std::vector<int32_t> cpu_tokens = greedy(*cpu, prompt, 24, &cpu_logits);
    std::vector<std::pair<std::string, CudaOptions>> runs;
    for (int version : {1, 2, 3}) runs.push_back({"gemv v" + std::to_string(version), {.dtype = DType::F32, .gemv_version = version}});
    for (const Road& road : decode_roads(DType::F32)) runs.push_back({road.name, road.options});
    for (const auto& [name, options] : runs) {
      CAPTURE(name);
      auto gpu = make_cuda_backend(model, options);
      std::vector<std::vector<float>> gpu_logits;
      const std::vector<int32_t> gpu_tokens = greedy(*gpu, prompt, 24, &gpu_logits);
      CHECK(gpu_tokens == cpu_tokens);
      for (size_t s = 0; s < cpu_logits.size(); ++s) {
        CAPTURE(s);
        CHECK(nmse(gpu_logits[s], cpu_logits[s]) < 1e-8);
      }
      const CudaStats stats = gpu->stats();
      CHECK(stats.graph_error == "");
      if (options.graphs && options.fast_decode) CHECK(stats.graph_replays >= 20);  // 23 decode steps: 1 eager, 1 capture...
      if (!options.fast_decode) CHECK(stats.plain_steps == 24);
    }
  }
}

TEST_CASE("every decode road gives the plain road's logits (bf16 weights, 40 steps)") {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string& path : kModels) {
    CAPTURE(path);
    LoadedModel model = load_model(path);
    const std::vector<int32_t> prompt = prompt_for(model.config);
    const std::vector<Road> roads = decode_roads(DType::BF16);
    std::vector<std::vector<float>> plain_logits;
    std::vector<int32_t> plain_tokens;
    for (const Road& road : roads) {
      CAPTURE(road.name);
      auto gpu = make_cuda_backend(model, road.options);
      std::vector<std::vector<float>> logits;
      const std::vector<int32_t> tokens = greedy(*gpu, prompt, 40, &logits);
      if (plain_logits.empty()) {
        plain_logits = logits, plain_tokens = tokens;
        continue;
      }
      CHECK(tokens == plain_tokens);
      double worst = 0;
      for (size_t s = 0; s < logits.size(); ++s) worst = std::max(worst, nmse(logits[s], plain_logits[s]));
      MESSAGE(path << ": " << std::string(road.name) << ": worst logits NMSE against the plain road " << worst);
      CHECK(worst < 1e-10);  // the same bf16 weights: only the summation order differs
    }
  }
}

TEST_CASE("bf16 weights: logits close to the CPU's, first token divergence reported") {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string& path : kModels) {
    CAPTURE(path);
    LoadedModel model = load_model(path);
    auto cpu = make_cpu_backend(model, {.threads = 2});
    auto gpu = make_cuda_backend(model, {.dtype = DType::BF16});
    const std::vector<int32_t> prompt = prompt_for(model.config);
    std::vector<std::vector<float>> cpu_logits, gpu_logits;
    const std::vector<int32_t> cpu_tokens = greedy(*cpu, prompt, 24, &cpu_logits);
    const std::vector<int32_t> gpu_tokens = greedy(*gpu, prompt, 24, &gpu_logits);
    // bf16 keeps 8 mantissa bits: ~0.4% per weight; over a few layers the logits drift by about that
    CHECK(nmse(gpu_logits[0], cpu_logits[0]) < 1e-3);
    size_t first = 0;
    while (first < cpu_tokens.size() && cpu_tokens[first] == gpu_tokens[first]) ++first;
    if (first == cpu_tokens.size())
      MESSAGE(path << ": bf16 greedy tokens identical to f32 CPU for all " << cpu_tokens.size() << " steps");
    else
      MESSAGE(path << ": bf16 greedy tokens first differ at step " << first << " (cpu " << cpu_tokens[first]
                   << ", cuda " << gpu_tokens[first] << ")");
  }
}

TEST_CASE("every traced stage matches the CPU's, and the fused path matches the traced one") {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const std::string& path : kModels) {
    CAPTURE(path);
    LoadedModel model = load_model(path);
    auto cpu = make_cpu_backend(model, {.threads = 2});
    auto gpu = make_cuda_backend(model, {.dtype = DType::F32});
    const std::vector<int32_t> prompt = prompt_for(model.config);
    const std::vector<int32_t> table = iota_table(2);
    cpu->allocate_kv_cache(2, 16);
    gpu->allocate_kv_cache(2, 16);
    ForwardBatch batch;
    batch.sequences.push_back({0, prompt, 0, table, true});
    MemorySink cpu_trace, gpu_trace;
    cpu->forward(batch, &cpu_trace);
    gpu->forward(batch, &gpu_trace);
    REQUIRE(gpu_trace.entries().size() == cpu_trace.entries().size());
    for (size_t i = 0; i < cpu_trace.entries().size(); ++i) {
      const MemorySink::Entry& want = cpu_trace.entries()[i];
      const MemorySink::Entry& got = gpu_trace.entries()[i];
      CAPTURE(want.name);
      CHECK(got.name == want.name);  // same stages, same layers, same order
      CHECK(got.shape == want.shape);
      CHECK(nmse(got.values, want.values) < 1e-8);
    }
    LogitsOnly fast;
    gpu->forward(batch, &fast);  // same positions again: the pool slots are overwritten with equal values
    CHECK(nmse(fast.logits, gpu_trace.get("logits").values) < 1e-10);
  }
}

TEST_CASE("a traced decode step takes the plain road and records what the CPU records") {
  SKIP_WITHOUT_CUDA_DEVICE();
  LoadedModel model = load_model("tests/golden/models/tiny-qwen3");
  auto cpu = make_cpu_backend(model, {.threads = 2});
  auto gpu = make_cuda_backend(model, {.dtype = DType::F32});
  const std::vector<int32_t> prompt = prompt_for(model.config), table = iota_table(2);
  for (Backend* b : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(gpu.get())}) {
    b->allocate_kv_cache(2, 16);
    ForwardBatch prefill;
    prefill.sequences.push_back({0, prompt, 0, table, false});
    b->forward(prefill);
  }
  ForwardBatch decode;
  decode.sequences.push_back({0, {5}, int64_t(prompt.size()), table, false});
  MemorySink cpu_trace, gpu_trace;
  cpu->forward(decode, &cpu_trace);
  gpu->forward(decode, &gpu_trace);
  CHECK(gpu->stats().plain_steps == 2);
  CHECK(gpu->stats().decode_steps == 0);
  REQUIRE(gpu_trace.entries().size() == cpu_trace.entries().size());
  for (size_t i = 0; i < cpu_trace.entries().size(); ++i) {
    CAPTURE(cpu_trace.entries()[i].name);
    CHECK(gpu_trace.entries()[i].name == cpu_trace.entries()[i].name);
    CHECK(nmse(gpu_trace.entries()[i].values, cpu_trace.entries()[i].values) < 1e-8);
  }
}

TEST_CASE("a batch of sequences with scattered blocks matches the CPU, graphs replayed as the batch changes") {
  SKIP_WITHOUT_CUDA_DEVICE();
  LoadedModel model = load_model("tests/golden/models/tiny-qwen2");
  auto cpu = make_cpu_backend(model, {.threads = 2});
  auto gpu = make_cuda_backend(model, {.dtype = DType::F32});
  auto plain = make_cuda_backend(model, {.dtype = DType::F32, .fast_decode = false});
  std::vector<Backend*> backends = {cpu.get(), gpu.get(), plain.get()};
  for (Backend* b : backends) b->allocate_kv_cache(24, 4);
  const std::vector<int32_t> prompt = prompt_for(model.config);
  ForwardBatch prefill;
  prefill.sequences.push_back({0, prompt, 0, {5, 1, 9, 20, 21, 22}, true});
  prefill.sequences.push_back({1, {1, 2, 3}, 0, {0, 3, 12, 13, 14}, false});
  prefill.sequences.push_back({2, {7}, 0, {11, 15, 16, 17, 18}, false});
  std::vector<ForwardOutput> out;
  for (Backend* b : backends) out.push_back(b->forward(prefill));
  CHECK(out[1].row_begin == out[0].row_begin);
  CHECK(nmse(out[1].logits, out[0].logits) < 1e-8);
  // decode steps for all three (S = 3: cuBLAS products of 3 rows), then for two of them (S = 2):
  // a new graph key; tables of 2 to 5 blocks share the stride-8 graphs
  std::vector<int64_t> position = {int64_t(prompt.size()), 3, 1};
  for (int step = 0; step < 10; ++step) {
    ForwardBatch decode;
    const size_t active = step < 6 ? 3 : 2;
    for (size_t i = 0; i < active; ++i)
      decode.sequences.push_back({int64_t(i), {int32_t((step * 7 + int(i)) % 500)}, position[i],
                                  prefill.sequences[i].block_table, false});
    for (size_t i = 0; i < active; ++i) ++position[i];
    std::vector<ForwardOutput> o;
    for (Backend* b : backends) o.push_back(b->forward(decode));
    CAPTURE(step);
    CHECK(nmse(o[1].logits, o[0].logits) < 1e-8);
    CHECK(nmse(o[2].logits, o[0].logits) < 1e-8);
    CHECK(nmse(o[1].logits, o[2].logits) < 1e-10);
  }
  const CudaStats stats = gpu->stats();
  CHECK(stats.graph_error == "");
  CHECK(stats.graph_captures == 2);  // (S = 3) and (S = 2)
  CHECK(stats.graph_replays == 10 - 2);  // each key: one eager warm-up, then the capture (launched) and replays
}

TEST_CASE("a prefill that grows the buffers retires the decode graphs, which are captured again") {
  SKIP_WITHOUT_CUDA_DEVICE();
  LoadedModel model = load_model("data/stories260K");
  auto gpu = make_cuda_backend(model, {.dtype = DType::F32});
  auto plain = make_cuda_backend(model, {.dtype = DType::F32, .fast_decode = false});
  const std::vector<int32_t> prompt = prompt_for(model.config);
  std::vector<int32_t> long_prompt;  // 60 tokens: every activation buffer grows
  for (int i = 0; i < 60; ++i) long_prompt.push_back(int32_t((i * 13 + 5) % model.config.vocab_size));
  for (Backend* b : {static_cast<Backend*>(gpu.get()), static_cast<Backend*>(plain.get())}) b->allocate_kv_cache(12, 16);
  auto run = [&](Backend& b, const std::vector<int32_t>& p, std::vector<int32_t> table, int steps) {
    std::vector<std::vector<float>> logits;
    ForwardBatch batch;
    batch.sequences.push_back({0, p, 0, table, false});
    int32_t next = argmax(std::span<const float>(b.forward(batch).last_row(0), size_t(model.config.vocab_size)));
    for (int s = 0; s < steps; ++s) {
      batch.sequences[0] = {0, {next}, int64_t(p.size()) + s, table, false};
      ForwardOutput o = b.forward(batch);
      logits.emplace_back(o.logits);
      next = argmax(std::span<const float>(o.last_row(0), size_t(model.config.vocab_size)));
    }
    return logits;
  };
  for (int round = 0; round < 2; ++round) {
    const auto& p = round == 0 ? prompt : long_prompt;
    // both tables pad to 8 entries: the same graph key, so round 1 must retire round 0's graph
    const std::vector<int32_t> table = round == 0 ? std::vector<int32_t>{0, 1, 7, 8, 9} : std::vector<int32_t>{2, 3, 4, 5, 6};
    const auto a = run(*gpu, p, table, 6), b = run(*plain, p, table, 6);
    for (size_t s = 0; s < a.size(); ++s) CHECK(nmse(a[s], b[s]) < 1e-10);
  }
  const CudaStats stats = gpu->stats();
  CHECK(stats.graph_error == "");
  CHECK(stats.graph_captures == 2);  // the first graph was retired by the long prefill, not replayed
}

TEST_CASE("on-device sampling: greedy equals the host argmax of the same logits; ids only") {
  SKIP_WITHOUT_CUDA_DEVICE();
  LoadedModel model = load_model("data/stories260K");
  auto gpu = make_cuda_backend(model, {.dtype = DType::F32});
  gpu->allocate_kv_cache(4, 16);
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt_for(model.config), 0, {0}, false});
  batch.sequences.push_back({1, {1, 300, 42}, 0, {1}, true});
  const ForwardOutput out = gpu->forward(batch);
  std::vector<DeviceSampling> greedy_params(2);
  const std::vector<int32_t> ids = gpu->forward_sample(batch, greedy_params);
  REQUIRE(ids.size() == 2);
  for (size_t i = 0; i < 2; ++i)
    CHECK(ids[i] == argmax(std::span<const float>(out.last_row(i), size_t(out.vocab_size))));
  // top_k = 1 is greedy whatever u is
  std::vector<DeviceSampling> top1 = {{0.8, 1, 1.0, 0.9f}, {1.5, 1, 0.5, 0.1f}};
  CHECK(gpu->forward_sample(batch, top1) == ids);
  std::vector<DeviceSampling> bad = {{-1.0, 0, 1.0, 0.5f}, {1.0, 0, 1.0, 0.5f}};
  CHECK_THROWS_AS(gpu->forward_sample(batch, bad), Error);
}

TEST_CASE("on-device sampling inside the decode graph draws what the host draws from the same logits") {
  SKIP_WITHOUT_CUDA_DEVICE();
  LoadedModel model = load_model("data/stories260K");
  auto sampler = make_cuda_backend(model, {.dtype = DType::F32});
  auto logits_source = make_cuda_backend(model, {.dtype = DType::F32});
  const std::vector<int32_t> prompt = prompt_for(model.config), table = {0, 1};
  for (CudaBackend* b : {sampler.get(), logits_source.get()}) b->allocate_kv_cache(2, 16);
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, false});
  std::vector<DeviceSampling> params = {{0.9, 40, 0.95, 0.3f}};
  int32_t next = sampler->forward_sample(batch, params)[0];
  logits_source->forward(batch);
  for (int step = 0; step < 8; ++step) {
    batch.sequences[0] = {0, {next}, int64_t(prompt.size()) + step, table, false};
    params[0].u = float(step * 0.11 + 0.05);
    const ForwardOutput o = logits_source->forward(batch);  // the same step on a twin, logits to the host
    std::vector<float> row(o.last_row(0), o.last_row(0) + o.vocab_size);
    apply_temperature(row, params[0].temperature);
    std::vector<float> probs = softmax(row);
    keep_top_k(probs, params[0].top_k);
    keep_top_p(probs, params[0].top_p);
    const int32_t host_id = sample_from(probs, params[0].u);
    next = sampler->forward_sample(batch, params)[0];
    CAPTURE(step);
    CHECK(next == host_id);
  }
  CHECK(sampler->stats().graph_replays >= 6);
}

TEST_CASE("bad input gets journey::Error, not a crash") {
  SKIP_WITHOUT_CUDA_DEVICE();
  LoadedModel model = load_model("tests/golden/models/tiny-llama");
  auto gpu = make_cuda_backend(model, {.dtype = DType::F32});
  ForwardBatch batch;
  batch.sequences.push_back({0, {1, 2}, 0, {0}, false});
  CHECK_THROWS_AS(gpu->forward(batch), Error);  // no KV cache yet
  gpu->allocate_kv_cache(2, 16);
  batch.sequences[0].tokens = {1, int32_t(model.config.vocab_size)};
  CHECK_THROWS_AS(gpu->forward(batch), Error);  // token outside the vocabulary
  batch.sequences[0].tokens = {1, 2};
  batch.sequences[0].block_table = {5};
  CHECK_THROWS_AS(gpu->forward(batch), Error);  // block outside the pool
  batch.sequences[0] = {0, {int32_t(model.config.vocab_size)}, 3, {0}, false};
  CHECK_THROWS_AS(gpu->forward(batch), Error);  // a decode step checks its token too
  CHECK_THROWS_AS(make_cuda_backend(model, {.dtype = DType::Q8_0}), Error);
  CHECK_THROWS_AS(make_cuda_backend(model, {.dtype = DType::F32, .gemv_version = 5}), Error);
  CHECK_THROWS_AS(gpu->copy_kv_block(0, 7), Error);
}

TEST_CASE("quantized GGUF files keep their blocks on the device; decode equals the reference's dequantized model") {
  SKIP_WITHOUT_CUDA_DEVICE();
  // kq-q4_k_m: Q4_K and Q6_K (mixed within a layer); t105-q4_1: Q4_1 with a Q8_0 output matrix;
  // kq-q2_k: a type the device does not read, widened to bf16 on upload.
  struct Case {
    std::string path;
    DType kept;  // a type that must stay as stored (F32 for none)
  };
  for (const Case& c : {Case{"tests/data/quantized/kq-q4_k_m.gguf", DType::Q4_K}, Case{"tests/data/quantized/t105-q4_1.gguf", DType::Q4_1},
                        Case{"tests/data/quantized/kq-q2_k.gguf", DType::F32}}) {
    CAPTURE(c.path);
    LoadedModel model = load_model(c.path);
    // the literal reference dequantizes every weight to f32 at load (the fast CPU backend would
    // quantize the activations to 8 bits, as llama.cpp does: a different, rounder computation)
    auto cpu = make_reference_backend(model);
    auto gpu = make_cuda_backend(model, {});
    bool kept = false, widened = false;
    for (const auto& [type, bytes] : gpu->weight_bytes_by_type()) {
      kept = kept || type == c.kept;
      widened = widened || type == DType::BF16;
      CHECK(type != DType::Q2_K);
    }
    if (c.kept != DType::F32) CHECK(kept);
    else CHECK(widened);
    // a one-token prompt: every step multiplies at T = 1, where the GEMV dequantizes exactly as the
    // reference does, so the only difference from the CPU is the order of the sums
    std::vector<std::vector<float>> cpu_logits, gpu_logits;
    const std::vector<int32_t> a = greedy(*cpu, {1}, 16, &cpu_logits), b = greedy(*gpu, {1}, 16, &gpu_logits);
    if (c.kept != DType::F32) {
      CHECK(b == a);
      for (size_t s = 0; s < a.size(); ++s) CHECK(nmse(gpu_logits[s], cpu_logits[s]) < 1e-8);
    } else {  // widened to bf16: a rounded model
      CHECK(nmse(gpu_logits[0], cpu_logits[0]) < 1e-3);
    }
    // a 9-token prefill multiplies through cuBLAS on the matrices dequantized to bf16
    cpu_logits.clear(), gpu_logits.clear();
    greedy(*cpu, prompt_for(model.config), 1, &cpu_logits);
    greedy(*gpu, prompt_for(model.config), 1, &gpu_logits);
    CHECK(nmse(gpu_logits[0], cpu_logits[0]) < 1e-3);
    CHECK(gpu->stats().graph_error == "");
  }
}
