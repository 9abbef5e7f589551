// "What runs next" (nano-vllm's scheduler.py, vLLM's Scheduler): continuous batching over a
// waiting queue and a running list. Each step:
//   1. every running sequence gets its next tokens (1 for decode, a chunk for an unfinished
//      prefill), oldest first, within the token budget; when the KV pool runs dry the most
//      recently admitted running sequence is preempted (its blocks freed, it goes back to the
//      front of the waiting queue and is recomputed later, mostly from the prefix cache);
//   2. waiting sequences are admitted, first come first served, while sequence slots, token
//      budget and free blocks allow; a long prompt is prefilled in chunks (chunked prefill).
// The result is one plan for one forward pass mixing prefills and decodes. How the plan runs
// is the runner's business (llm_engine.cpp); the scheduler never sees the model.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace journey {

struct SchedulerConfig {
  int64_t max_num_seqs = 32;             // sequences in one step
  int64_t max_num_batched_tokens = 512;  // tokens in one step (prefill chunks + decodes)
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int64_t num_tokens = 0;  // tokens fed this step: positions [num_computed, num_computed + num_tokens)
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;  // in batch order
  std::vector<BlockCopy> copies;             // copy-on-write copies to run before the forward
  std::vector<Sequence*> preempted;          // sent back to waiting during this step
  int64_t num_batched_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks);

  // Queue a new sequence. Throws journey::Error when it could never fit in the KV pool.
  void add(Sequence* seq);
  SchedulerOutput schedule();
  // After the forward pass: advance num_computed_tokens and register completed blocks.
  void commit(const SchedulerOutput& plan);
  // Remove a sequence (finished or aborted) from whichever queue holds it and free its blocks.
  void finish(Sequence* seq);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }
  BlockManager& block_manager() { return blocks_; }

 private:
  void preempt(Sequence* seq, SchedulerOutput& plan);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;  // front = next to admit
  std::deque<Sequence*> running_;  // admission order: back = most recently admitted
  int64_t num_preemptions_ = 0;
};

}  // namespace journey
