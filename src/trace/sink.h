// A trace sink receives copies of intermediate tensors. The engine ASKS FIRST (wants) and copies
// only what is wanted, so a run with no sink, or a sink that wants nothing, does no extra work.
// The hooks compile to nothing when JOURNEY_TRACE_HOOKS is off (used only to measure their cost).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trace/stages.h"

namespace journey {

// A read-only f32 tensor handed to a sink: row-major, `shape` outermost first.
struct TraceTensor {
  std::span<const float> data;
  std::vector<int64_t> shape;
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Asked before anything is copied. layer is -1 for global stages.
  virtual bool wants(Stage stage, int layer) const = 0;
  // Called only after wants() returned true. The data is valid only during the call.
  virtual void record(Stage stage, int layer, const TraceTensor& tensor) = 0;
  // Integer payloads (token ids, block tables).
  virtual void record_ints(Stage stage, int layer, std::span<const int32_t> values, std::vector<int64_t> shape) {
    (void)stage; (void)layer; (void)values; (void)shape;
  }
};

}  // namespace journey

#ifndef JOURNEY_TRACE_HOOKS
#define JOURNEY_TRACE_HOOKS 1
#endif

#if JOURNEY_TRACE_HOOKS
// JOURNEY_TRACE(sink, Stage::q, layer, expr_making_TraceTensor): expr is evaluated only when wanted.
#define JOURNEY_TRACE(sink, stage, layer, ...)                              \
  do {                                                                       \
    if ((sink) != nullptr && (sink)->wants((stage), (layer)))                \
      (sink)->record((stage), (layer), (__VA_ARGS__));                       \
  } while (0)
#else
#define JOURNEY_TRACE(sink, stage, layer, ...) do { (void)sizeof(sink); } while (0)
#endif
