#include "engine/model_runner.h"

namespace journey {

ForwardBatch build_forward_batch(const SchedulerOutput& plan) {
  ForwardBatch batch;
  batch.sequences.reserve(plan.scheduled.size());
  for (const ScheduledSequence& s : plan.scheduled) {
    const Sequence& seq = *s.seq;
    SequenceInput in;
    in.seq_id = seq.id;
    in.start_position = seq.num_computed_tokens;
    in.tokens.assign(seq.tokens.begin() + seq.num_computed_tokens,
                     seq.tokens.begin() + seq.num_computed_tokens + s.num_tokens);
    in.block_table = seq.block_table;
    batch.sequences.push_back(std::move(in));
  }
  return batch;
}

ForwardOutput ModelRunner::run(const SchedulerOutput& plan, TraceSink* sink) {
  for (const BlockCopy& copy : plan.copies) backend_.copy_kv_block(copy.src, copy.dst);
  return backend_.forward(build_forward_batch(plan), sink);
}

std::vector<int32_t> ModelRunner::run_sample(const SchedulerOutput& plan, std::span<const DeviceSampling> params) {
  for (const BlockCopy& copy : plan.copies) backend_.copy_kv_block(copy.src, copy.dst);
  return backend_.forward_sample(build_forward_batch(plan), params);
}

}  // namespace journey
