#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace journey {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  if (config_.max_num_seqs <= 0) fail("scheduler: max_num_seqs must be positive, got ", config_.max_num_seqs);
  if (config_.max_num_batched_tokens <= 0)
    fail("scheduler: max_num_batched_tokens must be positive, got ", config_.max_num_batched_tokens);
}

void Scheduler::add(Sequence* seq) {
  int64_t need = blocks_.blocks_for_tokens(std::max(seq->max_total_tokens, seq->num_tokens()));
  if (need > blocks_.num_blocks())
    fail("request needs up to ", need, " KV blocks (", std::max(seq->max_total_tokens, seq->num_tokens()),
         " tokens) but the whole KV cache has ", blocks_.num_blocks(), " blocks of ", blocks_.block_size(),
         " tokens; shorten the prompt or max_tokens, or give the cache more memory");
  seq->status = SequenceStatus::Waiting;
  waiting_.push_back(seq);
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput& plan) {
  blocks_.free(*seq);  // recompute later; its full blocks stay in the prefix cache meanwhile
  seq->status = SequenceStatus::Waiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(seq);
  plan.preempted.push_back(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput plan;
  int64_t budget = config_.max_num_batched_tokens;

  // 1. Running sequences, oldest first: decodes (1 token) and the next chunk of unfinished prefills.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    int64_t n = std::min(seq->num_uncomputed_tokens(), budget);
    bool scheduled = false;
    while (true) {
      if (blocks_.append_slots(*seq, n, plan.copies)) {
        scheduled = true;
        break;
      }
      // Out of blocks: preempt the newest running sequence (maybe this one).
      Sequence* victim = running_.back();
      running_.pop_back();
      preempt(victim, plan);
      if (victim == seq) break;
    }
    if (!scheduled) break;  // seq itself was the newest: nobody after it is left to schedule
    plan.scheduled.push_back({seq, n});
    budget -= n;
    ++i;
  }

  // 2. Admit waiting sequences while there is room. Nothing is admitted in a step that preempted.
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (!blocks_.allocate(*seq, budget, plan.copies)) break;  // first come, first served
    waiting_.pop_front();
    int64_t n = std::min(seq->num_uncomputed_tokens(), budget);
    seq->status = SequenceStatus::Running;
    running_.push_back(seq);
    plan.scheduled.push_back({seq, n});
    budget -= n;
  }
  plan.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return plan;
}

void Scheduler::commit(const SchedulerOutput& plan) {
  for (const ScheduledSequence& s : plan.scheduled) {
    s.seq->num_computed_tokens += s.num_tokens;
    blocks_.mark_computed(*s.seq);
  }
}

void Scheduler::finish(Sequence* seq) {
  auto drop = [seq](std::deque<Sequence*>& queue) {
    auto it = std::find(queue.begin(), queue.end(), seq);
    if (it != queue.end()) queue.erase(it);
  };
  drop(running_);
  drop(waiting_);
  blocks_.free(*seq);
  seq->status = SequenceStatus::Finished;
}

}  // namespace journey
