// A trace sink that keeps every stage it wants in memory, in the order the forward pass emitted
// them, each under its dump name ("L3.q", "logits") and step: what DumpSink writes to .npy files
// (whole tensors: the heads filter is not applied), for programs that compare two runs in-process
// (chapter 12, the backend tests) instead of through `journey-trace diff`. Recording the same
// name twice in one step is an error, as for DumpSink.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trace/filters.h"
#include "trace/sink.h"

namespace journey {

class MemorySink : public TraceSink {
 public:
  struct Entry {
    std::string name;             // the dump's name: "L3.q", "logits"
    Stage stage;
    int layer = -1;               // -1 for global stages
    int step = 0;
    std::vector<int64_t> shape;   // outermost first
    std::vector<float> values;    // row-major copy (integer stages widened)
    bool integers = false;        // token ids, block tables
  };

  // Wants every stage of every layer and step; with filters, what `journey trace --stages ...`
  // with the same filters would dump.
  MemorySink() = default;
  explicit MemorySink(TraceFilters filters) : filters_(std::move(filters)) {}

  // Later records belong to step `step` (0, the prefill, until the first call).
  void set_step(int step) { step_ = step; }

  bool wants(Stage stage, int layer) const override { return filters_.wants(stage, layer, step_); }
  void record(Stage stage, int layer, const TraceTensor& tensor) override;
  void record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) override;

  const std::vector<Entry>& entries() const { return entries_; }
  // The entry of that name and step, or nullptr / an Error naming both.
  const Entry* find(std::string_view name, int step = 0) const;
  const Entry& get(std::string_view name, int step = 0) const;
  void clear() { entries_.clear(); }

 private:
  Entry& add(Stage stage, int layer, std::vector<int64_t> shape, size_t count);

  TraceFilters filters_;
  int step_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace journey
