// Comparing two dumps stage by stage: the engine of `journey-trace diff` (CPU against CUDA, one
// build against another) and of the golden tests (the engine against tools/trace/reference.py).
// Tensors are visited in the order the forward pass computes them (step, then embeddings, then
// layer by layer in stages.def order, then the final stages), so the FIRST tensor beyond tolerance
// is where a bug entered; everything after it inherits the error.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "trace/manifest.h"
#include "trace/stages.h"

namespace journey {

// How close a stage must be, and why that close. NMSE = sum (a-b)^2 / sum b^2; max_abs is scaled
// by max(1, max |golden|) so one table serves small and large activations.
struct StageTolerance {
  double nmse = 0.0;
  double max_abs = 0.0;   // before scaling
  bool exact = false;     // integer stages: every value equal
  bool argmax = false;    // rows (last axis) must agree on their argmax, up to near-ties
  const char* why = "";
  // ids ranked by a derived distribution (the logit lens's top tokens): reported, never judged by
  // value — ids that swap places among near-ties are not an error; their probabilities are judged
  bool ranked_ids = false;
};

// The table in compare.cpp: one entry per stage (stages without an entry use the default). These
// are the f32 tolerances: two runs from the same f32 weights differ only by rounding and order.
StageTolerance stage_tolerance(Stage stage);

// What separates the two dumps, and so how close each stage must be. F32: the same f32 weights
// (the table above). BF16 / F16: the dump under test ran with its weight matrices rounded to
// bf16 / f16 (the GPU's default), the reference with f32 weights. From the arithmetic (docs/cuda.md,
// "Tolerances"): rounding to p significant bits has unit roundoff u = 2^-p (bf16 2^-8, f16 2^-11)
// and, over values spread across a binade, an NMSE of eps = (2u)^2 / 24 per rounded tensor
// (bf16 2.5e-6, f16 4.0e-8). An embedding row is one rounding: NMSE <= 4 eps, max_abs <= 2 u.
// Every product of rounded weights adds about eps, softmax and the residual stream carry it on,
// so a stage after d layers (a stage of layer l has d = l + 1; the final stages d = L + 1) must
// keep NMSE <= 40 eps (d + 1) and max_abs <= 10 u x max(1, |reference|max). Checked against the
// first H200 run (run 1): at most 82 eps at layer 4 of stories260K (bound 240 eps) and 3.3 u.
// A real bug stays far outside: the planted RoPE offset gives NMSE ~0.1 at L0.q_rope.
enum class ToleranceProfile { F32, BF16, F16 };
std::string_view tolerance_profile_name(ToleranceProfile profile);  // "f32", "bf16", "f16"
// Accepts "f32"/"float32", "bf16"/"bfloat16", "f16"/"float16" (any case).
std::optional<ToleranceProfile> tolerance_profile_from_name(std::string_view name);
// The tolerance of a stage at `depth` layers (see above) under a profile; F32 ignores depth.
StageTolerance stage_tolerance(Stage stage, ToleranceProfile profile, int depth);
// The layers a tensor has passed: embeddings (and earlier) 0, a stage of layer l l + 1, the final
// stages num_layers + 1.
int stage_depth(Stage stage, int layer, int num_layers);
// The weight type a dump records in its manifest ("weight_dtype", else "dtype", in settings), or "".
std::string manifest_weight_dtype(const Manifest& manifest);

enum class CompareStatus {
  Ok,
  BeyondTolerance,  // numbers differ by more than the stage's tolerance
  ArgmaxMismatch,   // logits rows pick a different top token
  MaskMismatch,     // -inf (masked) in one and finite in the other
  NonFinite,        // NaN, or +-inf where the other is not the same infinity
  ShapeMismatch,
  DtypeMismatch,
  HeadsMismatch,    // head filters that cannot be lined up
  MissingInOurs,    // the golden has it, we do not: a failure
  OnlyInOurs,       // we have it, the golden does not (e.g. sampling stages): informative only
};
std::string_view compare_status_name(CompareStatus status);

struct TensorComparison {
  std::string name;  // "L3.q"
  std::string stage;
  int layer = -1;
  int step = 0;
  CompareStatus status = CompareStatus::Ok;
  std::vector<int64_t> shape_ours, shape_golden;
  std::vector<int> heads;     // heads compared (empty = all)
  double max_abs = 0.0;
  double max_rel = 0.0;       // |a-b| / max(|b|, 1e-6 * max|golden|)
  double nmse = 0.0;
  double golden_max_abs = 0.0;
  int64_t worst_index = -1;   // flat index of max_abs (in the compared, head-filtered tensor)
  int64_t argmax_rows = 0, argmax_disagree = 0;
  StageTolerance tolerance;
  std::string detail;         // human-readable reason when not Ok
  // Values for the report: the first few, and a window around worst_index.
  std::vector<double> first_ours, first_golden;
  int64_t window_begin = 0;
  std::vector<double> window_ours, window_golden;

  bool fails() const { return status != CompareStatus::Ok && status != CompareStatus::OnlyInOurs; }
};

struct CompareOptions {
  double tolerance_scale = 1.0;  // multiplies every nmse and max_abs tolerance
  int report_values = 8;         // values shown side by side
  // nullopt: chosen from the manifests, the narrower of the two weight types (f32 when neither
  // records one); given: that profile whatever the manifests say.
  std::optional<ToleranceProfile> profile;
};

struct ComparisonResult {
  std::filesystem::path ours, golden;
  std::string ours_label, golden_label;  // what each dump is: "cuda, bf16 weights"
  ToleranceProfile profile = ToleranceProfile::F32;
  std::string profile_source;            // why this profile: the manifests' weight types, or the caller
  std::vector<TensorComparison> tensors;  // in journey order
  std::optional<size_t> first_divergence; // index into tensors of the first failing one
  bool ok() const { return !first_divergence.has_value(); }
  const TensorComparison* first() const { return first_divergence ? &tensors[*first_divergence] : nullptr; }
};

// Compare the dump in directory `ours` against the one in `golden`. Throws journey::Error only
// when a directory or manifest cannot be read; everything about tensors goes into the result.
ComparisonResult compare_dumps(const std::filesystem::path& ours, const std::filesystem::path& golden,
                               const CompareOptions& options = {});

// The journey-order sort key of a tensor; stages unknown to this build sort last.
std::tuple<int, int, int, int> journey_order_key(const std::string& stage, int layer, int step);

// A table with one line per tensor and, when there is one, the first divergence in detail:
// stage, layer, step, the errors against the tolerance and the first values side by side.
// only_failures: list just the failing lines (the detail block is always printed).
std::string format_comparison(const ComparisonResult& result, bool only_failures = false);
std::string format_divergence(const TensorComparison& comparison);

}  // namespace journey
