#include "trace/memory_sink.h"

#include "core/error.h"
#include "core/shape.h"
#include "trace/manifest.h"

namespace journey {

MemorySink::Entry& MemorySink::add(Stage stage, int layer, std::vector<int64_t> shape, size_t count) {
  std::string name = tensor_name(std::string(stage_name(stage)), layer);
  if (shape_numel(shape) != int64_t(count))
    fail("MemorySink: ", name, " has ", count, " values for shape ", shape_string(shape));
  if (find(name, step_) != nullptr)
    fail("MemorySink: ", name, " recorded twice in step ", step_, " (call set_step between steps)");
  entries_.push_back(Entry{std::move(name), stage, layer, step_, std::move(shape), {}, false});
  return entries_.back();
}

void MemorySink::record(Stage stage, int layer, const TraceTensor& tensor) {
  add(stage, layer, tensor.shape, tensor.data.size()).values.assign(tensor.data.begin(), tensor.data.end());
}

void MemorySink::record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) {
  Entry& entry = add(stage, layer, std::move(shape), values.size());
  entry.values.assign(values.begin(), values.end());
  entry.integers = true;
}

const MemorySink::Entry* MemorySink::find(std::string_view name, int step) const {
  for (const Entry& e : entries_)
    if (e.name == name && e.step == step) return &e;
  return nullptr;
}

const MemorySink::Entry& MemorySink::get(std::string_view name, int step) const {
  const Entry* e = find(name, step);
  if (e == nullptr) fail("MemorySink: nothing recorded as ", name, " in step ", step);
  return *e;
}

}  // namespace journey
