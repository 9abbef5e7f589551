// Chapter 12 — the same prompt on the CPU and on the GPU.
// Greedy continuation of one prompt by the CPU reference, by the CUDA backend with f32 weights and
// with bf16 weights; then one traced forward pass on each side and, stage by stage, how far the
// GPU's tensor is from the CPU's (normalized squared error). Exits 77 (ctest: Skipped) without a GPU.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "cpu/cpu_backend.h"
#include "sampling/processors.h"
#include "text/tokenizer.h"
#include "trace/sink.h"

using namespace journey;

namespace {

// Keeps a copy of every stage it is offered, in journey order.
class Recorder : public TraceSink {
 public:
  bool wants(Stage, int) const override { return true; }
  void record(Stage stage, int layer, const TraceTensor& t) override {
    const std::string key = (layer >= 0 ? "L" + std::to_string(layer) + "." : std::string()) + std::string(stage_name(stage));
    order.push_back(key);
    tensors[key].assign(t.data.begin(), t.data.end());
  }
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> tensors;
};

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) continue;  // masked attention scores
    err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref > 0 ? err / ref : err;
}

std::vector<int32_t> greedy(Backend& backend, const std::vector<int32_t>& prompt, int steps) {
  const int64_t block = 16, blocks = (int64_t(prompt.size()) + steps + block - 1) / block;
  backend.allocate_kv_cache(blocks, block);
  std::vector<int32_t> table(size_t(blocks), 0);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> out;
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, false});
  for (int s = 0; s < steps; ++s) {
    ForwardOutput o = backend.forward(batch);
    out.push_back(argmax(std::span<const float>(o.last_row(0), size_t(o.vocab_size))));
    batch.sequences[0] = {0, {out.back()}, int64_t(prompt.size()) + s, table, false};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::filesystem::path path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  const std::string text = argc > 2 ? argv[2] : "Once upon a time";
  std::printf("# Chapter 12: one prompt, two devices\n\n");
  if (cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible. This chapter compares the CPU and the GPU and needs a GPU;\n"
                "the README shows what it prints on one.\n");
    return 77;
  }
  LoadedModel model = load_model(path);
  auto tokenizer = load_tokenizer(path);
  const std::vector<int> ids = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  const std::vector<int32_t> prompt(ids.begin(), ids.end());

  auto cpu = make_cpu_backend(model, {});
  auto gpu32 = make_cuda_backend(model, {.dtype = DType::F32});
  auto gpu16 = make_cuda_backend(model, {.dtype = DType::BF16});
  std::printf("GPU: %s\n\n", gpu32->device_name().c_str());

  const int steps = 40;
  const auto show = [&](const char* name, const std::vector<int32_t>& out) {
    std::printf("%-12s %s%s\n", name, text.c_str(), tokenizer->decode(std::vector<int>(out.begin(), out.end())).c_str());
  };
  const std::vector<int32_t> a = greedy(*cpu, prompt, steps), b = greedy(*gpu32, prompt, steps),
                             c = greedy(*gpu16, prompt, steps);
  show("cpu f32", a);
  show("cuda f32", b);
  show("cuda bf16", c);
  auto first_difference = [&](const std::vector<int32_t>& x) {
    size_t i = 0;
    while (i < a.size() && a[i] == x[i]) ++i;
    return i;
  };
  std::printf("\ncuda f32 : %s\n", b == a ? "the same tokens as the CPU" : "DIFFERS from the CPU (a bug: f32 must agree)");
  const size_t d = first_difference(c);
  if (d == a.size()) std::printf("cuda bf16: the same %d tokens (bf16 rounding did not change an argmax)\n", steps);
  else std::printf("cuda bf16: first differs at generated token %zu (rounded weights are a slightly different model)\n", d);

  // one traced prefill on each side (the trace forces the unfused kernels on the GPU)
  std::vector<int32_t> table = {0};
  cpu->allocate_kv_cache(4, 64);
  gpu32->allocate_kv_cache(4, 64);
  gpu16->allocate_kv_cache(4, 64);
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, true});
  Recorder t_cpu, t_32, t_16;
  cpu->forward(batch, &t_cpu);
  gpu32->forward(batch, &t_32);
  gpu16->forward(batch, &t_16);
  std::printf("\n| stage | NMSE cuda f32 vs cpu | NMSE cuda bf16 vs cpu |\n|---|---|---|\n");
  for (const std::string& key : t_cpu.order)
    std::printf("| %s | %.2e | %.2e |\n", key.c_str(), nmse(t_32.tensors[key], t_cpu.tensors[key]),
                nmse(t_16.tensors[key], t_cpu.tensors[key]));
  return b == a ? 0 : 1;
} catch (const journey::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
