// A trace sink that keeps the tensors it is asked for in memory, for programs that want to look
// at a stage right away (the chapters, tests) instead of writing a dump to disk (DumpSink).
// It wants exactly the (stage, layer) pairs it was told to want, so everything else stays free.
#pragma once
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "trace/sink.h"

namespace journey {

struct CapturedTensor {
  std::vector<float> data;     // row-major copy
  std::vector<int64_t> shape;  // outermost first
  float at(std::initializer_list<int64_t> index) const {
    int64_t offset = 0;
    size_t axis = 0;
    for (int64_t i : index) offset = offset * shape.at(axis++) + i;
    return data.at(size_t(offset));
  }
};

class CaptureSink : public TraceSink {
 public:
  // Want a stage at one layer (-1 for global stages), or at every layer with want_all_layers.
  void want(Stage stage, int layer = -1) { wanted_.insert({stage, layer}); }
  void want_all_layers(Stage stage) { all_layers_.insert(stage); }

  bool wants(Stage stage, int layer) const override {
    return wanted_.count({stage, layer}) != 0 || (layer >= 0 && all_layers_.count(stage) != 0);
  }
  // A later record of the same (stage, layer) — the next decode step — replaces the earlier one.
  void record(Stage stage, int layer, const TraceTensor& tensor) override {
    captured_[{stage, layer}] = CapturedTensor{std::vector<float>(tensor.data.begin(), tensor.data.end()), tensor.shape};
  }
  void record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) override {
    captured_[{stage, layer}] = CapturedTensor{std::vector<float>(values.begin(), values.end()), std::move(shape)};
  }

  bool has(Stage stage, int layer = -1) const { return captured_.count({stage, layer}) != 0; }
  const CapturedTensor& get(Stage stage, int layer = -1) const {
    auto it = captured_.find({stage, layer});
    if (it == captured_.end()) fail("stage ", stage_name(stage), " (layer ", layer, ") was not captured");
    return it->second;
  }
  void clear() { captured_.clear(); }

 private:
  std::set<std::pair<Stage, int>> wanted_;
  std::set<Stage> all_layers_;
  std::map<std::pair<Stage, int>, CapturedTensor> captured_;
};

}  // namespace journey
