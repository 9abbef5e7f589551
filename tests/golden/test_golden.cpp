// The engine against the independent PyTorch reference, stage by stage.
//
// Each directory tests/golden/<name>/ is a dump written by tools/trace/reference.py (float64,
// from the Hugging Face model definitions) or, under transformers/, by tools/trace/hf_reference.py
// (transformers' modeling code itself): the prompt's prefill and a few greedy decode steps.
// Here each CPU backend (the literal reference and the fast cpu backend) runs the same token ids,
// step by step through its paged KV cache, into a DumpSink, and compare_dumps() must find every
// stage within its tolerance. On failure the
// message is the comparison table with the first diverging stage and its values side by side.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>

#include "assets/model.h"
#include "core/dtype.h"
#include "core/error.h"
#include "backend/backend.h"
#include "backends/backends_under_test.h"
#include "cpu/cpu_backend.h"
#include "trace/compare.h"
#include "trace/dump_sink.h"
#include "trace/npy.h"

using namespace journey;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = JOURNEY_SOURCE_DIR;
const char* const kGoldens[] = {"stories260K", "tiny-llama", "tiny-qwen2", "tiny-qwen3",
                                "transformers/tiny-llama", "transformers/tiny-qwen2", "transformers/tiny-qwen3"};

fs::path golden_dir(const std::string& name) { return kSource / "tests" / "golden" / name; }

// The model with every weight matrix rounded to bf16 and widened back (what `--device cuda` holds
// on the GPU); norm weights and biases stay f32, as there.
LoadedModel with_bf16_matrices(LoadedModel model) {
  WeightStore rounded;
  for (const auto& [name, t] : model.weights.all()) {
    auto values = std::make_shared<std::vector<float>>(t.to_f32());  // [numel]
    if (t.shape.size() == 2)
      for (float& v : *values) v = bf16_to_f32(f32_to_bf16(v));
    TensorRef r = t;
    r.dtype = DType::F32;
    r.data = reinterpret_cast<const std::byte*>(values->data());
    r.nbytes = values->size() * sizeof(float);
    rounded.add(r, values);
  }
  model.weights = std::move(rounded);
  return model;
}

using BackendFactory = std::function<std::unique_ptr<Backend>(const LoadedModel&)>;

// Run the golden's steps through a backend into a fresh dump directory; returns it. planted: the
// backend carries a planted bug, so its greedy tokens are not checked.
fs::path run_engine(const std::string& name, const Manifest& golden, const BackendFactory& make, const std::string& tag,
                    bool planted = false) {
  const LoadedModel model = load_model(kSource / golden.model.path);
  auto backend = make(model);
  // Small blocks and a scrambled block table, so decode steps read their past through the paging.
  const int64_t block_size = 4;
  backend->allocate_kv_cache(8, block_size);
  const std::vector<int32_t> block_table = {5, 2, 7, 0, 3, 1, 6, 4};  // [n_blocks]

  const fs::path out = fs::path(JOURNEY_BINARY_DIR) / "test-tmp" / "golden" / (name + tag);
  fs::remove_all(out);
  DumpSink sink(out);
  sink.manifest().generated_by_tool = "tests/golden/test_golden.cpp";
  sink.manifest().model.path = golden.model.path;
  sink.manifest().tokens = golden.tokens;
  int64_t start = 0;
  for (const ManifestStep& step : golden.steps) {
    const ManifestTensor* ids_entry = golden.find("token_ids", -1, step.step);
    REQUIRE_MESSAGE(ids_entry != nullptr, name, ": golden step ", step.step, " has no token_ids");
    const std::vector<int32_t> ids = read_npy(golden_dir(name) / ids_entry->file).i32;  // [T]
    REQUIRE(static_cast<int64_t>(step.positions.size()) == static_cast<int64_t>(ids.size()));
    REQUIRE(step.positions.front() == start);
    const int64_t blocks_needed = (start + static_cast<int64_t>(ids.size()) + block_size - 1) / block_size;
    REQUIRE(blocks_needed <= static_cast<int64_t>(block_table.size()));

    SequenceInput seq;
    seq.seq_id = 0;
    seq.tokens = ids;
    seq.start_position = start;
    seq.block_table.assign(block_table.begin(), block_table.begin() + blocks_needed);
    seq.all_logits = true;  // the golden holds logits for every prefill position
    ForwardBatch batch;
    batch.sequences.push_back(seq);
    sink.set_step(step.step, step.kind, step.positions);
    const ForwardOutput output = backend->forward(batch, &sink);

    // Greedy decoding must pick what the reference picked (the golden's next input).
    if (step.sampled && !planted) {
      const float* last = output.last_row(0);
      const int64_t ours = std::max_element(last, last + output.vocab_size) - last;
      CHECK_MESSAGE(ours == step.sampled->id, name, " step ", step.step, ": greedy token ", ours,
                    ", reference ", step.sampled->id);
    }
    start += static_cast<int64_t>(ids.size());
  }
  sink.finish();
  return out;
}

}  // namespace

TEST_CASE("golden: each golden is a complete, versioned dump of a model we ship") {
  for (const std::string name : kGoldens) {
   SUBCASE(name.c_str()) {
    const Manifest golden = read_manifest(golden_dir(name) / "manifest.json");  // checks format and version
    const std::string tool = name.rfind("transformers/", 0) == 0 ? "tools/trace/hf_reference.py" : "tools/trace/reference.py";
    CHECK(golden.generated_by_tool == tool);
    CHECK(golden.generated_by_command.find(tool) != std::string::npos);
    REQUIRE(golden.steps.size() >= 2);  // a prefill and at least one decode through the cache
    CHECK(golden.steps[0].kind == "prefill");
    CHECK(golden.steps[1].kind == "decode");
    // The model directory is the one the golden was made from.
    CHECK_MESSAGE(model_fingerprint(kSource / golden.model.path) == golden.model.hash,
                  golden.model.path, " changed since the golden was written; rerun tools/trace/regenerate_goldens.sh");
    // Every model stage is present at every layer and step, so a thin golden cannot pass by omission.
    const LoadedModel meta = load_model_metadata(kSource / golden.model.path);
    // The logit lens is journey trace's reading of layer_out, not a stage of the forward pass; the
    // grammar mask exists only under structured output, the *_partial stages only under tensor parallelism.
    std::set<std::string> skip = {"template_text", "kv_blocks", "sampled", "logit_lens", "logit_lens_probs", "grammar_mask",
                                  "attn_out_partial", "ffn_out_partial", "logits_partial"};
    if (!meta.config.qk_norm) skip.insert({"q_norm", "k_norm"});
    for (const auto& info : kStages) {
      const std::string stage(info.name);
      if (skip.count(stage) || stage.rfind("probs_", 0) == 0) continue;
      for (const auto& step : golden.steps) {
        const int layers = info.scope == StageScope::Layer ? static_cast<int>(meta.config.num_layers) : 1;
        for (int l = 0; l < layers; ++l)
          CHECK_MESSAGE(golden.find(stage, info.scope == StageScope::Layer ? l : -1, step.step) != nullptr,
                        "golden ", name, " lacks ", tensor_name(stage, info.scope == StageScope::Layer ? l : -1),
                        " at step ", step.step);
      }
    }
   }
  }
}

TEST_CASE("golden: the reference and the fast cpu backend match the PyTorch reference at every stage") {
  for (const std::string& kind : kCpuBackends)
  for (const std::string name : kGoldens) {
    SUBCASE((kind + " " + name).c_str()) {
      const Manifest golden = read_manifest(golden_dir(name) / "manifest.json");
      const fs::path ours = run_engine(
          name, golden, [&](const LoadedModel& m) { return make_backend_under_test(kind, m); }, "." + kind);
      const ComparisonResult result = compare_dumps(ours, golden_dir(name));
      const std::string report = format_comparison(result, /*only_failures=*/true);
      CHECK_MESSAGE(result.ok(), name, ":\n", report);
      // Not a vacuous pass: the number of compared tensors is what the golden lists.
      size_t compared = 0;
      double worst_nmse = 0, worst_abs = 0;
      std::string worst_name;
      for (const auto& c : result.tensors) {
        if (c.status == CompareStatus::OnlyInOurs) continue;
        ++compared;
        if (c.nmse > worst_nmse) worst_nmse = c.nmse, worst_name = cat(c.name, "@", c.step);
        worst_abs = std::max(worst_abs, c.max_abs);
      }
      CHECK(compared == golden.tensors.size());
      MESSAGE(kind, " ", name, ": ", compared, " tensors, worst nmse ", worst_nmse, " (", worst_name, "), worst max_abs ", worst_abs);
    }
  }
}

namespace {
// The planted bug: the fast backend's RoPE pairs dimensions the other layout's way.
void rope_with_swapped_layout(float* x, const int64_t* positions, int64_t T, int64_t heads, int64_t D, double theta,
                              RopeLayout layout) {
  cpu::rope(x, positions, T, heads, D, theta, layout == RopeLayout::HalfSplit ? RopeLayout::Interleaved : RopeLayout::HalfSplit);
}
}  // namespace

TEST_CASE("golden: a RoPE bug planted in the fast backend is found at L0.q_rope and nowhere earlier") {
  // The bug is injected from the test side, through the ops table of the fast backend (CpuOps).
  // The first stage that can see it is q_rope of layer 0 in the prefill; everything before must agree.
  for (const std::string name : {"stories260K", "tiny-qwen3"}) {
    SUBCASE(name.c_str()) {
      const Manifest golden = read_manifest(golden_dir(name) / "manifest.json");
      CpuOps planted;
      planted.rope = rope_with_swapped_layout;
      const fs::path ours = run_engine(
          name, golden, [&](const LoadedModel& m) { return make_cpu_backend(m, CpuOptions{.threads = 2}, planted); },
          ".rope-bug", /*planted=*/true);
      const ComparisonResult result = compare_dumps(ours, golden_dir(name));
      const TensorComparison* first = result.first();
      REQUIRE_MESSAGE(first != nullptr, "the planted bug went unnoticed:\n", format_comparison(result));
      CHECK_MESSAGE(first->name == "L0.q_rope", format_divergence(*first));
      CHECK(first->step == 0);
      MESSAGE(name, " with the planted bug:\n", format_divergence(*first));
      CHECK(first->status == CompareStatus::BeyondTolerance);
      for (size_t i = 0; i < *result.first_divergence; ++i) {
        CAPTURE(result.tensors[i].name);
        CHECK((result.tensors[i].status == CompareStatus::Ok || result.tensors[i].status == CompareStatus::OnlyInOurs));
      }
      // The formatted report names the stage, layer and step for the reader.
      CHECK(format_divergence(*first).find("L0.q_rope (stage q_rope, layer 0, step 0)") != std::string::npos);
    }
  }
}

TEST_CASE("golden: bf16-rounded weights pass the bf16 tolerance profile, and the planted RoPE bug still fails it") {
  // What the GPU's default bf16 weights do to a run, reproduced on the CPU: every matrix rounded to
  // bf16. The dump must be within the bf16 profile (trace/compare.h) at every stage of every golden;
  // the same run with the planted RoPE bug must still diverge first at L0.q_rope.
  CompareOptions bf16;
  bf16.profile = ToleranceProfile::BF16;
  for (const std::string name : kGoldens) {
    SUBCASE(name.c_str()) {
      const Manifest golden = read_manifest(golden_dir(name) / "manifest.json");
      // (rounded weights are another model: its greedy tokens may differ, so they are not checked)
      const fs::path rounded = run_engine(
          name, golden,
          [](const LoadedModel& m) { return make_cpu_backend(with_bf16_matrices(m), CpuOptions{.threads = 2}); },
          ".bf16", /*planted=*/true);
      const ComparisonResult strict = compare_dumps(rounded, golden_dir(name));
      CHECK_MESSAGE(!strict.ok(), "bf16-rounded weights should fail the f32 tolerances");
      const ComparisonResult result = compare_dumps(rounded, golden_dir(name), bf16);
      CHECK_MESSAGE(result.ok(), format_comparison(result, /*only_failures=*/true));
      double worst = 0;
      for (const auto& c : result.tensors) worst = std::max(worst, c.tolerance.nmse > 0 ? c.nmse / c.tolerance.nmse : 0);
      MESSAGE(name, ": bf16-rounded weights use at most ", worst, " of the bf16 NMSE bound");

      CpuOps planted;
      planted.rope = rope_with_swapped_layout;
      const fs::path bug = run_engine(
          name, golden,
          [&](const LoadedModel& m) { return make_cpu_backend(with_bf16_matrices(m), CpuOptions{.threads = 2}, planted); },
          ".bf16-rope-bug", /*planted=*/true);
      const ComparisonResult found = compare_dumps(bug, golden_dir(name), bf16);
      REQUIRE_MESSAGE(found.first() != nullptr, "the planted bug went unnoticed under the bf16 profile");
      CHECK_MESSAGE(found.first()->name == "L0.q_rope", format_divergence(*found.first()));
      CHECK(found.first()->step == 0);
    }
  }
}
