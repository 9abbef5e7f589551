// Chapter 10 — continuous batching, one step at a time.
// Part 1 drives the real Scheduler and BlockManager with five requests of different lengths in a
// pool too small for all of them, and prints the timeline: which sequences prefill (in chunks) or
// decode in each step, who is admitted, who is preempted, who finishes. The "model" of part 1 only
// marks tokens computed and appends a token, so the schedule is the only thing on screen.
// Part 2 runs the same kind of mix through LLMEngine on the real model and checks that every
// request's greedy answer is the same as when it runs alone.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "assets/model.h"
#include "core/error.h"
#include "engine/llm_engine.h"
#include "engine/scheduler.h"
#include "cpu/cpu_backend.h"
#include "text/tokenizer.h"

using namespace journey;

// Runs requests through the engine until all finish; returns each one's text.
static std::map<int64_t, std::string> run_all(LLMEngine& engine) {
  std::map<int64_t, std::string> texts;
  while (engine.has_unfinished())
    for (const RequestOutput& out : engine.step()) texts[out.request_id] += out.text;
  return texts;
}

int main(int argc, char** argv) try {
  const std::filesystem::path model_path = argc > 1 ? argv[1] : JOURNEY_SOURCE_DIR "/data/stories260K";
  bool ok = true;

  // ---- Part 1: the schedule ----
  const int64_t block_size = 4, new_tokens = 10;
  BlockManager blocks(/*num_blocks=*/12, block_size, /*enable_prefix_caching=*/false);
  Scheduler scheduler(SchedulerConfig{.max_num_seqs = 4, .max_num_batched_tokens = 12}, blocks);
  const std::vector<int64_t> prompt_lengths = {5, 17, 3, 9, 6};
  std::vector<Sequence> seqs(prompt_lengths.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].id = int64_t(i);
    seqs[i].tokens.assign(size_t(prompt_lengths[i]), 7);
    seqs[i].num_prompt_tokens = prompt_lengths[i];
    seqs[i].max_total_tokens = prompt_lengths[i] + new_tokens;
    scheduler.add(&seqs[i]);
  }
  std::printf("# Chapter 10: continuous batching (pool of %lld blocks x %lld slots, at most 4 sequences and 12 tokens "
              "per step)\n\nP5 = a prefill chunk of 5 tokens, D = one decode token, * = preempted\n\n",
              (long long)blocks.num_blocks(), (long long)block_size);
  int64_t finished = 0, step = 0, preemptions = 0;
  while (scheduler.has_work() && step < 200) {
    const SchedulerOutput plan = scheduler.schedule();
    std::printf("step %2lld  %2lld tokens  free blocks %2lld  |", (long long)step++, (long long)plan.num_batched_tokens,
                (long long)blocks.num_free_blocks());
    for (const ScheduledSequence& s : plan.scheduled) {
      const bool decode = s.seq->num_computed_tokens >= s.seq->num_prompt_tokens;
      std::printf("  seq%lld:%s", (long long)s.seq->id,
                  decode ? "D" : ("P" + std::to_string(s.num_tokens)).c_str());
    }
    for (const Sequence* p : plan.preempted) std::printf("  seq%lld*", (long long)p->id);
    preemptions += int64_t(plan.preempted.size());
    scheduler.commit(plan);
    // The "model": every sequence whose prompt is now fully computed produces one token.
    for (const ScheduledSequence& s : plan.scheduled) {
      Sequence* seq = s.seq;
      if (seq->num_computed_tokens < seq->num_tokens()) continue;  // mid-prefill: no token yet
      seq->tokens.push_back(7);
      if (seq->num_output_tokens() == new_tokens) {
        std::printf("  (seq%lld done)", (long long)seq->id);
        scheduler.finish(seq);
        ++finished;
      }
    }
    std::printf("\n");
  }
  std::printf("\n%lld of %zu sequences finished, %lld preemptions, free blocks at the end: %lld of %lld\n",
              (long long)finished, seqs.size(), (long long)preemptions, (long long)blocks.num_free_blocks(),
              (long long)blocks.num_blocks());
  ok = ok && finished == int64_t(seqs.size()) && blocks.num_free_blocks() == blocks.num_blocks();

  // ---- Part 2: batching does not change the answers ----
  const LoadedModel model = load_model(model_path);
  const auto tokenizer = load_tokenizer(model_path);
  auto backend = make_cpu_backend(model, CpuOptions{.threads = 1});
  const std::vector<std::string> prompts = {"Once upon a time", "Tom had a red ball", "The sun was", "Lily and her mom",
                                            "One day, a little bird"};
  EngineConfig config;
  config.block_size = 4;
  config.num_kv_blocks = 24;  // small: forces preemption with five sequences
  config.scheduler = SchedulerConfig{.max_num_seqs = 5, .max_num_batched_tokens = 16};
  auto request_for = [&](const std::string& prompt) {
    EngineRequest r;
    const std::vector<int> ids = tokenizer->encode(prompt, true);
    r.prompt.assign(ids.begin(), ids.end());
    r.params.temperature = 0;
    r.max_tokens = 24;
    return r;
  };
  LLMEngine batched(*backend, config, tokenizer.get());
  for (const std::string& p : prompts) batched.add_request(request_for(p));
  const std::map<int64_t, std::string> together = run_all(batched);
  std::printf("\nreal model, five requests batched (%lld preemptions):\n", (long long)batched.stats().preemptions);
  for (size_t i = 0; i < prompts.size(); ++i) {
    LLMEngine alone_engine(*backend, config, tokenizer.get());
    alone_engine.add_request(request_for(prompts[i]));
    const std::string alone = run_all(alone_engine).begin()->second;
    const std::string& in_batch = together.at(int64_t(i));
    std::printf("  %-24s ->%s   [%s]\n", prompts[i].c_str(), in_batch.c_str(), alone == in_batch ? "same alone" : "DIFFERS alone");
    ok = ok && alone == in_batch;
  }
  if (!ok) std::cerr << "MISMATCH: a sequence did not finish, blocks leaked, or batching changed an answer\n";
  return ok ? 0 : 1;
} catch (const journey::Error& e) {
  std::cerr << "ch10: " << e.what() << "\n";
  return 1;
}
