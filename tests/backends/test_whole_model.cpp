// The whole model, stage by stage: the fast cpu backend against the literal reference on the
// shipped model and the golden models (prefill, then greedy decode steps through a scattered paged
// KV cache), every stage of every step compared by compare_dumps() — the code behind
// `journey-trace diff` (the same comparison through the CLI is the backends.trace_diff_* ctest).
// And with a bug planted in one fast op, the comparison fails and names the first diverging stage.
#include <doctest/doctest.h>

#include <filesystem>

#include "backends/backends_under_test.h"
#include "trace/compare.h"
#include "trace/dump_sink.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = JOURNEY_SOURCE_DIR;
const char* const kModels[] = {"data/stories260K", "tests/golden/models/tiny-llama", "tests/golden/models/tiny-qwen2",
                               "tests/golden/models/tiny-qwen3"};

// Prefill `prompt`, then `steps` greedy decode steps, every stage recorded into `dir`.
void trace_greedy(Backend& backend, const std::vector<int32_t>& prompt, int steps, const fs::path& dir) {
  fs::remove_all(dir);
  const std::vector<int32_t> table = {6, 1, 4, 0, 5, 2, 3};  // [blocks] scrambled: decode reads through the paging
  backend.allocate_kv_cache(7, 4);
  DumpSink sink(dir);
  std::vector<int64_t> positions(prompt.size());  // [T]
  for (size_t i = 0; i < prompt.size(); ++i) positions[i] = int64_t(i);
  sink.set_step(0, "prefill", positions);
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, /*all_logits=*/true});
  for (int step = 0;; ++step) {
    const ForwardOutput out = backend.forward(batch, &sink);
    const float* last = out.last_row(0);
    const int32_t next = int32_t(std::max_element(last, last + out.vocab_size) - last);
    if (step == steps) break;
    const int64_t position = int64_t(prompt.size()) + step;
    sink.set_step(step + 1, "decode", {position});
    batch.sequences[0] = {0, {next}, position, table, false};
  }
  sink.finish();
}

std::vector<int32_t> prompt_for(const ModelConfig& c) {
  std::vector<int32_t> ids = {1};
  for (int i = 1; i < 7; ++i) ids.push_back(int32_t((i * 37 + 11) % c.vocab_size));
  return ids;
}

void rope_with_swapped_layout(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
                              RopeLayout layout) {
  cpu::rope(x, positions, T, heads, D, theta, layout == RopeLayout::HalfSplit ? RopeLayout::Interleaved : RopeLayout::HalfSplit);
}

// A planted bug in the FFN: SwiGLU without the gate's non-linearity (silu(g) replaced by g).
void swiglu_without_silu(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * up[i];
}

}  // namespace

TEST_CASE("whole model: the fast cpu backend equals the reference at every stage of every step") {
  for (const char* path : kModels) {
    SUBCASE(path) {
      const LoadedModel model = load_model(kSource / path);
      const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "whole-model" / fs::path(path).filename();
      auto reference = make_reference_backend(model);
      auto cpu = make_cpu_backend(model, CpuOptions{.threads = 2});
      trace_greedy(*reference, prompt_for(model.config), 4, work / "reference");
      trace_greedy(*cpu, prompt_for(model.config), 4, work / "cpu");
      const ComparisonResult result = compare_dumps(work / "cpu", work / "reference");
      CHECK_MESSAGE(result.ok(), format_comparison(result, /*only_failures=*/true));
      CHECK(result.tensors.size() > 50);  // not a vacuous pass: every stage of every step was compared
    }
  }
}

TEST_CASE("whole model: a bug planted in one fast op is found at the first stage it touches") {
  const LoadedModel model = load_model(kSource / "tests/golden/models/tiny-qwen2");
  const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "whole-model" / "planted";
  auto reference = make_reference_backend(model);
  trace_greedy(*reference, prompt_for(model.config), 2, work / "reference");
  struct Planted {
    CpuOps ops;
    const char* first_stage;
  };
  CpuOps rope_bug, ffn_bug;
  rope_bug.rope = rope_with_swapped_layout;
  ffn_bug.swiglu = swiglu_without_silu;
  for (const Planted& p : {Planted{rope_bug, "L0.q_rope"}, Planted{ffn_bug, "L0.act"}}) {
    CAPTURE(std::string(p.first_stage));
    auto bugged = make_cpu_backend(model, CpuOptions{.threads = 2}, p.ops);
    trace_greedy(*bugged, prompt_for(model.config), 2, work / "cpu");
    const ComparisonResult result = compare_dumps(work / "cpu", work / "reference");
    const TensorComparison* first = result.first();
    REQUIRE_MESSAGE(first != nullptr, "the planted bug went unnoticed");
    CHECK(first->name == p.first_stage);
    CHECK(first->step == 0);
    MESSAGE(format_divergence(*first));
  }
}
