// The whole model, stage by stage: the fast cpu backend against the literal reference on the
// shipped model and the golden models (prefill, then greedy decode steps through a scattered paged
// KV cache), every stage of every step compared by compare_dumps() — the code behind
// `journey-trace diff` (the same comparison through the CLI is the backends.trace_diff_* ctest).
// And with a bug planted in one fast op, the comparison fails and names the first diverging stage.
#include <doctest/doctest.h>

#include <filesystem>

#include "backends/backends_under_test.h"
#include "core/numeric.h"
#include "backends/planted.h"
#include "cpu/kernels.h"
#include "quant/quantize_model.h"
#include "trace/compare.h"
#include "trace/dump_sink.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = JOURNEY_SOURCE_DIR;
const char* const kModels[] = {"data/stories260K", "tests/golden/models/tiny-llama", "tests/golden/models/tiny-qwen2",
                               "tests/golden/models/tiny-qwen3"};

// Prefill `prompt`, then `steps` greedy decode steps, every stage recorded into `dir`. With
// `forced`, decode step i feeds forced[i] instead of the backend's own choice (so that two
// backends whose top tokens may differ on a near-tie still run the same sequence). Returns the
// tokens fed after the prompt.
std::vector<int32_t> trace_greedy(Backend& backend, const std::vector<int32_t>& prompt, int steps, const fs::path& dir,
                                  const std::vector<int32_t>& forced = {}) {
  fs::remove_all(dir);
  const std::vector<int32_t> table = {6, 1, 4, 0, 5, 2, 3};  // [blocks] scrambled: decode reads through the paging
  backend.allocate_kv_cache(7, 4);
  DumpSink sink(dir);
  std::vector<int64_t> positions(prompt.size());  // [T]
  for (size_t i = 0; i < prompt.size(); ++i) positions[i] = int64_t(i);
  sink.set_step(0, "prefill", positions);
  ForwardBatch batch;
  batch.sequences.push_back({0, prompt, 0, table, /*all_logits=*/true});
  std::vector<int32_t> fed;
  for (int step = 0;; ++step) {
    const ForwardOutput out = backend.forward(batch, &sink);
    const float* last = out.last_row(0);
    int32_t next = int32_t(std::max_element(last, last + out.vocab_size) - last);
    if (step == steps) break;
    if (size_t(step) < forced.size()) next = forced[size_t(step)];
    fed.push_back(next);
    const int64_t position = int64_t(prompt.size()) + step;
    sink.set_step(step + 1, "decode", {position});
    batch.sequences[0] = {0, {next}, position, table, false};
  }
  sink.finish();
  return fed;
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

namespace {

// A quantized model file: stored in tests/data/quantized (llama.cpp's own files, PROVENANCE.md
// there), or made at test time from t105-f32.gguf by the quant module (byte-identical to
// llama-quantize's output for these legacy types, tests/quant).
struct QuantizedFile {
  const char* name;
  const char* recipe;   // nullptr: stored; else journey quantize's --type
  double stage_nmse;    // bound on every float stage's NMSE against the reference's (logits included)
};

// Where the tolerances come from: the reference multiplies by the dequantized weights in f32, the
// fast backend by the same values but with the activations quantized to 8 bits per block (Q8_0 /
// Q8_K, NMSE ~3e-5 .. 5e-5 per product, tests/backends/op_check.h) or rounded to bf16 for the
// prefill (~3e-6). Those errors add up through the layers and are amplified where a stage divides
// by a small number (softmax of near-equal scores); the bounds are ~3x the largest stage NMSE
// measured per file. The f32 file is held to the f32 tolerances of the trace diff instead.
const QuantizedFile kQuantizedFiles[] = {
    {"t105-f32.gguf", nullptr, 0.0},      // f32 used in place in the mapping: only the summation order
    {"t105-q8_0.gguf", "q8_0", 3e-3},
    {"t105-q4_0.gguf", "q4_0", 3e-3},
    {"t105-q5_0.gguf", "q5_0", 3e-3},
    {"t105-q5_1.gguf", "q5_1", 3e-3},
    {"t105-q4_1.gguf", nullptr, 3e-3},    // Q4_1 + a Q8_0 output
    {"kq-q2_k.gguf", nullptr, 3e-3},      // every matrix Q2_K
    {"kq-q3_k_m.gguf", nullptr, 3e-3},    // Q3_K, Q4_K, Q5_K, Q6_K
    {"kq-q4_k_m.gguf", nullptr, 3e-3},    // Q4_K, Q6_K
};

// The first float stage (in the order the forward computes them) whose NMSE exceeds `bound`: where a
// quantized kernel's error stops looking like activation rounding. Integer stages must be equal.
const TensorComparison* first_beyond(const ComparisonResult& result, double bound) {
  for (const TensorComparison& t : result.tensors) {
    if (t.status == CompareStatus::OnlyInOurs) continue;
    if (t.tolerance.exact ? t.fails() : !(t.nmse <= bound)) return &t;
  }
  return nullptr;
}

fs::path quantized_file(const QuantizedFile& f, const fs::path& work) {
  const fs::path stored = kSource / "tests/data/quantized" / f.name;
  if (!f.recipe) return stored;
  const fs::path made = work / f.name;
  if (!fs::exists(made)) {
    fs::create_directories(work);
    quant::QuantizeOptions options;
    options.input = kSource / "tests/data/quantized/t105-f32.gguf";
    options.output = made;
    options.type = f.recipe;
    options.threads = 2;
    quant::quantize_model(options);
  }
  return made;
}

}  // namespace

TEST_CASE("whole model, quantized GGUF files: the fast backend on the stored blocks against the reference on "
          "the dequantized weights, stage by stage") {
  // (its own folder per kernel level: ctest runs the levels side by side, CMakeLists.txt)
  const std::string level = cpu::kernels::isa_name(cpu::kernels::best_isa());
  MESSAGE("kernels: " << level);
  const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / ("whole-model-quantized-" + level);
  for (const QuantizedFile& f : kQuantizedFiles) {
    SUBCASE(f.name) {
      const LoadedModel model = load_model(quantized_file(f, work));
      auto reference = make_reference_backend(model);  // widens every weight with quant::dequantize
      auto cpu = make_cpu_backend(model, CpuOptions{.threads = 2});
      // the cpu backend decodes the reference's tokens: a near-tie may pick another top token
      const auto tokens = trace_greedy(*reference, prompt_for(model.config), 4, work / "reference");
      trace_greedy(*cpu, prompt_for(model.config), 4, work / "cpu", tokens);
      const ComparisonResult result = compare_dumps(work / "cpu", work / "reference");
      CHECK(result.tensors.size() > 50);
      if (f.stage_nmse == 0.0) {  // f32: the trace diff's own tolerances
        CHECK_MESSAGE(result.ok(), format_comparison(result, /*only_failures=*/true));
        continue;
      }
      // the first stage beyond the bound, if any, with the numbers side by side
      const TensorComparison* first = first_beyond(result, f.stage_nmse);
      CHECK_MESSAGE(first == nullptr, (first ? format_divergence(*first) : std::string()));
      double worst = 0, worst_logits = 0;
      std::string worst_stage;
      for (const TensorComparison& t : result.tensors) {
        if (t.nmse > worst) worst = t.nmse, worst_stage = t.name;
        if (t.stage == "logits") worst_logits = std::max(worst_logits, t.nmse);
      }
      MESSAGE(std::string(f.name) << ": largest stage NMSE " << worst << " at " << worst_stage << " (bound " << f.stage_nmse
                     << "), logits at most " << worst_logits);
    }
  }
}

TEST_CASE("whole model, quantized: a bug planted in the Q4_K kernel is found at the first product it touches") {
  const LoadedModel model = load_model(kSource / "tests/data/quantized/kq-q4_k_m.gguf");
  const fs::path work = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "whole-model-quantized" / "planted";
  auto reference = make_reference_backend(model);
  const auto tokens = trace_greedy(*reference, prompt_for(model.config), 2, work / "reference");
  CpuOps planted;
  planted.linear = planted::linear_q4_k_without_minimums;  // o_proj (Q4_K) is the first product through linear()
  auto bugged = make_cpu_backend(model, CpuOptions{.threads = 2}, planted);
  trace_greedy(*bugged, prompt_for(model.config), 2, work / "cpu", tokens);
  const ComparisonResult result = compare_dumps(work / "cpu", work / "reference");
  const TensorComparison* first = first_beyond(result, 3e-3);  // the bound of the unbugged run
  REQUIRE_MESSAGE(first != nullptr, "the planted bug went unnoticed");
  CHECK(first->name == "L0.attn_out");
  CHECK(first->step == 0);
  MESSAGE(format_divergence(*first));
}
