// Chapter 12 — the same prompt on the CPU and on the GPU.
// 1. generate() (engine/generate.h) runs the prompt greedily on the CPU backend, on the CUDA
//    backend with f32 weights and on the CUDA backend with bf16 weights (its default).
// 2. One traced prefill on each, into MemorySinks (trace/memory_sink.h): stage by stage, the NMSE
//    (core/numeric.h) of each GPU tensor against the CPU's, and for bf16 the bound the bf16
//    tolerance profile (trace/compare.h) sets for that stage.
// 3. Which road the decode steps took (the CUDA graph replays) and that turning the fast roads
//    off gives the same text.
// Exits 77 (ctest: Skipped) without a GPU; 1 when f32 disagrees with the CPU or a bf16 stage
// leaves its bound.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "core/numeric.h"
#include "cuda/cuda_backend.h"
#include "cpu/cpu_backend.h"
#include "engine/generate.h"
#include "text/tokenizer.h"
#include "trace/compare.h"
#include "trace/memory_sink.h"

using namespace journey;

int main(int argc, char** argv) try {
  const std::filesystem::path path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const std::string text = argc > 2 ? argv[2] : "Once upon a time";
  std::printf("# Chapter 12: one prompt, two devices\n\n");
  if (cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible. This chapter compares the CPU and the GPU and needs a GPU;\n"
                "the README shows what it printed on one.\n");
    return 77;
  }
  const LoadedModel model = load_model(path);
  const auto tokenizer = load_tokenizer(path);
  const std::vector<int> ids = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);

  auto cpu = make_cpu_backend(model, {});
  auto gpu32 = make_cuda_backend(model, {.dtype = DType::F32});
  auto gpu16 = make_cuda_backend(model, {.dtype = DType::BF16});
  std::printf("GPU: %s\n\n", gpu32->device_name().c_str());

  // 1. greedy text, 40 tokens, on each backend
  GenerationRequest request;
  request.prompt_ids.assign(ids.begin(), ids.end());
  request.sampling.temperature = 0;
  request.stop.max_tokens = 40;  // no EOS: every backend writes exactly 40 tokens
  const GenerationResult a = generate(*cpu, *tokenizer, request), b = generate(*gpu32, *tokenizer, request),
                         c = generate(*gpu16, *tokenizer, request);
  std::printf("%-10s %s%s\n%-10s %s%s\n%-10s %s%s\n", "cpu f32", text.c_str(), a.text.c_str(), "cuda f32", text.c_str(),
              b.text.c_str(), "cuda bf16", text.c_str(), c.text.c_str());
  const bool f32_same = b.token_ids == a.token_ids;
  std::printf("\ncuda f32 : %s\n", f32_same ? "the same tokens as the CPU" : "DIFFERS from the CPU (a bug: f32 must agree)");
  size_t first = 0;
  while (first < a.token_ids.size() && first < c.token_ids.size() && a.token_ids[first] == c.token_ids[first]) ++first;
  if (first == a.token_ids.size()) std::printf("cuda bf16: the same %zu tokens (bf16 rounding did not change an argmax)\n", first);
  else std::printf("cuda bf16: first differs at generated token %zu (rounded weights are a slightly different model)\n", first);

  // 2. one traced prefill on each side (a trace sends the GPU down its plain, unfused road)
  MemorySink t_cpu, t_32, t_16;
  ForwardBatch batch;
  batch.sequences.push_back({0, request.prompt_ids, 0, {0}, true});
  for (auto [backend, sink] : {std::pair<Backend*, MemorySink*>{cpu.get(), &t_cpu}, {gpu32.get(), &t_32}, {gpu16.get(), &t_16}}) {
    backend->allocate_kv_cache(4, 64);
    backend->forward(batch, sink);
  }
  const int layers = int(model.config.num_layers);
  bool bf16_within = true;
  std::printf("\n| stage | NMSE cuda f32 vs cpu | NMSE cuda bf16 vs cpu | bf16 bound |\n|---|---|---|---|\n");
  for (size_t i = 0; i < t_cpu.entries().size(); ++i) {
    const MemorySink::Entry& e = t_cpu.entries()[i];
    if (e.integers) continue;
    const double n32 = nmse(t_32.get(e.name).values, e.values), n16 = nmse(t_16.get(e.name).values, e.values);
    const double bound = stage_tolerance(e.stage, ToleranceProfile::BF16, stage_depth(e.stage, e.layer, layers)).nmse;
    bf16_within = bf16_within && n16 <= bound;
    std::printf("| %s | %.2e | %.2e | %.1e%s |\n", e.name.c_str(), n32, n16, bound, n16 <= bound ? "" : " OVER");
  }
  std::printf("\nbf16: every stage %s its bound (docs/cuda.md derives the bounds)\n", bf16_within ? "within" : "NOT within");

  // 3. the decode steps of generate() ran as CUDA graphs; without graphs and fusion, the same text
  const CudaStats roads = gpu16->stats();
  std::printf("\ncuda bf16 decode steps: %lld replayed from a CUDA graph (%lld captured), %lld launched kernel by kernel, "
              "%lld on the plain road\n",
              (long long)roads.graph_replays, (long long)roads.graph_captures, (long long)roads.decode_steps,
              (long long)roads.plain_steps);
  auto slow = make_cuda_backend(model, {.dtype = DType::BF16, .fuse = false, .fast_decode = false, .graphs = false});
  const GenerationResult d = generate(*slow, *tokenizer, request);
  std::printf("without graphs, fusion and the decode kernels: %s\n",
              d.token_ids == c.token_ids ? "the same tokens" : "DIFFERENT tokens (a bug in a fast road)");
  return f32_same && bf16_within && d.token_ids == c.token_ids ? 0 : 1;
} catch (const journey::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
