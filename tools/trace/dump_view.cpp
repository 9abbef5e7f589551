#include "dump_view.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace journey::tracer {

TensorSummary summarize(const NpyArray& a) {
  TensorSummary s;
  s.numel = a.numel();
  std::vector<double> values;  // [numel]
  values.reserve(static_cast<size_t>(s.numel));
  if (a.dtype == NpyDType::F32) values.assign(a.f32.begin(), a.f32.end());
  else values.assign(a.i32.begin(), a.i32.end());
  double sum = 0, sum_sq = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -std::numeric_limits<double>::infinity();
  for (double v : values) {
    if (std::isfinite(v)) {
      ++s.finite;
      sum += v;
      sum_sq += v * v;
      s.min = std::min(s.min, v);
      s.max = std::max(s.max, v);
    } else if (v == -std::numeric_limits<double>::infinity()) {
      ++s.neg_inf;  // masked attention scores
    } else {
      ++s.nan_or_pos_inf;
    }
  }
  if (s.finite == 0) s.min = s.max = 0;
  else {
    s.mean = sum / double(s.finite);
    s.rms = std::sqrt(sum_sq / double(s.finite));
    s.l2 = std::sqrt(sum_sq);
  }
  // Largest values of the last row (the last token's: the one that decides the next token).
  const int64_t row = a.shape.empty() ? 1 : a.shape.back();
  const int64_t begin = std::max<int64_t>(0, s.numel - row);
  std::vector<std::pair<int64_t, double>> last;
  for (int64_t i = begin; i < s.numel; ++i)
    if (std::isfinite(values[size_t(i)])) last.push_back({i - begin, values[size_t(i)]});
  const size_t k = std::min<size_t>(3, last.size());
  std::partial_sort(last.begin(), last.begin() + k, last.end(),
                    [](const auto& x, const auto& y) { return x.second > y.second; });
  s.top.assign(last.begin(), last.begin() + k);
  return s;
}

Dump::Dump(std::filesystem::path dir) : dir_(std::move(dir)) {
  const auto manifest_path = dir_ / "manifest.json";
  if (!std::filesystem::exists(manifest_path))
    fail(dir_.string(), " is not a trace dump: ", manifest_path.string(),
         " does not exist (make one with `journey trace PROMPT --out DIR`)");
  manifest_ = read_manifest(manifest_path);
  pieces_ = manifest_.pieces;
  for (const auto& t : manifest_.tokens) pieces_[t.id] = t.piece;
  for (const auto& s : manifest_.steps)
    if (s.sampled) {
      pieces_[s.sampled->id] = s.sampled->piece;
      for (const auto& alt : s.sampled->top) pieces_[alt.id] = alt.piece;
    }
}

const NpyArray& Dump::array(const ManifestTensor& entry) const {
  auto it = arrays_.find(entry.file);
  if (it != arrays_.end()) return it->second;
  NpyArray a = read_npy(dir_ / entry.file);
  if (a.shape != entry.shape)
    fail(dir_.string(), "/manifest.json lists ", entry.name, " (step ", entry.step, ") with shape ",
         shape_string(entry.shape), " but ", entry.file, " holds ", shape_string(a.shape));
  return arrays_.emplace(entry.file, std::move(a)).first->second;
}

const TensorSummary& Dump::summary(const ManifestTensor& entry) const {
  auto it = summaries_.find(entry.file);
  if (it != summaries_.end()) return it->second;
  return summaries_.emplace(entry.file, summarize(array(entry))).first->second;
}

int Dump::num_layers() const {
  const auto& config = manifest_.model.config;
  for (const char* key : {"num_hidden_layers", "n_layers", "num_layers"})
    if (config.contains(key) && config.at(key).is_number_integer()) return config.at(key).get<int>();
  int highest = -1;
  for (const auto& t : manifest_.tensors) highest = std::max(highest, t.layer);
  return highest + 1;
}

std::vector<int> Dump::steps() const {
  std::vector<int> out;
  for (const auto& s : manifest_.steps) out.push_back(s.step);
  for (const auto& t : manifest_.tensors) out.push_back(t.step);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string Dump::piece(int32_t id) const {
  auto it = pieces_.find(id);
  return it != pieces_.end() ? it->second : cat("#", id);
}

}  // namespace journey::tracer
