// compare_dumps on synthetic dumps: a "golden" and an "ours" written from the same random
// tensors, with divergences injected at known places.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "trace/compare.h"
#include "trace/dump_sink.h"
#include "trace/npy.h"
#include "trace_test_util.h"

using namespace journey;

namespace {

using Perturb = std::function<void(Stage, int layer, int step, std::vector<float>& values, std::vector<int64_t>& shape)>;

// A fake two-layer, two-step run: T=3 prefill then one decode token; H=2, D=4, E=8, V=16.
void make_dump(const std::filesystem::path& dir, const Perturb& perturb = nullptr,
               const nlohmann::json& settings = nlohmann::json::object()) {
  DumpSink sink(dir);
  sink.manifest().settings = settings;
  unsigned seed = 1;
  for (int step = 0; step < 2; ++step) {
    const int64_t T = step == 0 ? 3 : 1, P = step == 0 ? 3 : 4, start = step == 0 ? 0 : 3;
    std::vector<int64_t> positions;
    for (int64_t t = 0; t < T; ++t) positions.push_back(start + t);
    sink.set_step(step, step == 0 ? "prefill" : "decode", positions);
    auto emit = [&](Stage stage, int layer, std::vector<int64_t> shape) {
      std::vector<float> v = test::random_values(static_cast<size_t>(shape_numel(shape)), seed++);
      if (stage == Stage::attn_scores)  // causal mask: position p > start + t is -inf
        for (int64_t h = 0; h < shape[0]; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t p = 0; p < P; ++p)
              if (p > start + t) v[(h * T + t) * P + p] = -std::numeric_limits<float>::infinity();
      if (perturb) perturb(stage, layer, step, v, shape);
      if (sink.wants(stage, layer)) sink.record(stage, layer, TraceTensor{v, shape});
    };
    std::vector<int32_t> ids(T, 5);
    sink.record_ints(Stage::token_ids, -1, ids, {T});
    emit(Stage::embeddings, -1, {T, 8});
    for (int layer = 0; layer < 2; ++layer) {
      emit(Stage::q, layer, {T, 2, 4});
      emit(Stage::k, layer, {T, 2, 4});
      emit(Stage::q_rope, layer, {T, 2, 4});
      emit(Stage::attn_scores, layer, {2, T, P});
      emit(Stage::layer_out, layer, {T, 8});
    }
    emit(Stage::logits, -1, {T, 16});
  }
  sink.finish();
}

}  // namespace

TEST_CASE("compare: identical dumps agree everywhere, -inf masks included") {
  auto golden = test::fresh_dir("cmp_same_golden"), ours = test::fresh_dir("cmp_same_ours");
  make_dump(golden);
  make_dump(ours);
  ComparisonResult r = compare_dumps(ours, golden);
  CHECK(r.ok());
  CHECK(r.tensors.size() == 2 * (1 + 1 + 2 * 5 + 1));
  for (const auto& c : r.tensors) {
    CHECK(c.status == CompareStatus::Ok);
    CHECK(c.max_abs == 0.0);
  }
  CHECK(format_comparison(r).find("every stage is within tolerance") != std::string::npos);
}

TEST_CASE("compare: tensors are listed in journey order and the first injected divergence is named") {
  auto golden = test::fresh_dir("cmp_order_golden"), ours = test::fresh_dir("cmp_order_ours");
  make_dump(golden);
  // Two bugs: L1.k in step 0 (small but far beyond f32 rounding) and logits in step 1.
  make_dump(ours, [](Stage s, int layer, int step, std::vector<float>& v, std::vector<int64_t>&) {
    if (s == Stage::k && layer == 1 && step == 0) v[5] += 1e-2f;
    if (s == Stage::logits && step == 1) v[0] += 10.f;
  });
  ComparisonResult r = compare_dumps(ours, golden);
  REQUIRE_FALSE(r.ok());
  const TensorComparison* first = r.first();
  REQUIRE(first != nullptr);
  CHECK(first->name == "L1.k");
  CHECK(first->step == 0);
  CHECK(first->status == CompareStatus::BeyondTolerance);
  CHECK(first->max_abs == doctest::Approx(1e-2).epsilon(1e-3));
  CHECK(first->worst_index == 5);
  // Journey order: step 0's token_ids, embeddings, L0 stages, L1 stages, logits; then step 1.
  CHECK(r.tensors[0].name == "token_ids");
  CHECK(r.tensors[1].name == "embeddings");
  CHECK(r.tensors[2].name == "L0.q");
  CHECK(r.tensors[7].name == "L1.q");
  CHECK(r.tensors[12].name == "logits");
  CHECK(r.tensors[13].step == 1);
  // Everything before the first divergence is within tolerance.
  for (size_t i = 0; i < *r.first_divergence; ++i) CHECK(r.tensors[i].status == CompareStatus::Ok);
  // The step-1 logits bug is reported too, but not as the first.
  bool saw_logits = false;
  for (const auto& c : r.tensors)
    if (c.name == "logits" && c.step == 1) saw_logits = c.fails();
  CHECK(saw_logits);
  const std::string report = format_comparison(r);
  CHECK(report.find("first divergence: L1.k (stage k, layer 1, step 0)") != std::string::npos);
  CHECK(report.find("<== FIRST DIVERGENCE") != std::string::npos);
  CHECK(report.find("<- largest") != std::string::npos);
}

TEST_CASE("compare: NMSE and max errors are what the definitions say") {
  auto golden = test::fresh_dir("cmp_nmse_golden"), ours = test::fresh_dir("cmp_nmse_ours");
  make_dump(golden);
  // Scaling a tensor by (1 + e) gives NMSE = e^2 and max_rel = e exactly (up to f32 rounding).
  const float e = 1e-3f;
  make_dump(ours, [&](Stage s, int layer, int step, std::vector<float>& v, std::vector<int64_t>&) {
    if (s == Stage::layer_out && layer == 0 && step == 0)
      for (auto& x : v) x *= 1 + e;
  });
  ComparisonResult r = compare_dumps(ours, golden);
  REQUIRE(r.first() != nullptr);
  CHECK(r.first()->name == "L0.layer_out");
  CHECK(r.first()->nmse == doctest::Approx(1e-6).epsilon(1e-3));
  CHECK(r.first()->max_rel == doctest::Approx(1e-3).epsilon(1e-2));
}

TEST_CASE("compare: rounding-level noise is within tolerance") {
  auto golden = test::fresh_dir("cmp_noise_golden"), ours = test::fresh_dir("cmp_noise_ours");
  make_dump(golden);
  make_dump(ours, [](Stage s, int, int, std::vector<float>& v, std::vector<int64_t>&) {
    if (s == Stage::token_ids || s == Stage::embeddings) return;
    for (auto& x : v)
      if (std::isfinite(x)) x = std::nextafter(std::nextafter(x, 1e30f), 1e30f);  // two ulps
  });
  ComparisonResult r = compare_dumps(ours, golden);
  CHECK_MESSAGE(r.ok(), format_comparison(r, true));
}

TEST_CASE("compare: a mask difference, a shape mismatch, a missing stage and an argmax flip are each reported") {
  auto golden = test::fresh_dir("cmp_kinds_golden");
  make_dump(golden);

  SUBCASE("mask") {
    auto ours = test::fresh_dir("cmp_kinds_mask");
    make_dump(ours, [](Stage s, int layer, int step, std::vector<float>& v, std::vector<int64_t>&) {
      if (s == Stage::attn_scores && layer == 0 && step == 0) v[1] = 0.5f;  // (h0, t0, p1) should be masked
    });
    ComparisonResult r = compare_dumps(ours, golden);
    REQUIRE(r.first() != nullptr);
    CHECK(r.first()->name == "L0.attn_scores");
    CHECK(r.first()->status == CompareStatus::MaskMismatch);
    CHECK(r.first()->detail.find("[0, 0, 1]") != std::string::npos);
  }
  SUBCASE("shape") {
    auto ours = test::fresh_dir("cmp_kinds_shape");
    make_dump(ours, [](Stage s, int layer, int, std::vector<float>& v, std::vector<int64_t>& shape) {
      if (s == Stage::q && layer == 1) { shape = {shape[0], 4, 2}; (void)v; }  // heads/dims swapped
    });
    ComparisonResult r = compare_dumps(ours, golden);
    REQUIRE(r.first() != nullptr);
    CHECK(r.first()->name == "L1.q");
    CHECK(r.first()->status == CompareStatus::ShapeMismatch);
    CHECK(r.first()->detail.find("[3, 4, 2] (ours) vs [3, 2, 4] (golden)") != std::string::npos);
  }
  SUBCASE("missing") {
    auto ours = test::fresh_dir("cmp_kinds_missing");
    make_dump(ours);  // same data, then L0.q_rope is struck from the manifest
    Manifest m = read_manifest(ours / "manifest.json");
    std::erase_if(m.tensors, [](const ManifestTensor& t) { return t.name == "L0.q_rope"; });
    write_manifest(ours / "manifest.json", m);
    ComparisonResult r = compare_dumps(ours, golden);
    REQUIRE(r.first() != nullptr);
    CHECK(r.first()->name == "L0.q_rope");
    CHECK(r.first()->status == CompareStatus::MissingInOurs);
    CHECK(format_comparison(r).find("MISSING IN OURS") != std::string::npos);
  }
  SUBCASE("argmax") {
    auto ours = test::fresh_dir("cmp_kinds_argmax");
    make_dump(ours, [](Stage s, int, int step, std::vector<float>& v, std::vector<int64_t>&) {
      if (s != Stage::logits || step != 0) return;
      // Row 1: make index 3 the clear top token in ours only.
      float top = *std::max_element(v.begin() + 16, v.begin() + 32);
      v[16 + 3] = top + 1e-2f;
    });
    ComparisonResult r = compare_dumps(ours, golden);
    REQUIRE(r.first() != nullptr);
    CHECK(r.first()->name == "logits");
    CHECK(r.first()->argmax_disagree == 1);
  }
}

TEST_CASE("compare: head-filtered dumps are compared on the heads they share") {
  auto golden = test::fresh_dir("cmp_heads_golden"), ours = test::fresh_dir("cmp_heads_ours");
  make_dump(golden);
  {
    // Ours keeps only head 1 of the per-head stages, from the same random values as the golden.
    DumpSink sink(ours, parse_filters("", "", "1", ""));
    Manifest full = read_manifest(golden / "manifest.json");
    for (const auto& step : full.steps) {
      sink.set_step(step.step, step.kind, step.positions);
      for (const auto& t : full.tensors) {
        if (t.step != step.step) continue;
        NpyArray a = read_npy(golden / t.file);
        if (t.dtype == "i32") sink.record_ints(*stage_from_name(t.stage), t.layer, a.i32, a.shape);
        else sink.record(*stage_from_name(t.stage), t.layer, TraceTensor{a.f32, a.shape});
      }
    }
    sink.finish();
  }
  ComparisonResult r = compare_dumps(ours, golden);
  CHECK_MESSAGE(r.ok(), format_comparison(r, true));
  bool saw_heads = false;
  for (const auto& c : r.tensors)
    if (c.name == "L0.attn_scores" && c.step == 0) saw_heads = c.heads == std::vector<int>{1};
  CHECK(saw_heads);
}

TEST_CASE("compare: an extra stage in ours is listed but is not a failure") {
  auto golden = test::fresh_dir("cmp_extra_golden"), ours = test::fresh_dir("cmp_extra_ours");
  make_dump(golden);
  make_dump(ours);
  Manifest g = read_manifest(golden / "manifest.json");
  std::erase_if(g.tensors, [](const ManifestTensor& t) { return t.stage == "embeddings"; });
  write_manifest(golden / "manifest.json", g);
  ComparisonResult r = compare_dumps(ours, golden);
  CHECK(r.ok());
  int only = 0;
  for (const auto& c : r.tensors) only += c.status == CompareStatus::OnlyInOurs;
  CHECK(only == 2);
}

TEST_CASE("compare: the bf16 and f16 profiles follow the arithmetic of rounded weights") {
  const double eps_bf16 = std::pow(2.0 / 256, 2) / 24, eps_f16 = std::pow(2.0 / 2048, 2) / 24;
  CHECK(eps_bf16 == doctest::Approx(2.54e-6).epsilon(1e-2));
  const StageTolerance embed = stage_tolerance(Stage::embeddings, ToleranceProfile::BF16, 0);
  CHECK(embed.nmse == doctest::Approx(4 * eps_bf16));
  CHECK(embed.max_abs == doctest::Approx(2.0 / 256));
  // a stage of layer l has passed l + 1 layers: 40 eps per layer passed, plus 40
  CHECK(stage_tolerance(Stage::attn_out, ToleranceProfile::BF16, 1).nmse == doctest::Approx(80 * eps_bf16));
  CHECK(stage_tolerance(Stage::attn_out, ToleranceProfile::BF16, 5).nmse == doctest::Approx(240 * eps_bf16));
  CHECK(stage_tolerance(Stage::attn_out, ToleranceProfile::F16, 5).nmse == doctest::Approx(240 * eps_f16));
  CHECK(stage_tolerance(Stage::q, ToleranceProfile::F16, 1).max_abs == doctest::Approx(10.0 / 2048));
  CHECK(stage_tolerance(Stage::logits, ToleranceProfile::BF16, 3).argmax);  // logits keep the argmax rule
  CHECK(stage_tolerance(Stage::token_ids, ToleranceProfile::BF16, 0).exact);
  CHECK(stage_tolerance(Stage::q, ToleranceProfile::F32, 9).nmse == stage_tolerance(Stage::q).nmse);
  CHECK(tolerance_profile_from_name("BFloat16") == ToleranceProfile::BF16);
  CHECK(tolerance_profile_from_name("float32") == ToleranceProfile::F32);
  CHECK_FALSE(tolerance_profile_from_name("q4_0").has_value());
}

TEST_CASE("compare: bf16-sized errors pass the bf16 profile, chosen from the manifests; a bug still fails it") {
  auto golden = test::fresh_dir("cmp_bf16_golden");
  make_dump(golden, nullptr, {{"backend", "cpu"}, {"dtype", "float32"}});
  // What bf16 weights do to a run: embedding rows rounded to bf16 (NMSE ~eps), every later tensor
  // off by a relative error uniform in +-1.2% (NMSE ~4.8e-5, about 19 eps, as seen on the H200).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> rel(-1.2e-2f, 1.2e-2f);
  auto bf16_like = [&](Stage s, int, int, std::vector<float>& v, std::vector<int64_t>&) {
    if (s == Stage::token_ids) return;
    for (auto& x : v) {
      if (!std::isfinite(x)) continue;
      x = s == Stage::embeddings ? bf16_to_f32(f32_to_bf16(x)) : x * (1 + rel(rng));
    }
  };
  const nlohmann::json cuda_bf16 = {{"backend", "cuda"}, {"weight_dtype", "bf16"}};
  auto ours = test::fresh_dir("cmp_bf16_ours");
  make_dump(ours, bf16_like, cuda_bf16);

  ComparisonResult r = compare_dumps(ours, golden);
  CHECK(r.profile == ToleranceProfile::BF16);
  CHECK_MESSAGE(r.ok(), format_comparison(r, true));
  const std::string report = format_comparison(r);
  CHECK(report.find("A, under test: ") != std::string::npos);
  CHECK(report.find("(cuda, bf16 weights)") != std::string::npos);
  CHECK(report.find("(cpu, float32 weights)") != std::string::npos);
  CHECK(report.find("bf16 profile (from the manifests: A's weights bf16, B's float32)") != std::string::npos);

  // the same dumps judged as two f32 runs: the rounded embeddings already diverge
  CompareOptions f32;
  f32.profile = ToleranceProfile::F32;
  ComparisonResult strict = compare_dumps(ours, golden, f32);
  REQUIRE(strict.first() != nullptr);
  CHECK(strict.first()->name == "embeddings");
  CHECK(strict.profile_source == "given by the caller");

  // a bug on top of the bf16 noise (q rotated by a wrong angle: here, 30% of each value moved) is
  // found where it enters
  auto bugged = test::fresh_dir("cmp_bf16_bug");
  make_dump(bugged, [&](Stage s, int layer, int step, std::vector<float>& v, std::vector<int64_t>& shape) {
    bf16_like(s, layer, step, v, shape);
    if (s == Stage::q_rope && layer == 0)
      for (size_t i = 0; i + 1 < v.size(); i += 2) std::swap(v[i], v[i + 1]), v[i] *= 0.7f;
  }, cuda_bf16);
  ComparisonResult found = compare_dumps(bugged, golden);
  CHECK(found.profile == ToleranceProfile::BF16);
  REQUIRE(found.first() != nullptr);
  CHECK(found.first()->name == "L0.q_rope");
  CHECK(found.first()->step == 0);
}

TEST_CASE("compare: the labels say what each file stores, and a difference in stored types is named") {
  auto f32_dump = test::fresh_dir("cmp_stored_f32");
  make_dump(f32_dump, nullptr, {{"backend", "cpu"}, {"dtype", "f32"}, {"weights_as_stored", "f32 x 12"}});
  auto q4 = test::fresh_dir("cmp_stored_q4km");
  make_dump(q4, nullptr, {{"backend", "cpu"}, {"dtype", "f32"}, {"weights_as_stored", "f32 x 5, q4_K x 6, q6_K x 1"}});
  ComparisonResult r = compare_dumps(q4, f32_dump);
  CHECK(r.ours_label == "cpu, weights f32 x 5, q4_K x 6, q6_K x 1 as stored");
  CHECK(r.golden_label == "cpu, f32 weights");  // an all-f32 file needs no list
  CHECK(r.profile_source.find("the files store their weights differently (A: f32 x 5, q4_K x 6, q6_K x 1; B: f32)") !=
        std::string::npos);
  // the same stored types on both sides: nothing added
  ComparisonResult same = compare_dumps(q4, q4);
  CHECK(same.profile_source.find("differently") == std::string::npos);
  // a backend that multiplies in another type says so after the list
  auto cuda = test::fresh_dir("cmp_stored_cuda");
  make_dump(cuda, nullptr, {{"backend", "cuda"}, {"dtype", "bf16"}, {"weights_as_stored", "f32 x 5, q4_K x 7"}});
  CHECK(compare_dumps(cuda, q4).ours_label == "cuda, weights f32 x 5, q4_K x 7 as stored (multiplied in bf16)");
}
