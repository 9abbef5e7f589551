// "How it runs" (nano-vllm's model_runner.py): turns one scheduler plan into ONE ForwardBatch
// for the backend, so every weight matrix is read once per step for all sequences together.
// Copy-on-write copies the plan asks for are done first, before any slot is written.
#pragma once
#include "backend/backend.h"
#include "engine/scheduler.h"

namespace journey {

class TraceSink;

// The batch for a plan: per scheduled sequence its next tokens, their first position and its
// block table (vLLM's block_tables; the backend derives slots from it).
ForwardBatch build_forward_batch(const SchedulerOutput& plan);

class ModelRunner {
 public:
  explicit ModelRunner(Backend& backend) : backend_(backend) {}
  ForwardOutput run(const SchedulerOutput& plan, TraceSink* sink = nullptr);
  // The same step, with each sequence's next token drawn on the backend's device (params: one per
  // scheduled sequence; Backend::forward_sample). Returns one id per scheduled sequence.
  std::vector<int32_t> run_sample(const SchedulerOutput& plan, std::span<const DeviceSampling> params);
  Backend& backend() { return backend_; }

 private:
  Backend& backend_;
};

}  // namespace journey
