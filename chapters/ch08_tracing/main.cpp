// Chapter 8 — tracing: keep every intermediate tensor of a run, then use the dump to find a bug.
// Runs "Once upon a time" through stories260K three times, recording every stage with a DumpSink:
// on the literal reference backend, on the fast CPU backend, and on the fast CPU backend with a
// planted bug in its RoPE kernel (it pairs dimensions the Meta way, (2i, 2i+1), on a Hugging Face
// checkpoint whose q/k rows want (i, i + D/2) — a real bug that real converters have had). It
// prints a few recorded tensors, then compares the dumps stage by stage in journey order: the fast
// backend agrees with the reference everywhere, and the bugged one first diverges where the bug
// entered. Fails unless that is L0.q_rope.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/traced_generation.h"
#include "reference/reference_backend.h"
#include "sampling/sampler.h"
#include "text/tokenizer.h"
#include "trace/compare.h"
#include "trace/dump_sink.h"
#include "trace/npy.h"

using namespace journey;
namespace fs = std::filesystem;

// The generation loop of engine/generate.cpp, spelled out so the step boundaries are visible: the
// sink is told before every forward pass which step begins (a backend cannot know).
// `label` is what the manifest calls the backend (its settings.backend, which the diff prints).
static std::vector<int32_t> traced_run(Backend& backend, const std::string& label, const LoadedModel& model,
                                       const std::vector<int32_t>& prompt, int decode_steps, const fs::path& dir) {
  fs::remove_all(dir);
  backend.allocate_kv_cache(/*num_blocks=*/4, /*block_size=*/4);
  DumpSink sink(dir);
  SamplingParams greedy;
  greedy.temperature = 0.0;  // argmax
  Sampler sampler(greedy, prompt);

  std::vector<int64_t> positions(prompt.size());  // [T]
  for (size_t i = 0; i < prompt.size(); ++i) positions[i] = int64_t(i);
  sink.set_step(0, "prefill", positions);
  ForwardBatch batch;
  batch.sequences.push_back(SequenceInput{0, prompt, 0, {0, 1}, /*all_logits=*/true});
  std::vector<int32_t> generated;
  for (int step = 0;; ++step) {
    ForwardOutput out = backend.forward(batch, &sink);
    SampledToken token = sampler.sample({out.last_row(0), size_t(out.vocab_size)}, &sink);
    sink.set_sampled(ManifestSampled{token.id, "", token.prob, {}});
    generated.push_back(token.id);
    if (step == decode_steps) break;
    const int64_t position = int64_t(prompt.size()) + step;
    sink.set_step(step + 1, "decode", {position});
    batch.sequences[0] = SequenceInput{0, {token.id}, position, {0, 1}, false};
  }
  Manifest& m = sink.manifest();  // what the dump is, so that a diff can say what it compares
  m.generated_by_tool = "chapters/ch08_tracing";
  m.model = manifest_model(model.path, backend.config());
  m.prompt = "Once upon a time";
  m.settings = backend_manifest_settings(backend);
  m.settings["backend"] = label;  // which fast backend: the planted bug is part of its name
  sink.finish();
  return generated;
}

// The planted bug: RoPE with the pairs of the other layout.
static void rope_with_swapped_layout(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D,
                                     double theta, RopeLayout layout) {
  const RopeLayout wrong = layout == RopeLayout::HalfSplit ? RopeLayout::Interleaved : RopeLayout::HalfSplit;
  cpu::rope(x, positions, T, heads, D, theta, wrong);
}

int main() {
  try {
    const fs::path model_dir = fs::path(JOURNEY_SOURCE_DIR) / "data" / "stories260K";
    LoadedModel model = load_model(model_dir);
    auto tokenizer = load_tokenizer(model_dir);
    std::vector<int> ids = tokenizer->encode("Once upon a time", /*add_special=*/true, /*parse_special=*/false);
    const std::vector<int32_t> prompt(ids.begin(), ids.end());

    const fs::path work = "/tmp/journey-ch08";  // fixed, not $TMPDIR: the README names it and shows it in the output
    const fs::path good = work / "reference", fast = work / "cpu", buggy = work / "cpu-rope-bug";
    auto reference = make_reference_backend(model);
    auto cpu = make_cpu_backend(model, CpuOptions{.threads = 1});
    CpuOps planted;
    planted.rope = rope_with_swapped_layout;
    auto bugged = make_cpu_backend(model, CpuOptions{.threads = 1}, planted);
    std::vector<int32_t> good_tokens = traced_run(*reference, reference->name(), model, prompt, 3, good);
    std::vector<int32_t> fast_tokens = traced_run(*cpu, cpu->name(), model, prompt, 3, fast);
    std::vector<int32_t> buggy_tokens =
        traced_run(*bugged, cat(bugged->name(), " with a planted RoPE bug"), model, prompt, 3, buggy);

    std::cout << "prompt tokens:";
    for (int32_t id : prompt) std::cout << " " << id << " " << tokenizer->piece(id);
    std::cout << "\ngreedy, reference: ";
    for (int32_t id : good_tokens) std::cout << tokenizer->piece(id) << " ";
    std::cout << "\ngreedy, cpu:       ";
    for (int32_t id : fast_tokens) std::cout << tokenizer->piece(id) << " ";
    std::cout << "\ngreedy, RoPE bug:  ";
    for (int32_t id : buggy_tokens) std::cout << tokenizer->piece(id) << " ";

    // Read a dump like any other file: layer 0, head 0's attention in the prefill, [H, T, P].
    const Manifest manifest = read_manifest(good / "manifest.json");
    std::cout << "\n\n" << manifest.tensors.size() << " tensors in " << good << "\n";
    const NpyArray weights = read_npy(good / manifest.find("attn_weights", 0, 0)->file);
    const int64_t T = weights.shape[1], P = weights.shape[2];
    std::cout << "L0.attn_weights, head 0, prefill " << shape_string(weights.shape) << ": row = query position\n";
    for (int64_t t = 0; t < T; ++t) {
      std::printf("  %-8s", tokenizer->piece(prompt[size_t(t)]).c_str());
      for (int64_t p = 0; p < P; ++p) std::printf(" %5.2f", weights.f32[size_t(t * P + p)]);
      std::printf("\n");
    }

    // The fast backend against the reference: every stage within f32 rounding.
    ComparisonResult agree = compare_dumps(fast, good);
    std::cout << "\ncpu vs reference: " << (agree.first() ? "DIVERGED at " + agree.first()->name : std::string("every stage agrees")) << "\n";
    if (agree.first()) return 1;

    // Find the bug: compare stage by stage, in the order the forward pass computes them.
    ComparisonResult result = compare_dumps(buggy, good);
    std::cout << "\n" << format_comparison(result, /*only_failures=*/true);
    const TensorComparison* first = result.first();
    if (!first || first->name != "L0.q_rope" || first->step != 0) {
      std::cerr << "expected the first divergence at L0.q_rope, step 0\n";
      return 1;
    }
    std::cout << "\nThe bug entered at " << first->name << ": every stage before it matches.\n";
    return 0;
  } catch (const journey::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
