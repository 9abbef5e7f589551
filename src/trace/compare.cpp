#include "trace/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/error.h"
#include "trace/filters.h"
#include "trace/npy.h"

namespace journey {
namespace {

// The tolerance table. The goldens come from tools/trace/reference.py in float64 from the same
// f32 weights, so the golden is (nearly) the exact answer and the difference is the engine's own
// f32 rounding: about 6e-8 relative per operation, growing with the length of dot products and
// with depth. An NMSE of 1e-9 is a relative RMS error of ~3e-5, hundreds of f32 epsilons: room
// for any summation order (blocked GEMM, SIMD, a GPU reduction tree), while every real bug we have
// planted (a position off by one, a missing bias, swapped halves in RoPE, a wrong head mapping)
// lands at NMSE 1e-4 or more. docs/goldens.md has the longer argument.
constexpr StageTolerance kDefault{1e-9, 1e-4, false, false,
                                  "f32 arithmetic against a float64 reference: rounding and summation order only"};
constexpr StageTolerance kExact{0, 0, true, false, "integers (token ids, block tables) must match exactly"};
constexpr StageTolerance kCopy{1e-14, 1e-6, false, false,
                               "a row copy of the embedding matrix: no arithmetic, so (almost) bit-exact"};
constexpr StageTolerance kScores{1e-9, 1e-4, false, false,
                                 "dot products of length D scaled by 1/sqrt(D); masked entries must be -inf in both"};
constexpr StageTolerance kWeights{1e-9, 1e-5, false, false,
                                  "softmax outputs lie in [0, 1]; absolute error of f32 exp/sum is ~1e-7"};
constexpr StageTolerance kLogits{1e-9, 1e-4, false, true,
                                 "f32 LM head (dot products of length E); the top token of every row must agree "
                                 "unless the golden's top two are within the tolerance (a near-tie)"};
constexpr StageTolerance kRankedIds{0, 0, false, false,
                                    "token ids ranked by the logit lens: shown, not judged (near-ties may swap "
                                    "places); their probabilities, logit_lens_probs, are judged",
                                    true};
// A probability p moves by about p * (its logit's error) / temperature, so the sampler's
// probabilities get the attention weights' bound: with 1e-6, a trace whose step-5 logits differed
// from the reference's by 4.8e-6 (inside their own 1e-4 bound twentyfold) failed at 1.4e-6.
constexpr StageTolerance kProbs{1e-9, 1e-5, false, false,
                                "probabilities in [0, 1] after f32 softmax of logits that differ within their own "
                                "tolerance, and filtering"};

// The narrow-weight profiles (compare.h explains the numbers; docs/cuda.md derives them).
struct Precision {
  double eps;  // NMSE of rounding one tensor to this type: (2u)^2 / 24
  double u;    // unit roundoff: 2^-(significant bits)
  const char* copy_why;
  const char* computed_why;
};
constexpr double kBf16U = 1.0 / 256.0, kF16U = 1.0 / 2048.0;
constexpr Precision kBf16{(2 * kBf16U) * (2 * kBf16U) / 24, kBf16U,
                          "bf16 weights against f32: an embedding row rounded to 8 significant bits, NMSE eps = 2.5e-6 "
                          "per rounding; bound 4 eps, max_abs 2 u (u = 2^-8)",
                          "bf16 weights against f32: every product of rounded weights adds ~eps = 2.5e-6 of NMSE and "
                          "the layers carry it on; bound 40 eps (layers passed + 1), max_abs 10 u (u = 2^-8)"};
constexpr Precision kF16{(2 * kF16U) * (2 * kF16U) / 24, kF16U,
                         "f16 weights against f32: an embedding row rounded to 11 significant bits, NMSE eps = 4.0e-8 "
                         "per rounding; bound 4 eps, max_abs 2 u (u = 2^-11)",
                         "f16 weights against f32: every product of rounded weights adds ~eps = 4.0e-8 of NMSE and "
                         "the layers carry it on; bound 40 eps (layers passed + 1), max_abs 10 u (u = 2^-11)"};

StageTolerance tolerance_for(const std::string& stage_str, int layer, ToleranceProfile profile, int num_layers) {
  auto stage = stage_from_name(stage_str);
  return stage ? stage_tolerance(*stage, profile, stage_depth(*stage, layer, num_layers)) : kDefault;
}

bool is_int_stage(Stage s) { return s == Stage::token_ids || s == Stage::kv_blocks; }

// Cut a tensor down to the listed heads along `axis`; `present` names the heads it holds now.
std::optional<std::vector<float>> select_heads(const std::vector<float>& data, const std::vector<int64_t>& shape,
                                               int axis, const std::vector<int>& present,
                                               const std::vector<int>& wanted) {
  std::vector<int> positions;  // position in `present` of each wanted head
  for (int h : wanted) {
    if (present.empty()) {
      if (h >= shape[axis]) return std::nullopt;
      positions.push_back(h);
    } else {
      auto it = std::find(present.begin(), present.end(), h);
      if (it == present.end()) return std::nullopt;
      positions.push_back(static_cast<int>(it - present.begin()));
    }
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int p : positions) {
      const float* src = data.data() + (o * shape[axis] + p) * inner;
      out.insert(out.end(), src, src + inner);
    }
  return out;
}

std::string index_string(int64_t flat, const std::vector<int64_t>& shape) {
  if (shape.empty()) return "[]";
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_string(idx);
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

void compare_values(TensorComparison& c, const std::vector<float>& a, const std::vector<float>& b,
                    const std::vector<int64_t>& shape, const CompareOptions& options) {
  const StageTolerance& tol = c.tolerance;
  double golden_max = 0.0;
  for (float v : b)
    if (std::isfinite(v)) golden_max = std::max(golden_max, std::fabs(static_cast<double>(v)));
  c.golden_max_abs = golden_max;
  const double rel_floor = std::max(1e-6 * golden_max, std::numeric_limits<double>::min());
  double err2 = 0.0, ref2 = 0.0;
  int64_t first_bad_mask = -1, first_non_finite = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (first_non_finite < 0) first_non_finite = static_cast<int64_t>(i);
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x == y) continue;  // both masked (-inf): equal
      if ((std::isinf(x) && x < 0) != (std::isinf(y) && y < 0)) {
        if (first_bad_mask < 0) first_bad_mask = static_cast<int64_t>(i);
      } else if (first_non_finite < 0) {
        first_non_finite = static_cast<int64_t>(i);
      }
      continue;
    }
    const double diff = std::fabs(x - y);
    err2 += diff * diff;
    ref2 += y * y;
    if (diff > c.max_abs || c.worst_index < 0) {
      if (diff > c.max_abs || c.worst_index < 0) c.worst_index = static_cast<int64_t>(i);
      c.max_abs = std::max(c.max_abs, diff);
    }
    c.max_rel = std::max(c.max_rel, diff / std::max(std::fabs(y), rel_floor));
  }
  c.nmse = ref2 > 0 ? err2 / ref2 : err2;

  const double nmse_tol = tol.nmse * options.tolerance_scale;
  const double abs_tol = tol.max_abs * options.tolerance_scale * std::max(1.0, golden_max);
  if (first_non_finite >= 0) {
    c.status = CompareStatus::NonFinite;
    c.worst_index = first_non_finite;
    c.detail = cat("non-finite value at ", index_string(first_non_finite, shape), ": ours ", a[first_non_finite],
                   ", golden ", b[first_non_finite]);
  } else if (first_bad_mask >= 0) {
    c.status = CompareStatus::MaskMismatch;
    c.worst_index = first_bad_mask;
    c.detail = cat("masking differs at ", index_string(first_bad_mask, shape), ": ours ", a[first_bad_mask],
                   ", golden ", b[first_bad_mask]);
  } else if (tol.ranked_ids) {
    if (c.max_abs != 0.0) c.detail = "ids differ in places (ranked ids are shown, not judged)";
  } else if (tol.exact ? c.max_abs != 0.0 : (c.nmse > nmse_tol || c.max_abs > abs_tol)) {
    c.status = CompareStatus::BeyondTolerance;
    c.detail = tol.exact ? cat("values differ (max |diff| ", c.max_abs, " at ", index_string(c.worst_index, shape), ")")
                         : cat("nmse ", sci(c.nmse), (c.nmse > nmse_tol ? " > " : " <= "), sci(nmse_tol), ", max_abs ",
                               sci(c.max_abs), (c.max_abs > abs_tol ? " > " : " <= "), sci(abs_tol), " at ",
                               index_string(c.worst_index, shape));
  }

  if (tol.argmax && !shape.empty() && shape.back() > 0) {
    const int64_t cols = shape.back();
    const int64_t rows = static_cast<int64_t>(a.size()) / cols;
    c.argmax_rows = rows;
    for (int64_t r = 0; r < rows; ++r) {
      const float* ra = a.data() + r * cols;
      const float* rb = b.data() + r * cols;
      const int64_t ia = std::max_element(ra, ra + cols) - ra;
      const int64_t ib = std::max_element(rb, rb + cols) - rb;
      if (ia == ib) continue;
      // A near-tie in the golden: both answers are right within the tolerance.
      if (std::fabs(static_cast<double>(rb[ia]) - rb[ib]) <= abs_tol) continue;
      if (c.argmax_disagree++ == 0 && c.status == CompareStatus::Ok) {
        c.status = CompareStatus::ArgmaxMismatch;
        c.worst_index = r * cols + ia;
        c.detail = cat("row ", r, ": our top token is ", ia, ", the golden's is ", ib);
      }
    }
  }

  const int n = options.report_values;
  for (int i = 0; i < n && i < static_cast<int>(a.size()); ++i) {
    c.first_ours.push_back(a[i]);
    c.first_golden.push_back(b[i]);
  }
  if (c.worst_index >= 0) {
    c.window_begin = std::max<int64_t>(0, c.worst_index - n / 2);
    for (int64_t i = c.window_begin; i < c.window_begin + n && i < static_cast<int64_t>(a.size()); ++i) {
      c.window_ours.push_back(a[i]);
      c.window_golden.push_back(b[i]);
    }
  }
}

// Every value of an .npy as double-convertible floats (ints widened), for one comparison loop.
std::vector<float> as_floats(const NpyArray& array) {
  if (array.dtype == NpyDType::F32) return array.f32;
  return std::vector<float>(array.i32.begin(), array.i32.end());
}

TensorComparison compare_one(const std::filesystem::path& ours_dir, const ManifestTensor& ours,
                             const std::filesystem::path& golden_dir, const ManifestTensor& golden,
                             const CompareOptions& options, ToleranceProfile profile, int num_layers) {
  TensorComparison c;
  c.name = golden.name;
  c.stage = golden.stage;
  c.layer = golden.layer;
  c.step = golden.step;
  c.tolerance = tolerance_for(golden.stage, golden.layer, profile, num_layers);
  c.shape_ours = ours.shape;
  c.shape_golden = golden.shape;
  if (ours.dtype != golden.dtype) {
    c.status = CompareStatus::DtypeMismatch;
    c.detail = cat("dtype ", ours.dtype, " (ours) vs ", golden.dtype, " (golden)");
    return c;
  }
  NpyArray a = read_npy(ours_dir / ours.file);
  NpyArray b = read_npy(golden_dir / golden.file);
  if (a.shape != ours.shape || b.shape != golden.shape) {
    c.status = CompareStatus::ShapeMismatch;
    c.detail = cat("the manifest says ", shape_string(a.shape != ours.shape ? ours.shape : golden.shape), " but ",
                   (a.shape != ours.shape ? ours_dir / ours.file : golden_dir / golden.file).string(), " holds ",
                   shape_string(a.shape != ours.shape ? a.shape : b.shape));
    return c;
  }
  std::vector<float> va = as_floats(a), vb = as_floats(b);
  std::vector<int64_t> shape_a = a.shape, shape_b = b.shape;

  // Head filters: compare the heads we kept (or the golden kept), cutting the other side to match.
  auto stage = stage_from_name(golden.stage);
  if ((!ours.heads.empty() || !golden.heads.empty()) && stage && heads_axis(*stage) >= 0 && shape_a.size() == 3 &&
      shape_b.size() == 3) {
    const int axis = heads_axis(*stage);
    std::vector<int> wanted = !ours.heads.empty() ? ours.heads : golden.heads;
    if (!ours.heads.empty() && !golden.heads.empty()) {
      wanted.clear();
      for (int h : ours.heads)
        if (std::find(golden.heads.begin(), golden.heads.end(), h) != golden.heads.end()) wanted.push_back(h);
    }
    auto sa = select_heads(va, shape_a, axis, ours.heads, wanted);
    auto sb = select_heads(vb, shape_b, axis, golden.heads, wanted);
    if (!sa || !sb || wanted.empty()) {
      c.status = CompareStatus::HeadsMismatch;
      c.detail = "the head filters of the two dumps have no heads in common";
      return c;
    }
    va = std::move(*sa);
    vb = std::move(*sb);
    shape_a[axis] = shape_b[axis] = static_cast<int64_t>(wanted.size());
    c.heads = wanted;
  }
  if (shape_a != shape_b) {
    c.status = CompareStatus::ShapeMismatch;
    c.detail = cat("shape ", shape_string(shape_a), " (ours) vs ", shape_string(shape_b), " (golden)");
    return c;
  }
  compare_values(c, va, vb, shape_a, options);
  return c;
}

}  // namespace

StageTolerance stage_tolerance(Stage stage) {
  if (is_int_stage(stage)) return kExact;
  switch (stage) {
    case Stage::embeddings: return kCopy;
    case Stage::attn_scores: return kScores;
    case Stage::attn_weights: return kWeights;
    case Stage::logits: return kLogits;
    case Stage::logit_lens: return kRankedIds;
    case Stage::probs_penalized: return kLogits;
    case Stage::probs_temperature:
    case Stage::probs_top_k:
    case Stage::probs_top_p:
    case Stage::probs_min_p: return kProbs;
    default: return kDefault;
  }
}

int stage_depth(Stage stage, int layer, int num_layers) {
  if (layer >= 0) return layer + 1;
  return static_cast<int>(stage) > static_cast<int>(Stage::layer_out) ? num_layers + 1 : 0;
}

StageTolerance stage_tolerance(Stage stage, ToleranceProfile profile, int depth) {
  const StageTolerance f32 = stage_tolerance(stage);
  if (profile == ToleranceProfile::F32 || f32.exact || f32.ranked_ids) return f32;
  const Precision& p = profile == ToleranceProfile::BF16 ? kBf16 : kF16;
  StageTolerance t = f32;  // keeps the argmax rule of the logits
  if (stage == Stage::embeddings) {
    t.nmse = 4 * p.eps, t.max_abs = 2 * p.u, t.why = p.copy_why;
  } else {
    t.nmse = 40 * p.eps * (std::max(depth, 0) + 1), t.max_abs = 10 * p.u, t.why = p.computed_why;
  }
  return t;
}

std::string_view tolerance_profile_name(ToleranceProfile profile) {
  switch (profile) {
    case ToleranceProfile::F32: return "f32";
    case ToleranceProfile::BF16: return "bf16";
    case ToleranceProfile::F16: return "f16";
  }
  return "?";
}

std::optional<ToleranceProfile> tolerance_profile_from_name(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "f32" || lower == "float32") return ToleranceProfile::F32;
  if (lower == "bf16" || lower == "bfloat16") return ToleranceProfile::BF16;
  if (lower == "f16" || lower == "float16") return ToleranceProfile::F16;
  return std::nullopt;
}

std::string manifest_weight_dtype(const Manifest& manifest) {
  for (const char* key : {"weight_dtype", "dtype"}) {
    auto it = manifest.settings.find(key);
    if (it != manifest.settings.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

std::string_view compare_status_name(CompareStatus status) {
  switch (status) {
    case CompareStatus::Ok: return "ok";
    case CompareStatus::BeyondTolerance: return "BEYOND TOLERANCE";
    case CompareStatus::ArgmaxMismatch: return "ARGMAX DIFFERS";
    case CompareStatus::MaskMismatch: return "MASK DIFFERS";
    case CompareStatus::NonFinite: return "NON-FINITE";
    case CompareStatus::ShapeMismatch: return "SHAPE MISMATCH";
    case CompareStatus::DtypeMismatch: return "DTYPE MISMATCH";
    case CompareStatus::HeadsMismatch: return "HEADS MISMATCH";
    case CompareStatus::MissingInOurs: return "MISSING IN OURS";
    case CompareStatus::OnlyInOurs: return "only in ours";
  }
  return "?";
}

std::tuple<int, int, int, int> journey_order_key(const std::string& stage_str, int layer, int step) {
  auto stage = stage_from_name(stage_str);
  if (!stage) return {step, 3, layer, static_cast<int>(kStages.size())};
  int first_layer_stage = static_cast<int>(kStages.size());
  for (const auto& info : kStages)
    if (info.scope == StageScope::Layer) {
      first_layer_stage = static_cast<int>(info.stage);
      break;
    }
  const int index = static_cast<int>(*stage);
  int group = stage_info(*stage).scope == StageScope::Layer ? 1 : (index < first_layer_stage ? 0 : 2);
  return {step, group, group == 1 ? layer : 0, index};
}

ComparisonResult compare_dumps(const std::filesystem::path& ours, const std::filesystem::path& golden,
                               const CompareOptions& options) {
  ComparisonResult result;
  result.ours = ours;
  result.golden = golden;
  const Manifest mo = read_manifest(ours / "manifest.json");
  const Manifest mg = read_manifest(golden / "manifest.json");

  // What each dump is, and the tolerance profile: the narrower weight type of the two (f32 < f16 < bf16).
  const std::string ours_dtype = manifest_weight_dtype(mo), golden_dtype = manifest_weight_dtype(mg);
  // The model file's own types ("q4_K x 133, q6_K x 23, f32 x 45"), where the manifest records them
  // and they are not all f32: a Q4_K_M run and an f32 run are different models, whatever they multiply in.
  auto stored_types = [](const Manifest& m) {
    auto it = m.settings.find("weights_as_stored");
    if (it == m.settings.end() || !it->is_string()) return std::string();
    std::string types = it->get<std::string>();
    return types.rfind("f32 x ", 0) == 0 && types.find(',') == std::string::npos ? std::string() : types;
  };
  const std::string ours_stored = stored_types(mo), golden_stored = stored_types(mg);
  auto label = [](const Manifest& m, const std::string& dtype, const std::string& stored) {
    auto backend = m.settings.find("backend");
    std::string text = backend != m.settings.end() && backend->is_string() ? backend->get<std::string>()
                                                                           : m.generated_by_tool;
    if (!stored.empty())
      text += cat(text.empty() ? "" : ", ", "weights ", stored, " as stored",
                  dtype.empty() || dtype == "f32" ? "" : cat(" (multiplied in ", dtype, ")"));
    else if (!dtype.empty())
      text += cat(text.empty() ? "" : ", ", dtype, " weights");
    return text.empty() ? std::string("backend not recorded in its manifest") : text;
  };
  result.ours_label = label(mo, ours_dtype, ours_stored);
  result.golden_label = label(mg, golden_dtype, golden_stored);
  if (options.profile) {
    result.profile = *options.profile;
    result.profile_source = "given by the caller";
  } else {
    auto rank = [](const std::string& dtype) {
      const auto p = tolerance_profile_from_name(dtype);
      return !p || *p == ToleranceProfile::F32 ? 0 : *p == ToleranceProfile::F16 ? 1 : 2;
    };
    const std::string& narrow = rank(ours_dtype) >= rank(golden_dtype) ? ours_dtype : golden_dtype;
    result.profile = rank(narrow) == 0 ? ToleranceProfile::F32 : *tolerance_profile_from_name(narrow);
    result.profile_source = cat("from the manifests: A's weights ", ours_dtype.empty() ? "unrecorded" : ours_dtype,
                                ", B's ", golden_dtype.empty() ? "unrecorded" : golden_dtype);
  }
  if (ours_stored != golden_stored)
    result.profile_source += cat("; the files store their weights differently (A: ", ours_stored.empty() ? "f32" : ours_stored,
                                 "; B: ", golden_stored.empty() ? "f32" : golden_stored,
                                 "), so what lies beyond these tolerances measures that difference, stage by stage");
  // The final stages have passed every layer: L from the reference's config, else its deepest layer.
  int num_layers = 0;
  for (const auto& t : mg.tensors) num_layers = std::max(num_layers, t.layer + 1);
  if (auto it = mg.model.config.find("num_hidden_layers"); it != mg.model.config.end() && it->is_number_integer())
    num_layers = it->get<int>();

  using Key = std::tuple<std::string, int, int>;
  std::map<Key, const ManifestTensor*> ours_by_key;
  for (const auto& t : mo.tensors) ours_by_key[{t.stage, t.layer, t.step}] = &t;

  for (const auto& g : mg.tensors) {
    auto it = ours_by_key.find({g.stage, g.layer, g.step});
    if (it == ours_by_key.end()) {
      TensorComparison c;
      c.name = g.name, c.stage = g.stage, c.layer = g.layer, c.step = g.step;
      c.shape_golden = g.shape;
      c.tolerance = tolerance_for(g.stage, g.layer, result.profile, num_layers);
      c.status = CompareStatus::MissingInOurs;
      c.detail = cat("the golden has ", g.name, " at step ", g.step, " (", g.file, "); our dump does not");
      result.tensors.push_back(std::move(c));
      continue;
    }
    try {
      result.tensors.push_back(compare_one(ours, *it->second, golden, g, options, result.profile, num_layers));
    } catch (const Error& e) {  // an unreadable .npy is a finding about that tensor, not the end
      TensorComparison c;
      c.name = g.name, c.stage = g.stage, c.layer = g.layer, c.step = g.step;
      c.status = CompareStatus::ShapeMismatch;
      c.detail = e.what();
      result.tensors.push_back(std::move(c));
    }
    ours_by_key.erase(it);
  }
  for (const auto& [key, t] : ours_by_key) {
    TensorComparison c;
    c.name = t->name, c.stage = t->stage, c.layer = t->layer, c.step = t->step;
    c.shape_ours = t->shape;
    c.status = CompareStatus::OnlyInOurs;
    c.detail = "not in the golden dump";
    result.tensors.push_back(std::move(c));
  }
  std::stable_sort(result.tensors.begin(), result.tensors.end(), [](const auto& x, const auto& y) {
    return journey_order_key(x.stage, x.layer, x.step) < journey_order_key(y.stage, y.layer, y.step);
  });
  for (size_t i = 0; i < result.tensors.size(); ++i)
    if (result.tensors[i].fails()) {
      result.first_divergence = i;
      break;
    }
  return result;
}

std::string format_divergence(const TensorComparison& c) {
  std::string out = cat("first divergence: ", c.name, " (stage ", c.stage, ", layer ",
                        c.layer < 0 ? std::string("-") : std::to_string(c.layer), ", step ", c.step,
                        "): ", compare_status_name(c.status), "\n  ", c.detail, "\n");
  if (!c.shape_ours.empty() || !c.shape_golden.empty())
    out += cat("  shape ours ", shape_string(c.shape_ours), ", golden ", shape_string(c.shape_golden),
               c.heads.empty() ? "" : cat(", heads compared ", shape_string(std::vector<int64_t>(c.heads.begin(), c.heads.end()))),
               "\n");
  if (c.status != CompareStatus::MissingInOurs && c.status != CompareStatus::ShapeMismatch)
    out += cat("  max_abs ", sci(c.max_abs), "  max_rel ", sci(c.max_rel), "  nmse ", sci(c.nmse),
               "  (tolerance: nmse ", sci(c.tolerance.nmse), ", max_abs ", sci(c.tolerance.max_abs),
               " x max(1, |golden|max = ", sci(c.golden_max_abs), "))\n  why this tolerance: ", c.tolerance.why, "\n");
  auto table = [&](const char* title, int64_t begin, const std::vector<double>& a, const std::vector<double>& b) {
    if (a.empty()) return;
    out += cat("  ", title, "\n    flat index        ours              golden            diff\n");
    for (size_t i = 0; i < a.size(); ++i) {
      char line[160];
      std::snprintf(line, sizeof line, "    %-10lld  % .9e  % .9e  % .3e%s\n", static_cast<long long>(begin + i), a[i],
                    b[i], a[i] - b[i], begin + static_cast<int64_t>(i) == c.worst_index ? "  <- largest" : "");
      out += line;
    }
  };
  table("first values:", 0, c.first_ours, c.first_golden);
  if (c.window_begin > static_cast<int64_t>(c.first_ours.size()) - 1 || c.worst_index >= static_cast<int64_t>(c.first_ours.size()))
    table("around the largest difference:", c.window_begin, c.window_ours, c.window_golden);
  return out;
}

std::string format_comparison(const ComparisonResult& result, bool only_failures) {
  std::string out = cat("A, under test: ", result.ours.string(), " (", result.ours_label, ")\n",
                        "B, reference:  ", result.golden.string(), " (", result.golden_label, ")\n",
                        "tolerances:    ", tolerance_profile_name(result.profile), " profile (",
                        result.profile_source, ")");
  if (result.profile == ToleranceProfile::F32) {
    out += ": the same f32 weights, rounding and summation order only\n";
  } else {
    const StageTolerance first = stage_tolerance(Stage::attn_norm, result.profile, 1);
    out += cat(": A's weights rounded, B's f32; NMSE <= ", sci(first.nmse / 2), " x (layers passed + 1), max_abs <= ",
               sci(first.max_abs), " x max(1, |B|max)\n");
  }
  char line[256];
  std::snprintf(line, sizeof line, "%-4s  %-22s  %-16s  %-10s  %-10s  %-10s  %s\n", "step", "tensor", "shape",
                "max_abs", "max_rel", "nmse", "status");
  out += line;
  size_t failures = 0, compared = 0;
  for (size_t i = 0; i < result.tensors.size(); ++i) {
    const auto& c = result.tensors[i];
    if (c.fails()) ++failures;
    if (c.status != CompareStatus::OnlyInOurs) ++compared;
    if (only_failures && !c.fails()) continue;
    const bool numbers = c.status == CompareStatus::Ok || c.status == CompareStatus::BeyondTolerance ||
                         c.status == CompareStatus::ArgmaxMismatch;
    std::snprintf(line, sizeof line, "%-4d  %-22s  %-16s  %-10s  %-10s  %-10s  %s%s\n", c.step, c.name.c_str(),
                  shape_string(c.shape_golden.empty() ? c.shape_ours : c.shape_golden).c_str(),
                  numbers ? sci(c.max_abs).c_str() : "-", numbers ? sci(c.max_rel).c_str() : "-",
                  numbers ? sci(c.nmse).c_str() : "-", std::string(compare_status_name(c.status)).c_str(),
                  result.first_divergence == i ? "   <== FIRST DIVERGENCE" : "");
    out += line;
  }
  out += cat(compared, " tensors compared, ", failures, " beyond tolerance or missing\n");
  if (const auto* first = result.first()) out += format_divergence(*first);
  else out += "every stage is within tolerance\n";
  return out;
}

}  // namespace journey
