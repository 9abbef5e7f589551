#include "trace/dump_sink.h"

#include <algorithm>

#include "core/error.h"
#include "trace/npy.h"

namespace journey {

DumpSink::DumpSink(std::filesystem::path out_dir, TraceFilters filters)
    : dir_(std::move(out_dir)), filters_(std::move(filters)),
      stage_cache_(kStages.size() * (kCachedLayers + 1), int8_t{-1}) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    fail("cannot create the dump directory ", dir_.string(), ec ? cat(": ", ec.message()) : std::string());
}

void DumpSink::set_step(int step, std::string kind, std::vector<int64_t> positions) {
  if (kind != "prefill" && kind != "decode") fail("DumpSink::set_step: kind \"", kind, "\" is not prefill or decode");
  for (const auto& s : manifest_.steps)
    if (s.step == step) fail("DumpSink::set_step: step ", step, " was already started");
  step_ = step;
  manifest_.steps.push_back({step, std::move(kind), std::move(positions), std::nullopt});
}

ManifestStep& DumpSink::current_step_entry() {
  for (auto& s : manifest_.steps)
    if (s.step == step_) return s;
  manifest_.steps.push_back({step_, "prefill", {}, std::nullopt});
  return manifest_.steps.back();
}

void DumpSink::set_sampled(ManifestSampled sampled) { current_step_entry().sampled = std::move(sampled); }

bool DumpSink::wants(Stage stage, int layer) const {
  if (!filters_.steps.contains(step_)) return false;
  if (layer >= 0 && !filters_.layers.contains(layer)) return false;
  if (layer >= kCachedLayers) return filters_.stage_matches(stage, layer);
  int8_t& cached = stage_cache_[static_cast<size_t>(stage) * (kCachedLayers + 1) + static_cast<size_t>(layer + 1)];
  if (cached < 0) cached = filters_.stage_matches(stage, layer) ? 1 : 0;
  return cached == 1;
}

ManifestTensor& DumpSink::add_entry(Stage stage, int layer, std::vector<int64_t> shape, const char* dtype) {
  const std::string stage_str(stage_name(stage));
  if (manifest_.find(stage_str, layer, step_))
    fail("DumpSink: ", tensor_name(stage_str, layer), " recorded twice in step ", step_,
         " (trace one sequence at a time and call set_step between steps)");
  current_step_entry();  // make sure the step is listed
  ManifestTensor entry;
  entry.name = tensor_name(stage_str, layer);
  entry.stage = stage_str;
  entry.layer = layer;
  entry.step = step_;
  entry.shape = std::move(shape);
  entry.dtype = dtype;
  entry.file = tensor_file_name(stage_str, layer, step_);
  manifest_.tensors.push_back(std::move(entry));
  return manifest_.tensors.back();
}

namespace {

// The distributions a reader shows token by token: logits and the sampler's stages.
bool is_distribution(Stage stage) {
  return stage == Stage::logits || stage == Stage::probs_penalized || stage == Stage::probs_temperature ||
         stage == Stage::probs_top_k || stage == Stage::probs_top_p || stage == Stage::probs_min_p;
}

// Adds the ids of the `top` largest values of every row (the last axis) to `ids`.
void add_top_ids(std::span<const float> values, int64_t row_length, int top, std::set<int32_t>& ids) {
  if (row_length <= 0) return;
  std::vector<int32_t> order(static_cast<size_t>(row_length));  // [row_length]
  for (size_t begin = 0; begin + size_t(row_length) <= values.size(); begin += size_t(row_length)) {
    for (int32_t i = 0; i < int32_t(row_length); ++i) order[size_t(i)] = i;
    const size_t k = std::min<size_t>(size_t(top), order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return values[begin + a] > values[begin + b]; });
    ids.insert(order.begin(), order.begin() + k);
  }
}

}  // namespace

void DumpSink::record(Stage stage, int layer, const TraceTensor& tensor) {
  if (static_cast<int64_t>(tensor.data.size()) != shape_numel(tensor.shape))
    fail("DumpSink: ", tensor_name(std::string(stage_name(stage)), layer), " has ", tensor.data.size(),
         " values for shape ", shape_string(tensor.shape));
  if (is_distribution(stage) && !tensor.shape.empty())
    add_top_ids(tensor.data, tensor.shape.back(), kNotableTop, notable_ids_);
  const int axis = heads_axis(stage);
  if (axis < 0 || filters_.heads.all() || tensor.shape.size() != 3) {
    ManifestTensor& entry = add_entry(stage, layer, tensor.shape, "f32");
    write_npy(dir_ / entry.file, tensor.data, tensor.shape);
    return;
  }
  // Keep only the listed heads: view the tensor as [outer, H, inner] around the heads axis.
  const int64_t num_heads = tensor.shape[axis];
  const std::vector<int> keep = filters_.heads.list(static_cast<int>(num_heads));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= tensor.shape[d];
  for (size_t d = axis + 1; d < tensor.shape.size(); ++d) inner *= tensor.shape[d];
  std::vector<float> kept;  // [outer, keep.size(), inner]
  kept.reserve(outer * keep.size() * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int h : keep) {
      const float* src = tensor.data.data() + (o * num_heads + h) * inner;
      kept.insert(kept.end(), src, src + inner);
    }
  std::vector<int64_t> shape = tensor.shape;
  shape[axis] = static_cast<int64_t>(keep.size());
  ManifestTensor& entry = add_entry(stage, layer, shape, "f32");
  entry.heads = keep;
  write_npy(dir_ / entry.file, std::span<const float>(kept), shape);
}

void DumpSink::record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) {
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    fail("DumpSink: ", tensor_name(std::string(stage_name(stage)), layer), " has ", values.size(),
         " values for shape ", shape_string(shape));
  ManifestTensor& entry = add_entry(stage, layer, shape, "i32");
  write_npy(dir_ / entry.file, values, entry.shape);
  if (stage == Stage::logit_lens || stage == Stage::token_ids || stage == Stage::sampled)
    notable_ids_.insert(values.begin(), values.end());
}

void DumpSink::finish(const std::function<std::string(int32_t)>& piece) {
  current_step_entry();
  if (piece)
    for (int32_t id : notable_ids_) manifest_.pieces.emplace(id, piece(id));
  const std::string backend =
      manifest_.settings.is_object() ? manifest_.settings.value("backend", std::string()) : std::string();
  manifest_.stages = describe_stages(manifest_, backend);
  write_manifest(dir_ / "manifest.json", manifest_);
}

}  // namespace journey
